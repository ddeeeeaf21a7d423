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
use crate::provider::mapping::{self, EventRule, Mapping};
use crate::provider::signature::{SchemeKind, Verifier};

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

#[derive(Clone, Serialize, Deserialize)]
#[serde(from = "ProviderTable", into = "ProviderTable")]
pub struct ProviderSettings {
    pub name: String,
    pub scheme: SchemeKind,
    pub secrets: Vec<String>,
    pub tolerance_secs: u64,
    /// A built-in mapping (`stripe`, `standard-webhooks`); defaults to the scheme's.
    pub mapping: Option<String>,
    /// Per event type rules layered over the built-in mapping.
    pub events: BTreeMap<String, EventRule>,
    /// The provider's API (`api_*` keys of the entry): what reconciliation and outbound
    /// refunds talk to, Stripe's own or the simulator's.
    pub api: ProviderApiSettings,
    /// `scheme = "generic"`: where the signature is and what it covers.
    pub signature: Option<crate::provider::signature::SignatureSpec>,
}

/// How oncehook reaches a provider's API. In a file these are keys of the provider entry
/// (`api_base`, `api_key`, `api_timeout_ms`, `api_rate_per_sec`, `api_retry`).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderApiSettings {
    /// Where the API lives, without `/v1` (Stripe's by default; the simulator's for tests
    /// and the demo).
    pub base: String,
    /// The secret API key (`sk_…`), sent as a bearer token; a secret like `secrets`.
    pub key: Option<String>,
    /// One request, connection and answer included, must finish within this.
    pub timeout_ms: u64,
    /// Most requests per second to this API (Stripe allows 25 in test mode, 100 live).
    pub rate_per_sec: f64,
    /// 429, 5xx and timeouts retry under this policy (`Retry-After` honoured).
    pub retry: RetryPolicy,
}

impl Default for ProviderApiSettings {
    fn default() -> Self {
        ProviderApiSettings {
            base: "https://api.stripe.com".into(),
            key: None,
            timeout_ms: 30_000,
            rate_per_sec: 20.0,
            retry: RetryPolicy {
                base_ms: 500,
                cap_ms: 30_000,
                max_attempts: 5,
                max_retry_after_ms: 60_000,
            },
        }
    }
}

impl std::fmt::Debug for ProviderApiSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderApiSettings")
            .field("base", &redact_url(&self.base))
            .field("key", &self.key.as_ref().map(|_| REDACTED))
            .field("timeout_ms", &self.timeout_ms)
            .field("rate_per_sec", &self.rate_per_sec)
            .field("retry", &self.retry)
            .finish()
    }
}

/// The file form of a provider entry: one flat table, the API keys prefixed `api_`. (serde's
/// `flatten` cannot be combined with `deny_unknown_fields`, as for sinks.)
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderTable {
    name: String,
    scheme: SchemeKind,
    secrets: Vec<String>,
    #[serde(default = "default_tolerance")]
    tolerance_secs: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mapping: Option<String>,
    #[serde(default)]
    events: BTreeMap<String, EventRule>,
    #[serde(default = "default_api_base")]
    api_base: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    api_key: Option<String>,
    #[serde(default = "default_api_timeout")]
    api_timeout_ms: u64,
    #[serde(default = "default_api_rate")]
    api_rate_per_sec: f64,
    #[serde(default = "default_api_retry")]
    api_retry: RetryPolicy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signature: Option<crate::provider::signature::SignatureSpec>,
}

fn default_api_base() -> String {
    ProviderApiSettings::default().base
}

fn default_api_timeout() -> u64 {
    ProviderApiSettings::default().timeout_ms
}

fn default_api_rate() -> f64 {
    ProviderApiSettings::default().rate_per_sec
}

fn default_api_retry() -> RetryPolicy {
    ProviderApiSettings::default().retry
}

