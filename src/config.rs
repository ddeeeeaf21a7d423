//! Configuration: defaults, then a TOML file, then `ONCEHOOK_*` environment variables
//! (nested keys with `__`, e.g. `ONCEHOOK_PROCESSOR__WORKERS=8`), then command-line flags.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

use crate::alerts::AlertSettings;
use crate::mapping::{self, EventRule, Mapping};
use crate::retry::RetryPolicy;
use crate::signature::{SchemeKind, Verifier};

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// `sqlite://data/oncehook.db` (default) or `postgres://…`.
    pub database_url: String,
    /// Where the SQLite file and the generated development secret live.
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
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
    /// Dashboard sign-in and sessions (see src/auth/).
    pub dashboard: crate::auth::DashboardSettings,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSettings {
    pub name: String,
    pub scheme: SchemeKind,
    pub secrets: Vec<String>,
    #[serde(default = "default_tolerance")]
    pub tolerance_secs: u64,
    /// A built-in mapping (`stripe`, `standard-webhooks`); defaults to the scheme's.
    #[serde(default)]
    pub mapping: Option<String>,
    /// Per event type rules layered over the built-in mapping.
    #[serde(default)]
    pub events: BTreeMap<String, EventRule>,
}

fn default_tolerance() -> u64 {
    300
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiverSettings {
    pub enabled: bool,
    pub max_body_bytes: usize,
    /// Requests waiting longer than this for their commit get 503 (the provider retries).
    pub commit_timeout_ms: u64,
    /// Most events written in one transaction by an ingest writer.
    pub max_batch: usize,
    /// Concurrent ingest writers; SQLite has one writer whatever this says. One is the
    /// default on PostgreSQL too: it commits whatever requests queued up during the last
    /// commit, so batches grow with the load and PostgreSQL spends less CPU per event,
    /// which the processor beside it needs (BENCHMARKS.md: `receiver.writers`).
    pub writers: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessorSettings {
    pub enabled: bool,
    pub workers: usize,
    pub claim_batch: i64,
    /// Events committed together, each in its own savepoint (group commit: one fsync for
    /// many events). Unset: the whole claim on SQLite, where the single writer makes the
    /// batch free of lock contention; 1 on PostgreSQL, where concurrent workers would hold
    /// each other's order rows for a whole batch.
    pub events_per_transaction: Option<usize>,
    /// Fallback poll when no wake-up arrives.
    pub poll_interval_ms: u64,
    /// A claimed event not finished within this is claimed again (crashed worker).
    pub lease_secs: i64,
    /// Transient and unknown failures (database trouble, order not known yet) retry under
    /// this policy, then go to the dead-letter queue.
    pub retry: RetryPolicy,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxSettings {
    /// Sinks every applied transition is announced to (`order.<status>` topics), unless a
    /// route names the topic.
    pub sinks: Vec<String>,
    /// Topic-specific sinks, e.g. `order.paid` → fulfilment callback and customer email.
    pub routes: Vec<OutboxRoute>,
    pub relay: RelaySettings,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxRoute {
    pub topics: Vec<String>,
    pub sinks: Vec<String>,
}

impl OutboxSettings {
    /// The sinks that get a row for `topic`: every route naming it, else the defaults.
    pub fn sinks_for(&self, topic: &str) -> Vec<String> {
        let mut sinks: Vec<String> = self
            .routes
            .iter()
            .filter(|r| r.topics.iter().any(|t| t == topic || t == "*"))
            .flat_map(|r| r.sinks.iter().cloned())
            .collect();
        if sinks.is_empty() {
            sinks = self.sinks.clone();
        }
        sinks.sort();
        sinks.dedup();
        sinks
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySettings {
    pub enabled: bool,
    pub workers: usize,
    pub claim_batch: i64,
    pub poll_interval_ms: u64,
    /// A row being delivered is leased this long; long sends renew the lease.
    pub lease_secs: i64,
    pub retry: RetryPolicy,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkSettings {
    #[serde(flatten)]
    pub kind: SinkKind,
    /// Deliveries in flight at once through this sink.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Most deliveries per second through this sink (none: unlimited).
    #[serde(default)]
    pub rate_per_sec: Option<f64>,
}

fn default_concurrency() -> usize {
    4
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum SinkKind {
    /// Writes the message to the log (development).
    Log,
    /// POSTs the JSON payload with `Idempotency-Key` and Standard Webhooks signature headers.
    Http {
        url: String,
        /// `whsec_<base64>` secret the merchant verifies with; none: unsigned.
        #[serde(default)]
        secret: Option<String>,
        #[serde(default = "default_http_timeout")]
        timeout_ms: u64,
    },
    /// Sends an email over SMTP.
    Email {
        smtp_host: String,
        #[serde(default = "default_smtp_port")]
        smtp_port: u16,
        /// `none` (plain, for local relays), `starttls` or `tls`.
        #[serde(default = "default_smtp_security")]
        security: String,
        #[serde(default)]
        username: Option<String>,
        #[serde(default)]
        password: Option<String>,
        from: String,
        to: String,
        #[serde(default = "default_http_timeout")]
        timeout_ms: u64,
    },
}

fn default_http_timeout() -> u64 {
    10_000
}

fn default_smtp_port() -> u16 {
    25
}

fn default_smtp_security() -> String {
    "starttls".into()
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterSettings {
    /// A dead letter should be resolved within this many hours (its deadline).
    pub resolve_within_hours: i64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {
    /// Run the pruner in `serve`.
    pub enabled: bool,
    /// Finished inbox rows (and their deliveries) older than this are pruned.
    pub inbox_days: i64,
    /// Delivered outbox rows (and their attempts) older than this are pruned.
    pub outbox_days: i64,
    /// Closed dead letters older than this are pruned; open ones never are. Must exceed
    /// the two above, so a dead letter outlives what it came from.
    pub dead_letter_days: i64,
    pub interval_secs: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            database_url: "sqlite://data/oncehook.db".into(),
            data_dir: "data".into(),
            listen: "127.0.0.1:8080".parse().expect("valid default address"),
            site_root: "target/site".into(),
            providers: vec![],
            receiver: ReceiverSettings {
                enabled: true,
                max_body_bytes: 256 * 1024,
                commit_timeout_ms: 5_000,
                max_batch: 256,
                writers: 1,
            },
            processor: ProcessorSettings {
                enabled: true,
                workers: 4,
                claim_batch: 32,
                events_per_transaction: None,
                poll_interval_ms: 1_000,
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
            dashboard: crate::auth::DashboardSettings::default(),
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

const TOP_LEVEL_KEYS: [&str; 13] = [
    "database_url",
    "data_dir",
    "listen",
    "site_root",
    "providers",
    "receiver",
    "processor",
    "outbox",
    "sinks",
    "dead_letters",
    "alerts",
    "retention",
    "dashboard",
];

impl Settings {
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
            .context("invalid configuration")?;
        settings.validate()?;
        Ok(settings)
    }

    /// Cross-field rules the types cannot express.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.processor.claim_batch >= 1 && self.processor.events_per_transaction != Some(0),
            "processor.claim_batch and processor.events_per_transaction must be at least 1"
        );
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

    pub fn is_sqlite(&self) -> bool {
        self.database_url.starts_with("sqlite:")
    }

    /// With no provider configured, a `stripe` provider with a development secret that is
    /// generated once and kept under `data_dir`. Returns the secret when it did so.
    pub fn ensure_dev_provider(&mut self) -> anyhow::Result<Option<String>> {
        if !self.providers.is_empty() {
            return Ok(None);
        }
        std::fs::create_dir_all(&self.data_dir)
            .with_context(|| format!("creating {}", self.data_dir.display()))?;
        let path = self.data_dir.join("dev-stripe-secret");
        let secret = match std::fs::read_to_string(&path) {
            Ok(s) => s.trim().to_string(),
            Err(_) => {
                use rand::RngCore;
                let mut bytes = [0u8; 24];
                rand::thread_rng().fill_bytes(&mut bytes);
                let secret = format!("whsec_dev_{}", hex::encode(bytes));
                std::fs::write(&path, &secret)
                    .with_context(|| format!("writing {}", path.display()))?;
                secret
            }
        };
        self.providers.push(ProviderSettings {
            name: "stripe".into(),
            scheme: SchemeKind::Stripe,
            secrets: vec![secret.clone()],
            tolerance_secs: default_tolerance(),
            mapping: None,
            events: BTreeMap::new(),
        });
        Ok(Some(secret))
    }
}

/// A provider ready for use: its verifier and its mapping.
#[derive(Clone, Debug)]
pub struct Provider {
    pub name: String,
    pub verifier: Verifier,
    pub mapping: Mapping,
}

impl ProviderSettings {
    pub fn build(&self) -> anyhow::Result<Provider> {
        let base = match self.mapping.as_deref() {
            Some("stripe") => mapping::stripe_default(),
            Some("standard-webhooks") => mapping::standard_webhooks_default(),
            Some(other) => anyhow::bail!("provider {}: unknown mapping {other:?}", self.name),
            None => match self.scheme {
                SchemeKind::Stripe => mapping::stripe_default(),
                SchemeKind::StandardWebhooks => mapping::standard_webhooks_default(),
            },
        };
        Ok(Provider {
            name: self.name.clone(),
            verifier: Verifier::new(self.scheme, &self.secrets, self.tolerance_secs)
                .with_context(|| format!("provider {}", self.name))?,
            mapping: base.with_overrides(&self.events),
        })
    }
}

/// All configured providers by name.
#[derive(Clone, Debug, Default)]
pub struct Providers(BTreeMap<String, Provider>);

impl Providers {
    pub fn build(settings: &[ProviderSettings]) -> anyhow::Result<Self> {
        let mut map = BTreeMap::new();
        for p in settings {
            anyhow::ensure!(
                map.insert(p.name.clone(), p.build()?).is_none(),
                "provider {} is declared twice",
                p.name
            );
        }
        Ok(Providers(map))
    }

    pub fn get(&self, name: &str) -> Option<&Provider> {
        self.0.get(name)
    }
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
secrets = ["whsec_new", "whsec_old"]
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
        let mut a = Settings {
            data_dir: dir.path().into(),
            ..Settings::default()
        };
        let secret = a.ensure_dev_provider().unwrap().unwrap();
        let mut b = Settings {
            data_dir: dir.path().into(),
            ..Settings::default()
        };
        assert_eq!(b.ensure_dev_provider().unwrap().unwrap(), secret);
        assert_eq!(
            a.ensure_dev_provider().unwrap(),
            None,
            "already has a provider"
        );
    }
}
