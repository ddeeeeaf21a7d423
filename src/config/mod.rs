//! Configuration: defaults, then a TOML file, then `ONCEHOOK_*` environment variables
//! (nested keys with `__`, e.g. `ONCEHOOK_PROCESSOR__WORKERS=8`), then command-line flags.

pub mod view;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

use crate::domain::retry::RetryPolicy;
use crate::pipeline::alerts::AlertSettings;
use crate::provider::signature::SchemeKind;

// Each part owns its settings type; the configuration composes them (and names them here
// for those who build settings in code, such as the tests).
pub use crate::domain::commands::CommandSettings;
pub use crate::domain::outbox::{OutboxRoute, OutboxSettings, RelaySettings};
pub use crate::http::settings::{ProxyHeader, ServerSettings};
pub use crate::pipeline::relay::settings::{SinkKind, SinkSettings};
pub use crate::pipeline::settings::{
    ProcessorSettings, ReceiverSettings, RetentionSettings, MAX_CLAIM_BATCH, MAX_RECEIPT_BATCH,
    MAX_RECEIPT_LINGER_MS,
};
pub use crate::provider::settings::{
    Provider, ProviderApiSettings, ProviderSettings, Providers, MERCADOPAGO_API_BASE,
};
pub use crate::support::files::{create_private_dir, write_private_file};
pub use crate::support::redact::{redact_url, redact_url_path, REDACTED};
pub use crate::verify::VerifySettings;

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// `sqlite://data/oncehook.db` (default) or `postgres://…`.
    pub database_url: String,
    /// Where the SQLite file and the generated development secret live.
    pub data_dir: PathBuf,
    /// The webhook address (providers must reach it). Without `admin_listen` it serves the
    /// dashboard too, which is then only allowed on a loopback address.
    pub listen: SocketAddr,
    /// The dashboard, its API, health and metrics on their own address; `listen` then
    /// serves webhooks only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_listen: Option<SocketAddr>,
    /// HTTP server limits and timeouts.
    pub server: ServerSettings,
    pub log: LogSettings,
    /// The built dashboard assets (`target/site` after scripts/build-frontend.sh).
    pub site_root: PathBuf,
    pub providers: Vec<ProviderSettings>,
    pub receiver: ReceiverSettings,
    pub processor: ProcessorSettings,
    pub outbox: OutboxSettings,
    /// Named sinks outbox rows are delivered through; `log` always exists.
    pub sinks: BTreeMap<String, SinkSettings>,
    pub dead_letters: DeadLetterSettings,
    pub alerts: AlertSettings,
    pub retention: RetentionSettings,
    /// The periodic consistency check (src/verify/).
    pub verify: VerifySettings,
    /// Reconciliation against each provider's API (src/reconcile/).
    pub reconcile: crate::reconcile::ReconcileSettings,
    /// Refunds oncehook asks providers for (src/domain/commands.rs).
    pub commands: CommandSettings,
    /// Dashboard sign-in and sessions (see src/http/auth/).
    pub dashboard: crate::http::auth::DashboardSettings,
    /// Set by `serve --demo`, never by a file: the dashboard then shows a "demo data" badge.
    #[serde(skip)]
    pub demo: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    /// `text` (default) or `json` (one JSON object per line, for log shippers).
    pub format: LogFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterSettings {
    /// A dead letter should be resolved within this many hours (its deadline).
    pub resolve_within_hours: i64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            database_url: "sqlite://data/oncehook.db".into(),
            data_dir: "data".into(),
            listen: "127.0.0.1:8080".parse().expect("valid default address"),
            admin_listen: None,
            server: ServerSettings {
                header_read_timeout_ms: 10_000,
                body_timeout_ms: 30_000,
                request_timeout_ms: 60_000,
                max_connections: 512,
                max_in_flight: 256,
                max_connections_per_address: 128,
                trusted_proxies: vec![],
                proxy_header: ProxyHeader::XForwardedFor,
            },
            log: LogSettings {
                format: LogFormat::Text,
            },
            site_root: "target/site".into(),
            providers: vec![],
            receiver: ReceiverSettings {
                enabled: true,
                max_body_bytes: 256 * 1024,
                commit_timeout_ms: 5_000,
                max_batch: 256,
                writers: 1,
                linger_ms: 3,
            },
            processor: ProcessorSettings {
                enabled: true,
                workers: 4,
                claim_batch: 32,
                backlog_workers: 2,
                backlog_claim_batch: 128,
                events_per_transaction: None,
                set_based: true,
                poll_interval_ms: 1_000,
                linger_ms: 5,
                apply_with_receipts: true,
                vacuum_secs: 60,
                lease_secs: 30,
                retry: RetryPolicy {
                    base_ms: 500,
                    cap_ms: 300_000,
                    max_attempts: 12,
                    max_retry_after_ms: 3_600_000,
                },
            },
            outbox: OutboxSettings {
                sinks: vec!["log".into()],
                routes: vec![],
                relay: RelaySettings {
                    enabled: true,
                    workers: 2,
                    claim_batch: 16,
                    poll_interval_ms: 1_000,
                    lease_secs: 30,
                    retry: RetryPolicy {
                        base_ms: 1_000,
                        cap_ms: 600_000,
                        max_attempts: 15,
                        max_retry_after_ms: 3_600_000,
                    },
                },
            },
            sinks: BTreeMap::new(),
            dead_letters: DeadLetterSettings {
                resolve_within_hours: 72,
            },
            alerts: AlertSettings::default(),
            retention: RetentionSettings {
                enabled: true,
                inbox_days: 30,
                outbox_days: 30,
                dead_letter_days: 180,
                interval_secs: 3_600,
            },
            verify: VerifySettings {
                interval_minutes: 60,
            },
            reconcile: crate::reconcile::ReconcileSettings::default(),
            commands: CommandSettings {
                confirm_within_secs: 3_600,
            },
            dashboard: crate::http::auth::DashboardSettings::default(),
            demo: false,
        }
    }
}

