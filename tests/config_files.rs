//! Configuration as documented: every TOML block of the book (docs/src) and every example config
//! shipped in the repository loads through the loader `serve` uses, and every sink kind can
//! be configured from a file and from ONCEHOOK_* variables.
#![allow(clippy::result_large_err)] // figment's Jail error type

use std::collections::BTreeSet;
use std::path::PathBuf;

use oncehook::config::{Overrides, Settings, SinkKind};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The ```toml blocks of a Markdown file, with the line each starts on.
fn toml_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, line) in markdown.lines().enumerate() {
        let fence = line.trim_start();
        match current.take() {
            None if fence.starts_with("```toml") => current = Some((n + 1, String::new())),
            None => {}
            Some(block) if fence.starts_with("```") => blocks.push(block),
            Some((start, mut text)) => {
                text.push_str(line);
                text.push('\n');
                current = Some((start, text));
            }
        }
    }
    assert!(current.is_none(), "unterminated ```toml block");
    blocks
}

/// Loads `text` as a config file through `Settings::load` (what `serve` calls), then builds
/// its providers and sinks as `serve` does.
fn load(text: &str) -> anyhow::Result<Settings> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("oncehook.toml");
    std::fs::write(&file, text).unwrap();
    let settings = Settings::load(Some(&file), &Overrides::default())?;
    settings.check()?;
    Ok(settings)
}

/// Every Markdown page of the book, `docs/src/**/*.md`, sorted.
fn book_pages() -> Vec<PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut pages = Vec::new();
    walk(&repo().join("docs/src"), &mut pages);
    pages.sort();
    pages
}

#[test]
fn every_toml_block_of_the_book_loads() {
    figment::Jail::expect_with(|_| {
        let mut blocks = 0;
        for page in book_pages() {
            let markdown = std::fs::read_to_string(&page).unwrap();
            for (line, text) in toml_blocks(&markdown) {
                blocks += 1;
                if let Err(e) = load(&text) {
                    panic!(
                        "{} block at line {line} does not load: {e:#}\n{text}",
                        page.display()
                    );
                }
            }
        }
        assert!(blocks >= 2, "the book has its provider and sink examples");
        Ok(())
    });
}

/// Every `*.toml` shipped as an example (the repository root and `examples/`).
fn example_configs() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in [repo(), repo().join("examples")] {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with(".toml") && name != "Cargo.toml" {
                files.push(path);
            }
        }
    }
    files
}

#[test]
fn every_example_config_loads() {
    figment::Jail::expect_with(|_| {
        let files = example_configs();
        assert!(
            files.iter().any(|f| f.ends_with("oncehook.example.toml")),
            "oncehook.example.toml is shipped: {files:?}"
        );
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            if let Err(e) = load(&text) {
                panic!("{} does not load: {e:#}", file.display());
            }
        }
        Ok(())
    });
}

/// Dotted paths of every leaf of a TOML / figment value; arrays count as leaves, and
/// entries of a map keyed by user-chosen names (`sinks.NAME`) appear under `*`.
fn leaf_keys(prefix: &str, value: &figment::value::Value, out: &mut BTreeSet<String>) {
    use figment::value::Value;
    match value {
        Value::Dict(_, dict) if !dict.is_empty() => {
            for (k, v) in dict {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaf_keys(&key, v, out);
            }
        }
        _ => {
            out.insert(prefix.to_string());
        }
    }
}

