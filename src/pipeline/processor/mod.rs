//! Processor workers: claim due inbox rows and turn each into its effect (or its filed
//! reason) in one transaction. Many workers, in one process or many, share the inbox:
//! PostgreSQL hands each row to one claimer (SKIP LOCKED); SQLite has one writer anyway.
//! Failures are classified: transient and unknown ones retry under the policy, permanent
//! and business ones go to the dead-letter queue at once.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{Acquire, AnyConnection};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use crate::domain::failure::{ErrorClass, Failure};
use crate::domain::outbox::OutboxSettings;
use crate::domain::retry::Next;
use crate::pipeline::alerts::{Alerter, DeadLetterAlert};
use crate::pipeline::settings::ProcessorSettings;
use crate::provider::settings::Providers;
use crate::store::batch;
use crate::store::effects::{self, EffectOutcome, EffectRequest};
use crate::store::health::classify_db_error;
use crate::store::inbox::{self, Claimed, Filed};
use crate::store::{now_ms, Db};

mod one_by_one;

pub struct Processor {
    db: Db,
    providers: Arc<Providers>,
    settings: ProcessorSettings,
    outbox: OutboxSettings,
    resolve_within_ms: i64,
    alerter: Alerter,
    wake: Arc<Notify>,
    outbox_wake: Arc<Notify>,
    /// Set-based batches processed one event at a time instead (tests read it).
    fallbacks: std::sync::atomic::AtomicU64,
    /// Batches run again after a deadlock or serialization failure (tests read it).
    conflicts: std::sync::atomic::AtomicU64,
    /// Wake-ups of a live stream coalesced into larger claims.
    gather: crate::pipeline::worker::Gather,
    /// How many workers claim, and how much, while there is a backlog.
    rounds: crate::pipeline::worker::Rounds,
    /// The most events one claim took (tests read it).
    largest_claim: std::sync::atomic::AtomicUsize,
    /// When a receiver last announced new events (ms since the epoch; PostgreSQL's NOTIFY).
    last_arrival_ms: std::sync::atomic::AtomicI64,
}

/// Events announced within this long count as still arriving: a receiver is at work, and
/// a backlog is shared with it (`worker::Rounds`).
const ARRIVING_WITHIN_MS: i64 = 100;

/// What must wait for the commit of a processing transaction.
#[derive(Default)]
struct AfterCommit {
    /// Outbox rows were written: wake the relay.
    applied: bool,
    dead_letters: Vec<DeadLetterAlert>,
    /// (provider, outcome, received_at) of each event handled, for the metrics and the
    /// overview's rollups once committed.
    processed: Vec<(String, &'static str, i64)>,
    /// Money each event moved, by provider, for the overview.
    moved: Vec<(String, effects::Moved)>,
    /// (provider, the event's `created` to our receipt in ms) of each event on its first
    /// attempt: the overview's provider delay.
    delays: Vec<(String, i64)>,
}

/// Notes the provider's delay of an event mapped on its first attempt.
fn note_delay(
    after: &mut AfterCommit,
    claim: &Claimed,
    event: &crate::provider::mapping::MappedEvent,
) {
    if claim.attempt == 1 {
        after.delays.push((
            claim.provider.clone(),
            claim.received_at - event.occurred_at_ms,
        ));
    }
}

/// Counts what became of an event for after the commit.
fn note_handled(after: &mut AfterCommit, claim: &Claimed, handled: &Handled) {
    match handled {
        Handled::Filed(filed) => {
            after
                .processed
                .push((claim.provider.clone(), filed.as_str(), claim.received_at))
        }
        Handled::RetryLater(_) => {
            after
                .processed
                .push((claim.provider.clone(), "retry", claim.received_at))
        }
        Handled::Fenced => {}
    }
    // Stale and refused events may write outbox rows too (new money, a status change).
    after.applied |= matches!(
        handled,
        Handled::Filed(Filed::Applied | Filed::Stale | Filed::Refused)
    );
}

/// What `Processor::apply_with_receipts` applied, for after the receipts' commit.
pub struct AppliedWithReceipts {
    /// The claim came back full, or failed: due events may be waiting for the workers.
    more_due: bool,
    /// None: rolled back to the savepoint, nothing applied.
    after: Option<AfterCommit>,
}

/// A claimed event mapped for a set-based batch.
enum Prepared {
    Mapped(crate::provider::mapping::MappedEvent),
    Ignored(String),
    Failed(Failure),
}

/// Deadlocks and serialization failures retry the batch this many times before its
/// events are processed one by one.
const MAX_CONFLICT_RETRIES: u32 = 3;

/// A deadlock (40P01) or serialization failure (40001): the batch may simply run again.
fn is_conflict(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<sqlx::Error>()
            .and_then(|e| match e {
                sqlx::Error::Database(db) => db.code(),
                _ => None,
            })
            .is_some_and(|code| code == "40P01" || code == "40001")
    })
}