/// Flags that override everything else.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Overrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
}

const TOP_LEVEL_KEYS: [&str; 18] = [
    "database_url",
    "data_dir",
    "listen",
    "admin_listen",
    "server",
    "log",
    "site_root",
    "providers",
    "receiver",
    "processor",
    "outbox",
    "sinks",
    "dead_letters",
    "alerts",
    "retention",
    "verify",
    "dashboard",
    "reconcile",
];

impl Settings {
    /// What reconciliation needs of these settings.
    pub fn reconcile_scope(&self) -> crate::reconcile::Scope {
        crate::reconcile::Scope {
            reconcile: self.reconcile.clone(),
            providers: self.providers.clone(),
        }
    }

    /// What the consistency check needs of these settings.
    pub fn verify_scope(&self) -> crate::verify::Scope {
        crate::verify::Scope {
            outbox: self.outbox.clone(),
            outbox_days: self.retention.outbox_days,
            interval_minutes: self.verify.interval_minutes,
        }
    }

    pub fn load(file: Option<&Path>, overrides: &Overrides) -> anyhow::Result<Settings> {
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        if let Some(file) = file {
            anyhow::ensure!(
                file.exists(),
                "config file {} does not exist",
                file.display()
            );
            figment = figment.merge(Toml::file(file));
        }
        let settings: Settings = figment
            .merge(
                Env::prefixed("ONCEHOOK_")
                    .split("__")
                    // Other ONCEHOOK_* variables (the test suite's) are not settings.
                    .filter(|key| {
                        let key = key.as_str().to_ascii_lowercase();
                        TOP_LEVEL_KEYS.iter().any(|k| key.starts_with(k))
                    }),
            )
            .merge(Serialized::defaults(overrides))
            .extract()
            .map_err(|e| anyhow::anyhow!("invalid configuration: {}", describe_errors(e)))?;
        settings.validate()?;
        Ok(settings)
    }