impl From<ProviderTable> for ProviderSettings {
    fn from(t: ProviderTable) -> Self {
        ProviderSettings {
            name: t.name,
            scheme: t.scheme,
            secrets: t.secrets,
            tolerance_secs: t.tolerance_secs,
            mapping: t.mapping,
            events: t.events,
            api: ProviderApiSettings {
                base: t.api_base,
                key: t.api_key,
                timeout_ms: t.api_timeout_ms,
                rate_per_sec: t.api_rate_per_sec,
                retry: t.api_retry,
            },
            signature: t.signature,
        }
    }
}

impl From<ProviderSettings> for ProviderTable {
    fn from(p: ProviderSettings) -> Self {
        ProviderTable {
            name: p.name,
            scheme: p.scheme,
            secrets: p.secrets,
            tolerance_secs: p.tolerance_secs,
            mapping: p.mapping,
            events: p.events,
            api_base: p.api.base,
            api_key: p.api.key,
            api_timeout_ms: p.api.timeout_ms,
            api_rate_per_sec: p.api.rate_per_sec,
            api_retry: p.api.retry,
            signature: p.signature,
        }
    }
}

fn default_tolerance() -> u64 {
    300
}

impl std::fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderSettings")
            .field("name", &self.name)
            .field("scheme", &self.scheme)
            .field(
                "secrets",
                &format_args!("[{} {REDACTED}]", self.secrets.len()),
            )
            .field("tolerance_secs", &self.tolerance_secs)
            .field("mapping", &self.mapping)
            .field("events", &self.events)
            .field("api", &self.api)
            .finish()
    }
}

/// Limits and timeouts of the HTTP server (both listeners).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// A client must send its request headers within this (slowloris guard).
    pub header_read_timeout_ms: u64,
    /// A request body must arrive within this.
    pub body_timeout_ms: u64,
    /// A whole request, body and answer included, must finish within this.
    pub request_timeout_ms: u64,
    /// Open connections per listener; more wait in the accept queue.
    pub max_connections: usize,
    /// Requests handled at once per listener; beyond that 503 with `Retry-After`. At most
    /// `max_connections` (each connection carries one request at a time, so a larger limit
    /// is never reached); below it, so that load is shed while connections remain.
    pub max_in_flight: usize,
    /// Open connections per client address (the TCP peer); more are closed at once, so one
    /// address dribbling slow bodies cannot take every slot. Trusted proxies are exempt.
    pub max_connections_per_address: usize,
    /// Peers whose `proxy_header` names the client (CIDR blocks). Empty: the TCP peer is
    /// the client, whatever the request's headers say.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Which header a trusted proxy reports the client in.
    pub proxy_header: ProxyHeader,
}

/// The header a trusted proxy names the client in. Only one is read: a proxy that sets one
/// passes the other through from the client unchecked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, ...` (nginx, HAProxy, Caddy, Traefik, cloud LBs).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1`.
    Forwarded,
}

impl ServerSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.max_in_flight <= self.max_connections,
            "server.max_in_flight ({}) must not exceed server.max_connections ({}): each \
             connection carries one request at a time, so that many requests are never in \
             flight and load is never shed",
            self.max_in_flight,
            self.max_connections
        );
        Ok(())
    }
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

/// The most events one claim may take (`processor.claim_batch`,
/// `processor.backlog_claim_batch`). A claim is one transaction: every event in it waits
/// for the whole batch's commit while its orders stay locked, and a deadlock or
/// serialization failure retries all of it, so a mistyped 100000 would turn a backlog into
/// multi-second transactions rather than a faster drain.
pub const MAX_CLAIM_BATCH: i64 = 1_024;

/// The most receipts one ingest commit may carry (`receiver.max_batch`).
pub const MAX_RECEIPT_BATCH: usize = 2_048;

