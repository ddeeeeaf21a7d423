//! The periodic run in `serve` (`reconcile.interval`): each provider with an API key is
//! reconciled when its newest run is older than the interval, or when that run is still
//! marked running (its process died: the new run takes the lease once it expires and
//! resumes from the checkpoint). Instances sharing a database take turns through the lease.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{NotStarted, Options, Reconciler};
use crate::store::{now_ms, reconcile as store};

/// How often an instance looks whether a run is due (at most).
const RECHECK: Duration = Duration::from_secs(10);

/// Whether `provider` is due now.
pub async fn due(r: &Reconciler, provider: &str, now: i64) -> anyhow::Result<bool> {
    let interval_ms = r.settings.reconcile.interval.0.as_millis() as i64;
    let last = store::newest_full_run(&r.db, provider).await?;
    Ok(match last.as_ref() {
        None => true,
        Some(run) if run.status == "running" => true,
        Some(run) => run.started_at + interval_ms <= now,
    })
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