    /// Cross-field rules the types cannot express.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.server.validate()?;
        self.reconcile.validate()?;
        anyhow::ensure!(
            self.commands.confirm_within_secs >= 1,
            "commands.confirm_within_secs must be at least 1"
        );
        anyhow::ensure!(
            self.processor.claim_batch >= 1
                && self.processor.events_per_transaction != Some(0)
                && self.processor.backlog_workers >= 1
                && self.processor.backlog_claim_batch >= 1,
            "processor.claim_batch, processor.backlog_workers, processor.backlog_claim_batch and \
             processor.events_per_transaction must be at least 1"
        );
        anyhow::ensure!(
            self.processor.claim_batch <= MAX_CLAIM_BATCH
                && self.processor.backlog_claim_batch <= MAX_CLAIM_BATCH,
            "processor.claim_batch and processor.backlog_claim_batch must be at most \
             {MAX_CLAIM_BATCH} (a claim is one transaction: its events wait for its commit and \
             a conflict retries all of it)"
        );
        anyhow::ensure!(
            (1..=MAX_RECEIPT_BATCH).contains(&self.receiver.max_batch),
            "receiver.max_batch must be between 1 and {MAX_RECEIPT_BATCH} (a statement binds up \
             to ten parameters per receipt; SQLite allows 32,766 per statement, PostgreSQL \
             65,535)"
        );
        anyhow::ensure!(
            self.receiver.linger_ms <= MAX_RECEIPT_LINGER_MS,
            "receiver.linger_ms must be at most {MAX_RECEIPT_LINGER_MS} (every receipt of a \
             quiet stream waits it out before its answer)"
        );
        anyhow::ensure!(
            self.processor.linger_ms <= 1_000,
            "processor.linger_ms must be at most 1000 (it delays every event of a quiet stream)"
        );
        for p in &self.providers {
            anyhow::ensure!(
                p.api.rate_per_sec.is_finite() && p.api.rate_per_sec > 0.0,
                "provider {}: api_rate_per_sec must be a positive number",
                p.name
            );
            anyhow::ensure!(
                p.api.timeout_ms >= 1 && p.api.retry.max_attempts >= 1,
                "provider {}: api_timeout_ms and api_retry.max_attempts must be at least 1",
                p.name
            );
            anyhow::ensure!(
                p.api.base.starts_with("http://") || p.api.base.starts_with("https://"),
                "provider {}: api_base must be an http:// or https:// URL",
                p.name
            );
        }
        let r = &self.retention;
        anyhow::ensure!(
            r.dead_letter_days > r.inbox_days && r.dead_letter_days > r.outbox_days,
            "retention.dead_letter_days ({}) must exceed inbox_days ({}) and outbox_days ({}): \
             a dead letter outlives what it came from",
            r.dead_letter_days,
            r.inbox_days,
            r.outbox_days
        );
        let mut named: Vec<&String> = self.outbox.sinks.iter().collect();
        named.extend(self.outbox.routes.iter().flat_map(|r| r.sinks.iter()));
        for sink in named {
            anyhow::ensure!(
                sink == "log" || self.sinks.contains_key(sink),
                "outbox names sink {sink:?}, which is not declared under [sinks]"
            );
        }
        Ok(())
    }

    /// Everything `serve` checks before it touches the database or the network: the
    /// cross-field rules, and every provider and sink built as `serve` builds them.
    pub fn check(&self) -> anyhow::Result<()> {
        self.validate()?;
        Providers::build(&self.providers)?;
        crate::pipeline::relay::sinks::Sinks::build(&self.sinks)?;
        Ok(())
    }

    /// A copy safe to print: secrets, passwords and credentials replaced.
    pub fn redacted(&self) -> Settings {
        let mut s = self.clone();
        s.database_url = redact_url(&s.database_url);
        for p in &mut s.providers {
            p.secrets = p.secrets.iter().map(|_| REDACTED.to_string()).collect();
            p.api.base = redact_url(&p.api.base);
            if let Some(key) = &mut p.api.key {
                *key = REDACTED.into();
            }
        }
        for sink in s.sinks.values_mut() {
            match &mut sink.kind {
                SinkKind::Log => {}
                SinkKind::Http { url, secret, .. } => {
                    *url = redact_url(url);
                    if let Some(secret) = secret {
                        *secret = REDACTED.into();
                    }
                }
                SinkKind::Email { password, .. } => {
                    if let Some(password) = password {
                        *password = REDACTED.into();
                    }
                }
            }
        }
        s.alerts.webhook_url = s.alerts.webhook_url.as_deref().map(redact_url_path);
        s
    }

    /// The effective settings as TOML, secrets redacted (`oncehook config check`).
    pub fn to_redacted_toml(&self) -> anyhow::Result<String> {
        Ok(toml::to_string_pretty(&self.redacted())?)
    }

    pub fn is_sqlite(&self) -> bool {
        self.database_url.starts_with("sqlite:")
    }

    /// With no provider configured, a `stripe` provider with a development secret that is
    /// generated once and kept under `data_dir` (written atomically, mode 0600). A short or
    /// empty secret file is an error, never silently replaced or used.
    pub fn ensure_dev_provider(&mut self) -> anyhow::Result<Option<DevSecret>> {
        if !self.providers.is_empty() {
            return Ok(None);
        }
        create_private_dir(&self.data_dir)?;
        let path = self.data_dir.join("dev-stripe-secret");
        let (secret, generated) = match std::fs::read_to_string(&path) {
            Ok(s) => {
                let secret = s.trim().to_string();
                anyhow::ensure!(
                    secret.len() >= 32,
                    "{} holds a secret of {} bytes; delete the file to generate a new one",
                    path.display(),
                    secret.len()
                );
                (secret, false)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                use rand::RngCore;
                let mut bytes = [0u8; 24];
                rand::thread_rng().fill_bytes(&mut bytes);
                let secret = format!("whsec_dev_{}", hex::encode(bytes));
                write_private_file(&path, secret.as_bytes())?;
                (secret, true)
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        self.providers.push(ProviderSettings {
            name: "stripe".into(),
            scheme: SchemeKind::Stripe,
            secrets: vec![secret.clone()],
            tolerance_secs: crate::provider::settings::default_tolerance(),
            mapping: None,
            events: BTreeMap::new(),
            api: ProviderApiSettings::default(),
            signature: None,
        });
        Ok(Some(DevSecret {
            secret,
            path,
            generated,
        }))
    }
}

/// The development provider's secret and where it is kept.
pub struct DevSecret {
    pub secret: String,
    pub path: PathBuf,
    /// Generated by this start (print it); false: it was already there (print the path).
    pub generated: bool,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.redacted();
        f.debug_struct("Settings")
            .field("database_url", &s.database_url)
            .field("data_dir", &s.data_dir)
            .field("listen", &s.listen)
            .field("admin_listen", &s.admin_listen)
            .field("server", &s.server)
            .field("log", &s.log)
            .field("site_root", &s.site_root)
            .field("providers", &s.providers)
            .field("receiver", &s.receiver)
            .field("processor", &s.processor)
            .field("outbox", &s.outbox)
            .field("sinks", &s.sinks)
            .field("dead_letters", &s.dead_letters)
            .field("alerts", &s.alerts)
            .field("retention", &s.retention)
            .field("demo", &s.demo)
            .finish()
    }
}

