//! The settings of the pipeline's moving parts: the receipt writer (`[receiver]`), the
//! processor (`[processor]`) and the pruner (`[retention]`).

use serde::{Deserialize, Serialize};

use crate::domain::retry::RetryPolicy;

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
