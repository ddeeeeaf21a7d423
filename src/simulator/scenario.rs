//! Scenarios: the mix of payment lives, the delivery faults and their rates, the API's
//! faults, and how webhooks are retried. `steady`, `storm` and `chaos` are built in; a
//! scenario file (TOML) overrides any of their keys, and a bad key or value is an error
//! naming it.

use std::path::Path;

use figment::providers::{Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

use super::api::ApiFaults;
use super::plan::Mix;

/// Faults of the webhook stream, each a share of events (0 to 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Faults {
    /// Delivered twice (a second delivery shortly after the first).
    pub duplicate: f64,
    /// The change announced by a second event type too.
    pub two_types: f64,
    /// Held back up to `max_delay_ms`, so later events overtake it.
    pub delay: f64,
    pub max_delay_ms: u64,
    /// Sent again later as a manual "resend" from the dashboard would.
    pub resend: f64,
    /// Never delivered (the event exists in `GET /v1/events`).
    pub drop: f64,
    /// Never generated: the objects change, no event exists anywhere.
    pub ungenerated: f64,
    /// Sent with an API version older than any mapping understands (an endpoint pinned to
    /// 2019): oncehook keeps it as a dead letter.
    pub legacy_version: f64,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            duplicate: 0.0,
            two_types: 0.0,
            delay: 0.0,
            max_delay_ms: 2_000,
            resend: 0.0,
            drop: 0.0,
            ungenerated: 0.0,
            legacy_version: 0.0,
        }
    }
}

/// How webhooks are sent and retried: Stripe's exponential backoff, with its days
/// compressed into the run's time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Delivery {
    /// Deliveries in flight at once.
    pub concurrency: usize,
    /// A delivery not answered within this failed, and is retried (Stripe waits 10 s).
    pub timeout_ms: u64,
    /// Delay before the first retry; doubled for each next one, up to `retry_cap_ms`.
    pub retry_base_ms: u64,
    pub retry_cap_ms: u64,
    /// Attempts in all; after the last failed one the event is never delivered.
    pub max_attempts: u32,
}

