//! The periodic run in `serve` (`reconcile.interval`): each provider with an API key is
//! reconciled when its newest run is older than the interval, or when that run is still
//! marked running (its process died: the new run takes the lease once it expires and
//! resumes from the checkpoint), or soon after a run that failed (`reconcile.retry_secs`,
//! backing off). Instances sharing a database take turns through the lease.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{NotStarted, Options, ReconcileSettings, Reconciler};
use crate::store::now_ms;
use crate::store::reconcile::{self as store, RunRow};

/// How often an instance looks whether a run is due (at most).
const RECHECK: Duration = Duration::from_secs(10);

/// Whether `provider` is due now.
pub async fn due(r: &Reconciler, provider: &str, now: i64) -> anyhow::Result<bool> {
    let recent = store::newest_full_runs(&r.db, provider, FAILURES_COUNTED).await?;
    Ok(next_run_at(&recent, &r.settings.reconcile) <= now)
}

/// Failures in a row past this many no longer lengthen the wait (it has reached the
/// interval long before: 60 s × 2^15).
const FAILURES_COUNTED: i64 = 16;

/// When the next scheduled run is due (Unix ms), from the newest full runs, newest first:
/// at once without a run or while one is marked running (its process died: the new run
/// takes the lease once it expires); an interval after a success began; after a run that
/// was interrupted (a shutdown, say a deploy), `retry_secs` after it ended; after a run
/// that failed, `retry_secs` after it ended, doubled for each failure since the last
/// success, but never later than an interval after it ended. A shutdown says nothing about
/// the provider, so interrupted runs neither lengthen the wait nor end the streak.
pub fn next_run_at(recent: &[RunRow], settings: &ReconcileSettings) -> i64 {
    let interval_ms = settings.interval.0.as_millis() as i64;
    let Some(newest) = recent.first() else {
        return i64::MIN;
    };
    match newest.status.as_str() {
        "running" => i64::MIN,
        "succeeded" => newest.started_at + interval_ms,
        "interrupted" => newest.finished_at.unwrap_or(newest.updated_at) + retry_ms(settings),
        _ => {
            let in_a_row = recent
                .iter()
                .take_while(|run| matches!(run.status.as_str(), "failed" | "interrupted"))
                .filter(|run| run.status == "failed")
                .count() as u32;
            let wait = retry_ms(settings)
                .saturating_mul(1_i64 << in_a_row.saturating_sub(1).min(30))
                .min(interval_ms);
            newest.finished_at.unwrap_or(newest.updated_at) + wait
        }
    }
}

fn retry_ms(settings: &ReconcileSettings) -> i64 {
    let interval_ms = settings.interval.0.as_millis() as i64;
    (settings.retry_secs as i64)
        .saturating_mul(1_000)
        .min(interval_ms)
}

