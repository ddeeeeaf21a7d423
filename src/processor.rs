//! Processor workers: claim due inbox rows and turn each into its effect (or its filed
//! reason) in one transaction. Many workers, in one process or many, share the inbox:
//! PostgreSQL hands each row to one claimer (SKIP LOCKED); SQLite has one writer anyway.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use crate::config::{ProcessorSettings, Providers};
use crate::retry::Backoff;
use crate::store::effects::{self, EffectOutcome, EffectRequest};
use crate::store::inbox::{self, Claimed, Filed};
use crate::store::{now_ms, Db};

pub struct Processor {
    db: Db,
    providers: Arc<Providers>,
    settings: ProcessorSettings,
    sinks: Vec<String>,
    wake: Arc<Notify>,
}

/// What happened to one claimed event; tests and logs read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handled {
    Filed(Filed),
    RetryLater(String),
    /// Another worker owns the row now (our lease expired).
    Fenced,
}

impl Processor {
    pub fn new(
        db: Db,
        providers: Arc<Providers>,
        settings: ProcessorSettings,
        sinks: Vec<String>,
        wake: Arc<Notify>,
    ) -> Self {
        Processor {
            db,
            providers,
            settings,
            sinks,
            wake,
        }
    }

    fn backoff(&self) -> Backoff {
        Backoff {
            base_ms: self.settings.retry_base_ms,
            cap_ms: self.settings.retry_cap_ms,
        }
    }

    /// Claims one batch and handles it. Returns how many events were claimed.
    pub async fn run_once(&self, shutdown: &CancellationToken) -> anyhow::Result<usize> {
        let now = now_ms();
        let claims = inbox::claim(
            &self.db,
            now,
            now + self.settings.lease_secs * 1000,
            self.settings.claim_batch,
        )
        .await?;
        let count = claims.len();
        let mut claims = claims.into_iter();
        for claim in claims.by_ref() {
            if shutdown.is_cancelled() {
                // Hand the rest back at once rather than leaving them to lease expiry.
                inbox::retry_later(&self.db, &claim, now_ms(), "released at shutdown").await?;
                continue;
            }
            let span = tracing::info_span!(
                "event",
                correlation_id = %claim.correlation_id,
                provider = %claim.provider,
                event_id = %claim.event_id,
                attempt = claim.attempt,
            );
            self.handle(&claim).instrument(span).await;
        }
        Ok(count)
    }

    /// Processes until nothing is due (rows waiting for a retry later are not due).
    pub async fn run_until_idle(&self) -> anyhow::Result<usize> {
        let never = CancellationToken::new();
        let mut total = 0;
        loop {
            match self.run_once(&never).await? {
                0 => return Ok(total),
                n => total += n,
            }
        }
    }

    async fn handle(&self, claim: &Claimed) -> Handled {
        match self.try_handle(claim).await {
            Ok(handled) => handled,
            Err(error) => {
                // Database trouble, deadlock, lost connection: transient until proven
                // otherwise; the row is retried with backoff.
                let reason = format!("processing failed: {error:#}");
                warn!(%reason, "will retry");
                self.retry_or_fail(claim, reason).await
            }
        }
    }

    async fn retry_or_fail(&self, claim: &Claimed, reason: String) -> Handled {
        let result = if claim.attempt >= self.settings.max_attempts {
            let reason = format!("gave up after {} attempts: {reason}", claim.attempt);
            inbox::file(
                self.db.writer(),
                claim,
                Filed::Failed,
                Some(&reason),
                None,
                None,
                now_ms(),
            )
            .await
            .map(|_| Handled::Filed(Filed::Failed))
        } else {
            let next = now_ms() + self.backoff().delay_ms(claim.attempt);
            inbox::retry_later(&self.db, claim, next, &reason)
                .await
                .map(|_| Handled::RetryLater(reason))
        };
        result.unwrap_or_else(|error| {
            // Even this failed: the lease runs out and the row is claimed again.
            warn!(
                error = format!("{error:#}"),
                "could not reschedule; lease will expire"
            );
            Handled::Fenced
        })
    }