/// The longest `receiver.linger_ms`.
pub const MAX_RECEIPT_LINGER_MS: u64 = 10;

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
    /// A writer whose queue held a few receipts (more than one, fewer than
    /// `ingest::SMALL_BATCH` and than half the open connections) waits up to this many
    /// milliseconds for more before it commits, so a live stream's receipts share commits;
    /// a burst's batches are large and a lone receipt is alone, and neither waits. Timers
    /// tick in whole milliseconds, so 1 waits 1-2 ms. 0: commit at once.
    pub linger_ms: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessorSettings {
    pub enabled: bool,
    pub workers: usize,
    pub claim_batch: i64,
    /// PostgreSQL, while claims come back full (a backlog): every claim takes up to
    /// `backlog_claim_batch` events (cheaper per event), and while receivers keep
    /// announcing new events only this many workers claim, so a burst leaves the receiver
    /// its share of the database's CPU (`worker::Rounds`). Ignored on SQLite, whose one
    /// writer runs every claim anyway.
    pub backlog_workers: usize,
    pub backlog_claim_batch: i64,
    /// Events committed together (group commit: one fsync for many events). Unset: the
    /// whole claim, on both databases (set-based batches lock their orders in one sorted
    /// order, so concurrent workers on PostgreSQL do not deadlock).
    pub events_per_transaction: Option<usize>,
    /// A group of events is applied set-based (a few multi-row statements per batch,
    /// `store::batch`); false: one savepoint and several statements per event.
    pub set_based: bool,
    /// Fallback poll when no wake-up arrives.
    pub poll_interval_ms: u64,
    /// How long the first worker woken waits before it claims, so that events arriving
    /// within this window are applied as one batch (`worker::Gather`); skipped while
    /// claims come back full. 0: claim at once on every wake-up.
    pub linger_ms: u64,
    /// SQLite: the receipts' commit also applies the oldest due events, up to a claim
    /// (`Processor::apply_with_receipts`): one commit and one sync instead of two, and each
    /// inbox row written to the WAL once. Ignored on PostgreSQL, where concurrent writers
    /// commit apart, and with `set_based` off.
    pub apply_with_receipts: bool,
    /// On a PostgreSQL server with `autovacuum = off`, VACUUM (ANALYZE) the tables the
    /// processor rewrites this often (`store::vacuum_hot_tables`); 0: never. Ignored
    /// elsewhere and on an instance whose processor is off.
    pub vacuum_secs: u64,
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

/// A named sink: its kind with the kind's own keys, plus the keys every kind has. In a
/// file it is one flat table (`[sinks.NAME] kind = "http"`, `url = …`, `concurrency = …`).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "SinkTable", into = "SinkTable")]
pub struct SinkSettings {
    pub kind: SinkKind,
    /// Deliveries in flight at once through this sink.
    pub concurrency: usize,
    /// Most deliveries per second through this sink (none: unlimited).
    pub rate_per_sec: Option<f64>,
}

fn default_concurrency() -> usize {
    4
}

#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
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

/// The file form of a sink. serde's `flatten` cannot be combined with
/// `deny_unknown_fields`, so every variant carries the common keys itself: an internally
/// tagged enum whose variants each refuse unknown keys.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
enum SinkTable {
    Log {
        #[serde(default = "default_concurrency")]
        concurrency: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_per_sec: Option<f64>,
    },
    Http {
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secret: Option<String>,
        #[serde(default = "default_http_timeout")]
        timeout_ms: u64,
        #[serde(default = "default_concurrency")]
        concurrency: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_per_sec: Option<f64>,
    },
    Email {
        smtp_host: String,
        #[serde(default = "default_smtp_port")]
        smtp_port: u16,
        #[serde(default = "default_smtp_security")]
        security: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        username: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        password: Option<String>,
        from: String,
        to: String,
        #[serde(default = "default_http_timeout")]
        timeout_ms: u64,
        #[serde(default = "default_concurrency")]
        concurrency: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_per_sec: Option<f64>,
    },
}

impl From<SinkTable> for SinkSettings {
    fn from(table: SinkTable) -> Self {
        let (kind, concurrency, rate_per_sec) = match table {
            SinkTable::Log {
                concurrency,
                rate_per_sec,
            } => (SinkKind::Log, concurrency, rate_per_sec),
            SinkTable::Http {
                url,
                secret,
                timeout_ms,
                concurrency,
                rate_per_sec,
            } => (
                SinkKind::Http {
                    url,
                    secret,
                    timeout_ms,
                },
                concurrency,
                rate_per_sec,
            ),
            SinkTable::Email {
                smtp_host,
                smtp_port,
                security,
                username,
                password,
                from,
                to,
                timeout_ms,
                concurrency,
                rate_per_sec,
            } => (
                SinkKind::Email {
                    smtp_host,
                    smtp_port,
                    security,
                    username,
                    password,
                    from,
                    to,
                    timeout_ms,
                },
                concurrency,
                rate_per_sec,
            ),
        };
        SinkSettings {
            kind,
            concurrency,
            rate_per_sec,
        }
    }
}

impl From<SinkSettings> for SinkTable {
    fn from(s: SinkSettings) -> Self {
        let (concurrency, rate_per_sec) = (s.concurrency, s.rate_per_sec);
        match s.kind {
            SinkKind::Log => SinkTable::Log {
                concurrency,
                rate_per_sec,
            },
            SinkKind::Http {
                url,
                secret,
                timeout_ms,
            } => SinkTable::Http {
                url,
                secret,
                timeout_ms,
                concurrency,
                rate_per_sec,
            },
            SinkKind::Email {
                smtp_host,
                smtp_port,
                security,
                username,
                password,
                from,
                to,
                timeout_ms,
            } => SinkTable::Email {
                smtp_host,
                smtp_port,
                security,
                username,
                password,
                from,
                to,
                timeout_ms,
                concurrency,
                rate_per_sec,
            },
        }
    }
}

impl std::fmt::Debug for SinkSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkSettings")
            .field("kind", &self.kind)
            .field("concurrency", &self.concurrency)
            .field("rate_per_sec", &self.rate_per_sec)
            .finish()
    }
}