impl Default for Delivery {
    fn default() -> Self {
        Delivery {
            concurrency: 64,
            timeout_ms: 10_000,
            retry_base_ms: 500,
            retry_cap_ms: 30_000,
            max_attempts: 8,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Scenario {
    pub mix: Mix,
    pub faults: Faults,
    pub api: ApiFaults,
    pub delivery: Delivery,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario::builtin("steady").expect("steady is built in")
    }
}

pub const NAMES: [&str; 3] = ["steady", "storm", "chaos"];

impl Scenario {
    /// `steady`: everyday traffic, a few duplicates and late events. `storm`: the provider
    /// catching up after an outage (many duplicates, reordering, resends). `chaos`: every
    /// fault at once, events lost and never generated, a flaky API.
    pub fn builtin(name: &str) -> Option<Scenario> {
        let base = Scenario {
            mix: Mix::default(),
            faults: Faults::default(),
            api: ApiFaults::default(),
            delivery: Delivery::default(),
        };
        Some(match name {
            "steady" => Scenario {
                faults: Faults {
                    duplicate: 0.02,
                    two_types: 0.3,
                    delay: 0.02,
                    max_delay_ms: 1_000,
                    resend: 0.002,
                    ..Faults::default()
                },
                ..base
            },
            "storm" => Scenario {
                faults: Faults {
                    duplicate: 0.3,
                    two_types: 0.5,
                    delay: 0.3,
                    max_delay_ms: 3_000,
                    resend: 0.05,
                    ..Faults::default()
                },
                ..base
            },
            "chaos" => Scenario {
                faults: Faults {
                    duplicate: 0.15,
                    two_types: 0.5,
                    delay: 0.2,
                    max_delay_ms: 2_000,
                    resend: 0.03,
                    drop: 0.02,
                    ungenerated: 0.01,
                    legacy_version: 0.005,
                },
                api: ApiFaults {
                    rate_429: 0.05,
                    rate_5xx: 0.05,
                    ..ApiFaults::default()
                },
                ..base
            },
            _ => return None,
        })
    }

    /// The named scenario with a file's keys over it.
    pub fn load(name: &str, file: Option<&Path>) -> anyhow::Result<Scenario> {
        let base = Scenario::builtin(name).ok_or_else(|| {
            anyhow::anyhow!(
                "--scenario: unknown scenario {name:?} (one of {})",
                NAMES.join(", ")
            )
        })?;
        let scenario = match file {
            None => base,
            Some(file) => {
                anyhow::ensure!(
                    file.exists(),
                    "--scenario-file: {} does not exist",
                    file.display()
                );
                Figment::from(Serialized::defaults(base))
                    .merge(Toml::file(file))
                    .extract::<Scenario>()
                    .map_err(|e| {
                        let keys: Vec<String> = e
                            .clone()
                            .into_iter()
                            .map(|e| {
                                let key = e.path.join(".");
                                let what = match &e.kind {
                                    figment::error::Kind::UnknownField(f, _) => {
                                        format!("unknown key {f:?}")
                                    }
                                    other => other.to_string(),
                                };
                                if key.is_empty() {
                                    what
                                } else {
                                    format!("{key}: {what}")
                                }
                            })
                            .collect();
                        anyhow::anyhow!("--scenario-file {}: {}", file.display(), keys.join("; "))
                    })?
            }
        };
        scenario.validate()?;
        Ok(scenario)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        self.mix.validate().map_err(anyhow::Error::msg)?;
        let f = &self.faults;
        for (name, p) in [
            ("faults.duplicate", f.duplicate),
            ("faults.two_types", f.two_types),
            ("faults.delay", f.delay),
            ("faults.resend", f.resend),
            ("faults.drop", f.drop),
            ("faults.ungenerated", f.ungenerated),
            ("faults.legacy_version", f.legacy_version),
            ("api.rate_429", self.api.rate_429),
            ("api.rate_5xx", self.api.rate_5xx),
        ] {
            anyhow::ensure!(
                (0.0..=1.0).contains(&p),
                "{name} must be between 0 and 1, not {p}"
            );
        }
        anyhow::ensure!(
            self.api.rate_429 + self.api.rate_5xx <= 1.0,
            "api.rate_429 + api.rate_5xx must not exceed 1"
        );
        let d = &self.delivery;
        anyhow::ensure!(
            d.concurrency >= 1 && d.max_attempts >= 1 && d.timeout_ms >= 1,
            "delivery.concurrency, delivery.max_attempts and delivery.timeout_ms must be at least 1"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_valid_and_files_override_them() {
        for name in NAMES {
            Scenario::builtin(name).unwrap().validate().unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.toml");
        std::fs::write(
            &file,
            "[faults]\ndrop = 0.5\n[delivery]\nmax_attempts = 2\n",
        )
        .unwrap();
        let s = Scenario::load("chaos", Some(&file)).unwrap();
        assert_eq!((s.faults.drop, s.delivery.max_attempts), (0.5, 2));
        assert_eq!(s.faults.duplicate, 0.15, "the rest stays chaos");
    }

    #[test]
    fn bad_scenarios_are_errors_naming_the_option_and_key() {
        let err = Scenario::load("calm", None).unwrap_err().to_string();
        assert!(err.contains("--scenario") && err.contains("calm"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.toml");
        for (text, named) in [
            ("[faults]\ndupliate = 0.1\n", "dupliate"),
            ("[faults]\ndrop = 1.5\n", "faults.drop"),
            ("[faults]\ndrop = \"x\"\n", "faults.drop"),
            ("[mix]\nrefunded = -1\n", "mix.refunded"),
            ("[delivery]\nconcurrency = 0\n", "delivery.concurrency"),
        ] {
            std::fs::write(&file, text).unwrap();
            let err = format!("{:#}", Scenario::load("steady", Some(&file)).unwrap_err());
            assert!(err.contains(named), "{text}: {err}");
        }
        let err = Scenario::load("steady", Some(&dir.path().join("none.toml")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("--scenario-file"), "{err}");
    }
}