/// `None` when the job is off (`reconcile.interval = "0"`) or no provider has an API key.
pub fn spawn(r: Reconciler, shutdown: CancellationToken) -> Option<JoinHandle<()>> {
    let interval = r.settings.reconcile.interval;
    if interval.is_off() {
        return None;
    }
    let providers = r.providers_with_api();
    if providers.is_empty() {
        return None;
    }
    // A run whose process died is taken over soon after its lease expires.
    let lease = Duration::from_secs(r.settings.reconcile.lease_secs.max(1) as u64);
    let recheck = interval
        .0
        .min(RECHECK)
        .min(lease)
        .max(Duration::from_millis(200));
    Some(tokio::spawn(async move {
        loop {
            for provider in &providers {
                if shutdown.is_cancelled() {
                    return;
                }
                match due(&r, provider, now_ms()).await {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) => {
                        warn!(error = format!("{e:#}"), "reconciliation: no last run read");
                        continue;
                    }
                }
                let options = Options {
                    provider: provider.clone(),
                    source: "serve",
                    ..Default::default()
                };
                match r.run(&options, shutdown.child_token(), &|_| {}).await {
                    Ok(report) => info!(
                        provider = %provider,
                        run_id = report.run_id,
                        status = %report.status,
                        events = report.counts.events_compared,
                        objects = report.counts.objects_compared,
                        diffs = report.counts.diffs_found,
                        fixed = report.counts.fixed,
                        resumed = report.resumed,
                        "reconciliation run finished"
                    ),
                    Err(e) if e.downcast_ref::<NotStarted>().is_some() => {
                        tracing::debug!(error = %e, "reconciliation not started")
                    }
                    Err(e) => warn!(
                        error = format!("{e:#}"),
                        "reconciliation run could not start"
                    ),
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(recheck) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::Interval;

    fn run(id: i64, status: &str, started_at: i64, finished_at: Option<i64>) -> RunRow {
        RunRow {
            id,
            provider: "stripe".into(),
            source: "serve".into(),
            status: status.into(),
            dry_run: false,
            since_s: 0,
            events_compared: 0,
            objects_compared: 0,
            api_calls: 0,
            diffs_found: 0,
            fixed: 0,
            error: None,
            started_at,
            updated_at: finished_at.unwrap_or(started_at),
            finished_at,
        }
    }

    fn hourly() -> ReconcileSettings {
        ReconcileSettings {
            interval: Interval::parse("1h").unwrap(),
            retry_secs: 60,
            ..Default::default()
        }
    }

    #[test]
    fn without_a_run_or_with_one_marked_running_it_is_due_at_once() {
        assert_eq!(next_run_at(&[], &hourly()), i64::MIN);
        let died = [
            run(2, "running", 5_000, None),
            run(1, "failed", 0, Some(10)),
        ];
        assert_eq!(next_run_at(&died, &hourly()), i64::MIN);
    }

    #[test]
    fn a_success_waits_an_interval_from_its_start() {
        let ok = [
            run(3, "succeeded", 10_000, Some(70_000)),
            run(2, "failed", 0, Some(5)),
        ];
        assert_eq!(next_run_at(&ok, &hourly()), 10_000 + 3_600_000);
    }

    #[test]
    fn failures_in_a_row_back_off_from_their_end_up_to_the_interval_shutdowns_do_not() {
        let s = hourly();
        let mut recent = vec![run(1, "succeeded", 0, Some(1_000))];
        let mut waits = Vec::new();
        for id in 2..12 {
            let status = if id % 2 == 0 { "failed" } else { "interrupted" };
            recent.insert(
                0,
                run(id, status, id * 10_000_000, Some(id * 10_000_000 + 500)),
            );
            waits.push(next_run_at(&recent, &s) - (id * 10_000_000 + 500));
        }
        assert_eq!(
            waits,
            [
                // failed, interrupted, failed, ...: only the failures double the wait
                60_000, 60_000, 120_000, 60_000, 240_000, 60_000, 480_000, 60_000, 960_000, 60_000
            ]
        );
        for id in 12..20 {
            recent.insert(
                0,
                run(id, "failed", id * 10_000_000, Some(id * 10_000_000 + 500)),
            );
        }
        assert_eq!(next_run_at(&recent, &s), 19 * 10_000_000 + 500 + 3_600_000);
        // Two deploys in a row: the second run still comes back after `retry_secs`.
        recent.insert(0, run(30, "interrupted", 300_000_000, Some(300_000_500)));
        recent.insert(0, run(31, "interrupted", 310_000_000, Some(310_000_500)));
        assert_eq!(next_run_at(&recent, &s), 310_000_500 + 60_000);
        // A success ends the streak: the next failure waits the first step again.
        recent.insert(0, run(20, "succeeded", 900_000_000, Some(900_001_000)));
        recent.insert(0, run(21, "failed", 910_000_000, Some(910_000_100)));
        assert_eq!(next_run_at(&recent, &s), 910_000_100 + 60_000);
    }

    #[test]
    fn a_retry_is_never_later_than_an_interval_after_the_failure() {
        let s = ReconcileSettings {
            interval: Interval::parse("90s").unwrap(),
            retry_secs: 600,
            ..Default::default()
        };
        let failed = [run(1, "failed", 0, Some(2_000))];
        assert_eq!(next_run_at(&failed, &s), 2_000 + 90_000);
    }
}
