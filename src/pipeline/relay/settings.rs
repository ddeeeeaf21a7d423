//! Named sinks (`[sinks.NAME]`): a kind (http, email, log) with its own keys, plus how many
//! deliveries run at once and how fast.

use serde::{Deserialize, Serialize};

use crate::support::redact::{redact_url, REDACTED};

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

fn default_http_timeout() -> u64 {
    10_000
}

fn default_smtp_port() -> u16 {
    25
}

fn default_smtp_security() -> String {
    "starttls".into()
}
