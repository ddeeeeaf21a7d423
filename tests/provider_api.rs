//! The provider entry's API keys, as a user writes them in the TOML file: loaded, checked,
//! and the key redacted wherever settings are shown (`config check`, `Debug`).
#![allow(clippy::result_large_err)] // figment's Jail error type

use std::process::Command;

use oncehook::config::{Overrides, Settings};

const FILE: &str = r#"
[[providers]]
name = "stripe"
scheme = "stripe"
secrets = ["whsec_0123456789abcdef0123"]
api_base = "http://127.0.0.1:12111"
api_key = "sk_test_tomlKEYvalue"
api_timeout_ms = 1500
api_rate_per_sec = 7.5
api_retry = { base_ms = 20, cap_ms = 400, max_attempts = 3, max_retry_after_ms = 2000 }

[[providers]]
name = "acme"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
"#;

fn write(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
    let file = dir.path().join("oncehook.toml");
    std::fs::write(&file, text).unwrap();
    file
}

#[test]
fn api_keys_load_from_the_provider_entry_with_defaults() {
    figment::Jail::expect_with(|_| {
        let dir = tempfile::tempdir().unwrap();
        let s = Settings::load(Some(&write(&dir, FILE)), &Overrides::default()).unwrap();
        s.check().unwrap();
        let api = &s.providers[0].api;
        assert_eq!(api.base, "http://127.0.0.1:12111");
        assert_eq!(api.key.as_deref(), Some("sk_test_tomlKEYvalue"));
        assert_eq!((api.timeout_ms, api.rate_per_sec), (1500, 7.5));
        assert_eq!((api.retry.base_ms, api.retry.max_attempts), (20, 3));
        let default = &s.providers[1].api;
        assert_eq!(default.base, "https://api.stripe.com");
        assert_eq!(default.key, None);
        // The client is built from exactly these settings.
        oncehook::provider::api::ApiClient::new(api).unwrap();
        assert!(!format!("{s:?}").contains("tomlKEY"));
        Ok(())
    });
}

#[test]
fn bad_api_keys_are_errors_naming_the_key() {
    figment::Jail::expect_with(|_| {
        let dir = tempfile::tempdir().unwrap();
        for (bad, named) in [
            (FILE.replace("api_timeout_ms", "api_timeout"), "api_timeout"),
            (
                FILE.replace("api_rate_per_sec = 7.5", "api_rate_per_sec = 0.0"),
                "api_rate_per_sec",
            ),
            (
                FILE.replace("http://127.0.0.1:12111", "127.0.0.1:12111"),
                "api_base",
            ),
        ] {
            let err = Settings::load(Some(&write(&dir, &bad)), &Overrides::default())
                .expect_err("refused");
            let text = format!("{err:#}");
            assert!(text.contains(named), "{named}: {text}");
            assert!(!text.contains("tomlKEY"), "{text}");
        }
        Ok(())
    });
}

#[test]
fn config_check_redacts_the_api_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, FILE);
    let out = Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args(["config", "check", "--config"])
        .arg(&file)
        .env_remove("ONCEHOOK_CONFIG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains("tomlKEY"), "{stdout}");
    assert!(stdout.contains("api_key = \"<redacted>\""), "{stdout}");
    assert!(stdout.contains("api_rate_per_sec = 7.5"), "{stdout}");
}
