//! The periodic check in `serve` (`verify.interval_minutes`): runs the check of
//! `oncehook verify` when the newest recorded run (this instance's, another's, or the CLI's)
//! is older than the interval, and records its result for the overview and `/metrics`.
//! Instances sharing a database look at the newest run every minute, so the check runs about
//! once per interval for all of them, not once per instance.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Scope;
use crate::store::{now_ms, verify as records, Db};

/// How often an instance looks whether a run is due.
const RECHECK: Duration = Duration::from_secs(60);

/// How long until the next run is due (zero: now), from the newest recorded run.
pub async fn due_in(db: &Db, interval: Duration, now: i64) -> anyhow::Result<Duration> {
    let Some(last) = records::last_run(db).await? else {
        return Ok(Duration::ZERO);
    };
    let due = last.finished_at + interval.as_millis() as i64;
    Ok(Duration::from_millis((due - now).max(0) as u64))
}

/// One check, recorded as `serve`'s.
pub async fn run_once(db: &Db, scope: &Scope) -> anyhow::Result<super::Report> {
    let options = super::Options::new(scope, now_ms());
    let report = super::run(db, &options).await?;
    records::record(db, &report.record("serve")).await?;
    Ok(report)
}

/// How often the job runs; `None` (off) when `verify.interval_minutes` is 0.
pub fn interval(scope: &Scope) -> Option<Duration> {
    let minutes = scope.interval_minutes;
    (minutes > 0).then(|| Duration::from_secs(minutes.saturating_mul(60)))
}

/// `None` when the job is off.
pub fn spawn(db: Db, scope: Scope, shutdown: CancellationToken) -> Option<JoinHandle<()>> {
    let interval = interval(&scope)?;
    Some(tokio::spawn(async move {
        loop {
            let wait = match due_in(&db, interval, now_ms()).await {
                Ok(wait) => wait,
                Err(error) => {
                    warn!(
                        error = format!("{error:#}"),
                        "consistency check: no last run read"
                    );
                    RECHECK
                }
            };
            if !wait.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(wait.min(RECHECK)) => continue,
                    _ = shutdown.cancelled() => return,
                }
            }
            // The check only reads until it records: stopping in the middle loses nothing.
            let outcome = tokio::select! {
                outcome = run_once(&db, &scope) => outcome,
                _ = shutdown.cancelled() => return,
            };
            match outcome {
                Ok(r) if r.is_clean() => info!(
                    orders = r.orders_checked,
                    elapsed_ms = r.elapsed_ms,
                    "consistency check: no drift"
                ),
                Ok(r) => warn!(
                    orders = r.orders_checked,
                    drifting_orders = r.drifting_orders,
                    missing_messages = r.missing_messages,
                    first = ?r.record("serve").sample,
                    "consistency check: stored status or totals differ from the facts; \
                     `oncehook verify` lists them"
                ),
                Err(error) => {
                    warn!(error = format!("{error:#}"), "consistency check failed");
                    tokio::select! {
                        _ = tokio::time::sleep(RECHECK) => {}
                        _ = shutdown.cancelled() => return,
                    }
                }
            }
        }
    }))
}
