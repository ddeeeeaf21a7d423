//! The folders of `src/` are layers, and a module imports only from layers below its own
//! (ARCHITECTURE.md draws them). This reads every `crate::` path in the library's source,
//! code and doc links alike, and fails naming each one that points up or sideways into
//! another layer above: a circle between two modules cannot come back unnoticed.

use std::path::{Path, PathBuf};

/// Top to bottom. A file in `src/LAYER/…` (or `src/LAYER.rs`) may name `crate::X` for any
/// layer X listed after LAYER, and its own layer.
const LAYERS: &[&str] = &[
    "cli",
    "simulator",
    "server",
    "config",
    "http",
    "reconcile",
    "verify",
    "pipeline",
    "provider",
    "store",
    "domain",
    "ops",
    "support",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The layer of a file under `src/`: its first path component, without `.rs`.
fn layer_of(src: &Path, file: &Path) -> Option<&'static str> {
    let first = file.strip_prefix(src).ok()?.components().next()?;
    let name = first.as_os_str().to_str()?.trim_end_matches(".rs");
    LAYERS.iter().copied().find(|l| *l == name)
}

/// Every `crate::NAME` in `text`, with its line number.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().last();
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // `oncehook_crate::` or `$crate::` are other things.
            if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
                found.push((n + 1, name));
            }
            rest = after;
        }
    }
    found
}

#[test]
fn every_import_points_down_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let rank = |l: &str| LAYERS.iter().position(|x| *x == l);
    let mut upward = Vec::new();
    for file in &files {
        let Some(layer) = layer_of(&src, file) else {
            continue; // lib.rs and main.rs sit above every layer
        };
        let text = std::fs::read_to_string(file).unwrap();
        for (line, name) in crate_paths(&text) {
            let Some(target) = rank(&name) else { continue };
            if target < rank(layer).unwrap() {
                upward.push(format!(
                    "{}:{line}: {layer} names crate::{name}",
                    file.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "{} imports point up the layers ({}):\n{}",
        upward.len(),
        LAYERS.join(" > "),
        upward.join("\n")
    );
}

#[test]
fn every_folder_of_src_is_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_end_matches(".rs");
        assert!(
            LAYERS.contains(&name) || name == "lib" || name == "main",
            "src/{name} is in no layer: add it to LAYERS (and ARCHITECTURE.md) or move it"
        );
    }
}

#[test]
fn the_checker_sees_a_path_that_points_up() {
    let found = crate_paths("use crate::config::Settings; // $crate::x, my_crate::y");
    assert_eq!(found, vec![(1, "config".to_string())]);
}
