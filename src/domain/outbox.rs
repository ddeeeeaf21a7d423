//! Where outbox messages go (`[outbox]`: default sinks and per-topic routes) and how the
//! relay delivers them (`[outbox.relay]`): the store writes a row per sink a topic routes to.

use serde::{Deserialize, Serialize};

use crate::domain::retry::RetryPolicy;

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