/// Figment's errors, each with its key and source, but never the offending value (it may
/// be a secret typed into the wrong key).
fn describe_errors(error: figment::Error) -> String {
    use figment::error::Kind;
    error
        .into_iter()
        .map(|e| {
            let what = match &e.kind {
                Kind::InvalidType(_, expected) => format!("invalid type, expected {expected}"),
                Kind::InvalidValue(_, expected) => format!("invalid value, expected {expected}"),
                Kind::Message(_) => "invalid value".to_string(),
                other => other.to_string(),
            };
            let key = if e.path.is_empty() {
                String::new()
            } else {
                format!("{}: ", e.path.join("."))
            };
            let source = e
                .metadata
                .as_ref()
                .map(|m| match &m.source {
                    Some(source) => format!(" (in {} {source})", m.name),
                    None => format!(" (in {})", m.name),
                })
                .unwrap_or_default();
            format!("{key}{what}{source}")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail error type
    fn a_provider_in_the_issue_form_loads() {
        // In a Jail: another test sets ONCEHOOK_* variables, and the jail's lock keeps
        // them out of this one.
        figment::Jail::expect_with(|_| {
            a_provider_in_the_issue_form_loads_here();
            Ok(())
        });
    }

    fn a_provider_in_the_issue_form_loads_here() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("oncehook.toml");
        std::fs::write(
            &file,
            r#"
database_url = "sqlite://x.db"
[[providers]]
name = "stripe"
scheme = "stripe"              # or "standard-webhooks"
secrets = ["whsec_0123456789abcdef0123", "whsec_fedcba9876543210fedc"]
tolerance_secs = 300

[[providers]]
name = "acme"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
[providers.events."payment.captured"]
transition = "pay"
external_ref = ["/data/payment_id"]
occurred_at = ["/timestamp"]
"#,
        )
        .unwrap();
        let overrides = Overrides {
            listen: Some("127.0.0.1:9999".parse().unwrap()),
            ..Default::default()
        };
        let s = Settings::load(Some(&file), &overrides).unwrap();
        assert_eq!(s.database_url, "sqlite://x.db");
        assert_eq!(s.listen.port(), 9999);
        assert_eq!(s.providers[0].secrets.len(), 2);
        let providers = Providers::build(&s.providers).unwrap();
        assert!(providers
            .get("acme")
            .unwrap()
            .mapping
            .events
            .contains_key("payment.captured"));
        assert!(providers
            .get("acme")
            .unwrap()
            .mapping
            .events
            .contains_key("payment.succeeded"));
    }

    #[test]
    // figment's Jail (which isolates the environment) returns its large error type.
    #[allow(clippy::result_large_err)]
    fn environment_variables_override_the_file_and_bad_values_are_errors() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("ONCEHOOK_SITE_ROOT", "/srv/site");
            jail.set_env("ONCEHOOK_PROCESSOR__WORKERS", "9");
            jail.set_env("ONCEHOOK_TEST_SOMETHING_ELSE", "ignored");
            let s = Settings::load(None, &Overrides::default()).expect("valid environment");
            assert_eq!(s.site_root, PathBuf::from("/srv/site"));
            assert_eq!(s.processor.workers, 9);
            jail.set_env("ONCEHOOK_PROCESSOR__WORKERS", "abc");
            assert!(Settings::load(None, &Overrides::default()).is_err());
            Ok(())
        });
    }

    #[test]
    fn debug_of_settings_never_shows_a_secret() {
        let mut s = Settings {
            database_url: "postgres://app:pgPW1@db/x?sslmode=require&password=pgPW2".into(),
            providers: vec![ProviderSettings {
                name: "stripe".into(),
                scheme: SchemeKind::Stripe,
                secrets: vec!["whsec_providerSECRET".into()],
                tolerance_secs: 300,
                mapping: None,
                events: BTreeMap::new(),
                api: ProviderApiSettings {
                    base: "https://apiuser:basePW@api.example/".into(),
                    key: Some("sk_test_apiKEY".into()),
                    ..ProviderApiSettings::default()
                },
                signature: None,
            }],
            ..Settings::default()
        };
        s.alerts.webhook_url = Some("https://hooks.slack.com/services/T0/B0/slackTOKEN".into());
        s.sinks.insert(
            "cb".into(),
            SinkSettings {
                kind: SinkKind::Http {
                    url: "https://merchant.example/hook?token=urlTOKEN".into(),
                    secret: Some("whsec_sinkSECRET".into()),
                    timeout_ms: 1,
                },
                concurrency: 1,
                rate_per_sec: None,
            },
        );
        s.sinks.insert(
            "mail".into(),
            SinkSettings {
                kind: SinkKind::Email {
                    smtp_host: "smtp".into(),
                    smtp_port: 587,
                    security: "starttls".into(),
                    username: Some("u".into()),
                    password: Some("smtpPASSWORD".into()),
                    from: "a@b.c".into(),
                    to: "d@e.f".into(),
                    timeout_ms: 1,
                },
                concurrency: 1,
                rate_per_sec: None,
            },
        );
        let shown = format!(
            "{s:?} {:?} {}",
            s.providers[0],
            s.to_redacted_toml().unwrap()
        );
        for secret in [
            "pgPW1",
            "pgPW2",
            "providerSECRET",
            "slackTOKEN",
            "urlTOKEN",
            "sinkSECRET",
            "smtpPASSWORD",
            "apiKEY",
            "basePW",
        ] {
            assert!(!shown.contains(secret), "{secret} shown: {shown}");
        }
        assert!(shown.contains("db/x") && shown.contains("merchant.example"));
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail error type
    fn configuration_errors_never_echo_a_value() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "bad.toml",
                "[[providers]]\nname = \"s\"\nscheme = \"stripe\"\nsecrets = \"whsec_leakedVALUE\"\n",
            )?;
            let err =
                Settings::load(Some(Path::new("bad.toml")), &Overrides::default()).unwrap_err();
            let text = format!("{err:#} {err:?}");
            assert!(!text.contains("leakedVALUE"), "{text}");
            assert!(text.contains("secrets"), "names the key: {text}");
            jail.set_env("ONCEHOOK_DATABASE_URL", "[\"postgres://u:envPW@h/db\"]");
            let err = Settings::load(None, &Overrides::default()).unwrap_err();
            let text = format!("{err:#} {err:?}");
            assert!(!text.contains("envPW"), "{text}");
            Ok(())
        });
    }

    #[test]
    fn retention_must_keep_dead_letters_longest_and_sinks_must_exist() {
        let mut s = Settings::default();
        s.retention.dead_letter_days = 10;
        assert!(s
            .validate()
            .unwrap_err()
            .to_string()
            .contains("dead_letter_days"));
        let mut s = Settings::default();
        s.outbox.sinks = vec!["fulfilment".into()];
        assert!(s.validate().unwrap_err().to_string().contains("fulfilment"));
    }

    #[test]
    fn routes_pick_sinks_per_topic() {
        let mut o = Settings::default().outbox;
        o.routes = vec![OutboxRoute {
            topics: vec!["order.paid".into()],
            sinks: vec!["fulfilment".into(), "email".into()],
        }];
        assert_eq!(o.sinks_for("order.paid"), vec!["email", "fulfilment"]);
        assert_eq!(o.sinks_for("order.refunded"), vec!["log"]);
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail error type
    fn unknown_keys_and_missing_files_are_clear_errors() {
        figment::Jail::expect_with(|_| {
            unknown_keys_and_missing_files_are_clear_errors_here();
            Ok(())
        });
    }

    fn unknown_keys_and_missing_files_are_clear_errors_here() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, "databse_url = \"typo\"\n").unwrap();
        let err = format!(
            "{:#}",
            Settings::load(Some(&file), &Overrides::default()).unwrap_err()
        );
        assert!(err.contains("databse_url"), "{err}");
        let missing = dir.path().join("nope.toml");
        assert!(Settings::load(Some(&missing), &Overrides::default()).is_err());
    }

    #[test]
    fn dev_provider_secret_is_generated_once() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("data");
        let mut a = Settings {
            data_dir: data_dir.clone(),
            ..Settings::default()
        };
        let first = a.ensure_dev_provider().unwrap().unwrap();
        assert!(first.generated, "the first start generates and prints it");
        let mut b = Settings {
            data_dir: data_dir.clone(),
            ..Settings::default()
        };
        let again = b.ensure_dev_provider().unwrap().unwrap();
        assert_eq!(again.secret, first.secret);
        assert!(!again.generated, "later starts print only where it is");
        assert!(
            a.ensure_dev_provider().unwrap().is_none(),
            "already has a provider"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&first.path), 0o600);
            assert_eq!(mode(&data_dir), 0o700);
        }
        let leftovers: Vec<_> = std::fs::read_dir(&data_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left: {leftovers:?}");
    }

    #[test]
    fn a_short_or_empty_dev_secret_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        for contents in ["", "\n", "whsec_"] {
            std::fs::write(dir.path().join("dev-stripe-secret"), contents).unwrap();
            let mut s = Settings {
                data_dir: dir.path().into(),
                ..Settings::default()
            };
            let err = s.ensure_dev_provider().err().expect("refused");
            assert!(err.to_string().contains("dev-stripe-secret"), "{err}");
        }
    }
}