impl std::fmt::Debug for SinkKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SinkKind::Log => f.write_str("Log"),
            SinkKind::Http {
                url,
                secret,
                timeout_ms,
            } => f
                .debug_struct("Http")
                .field("url", &redact_url(url))
                .field("secret", &secret.as_ref().map(|_| REDACTED))
                .field("timeout_ms", timeout_ms)
                .finish(),
            SinkKind::Email {
                smtp_host,
                smtp_port,
                security,
                username,
                password,
                from,
                to,
                timeout_ms,
            } => f
                .debug_struct("Email")
                .field("smtp_host", smtp_host)
                .field("smtp_port", smtp_port)
                .field("security", security)
                .field("username", username)
                .field("password", &password.as_ref().map(|_| REDACTED))
                .field("from", from)
                .field("to", to)
                .field("timeout_ms", timeout_ms)
                .finish(),
        }
    }
}

/// What secrets are replaced with wherever settings are shown.
pub const REDACTED: &str = "<redacted>";

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

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifySettings {
    /// `serve` runs the check of `oncehook verify` this often, in minutes, and keeps the
    /// result for the overview and `/metrics`; 0 turns it off. With several instances on
    /// one database the newest recorded run counts for all of them.
    pub interval_minutes: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandSettings {
    /// A command the provider answered (`sent`) whose webhook has not confirmed it after
    /// this many seconds is flagged: counted on the overview and in
    /// `oncehook_provider_commands_unconfirmed` (reconciliation's objects pass finds the
    /// refund at the provider and confirms it).
    pub confirm_within_secs: u64,
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
            tolerance_secs: default_tolerance(),
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

/// Creates `dir` (and its parents) readable by the owner only (0700 on Unix).
pub fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))
}

