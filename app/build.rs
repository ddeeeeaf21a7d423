//! Compiles app/locales/*.json into the `i18n` module (leptos_i18n): a key used in the code
//! but missing from en.json does not compile; a key missing from pt-BR.json is a warning
//! here and a failing test (`locale_files_have_the_same_keys`).

use leptos_i18n_build::{Config, ParseOptions, TranslationsInfos};
use std::error::Error;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=Cargo.toml");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("no OUT_DIR")?).join("i18n");
    // interpolate_display: td_string! gives plain Strings, for attributes and server text.
    let options = ParseOptions::default().interpolate_display(true);
    let cfg = Config::new("en")?
        .add_locale("pt-BR")?
        .parse_options(options);
    let infos = TranslationsInfos::parse(cfg)?;
    infos.emit_diagnostics();
    infos.rerun_if_locales_changed();
    infos.generate_i18n_module(out)?;
    Ok(())
}