/// What happened to one claimed event; tests and logs read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handled {
    Filed(Filed),
    RetryLater(String),
    /// Another worker owns the row now (our lease expired).
    Fenced,
}

/// Everything a processor needs besides the database.
pub struct ProcessorParts {
    pub providers: Arc<Providers>,
    pub settings: ProcessorSettings,
    pub outbox: OutboxSettings,
    pub resolve_within_hours: i64,
    pub alerter: Alerter,
    /// Wakes the workers when events arrive.
    pub wake: Arc<Notify>,
    /// Woken after an effect wrote outbox rows.
    pub outbox_wake: Arc<Notify>,
}

impl Processor {
    pub fn new(db: Db, parts: ProcessorParts) -> Self {
        let gather =
            crate::pipeline::worker::Gather::new(Duration::from_millis(parts.settings.linger_ms));
        let rounds = match db.backend {
            crate::store::Backend::Postgres => crate::pipeline::worker::Rounds::new(
                parts.settings.claim_batch,
                parts.settings.backlog_workers,
                parts.settings.backlog_claim_batch,
            ),
            // One writer: every claim waits its turn there, whoever makes it.
            crate::store::Backend::Sqlite => crate::pipeline::worker::Rounds::new(
                parts.settings.claim_batch,
                parts.settings.workers,
                parts.settings.claim_batch,
            ),
        };
        Processor {
            db,
            providers: parts.providers,
            settings: parts.settings,
            outbox: parts.outbox,
            resolve_within_ms: parts.resolve_within_hours * 3_600_000,
            alerter: parts.alerter,
            wake: parts.wake,
            outbox_wake: parts.outbox_wake,
            fallbacks: Default::default(),
            conflicts: Default::default(),
            gather,
            rounds,
            largest_claim: Default::default(),
            last_arrival_ms: Default::default(),
        }
    }