/// Writes `path` atomically with mode 0600: a temporary file beside it, fsync, rename,
/// fsync of the directory. A crash leaves either no file or the whole file.
pub fn write_private_file(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let result = (|| {
        let mut file = options.open(&tmp)?;
        file.write_all(contents)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok::<_, std::io::Error>(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("writing {}", path.display()))
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

/// Keys of a URL's query whose values are secrets.
fn secret_query_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["pass", "secret", "token", "key", "sig", "auth"]
        .iter()
        .any(|k| key.contains(k))
}

/// A URL safe to print: the password of its credentials and secret-looking query values
/// (`?password=`, `token=`…) replaced.
pub fn redact_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = match base.find("://") {
        Some(scheme) => {
            let rest = &base[scheme + 3..];
            let authority_end = rest.find('/').unwrap_or(rest.len());
            match rest[..authority_end].rfind('@') {
                Some(at) => {
                    let user = rest[..at].split(':').next().unwrap_or("");
                    let with_password = rest[..at].contains(':');
                    format!(
                        "{}{user}{}{}",
                        &base[..scheme + 3],
                        if with_password { ":***" } else { "" },
                        &rest[at..]
                    )
                }
                None => base.to_string(),
            }
        }
        None => base.to_string(),
    };
    if let Some(query) = query {
        out.push('?');
        let parts: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if secret_query_key(k) => format!("{k}=***"),
                _ => pair.to_string(),
            })
            .collect();
        out.push_str(&parts.join("&"));
    }
    out
}

/// A URL whose path is itself the secret (Slack incoming webhooks): scheme and host only.
pub fn redact_url_path(url: &str) -> String {
    match url.find("://") {
        Some(scheme) => {
            let rest = &url[scheme + 3..];
            let host_end = rest.find(['/', '?']).unwrap_or(rest.len());
            let host = &rest[..host_end];
            let host = host.rsplit('@').next().unwrap_or(host);
            format!("{}{host}/{REDACTED}", &url[..scheme + 3])
        }
        None => REDACTED.to_string(),
    }
}

/// A provider ready for use: its verifier and its mapping.
#[derive(Clone, Debug)]
pub struct Provider {
    pub name: String,
    pub verifier: Verifier,
    pub mapping: Mapping,
    /// Mercado Pago with an `api_key`: its thin notifications are completed with the
    /// payment they name before they are stored (`web::webhooks`).
    pub fetch: Option<crate::provider::api::ApiClient>,
}

/// Mercado Pago's API, where a Mercado Pago provider's `api_base` is not set.
pub const MERCADOPAGO_API_BASE: &str = "https://api.mercadopago.com";

impl ProviderSettings {
    pub fn build(&self) -> anyhow::Result<Provider> {
        let base = match self.mapping.as_deref() {
            Some("stripe") => mapping::stripe_default(),
            Some("standard-webhooks") => mapping::standard_webhooks_default(),
            Some("asaas") => mapping::asaas_default(),
            Some("pagbank") => mapping::pagbank_default(),
            Some("mercadopago") => mapping::mercadopago_default(),
            Some(other) => anyhow::bail!("provider {}: unknown mapping {other:?}", self.name),
            None => match self.scheme {
                SchemeKind::Stripe => mapping::stripe_default(),
                SchemeKind::StandardWebhooks => mapping::standard_webhooks_default(),
                SchemeKind::Asaas => mapping::asaas_default(),
                SchemeKind::PagBank => mapping::pagbank_default(),
                SchemeKind::MercadoPago => mapping::mercadopago_default(),
                _ => mapping::envelope_only(),
            },
        };
        Ok(Provider {
            name: self.name.clone(),
            verifier: Verifier::with_spec(
                self.scheme,
                &self.secrets,
                self.tolerance_secs,
                self.signature.as_ref(),
            )
            .with_context(|| format!("provider {}", self.name))?,
            mapping: base.with_overrides(&self.events),
            fetch: match (self.scheme, &self.api.key) {
                (SchemeKind::MercadoPago, Some(_)) => {
                    let mut api = self.api.clone();
                    if api.base == ProviderApiSettings::default().base {
                        api.base = MERCADOPAGO_API_BASE.into();
                    }
                    Some(
                        crate::provider::api::ApiClient::new(&api)
                            .with_context(|| format!("provider {}", self.name))?,
                    )
                }
                _ => None,
            },
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

    /// The configured provider names, in order.
    pub fn names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
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
