//! A provider as configured: its name, signature scheme and secrets, payload mapping and
//! API; and `Providers`, the verifiers and mappings built from them once at start-up.

use std::collections::BTreeMap;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::domain::retry::RetryPolicy;
use crate::provider::mapping::{self, EventRule, Mapping};
use crate::provider::signature::{SchemeKind, Verifier};
use crate::support::redact::{redact_url, REDACTED};

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

pub fn default_tolerance() -> u64 {
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