    /// A receiver (in this process or another) stored new events: wake a worker, and note
    /// that events are arriving.
    pub fn events_arrived(&self) {
        self.last_arrival_ms
            .store(now_ms(), std::sync::atomic::Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// Whether a receiver announced events within `ARRIVING_WITHIN_MS`.
    fn events_arriving(&self) -> bool {
        now_ms()
            - self
                .last_arrival_ms
                .load(std::sync::atomic::Ordering::Relaxed)
            < ARRIVING_WITHIN_MS
    }

    /// A worker's turn to claim, sized for the backlog and the receivers (`worker::Rounds`).
    fn start_round(&self) -> Option<crate::pipeline::worker::Round<'_>> {
        self.rounds
            .start(self.gather.backlogged(), self.events_arriving())
    }

    /// The most events one claim took.
    pub fn largest_claim(&self) -> usize {
        self.largest_claim
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many set-based batches fell back to one event at a time.
    pub fn batch_fallbacks(&self) -> u64 {
        self.fallbacks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many set-based batches ran again after a deadlock or serialization failure.
    pub fn batch_conflicts(&self) -> u64 {
        self.conflicts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Claims one batch and handles it. Returns how many events were claimed.
    /// Returns 0 without claiming while enough other workers are on a backlog.
    pub async fn run_once(&self, shutdown: &CancellationToken) -> anyhow::Result<usize> {
        match self.start_round() {
            Some(round) => self.run_round(round.limit, shutdown).await,
            // Enough workers are on the backlog; this one waits for a wake-up.
            None => Ok(0),
        }
    }

    /// One claim of up to `limit` events, handled. Returns how many were claimed.
    async fn run_round(&self, limit: i64, shutdown: &CancellationToken) -> anyhow::Result<usize> {
        let claimed = self.claim_round(limit, shutdown).await?;
        crate::ops::metrics::claim(claimed);
        self.largest_claim
            .fetch_max(claimed, std::sync::atomic::Ordering::Relaxed);
        Ok(claimed)
    }

    async fn claim_round(&self, limit: i64, shutdown: &CancellationToken) -> anyhow::Result<usize> {
        if self.one_commit_batches(limit) && !shutdown.is_cancelled() {
            match self.claim_and_apply(limit).await {
                Ok(claimed) => return Ok(claimed),
                Err(error) => info!(
                    error = format!("{error:#}"),
                    "batch not applied in one commit (rolled back, claims included); \
                     claiming and handling it step by step"
                ),
            }
        }
        let now = now_ms();
        let claims =
            inbox::claim(&self.db, now, now + self.settings.lease_secs * 1000, limit).await?;
        crate::pipeline::worker::recruit_if_full(&self.wake, claims.len(), limit);
        self.gather.claimed(claims.len(), limit);
        for group in claims.chunks(self.events_per_transaction(limit)) {
            // A single event goes set-based too: the per-event path takes its effect key
            // before the order's lock, the set-based one the order's lock first, and a
            // worker of each on one order deadlocked (PostgreSQL, property_db, 2 of 3 runs).
            let handled = if self.settings.set_based {
                self.handle_batch(group, shutdown).await
            } else {
                self.handle_group(group, shutdown).await
            };
            let handled = self
                .db
                .health()
                .record(crate::store::health::Writer::Processor, handled);
            if let Err(error) = handled {
                // Nothing of the group was committed: its leases run out and the rows are
                // claimed again, like after a crash.
                warn!(
                    error = format!("{error:#}"),
                    events = group.len(),
                    "processing transaction failed; its events will be claimed again"
                );
            }
        }
        Ok(claims.len())
    }

    /// Whether a claim is applied set-based in the transaction that claims it. On SQLite
    /// (one writer) the claim is the usual lease, written and filed in one transaction; on
    /// PostgreSQL it is `inbox::claim_locked`, which writes nothing and holds the rows with
    /// advisory locks (see there why not row locks).
    fn one_commit_batches(&self, limit: i64) -> bool {
        self.settings.set_based
            && self.events_per_transaction(limit) >= usize::try_from(limit).unwrap_or(1)
    }

    /// The common case in one commit: claim a batch, apply it set-based and file every
    /// event, so the claim costs no commit of its own (on SQLite no fsync, and no second
    /// copy of the inbox pages in the WAL; on PostgreSQL no WAL flush and no second version
    /// of each inbox row in all its indexes) and a crash leaves the rows unclaimed rather
    /// than leased. Anything unusual (a fallback, a fence, an error) rolls all of it back,
    /// the claim included, and `run_once` takes the step-by-step path, which handles each.
    /// Returns how many events were claimed and applied.
    pub async fn claim_and_apply(&self, limit: i64) -> anyhow::Result<usize> {
        let mut conn = self.db.writer().acquire().await?;
        let mut tx = conn.begin().await?;
        let applied = match self.claim_and_apply_in(&mut tx, limit).await {
            Ok(applied) => applied,
            Err(error) => {
                // At once, not when the pool next hands the connection out: until then the
                // claim's locks would keep the rows from the step-by-step path.
                let _ = tx.rollback().await;
                return Err(error);
            }
        };
        let Some((claimed, after)) = applied else {
            tx.rollback().await?;
            return Ok(0);
        };
        crate::pipeline::worker::recruit_if_full(&self.wake, claimed, limit);
        self.gather.claimed(claimed, limit);
        crate::store::commit_checked(tx).await?;
        self.after_commit(after);
        Ok(claimed)
    }

    /// Claims up to `limit` due events in `tx`, applies them set-based and files each.
    /// None: nothing was due. On an error the caller rolls `tx` back (the claims with it).
    async fn claim_and_apply_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        limit: i64,
    ) -> anyhow::Result<Option<(usize, AfterCommit)>> {
        let now = now_ms();
        let claims = match self.db.backend {
            crate::store::Backend::Sqlite => {
                inbox::claim_in(
                    &mut **tx,
                    &self.db,
                    now,
                    now + self.settings.lease_secs * 1000,
                    limit,
                )
                .await?
            }
            crate::store::Backend::Postgres => {
                // Every worker's batch may be in flight among the first due rows.
                let workers = i64::try_from(self.settings.workers).unwrap_or(1).max(1);
                let candidates = limit * (workers + 1);
                inbox::claim_locked(tx, now, limit, candidates).await?
            }
        };
        if claims.is_empty() {
            return Ok(None);
        }
        let prepared: Vec<Prepared> = claims.iter().map(|c| self.prepare(c)).collect();
        let live: Vec<(&Claimed, &Prepared)> = claims.iter().zip(&prepared).collect();
        let mut after = AfterCommit::default();
        self.apply_in(tx, &live, now, &mut after).await?;
        Ok(Some((claims.len(), after)))
    }

    /// Whether receipts may be applied in the transaction that stores them
    /// (`processor.apply_with_receipts`): SQLite only, whose one writer runs every commit
    /// anyway, and only where a claim is applied in one commit.
    pub fn applies_with_receipts(&self) -> bool {
        self.settings.apply_with_receipts
            && self.db.backend == crate::store::Backend::Sqlite
            && self.one_commit_batches(self.settings.claim_batch)
    }

    /// SQLite: applies the oldest due events, up to the larger of a claim and `received`
    /// (the new receipts just stored), in the receipts' own transaction, behind a savepoint.
    /// One commit then stores and applies them: the inbox rows reach the WAL once instead of
    /// twice, and the writer syncs once instead of twice. If anything fails, only the
    /// savepoint is rolled back: the receipts are committed as usual and the workers take
    /// them. Call `after_receipt_commit` once the transaction committed.
    pub async fn apply_with_receipts(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        received: usize,
    ) -> anyhow::Result<AppliedWithReceipts> {
        let limit = self
            .settings
            .claim_batch
            .max(i64::try_from(received).unwrap_or(i64::MAX));
        let mut savepoint = tx.begin().await?;
        match self.claim_and_apply_in(&mut savepoint, limit).await {
            Ok(applied) => {
                savepoint.commit().await?;
                let (claimed, after) = applied.unwrap_or((0, AfterCommit::default()));
                Ok(AppliedWithReceipts {
                    more_due: claimed as i64 >= limit,
                    after: Some(after),
                })
            }
            Err(error) => {
                info!(
                    error = format!("{error:#}"),
                    "events not applied with their receipts; the workers take them"
                );
                savepoint.rollback().await?;
                Ok(AppliedWithReceipts {
                    more_due: true,
                    after: None,
                })
            }
        }
    }

    /// After the receipts' commit: the wake-ups, metrics and alerts of what was applied
    /// with them. Returns whether due events may be left for the workers.
    pub fn after_receipt_commit(&self, applied: AppliedWithReceipts) -> bool {
        if let Some(after) = applied.after {
            self.after_commit(after);
        }
        applied.more_due
    }

    /// Applies `live` set-based in `tx` and files what each event became; the caller
    /// commits, or rolls back on an error.
    async fn apply_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        live: &[(&Claimed, &Prepared)],
        now: i64,
        after: &mut AfterCommit,
    ) -> Result<(), batch::BatchError> {
        let inputs: Vec<batch::Input> = live
            .iter()
            .filter_map(|(claim, p)| match p {
                Prepared::Mapped(event) => Some(batch::Input::Mapped { claim, event }),
                Prepared::Ignored(reason) => Some(batch::Input::Ignored {
                    claim,
                    reason: reason.clone(),
                }),
                Prepared::Failed(_) => None,
            })
            .collect();
        let outputs = batch::apply_batch(tx, self.db.backend, &inputs, &self.outbox, now).await?;
        self.file_batch(tx, live, outputs, after)
            .await
            .map_err(batch::BatchError::Db)
    }

    fn events_per_transaction(&self, limit: i64) -> usize {
        // The whole claim on both databases: set-based batches lock their orders in one
        // sorted order, so concurrent workers on PostgreSQL cannot deadlock each other.
        let n = match self.settings.events_per_transaction {
            Some(n) => n,
            None => usize::try_from(limit).unwrap_or(1),
        };
        n.max(1)
    }

    /// Processes a group set-based (`store::batch`): map every event, apply the batch in
    /// one transaction of a few multi-row statements, file the failures beside it.
    /// A claim fenced off is dropped and the batch runs again without it; a deadlock or
    /// serialization failure runs it again; anything else the batch cannot do, and any
    /// database error that persists, falls back to one savepoint per event, so a failing
    /// event fails only itself.
    async fn handle_batch(
        &self,
        group: &[Claimed],
        shutdown: &CancellationToken,
    ) -> anyhow::Result<()> {
        if shutdown.is_cancelled() {
            // Releases every claim at once.
            return self.handle_group(group, shutdown).await;
        }
        let prepared: Vec<Prepared> = group.iter().map(|c| self.prepare(c)).collect();
        let mut fenced: std::collections::BTreeSet<i64> = Default::default();
        let mut conflicts = 0;
        loop {
            let live: Vec<(&Claimed, &Prepared)> = group
                .iter()
                .zip(&prepared)
                .filter(|(c, _)| !fenced.contains(&c.id))
                .collect();
            if live.is_empty() {
                return Ok(());
            }
            let mut conn = self.db.writer().acquire().await?;
            let mut tx = conn.begin().await?;
            let mut after = AfterCommit::default();
            let error = match self.apply_in(&mut tx, &live, now_ms(), &mut after).await {
                Ok(()) => match crate::store::commit_checked(tx).await {
                    Ok(()) => {
                        self.after_commit(after);
                        return Ok(());
                    }
                    Err(e) => batch::BatchError::Db(e),
                },
                Err(e) => {
                    let _ = tx.rollback().await;
                    e
                }
            };
            drop(conn);
            match error {
                batch::BatchError::Fenced(ids) => {
                    info!(claims = ?ids, "claims fenced off; the batch runs again without them");
                    fenced.extend(ids);
                }
                batch::BatchError::Db(e) if is_conflict(&e) && conflicts < MAX_CONFLICT_RETRIES => {
                    conflicts += 1;
                    self.conflicts
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    warn!(
                        error = format!("{e:#}"),
                        attempt = conflicts,
                        "batch conflict; retrying it"
                    );
                    let pause = rand::Rng::gen_range(&mut rand::thread_rng(), 1..20u64);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                other => {
                    warn!(
                        error = format!("{other:#}"),
                        events = live.len(),
                        "set-based batch not applied; processing its events one by one"
                    );
                    crate::ops::metrics::batch_fallback();
                    self.fallbacks
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let rest: Vec<Claimed> = live.iter().map(|(c, _)| (*c).clone()).collect();
                    return self.handle_group(&rest, shutdown).await;
                }
            }
        }
    }

    /// Maps a claim for the batch (pure: no database).
    fn prepare(&self, claim: &Claimed) -> Prepared {
        let Some(provider) = self.providers.get(&claim.provider) else {
            return Prepared::Failed(Failure::new(
                ErrorClass::Permanent,
                format!("provider {} is not configured", claim.provider),
            ));
        };
        match provider.mapping.map(&claim.raw_body) {
            Ok(event) => Prepared::Mapped(event),
            Err(e) if e.is_ignorable() => Prepared::Ignored(e.to_string()),
            Err(e) => Prepared::Failed(Failure::new(ErrorClass::Permanent, e.to_string())),
        }
    }

    /// Turns the batch's outputs into what each event became, filing the failures (retry
    /// or dead letter) in the batch's transaction.
    async fn file_batch(
        &self,
        conn: &mut AnyConnection,
        live: &[(&Claimed, &Prepared)],
        outputs: Vec<batch::Output>,
        after: &mut AfterCommit,
    ) -> anyhow::Result<()> {
        let mut outputs = outputs.into_iter();
        for (claim, prepared) in live {
            if let Prepared::Mapped(event) = prepared {
                note_delay(after, claim, event);
            }
            let event_id = claim.event_id.as_str();
            let output = match prepared {
                Prepared::Failed(_) => None,
                _ => Some(outputs.next().expect("one output per input")),
            };
            let verdict: Result<Handled, (Failure, Option<String>)> = match (prepared, output) {
                (Prepared::Failed(failure), _) => Err((failure.clone(), None)),
                (_, Some(batch::Output::Ignored)) => {
                    info!(event_id, "ignored");
                    Ok(Handled::Filed(Filed::Ignored))
                }
                (_, Some(batch::Output::Unresolved(reason))) => {
                    Err((Failure::new(ErrorClass::Unknown, reason), None))
                }
                (_, Some(batch::Output::Effect { order_id, outcome })) => {
                    if let EffectOutcome::Applied { moved, .. }
                    | EffectOutcome::Stale { moved, .. }
                    | EffectOutcome::Refused { moved, .. } = &outcome
                    {
                        after.moved.push((claim.provider.clone(), moved.clone()));
                    }
                    match outcome {
                        EffectOutcome::Applied { status, .. } => {
                            info!(event_id, order_id, status = status.as_str(), "applied");
                            Ok(Handled::Filed(Filed::Applied))
                        }
                        EffectOutcome::Duplicate { reason, .. } => {
                            info!(event_id, order_id, %reason, "duplicate effect");
                            Ok(Handled::Filed(Filed::Duplicate))
                        }
                        EffectOutcome::Stale { reason, .. } => {
                            info!(event_id, order_id, %reason, "stale");
                            Ok(Handled::Filed(Filed::Stale))
                        }
                        EffectOutcome::Refused { reason, .. } => {
                            info!(event_id, order_id, %reason, "refused regression, recorded");
                            Ok(Handled::Filed(Filed::Refused))
                        }
                        EffectOutcome::Mismatch { reason, .. } => {
                            Err((Failure::new(ErrorClass::Business, reason), Some(order_id)))
                        }
                        EffectOutcome::Fenced => Ok(Handled::Fenced),
                    }
                }
                (_, None) => unreachable!("mapped and ignored events have outputs"),
            };
            let handled = match verdict {
                Ok(handled) => handled,
                Err((failure, order_id)) => {
                    self.fail(conn, claim, &failure, order_id.as_deref(), after)
                        .await?
                }
            };
            note_handled(after, claim, &handled);
        }
        Ok(())
    }

    /// Alerts, wake-ups, metrics and rollups that must wait for a commit.
    fn after_commit(&self, after: AfterCommit) {
        if after.applied {
            self.outbox_wake.notify_one();
        }
        for alert in after.dead_letters {
            self.alerter.dead_lettered(alert);
        }
        let now = now_ms();
        let rollup = self.db.rollup();
        for (provider, outcome, received_at) in after.processed {
            crate::ops::metrics::processed(outcome, received_at, now);
            rollup.filed(now, &provider, outcome, received_at);
        }
        for (provider, delay) in after.delays {
            rollup.delayed(now, &provider, delay);
        }
        for (provider, moved) in after.moved {
            rollup.moved(
                now,
                &provider,
                moved.currency.as_deref().unwrap_or("XXX"),
                [
                    ("paid", moved.paid),
                    ("refunded", moved.refunded),
                    ("disputed", moved.disputed),
                ],
            );
        }
    }

    /// Starts `workers` loops that run until `shutdown`, finishing the event in hand.
    pub fn spawn_workers(self: Arc<Self>, shutdown: CancellationToken) -> Vec<JoinHandle<()>> {
        let count = self.settings.workers;
        crate::pipeline::worker::spawn_n(
            self,
            count,
            |n| tracing::info_span!("worker", n),
            move |this| {
                let shutdown = shutdown.clone();
                async move { this.work(shutdown).await }
            },
        )
    }

    async fn work(&self, shutdown: CancellationToken) {
        let poll = Duration::from_millis(self.settings.poll_interval_ms);
        crate::pipeline::worker::run_gathering_loop(
            &self.wake,
            poll,
            &shutdown,
            Some(&self.gather),
            || self.run_once(&shutdown),
        )
        .await;
    }
}

/// Relays PostgreSQL NOTIFY wake-ups (sent by receivers in any process) to local workers.
pub fn spawn_pg_listener(
    url: String,
    processor: Arc<Processor>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        while !shutdown.is_cancelled() {
            let mut listener = match sqlx::postgres::PgListener::connect(&url).await {
                Ok(l) => l,
                Err(error) => {
                    warn!(%error, "LISTEN connection failed; polling meanwhile");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(2)) => continue,
                        _ = shutdown.cancelled() => return,
                    }
                }
            };
            if let Err(error) = listener.listen(crate::store::WAKE_CHANNEL).await {
                warn!(%error, "LISTEN failed");
                continue;
            }
            loop {
                tokio::select! {
                    n = listener.recv() => match n {
                        Ok(_) => processor.events_arrived(),
                        Err(error) => { warn!(%error, "LISTEN connection lost"); break; }
                    },
                    _ = shutdown.cancelled() => return,
                }
            }
        }
    })
}