#[test]
fn the_example_config_names_every_setting() {
    use figment::providers::{Format, Serialized, Toml};
    use figment::Figment;
    let defaults: figment::value::Value = Figment::from(Serialized::defaults(Settings::default()))
        .extract()
        .unwrap();
    let mut wanted = BTreeSet::new();
    leaf_keys("", &defaults, &mut wanted);
    let example = repo().join("oncehook.example.toml");
    let documented: figment::value::Value = Figment::from(Toml::file(&example)).extract().unwrap();
    let mut present = BTreeSet::new();
    leaf_keys("", &documented, &mut present);
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|k| {
            !present.contains(*k) && !present.iter().any(|p| p.starts_with(&format!("{k}.")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "oncehook.example.toml lacks {missing:?}"
    );
    // Keys with no default value are documented too.
    for key in [
        "admin_listen",
        "alerts.webhook_url",
        "processor.events_per_transaction",
    ] {
        assert!(present.contains(key), "oncehook.example.toml lacks {key}");
    }
}

const SINKS_TOML: &str = r#"
[sinks.fulfilment]
kind = "http"
url = "https://merchant.example/hooks"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
timeout_ms = 2500
concurrency = 2
rate_per_sec = 10.0

[sinks.mail]
kind = "email"
smtp_host = "smtp.example"
smtp_port = 587
security = "starttls"
username = "oncehook"
password = "correct horse"
from = "Shop <noreply@shop.example>"
to = "orders@shop.example"

[sinks.audit]
kind = "log"
concurrency = 1

[outbox]
sinks = ["fulfilment", "mail", "audit"]
"#;

fn assert_three_sinks(s: &Settings) {
    let http = &s.sinks["fulfilment"];
    assert_eq!(http.concurrency, 2);
    assert_eq!(http.rate_per_sec, Some(10.0));
    match &http.kind {
        SinkKind::Http {
            url, timeout_ms, ..
        } => {
            assert_eq!(url, "https://merchant.example/hooks");
            assert_eq!(*timeout_ms, 2500);
        }
        other => panic!("fulfilment is {other:?}"),
    }
    match &s.sinks["mail"].kind {
        SinkKind::Email {
            smtp_port,
            security,
            password,
            ..
        } => {
            assert_eq!(*smtp_port, 587);
            assert_eq!(security, "starttls");
            assert_eq!(password.as_deref(), Some("correct horse"));
        }
        other => panic!("mail is {other:?}"),
    }
    assert_eq!(s.sinks["mail"].concurrency, 4, "default concurrency");
    assert_eq!(s.sinks["audit"].kind, SinkKind::Log);
    assert_eq!(s.sinks["audit"].concurrency, 1);
}

#[test]
fn every_sink_kind_loads_from_a_file() {
    figment::Jail::expect_with(|_| {
        let s = load(SINKS_TOML).unwrap();
        assert_three_sinks(&s);
        Ok(())
    });
}

#[test]
fn every_sink_kind_loads_from_environment_variables() {
    figment::Jail::expect_with(|jail| {
        for (k, v) in [
            ("FULFILMENT__KIND", "http"),
            ("FULFILMENT__URL", "https://merchant.example/hooks"),
            (
                "FULFILMENT__SECRET",
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            ),
            ("FULFILMENT__TIMEOUT_MS", "2500"),
            ("FULFILMENT__CONCURRENCY", "2"),
            ("FULFILMENT__RATE_PER_SEC", "10.0"),
            ("MAIL__KIND", "email"),
            ("MAIL__SMTP_HOST", "smtp.example"),
            ("MAIL__SMTP_PORT", "587"),
            ("MAIL__SECURITY", "starttls"),
            ("MAIL__USERNAME", "oncehook"),
            ("MAIL__PASSWORD", "correct horse"),
            ("MAIL__FROM", "Shop <noreply@shop.example>"),
            ("MAIL__TO", "orders@shop.example"),
            ("AUDIT__KIND", "log"),
            ("AUDIT__CONCURRENCY", "1"),
        ] {
            jail.set_env(format!("ONCEHOOK_SINKS__{k}"), v);
        }
        jail.set_env("ONCEHOOK_OUTBOX__SINKS", "[fulfilment, mail, audit]");
        let s = Settings::load(None, &Overrides::default()).unwrap();
        s.check().unwrap();
        assert_three_sinks(&s);
        Ok(())
    });
}

#[test]
fn unknown_keys_in_a_sink_are_errors_naming_the_key() {
    figment::Jail::expect_with(|_| {
        let err =
            load("[sinks.x]\nkind = \"http\"\nurl = \"http://x\"\nurll = \"typo\"\n").unwrap_err();
        assert!(format!("{err:#}").contains("urll"), "{err:#}");
        let err = load("[sinks.x]\nkind = \"carrier-pigeon\"\n").unwrap_err();
        assert!(format!("{err:#}").contains("carrier-pigeon"), "{err:#}");
        Ok(())
    });
}

#[test]
fn config_check_prints_effective_settings_without_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("oncehook.toml");
    std::fs::write(
        &file,
        format!(
            "database_url = \"postgres://app:pgS3cretPW@db.internal/oncehook?sslmode=verify-full\"\n\
             [alerts]\nwebhook_url = \"https://hooks.slack.com/services/T000/B000/slackTOKEN123\"\n\
             [[providers]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"whsec_stripeSECRETvalue1\"]\n{SINKS_TOML}"
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args(["config", "check", "--config"])
        .arg(&file)
        .env_remove("ONCEHOOK_CONFIG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for secret in [
        "pgS3cretPW",
        "slackTOKEN123",
        "whsec_stripeSECRETvalue1",
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "correct horse",
    ] {
        assert!(!stdout.contains(secret), "{secret} printed:\n{stdout}");
    }
    for shown in [
        "db.internal/oncehook",
        "processor",
        "workers = 4",
        "smtp.example",
        "fulfilment",
    ] {
        assert!(stdout.contains(shown), "{shown} missing:\n{stdout}");
    }

    std::fs::write(&file, "[sinks.x]\nkind = \"http\"\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args(["config", "check", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success(), "a sink without url is refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("url"));
}

#[test]
fn listener_keys_load_from_a_file() {
    figment::Jail::expect_with(|_| {
        let s = load(
            "[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"2001:db8::/32\", \"192.0.2.7/32\"]\n\
             proxy_header = \"forwarded\"\nmax_connections = 100\nmax_in_flight = 50\n\
             max_connections_per_address = 8\n",
        )
        .unwrap();
        let proxies: Vec<String> = s
            .server
            .trusted_proxies
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(proxies, ["10.0.0.0/8", "2001:db8::/32", "192.0.2.7/32"]);
        assert_eq!(
            s.server.proxy_header,
            oncehook::config::ProxyHeader::Forwarded
        );
        assert_eq!(s.server.max_connections_per_address, 8);
        assert_eq!(s.server.max_in_flight, 50);

        // Nothing is trusted unless configured; X-Forwarded-For is what proxies send.
        let d = Settings::default().server;
        assert!(d.trusted_proxies.is_empty());
        assert_eq!(d.proxy_header, oncehook::config::ProxyHeader::XForwardedFor);
        // Defaults leave room: one address cannot take every slot, and requests are shed
        // before every connection is taken.
        assert!(d.max_connections_per_address * 4 <= d.max_connections);
        assert!(d.max_in_flight < d.max_connections);

        let err = load("[server]\ntrusted_proxies = [\"10.0.0.300/8\"]\n").unwrap_err();
        assert!(format!("{err:#}").contains("trusted_proxies"), "{err:#}");
        let err = load("[server]\nproxy_header = \"x-real-ip\"\n").unwrap_err();
        assert!(format!("{err:#}").contains("proxy_header"), "{err:#}");
        Ok(())
    });
}

#[test]
fn max_in_flight_above_max_connections_is_refused() {
    figment::Jail::expect_with(|_| {
        // Each connection carries one request at a time: a limit above the connection
        // count could never be reached, so load would never be shed.
        let err = load("[server]\nmax_connections = 64\nmax_in_flight = 128\n").unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains("max_in_flight") && text.contains("max_connections"),
            "{text}"
        );
        load("[server]\nmax_connections = 64\nmax_in_flight = 64\n").unwrap();
        Ok(())
    });
}

#[test]
fn a_receipt_batch_beyond_what_one_statement_can_bind_is_refused() {
    figment::Jail::expect_with(|_| {
        for refused in ["0", "2049", "100000"] {
            let err = load(&format!("[receiver]\nmax_batch = {refused}\n")).unwrap_err();
            let text = format!("{err:#}");
            assert!(text.contains("receiver.max_batch"), "{refused}: {text}");
        }
        load("[receiver]\nmax_batch = 2048\n").unwrap();
        Ok(())
    });
}

#[test]
fn the_receipt_linger_loads_from_a_file_and_is_bounded() {
    figment::Jail::expect_with(|_| {
        let s = load("[receiver]\nlinger_ms = 2\n").unwrap();
        assert_eq!(s.receiver.linger_ms, 2);
        let s = load("[receiver]\nlinger_ms = 10\n").unwrap();
        assert_eq!(s.receiver.linger_ms, 10);
        for refused in ["11", "1000"] {
            let err = load(&format!("[receiver]\nlinger_ms = {refused}\n")).unwrap_err();
            let text = format!("{err:#}");
            assert!(text.contains("receiver.linger_ms"), "{refused}: {text}");
        }
        Ok(())
    });
}

#[test]
fn a_claim_batch_outside_its_bounds_is_refused_naming_the_key() {
    figment::Jail::expect_with(|_| {
        for key in ["claim_batch", "backlog_claim_batch"] {
            for refused in ["0", "1025", "100000"] {
                let err = load(&format!("[processor]\n{key} = {refused}\n")).unwrap_err();
                let text = format!("{err:#}");
                assert!(
                    text.contains(&format!("processor.{key}")),
                    "{key} = {refused}: {text}"
                );
            }
            let s = load(&format!("[processor]\n{key} = 1024\n")).unwrap();
            let loaded = match key {
                "claim_batch" => s.processor.claim_batch,
                _ => s.processor.backlog_claim_batch,
            };
            assert_eq!(loaded, 1024);
        }
        Ok(())
    });
}

#[test]
fn sign_in_and_session_keys_load_from_a_file() {
    figment::Jail::expect_with(|_| {
        let s = load(
            "[dashboard]\nsession_idle_minutes = 30\nsession_lifetime_minutes = 240\n\
             sign_in_per_minute_per_user_and_address = 4\nsign_in_per_minute_per_address = 12\n",
        )
        .unwrap();
        assert_eq!(s.dashboard.session_idle_minutes, 30);
        assert_eq!(s.dashboard.session_lifetime_minutes, 240);
        assert_eq!(s.dashboard.sign_in_per_minute_per_user_and_address, 4);
        assert_eq!(s.dashboard.sign_in_per_minute_per_address, 12);
        // Unset: 12 h.
        assert_eq!(load("").unwrap().dashboard.session_lifetime_minutes, 720);
        // The old per-user key meant "from anywhere"; it is refused by name, not ignored.
        let err = load("[dashboard]\nsign_in_per_minute_per_user = 10\n").unwrap_err();
        assert!(
            format!("{err:#}").contains("sign_in_per_minute_per_user"),
            "{err:#}"
        );
        Ok(())
    });
}