    async fn try_handle(&self, claim: &Claimed) -> anyhow::Result<Handled> {
        let now = now_ms();
        let file = |filed: Filed, reason: String| async move {
            info!(status = filed.as_str(), %reason, "filed");
            let ok = inbox::file(
                self.db.writer(),
                claim,
                filed,
                Some(&reason),
                None,
                None,
                now,
            )
            .await?;
            anyhow::Ok(if ok {
                Handled::Filed(filed)
            } else {
                Handled::Fenced
            })
        };
        let Some(provider) = self.providers.get(&claim.provider) else {
            return file(
                Filed::Failed,
                format!("provider {} is not configured", claim.provider),
            )
            .await;
        };
        let event = match provider.mapping.map(&claim.raw_body) {
            Ok(event) => event,
            Err(e) if e.is_ignorable() => return file(Filed::Ignored, e.to_string()).await,
            Err(e) => return file(Filed::Failed, e.to_string()).await,
        };
        let order_id = match &event.order_id {
            Some(order_id) => order_id.clone(),
            None => {
                match effects::resolve_order(&self.db, &claim.provider, &event.lookup_refs).await? {
                    Some(order_id) => order_id,
                    None => {
                        let reason = format!(
                            "order not known yet: no earlier event named an order for {}",
                            event.lookup_refs.join(", ")
                        );
                        return Ok(self.retry_or_fail(claim, reason).await);
                    }
                }
            }
        };
        let outcome = effects::apply(
            &self.db,
            EffectRequest {
                claim,
                event: &event,
                order_id: &order_id,
                sinks: &self.sinks,
                now,
            },
        )
        .await?;
        let handled = match &outcome {
            EffectOutcome::Applied { status, .. } => {
                info!(
                    order_id,
                    transition = event.transition.as_str(),
                    status = status.as_str(),
                    "applied"
                );
                Handled::Filed(Filed::Applied)
            }
            EffectOutcome::Duplicate { reason, .. } => {
                info!(order_id, %reason, "duplicate effect");
                Handled::Filed(Filed::Duplicate)
            }
            EffectOutcome::Stale { reason, .. } => {
                info!(order_id, %reason, "stale");
                Handled::Filed(Filed::Stale)
            }
            EffectOutcome::Refused { reason, .. } => {
                info!(order_id, %reason, "refused");
                Handled::Filed(Filed::Refused)
            }
            EffectOutcome::Fenced => Handled::Fenced,
        };
        Ok(handled)
    }

    /// Starts `workers` loops that run until `shutdown`, finishing the event in hand.
    pub fn spawn_workers(self: Arc<Self>, shutdown: CancellationToken) -> Vec<JoinHandle<()>> {
        (0..self.settings.workers.max(1))
            .map(|n| {
                let this = self.clone();
                let shutdown = shutdown.clone();
                tokio::spawn(
                    async move { this.work(shutdown).await }
                        .instrument(tracing::info_span!("worker", n)),
                )
            })
            .collect()
    }

    async fn work(&self, shutdown: CancellationToken) {
        let poll = Duration::from_millis(self.settings.poll_interval_ms);
        while !shutdown.is_cancelled() {
            // Registered before the claim, so a wake-up during it is not missed.
            let notified = self.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.run_once(&shutdown).await {
                Ok(0) => {}
                Ok(_) => continue,
                Err(error) => warn!(error = format!("{error:#}"), "claim failed"),
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep(poll) => {}
                _ = shutdown.cancelled() => {}
            }
        }
    }
}

/// Relays PostgreSQL NOTIFY wake-ups (sent by receivers in any process) to local workers.
pub fn spawn_pg_listener(
    url: String,
    wake: Arc<Notify>,
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
                        Ok(_) => wake.notify_waiters(),
                        Err(error) => { warn!(%error, "LISTEN connection lost"); break; }
                    },
                    _ = shutdown.cancelled() => return,
                }
            }
        }
    })
}
