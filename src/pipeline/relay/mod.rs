//! The outbox relay: leases pending outbox rows, delivers each through its sink with the
//! row's stable idempotency key, records every attempt, and marks the row delivered —
//! fenced, so a relay whose lease expired cannot mark a row. A crash between send and
//! mark means a second send with the SAME key, which the receiving side drops.

mod commands;
pub mod settings;
pub mod sinks;

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use crate::domain::failure::{ErrorClass, Failure};
use crate::domain::outbox::RelaySettings;
use crate::domain::retry::Next;
use crate::pipeline::alerts::{Alerter, DeadLetterAlert};
use crate::store::health::classify_db_error;
use crate::store::now_ms;
use crate::store::outbox::{self, AttemptRecord, OutboxItem};
use crate::store::Db;
use sinks::{SendError, Sinks};

pub struct Relay {
    db: Db,
    sinks: Sinks,
    settings: RelaySettings,
    resolve_within_ms: i64,
    alerter: Alerter,
    wake: Arc<Notify>,
}

/// How one delivery ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivered {
    Delivered,
    RetryLater {
        delay_ms: i64,
    },
    DeadLettered,
    /// Lease lost: another relay owns the row.
    Fenced,
}

/// One send, before the claim's successful sends are marked together.
enum Attempt {
    /// The sink took it: to be marked delivered (fenced).
    Sent(AttemptRecord),
    /// Settled on its own (retry, dead letter, fenced).
    Done(Delivered),
}

impl Relay {
    pub fn new(
        db: Db,
        sinks: Sinks,
        settings: RelaySettings,
        resolve_within_hours: i64,
        alerter: Alerter,
        wake: Arc<Notify>,
    ) -> Self {
        Relay {
            db,
            sinks,
            settings,
            resolve_within_ms: resolve_within_hours * 3_600_000,
            alerter,
            wake,
        }
    }

    /// Leases one batch and delivers it (concurrently, within each sink's limits).
    pub async fn run_once(&self) -> anyhow::Result<Vec<Delivered>> {
        let now = now_ms();
        let items = outbox::claim(
            &self.db,
            now,
            now + self.settings.lease_secs * 1000,
            self.settings.claim_batch,
        )
        .await?;
        crate::pipeline::worker::recruit_if_full(
            &self.wake,
            items.len(),
            self.settings.claim_batch,
        );
        let attempts = join_all(items.iter().map(|item| {
            let span = tracing::info_span!("outbox", id = item.id, sink = %item.sink, correlation_id = %item.correlation_id, attempt = item.attempt);
            self.attempt_logged(item).instrument(span)
        }))
        .await;
        // The successful sends of the claim are marked together, in one transaction.
        let sent: Vec<(&OutboxItem, &AttemptRecord)> = items
            .iter()
            .zip(&attempts)
            .filter_map(|(item, a)| match a {
                Attempt::Sent(record) => Some((item, record)),
                Attempt::Done(_) => None,
            })
            .collect();
        let marked = match outbox::mark_delivered(&self.db, &sent, now_ms()).await {
            Ok(marked) => marked,
            Err(error) => {
                // Database trouble while recording: the leases expire and the rows are
                // sent again, with the same keys.
                self.db
                    .health()
                    .failed(crate::store::health::Writer::Relay, &error, now_ms());
                warn!(
                    error = format!("{error:#}"),
                    class = classify_db_error(&error).as_str(),
                    rows = sent.len(),
                    "relay bookkeeping failed"
                );
                Default::default()
            }
        };
        let results = items
            .iter()
            .zip(attempts)
            .map(|(item, attempt)| {
                let delivered = match attempt {
                    Attempt::Done(d) => d,
                    Attempt::Sent(record) if marked.contains(&item.id) => {
                        info!(outbox_id = item.id, sink = %item.sink, correlation_id = %item.correlation_id, duration_ms = record.duration_ms, "delivered");
                        Delivered::Delivered
                    }
                    Attempt::Sent(_) => Delivered::Fenced,
                };
                crate::ops::metrics::relayed(
                    &item.sink,
                    match delivered {
                        Delivered::Delivered => "delivered",
                        Delivered::RetryLater { .. } => "retry",
                        Delivered::DeadLettered => "dead",
                        Delivered::Fenced => "fenced",
                    },
                );
                delivered
            })
            .collect();
        Ok(results)
    }

    /// Delivers until nothing is due.
    pub async fn run_until_idle(&self) -> anyhow::Result<Vec<Delivered>> {
        let mut all = vec![];
        loop {
            let batch = self.run_once().await?;
            if batch.is_empty() {
                return Ok(all);
            }
            all.extend(batch);
        }
    }

    async fn attempt_logged(&self, item: &OutboxItem) -> Attempt {
        match self.try_deliver(item).await {
            Ok(attempt) => attempt,
            Err(error) => {
                // Database trouble while recording: the lease expires and the row is sent
                // again, with the same key.
                self.db
                    .health()
                    .failed(crate::store::health::Writer::Relay, &error, now_ms());
                warn!(
                    error = format!("{error:#}"),
                    class = classify_db_error(&error).as_str(),
                    "relay bookkeeping failed"
                );
                Attempt::Done(Delivered::Fenced)
            }
        }
    }

    async fn try_deliver(&self, item: &OutboxItem) -> anyhow::Result<Attempt> {
        let Some(sink) = self.sinks.get(&item.sink) else {
            let failure = Failure::new(
                ErrorClass::Permanent,
                format!("sink {:?} is not configured", item.sink),
            );
            return Ok(Attempt::Done(self.give_up(item, &failure).await?));
        };
        let started_at = now_ms();
        let result = {
            let heartbeat = self.heartbeat(item);
            tokio::pin!(heartbeat);
            tokio::select! {
                r = sink.send(item) => r,
                _ = &mut heartbeat => return Ok(Attempt::Done(Delivered::Fenced)),
            }
        };
        let mut record = AttemptRecord {
            started_at,
            duration_ms: now_ms() - started_at,
            ..Default::default()
        };
        match result {
            Ok(sent) => {
                record.status_code = sent.status_code;
                record.response_excerpt = sent.excerpt;
                record.object_id = sent.object_id;
                Ok(Attempt::Sent(record))
            }
            Err(SendError {
                failure,
                status_code,
                excerpt,
            }) => {
                record.status_code = status_code;
                record.response_excerpt = excerpt;
                record.error = Some(failure.message.clone());
                outbox::record_attempt(&self.db, item, &record).await?;
                Ok(Attempt::Done(self.after_failure(item, failure).await?))
            }
        }
    }

    /// A failed send: retry later under the policy, or give up (dead letter).
    async fn after_failure(
        &self,
        item: &OutboxItem,
        failure: Failure,
    ) -> anyhow::Result<Delivered> {
        if !failure.class.retries() {
            return self.give_up(item, &failure).await;
        }
        let Next::RetryInMs(delay_ms) = self
            .settings
            .retry
            .next(item.budget_attempt(), failure.retry_after)
        else {
            let failure = Failure::new(
                failure.class,
                format!(
                    "gave up after {} attempts: {}",
                    item.budget_attempt(),
                    failure.message
                ),
            );
            return self.give_up(item, &failure).await;
        };
        warn!(class = failure.class.as_str(), error = %failure.message, delay_ms, "will retry");
        let rescheduled =
            outbox::retry_later(&self.db, item, now_ms() + delay_ms, &failure.message).await?;
        Ok(if rescheduled {
            Delivered::RetryLater { delay_ms }
        } else {
            Delivered::Fenced
        })
    }

    async fn give_up(&self, item: &OutboxItem, failure: &Failure) -> anyhow::Result<Delivered> {
        let now = now_ms();
        match outbox::dead_letter(&self.db, item, failure, now, now + self.resolve_within_ms)
            .await?
        {
            Some(id) => {
                self.alerter.dead_lettered(DeadLetterAlert {
                    dead_letter_id: id,
                    stage: format!("outbox ({})", item.sink),
                    class: failure.class.as_str().into(),
                    error: failure.message.clone(),
                    event_id: None,
                    order_id: Some(item.order_id.clone()),
                });
                Ok(Delivered::DeadLettered)
            }
            None => Ok(Delivered::Fenced),
        }
    }

    /// Renews the lease while a send runs; completes only if the lease was lost.
    async fn heartbeat(&self, item: &OutboxItem) {
        let lease_ms = self.settings.lease_secs * 1000;
        let every = Duration::from_millis((lease_ms / 3).max(100) as u64);
        loop {
            tokio::time::sleep(every).await;
            match outbox::heartbeat(&self.db, item, now_ms() + lease_ms).await {
                Ok(true) => {}
                Ok(false) => {
                    warn!("lease lost during the send; another relay owns the row");
                    return;
                }
                Err(error) => warn!(error = format!("{error:#}"), "heartbeat failed"),
            }
        }
    }

    pub fn spawn_workers(self: Arc<Self>, shutdown: CancellationToken) -> Vec<JoinHandle<()>> {
        let count = self.settings.workers;
        crate::pipeline::worker::spawn_n(
            self,
            count,
            |n| tracing::info_span!("relay", n),
            move |this| {
                let shutdown = shutdown.clone();
                async move { this.work(shutdown).await }
            },
        )
    }

    async fn work(&self, shutdown: CancellationToken) {
        let poll = Duration::from_millis(self.settings.poll_interval_ms);
        crate::pipeline::worker::run_loop(&self.wake, poll, &shutdown, || async {
            Ok(self.run_once().await?.len())
        })
        .await;
    }
}
