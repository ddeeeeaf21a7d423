//! `/metrics` at scrape time: the database's gauges (backlogs, open dead letters, the last
//! consistency check, reconciliation, provider commands) read now, then the Prometheus
//! exposition of everything `ops::metrics` recorded.

use metrics::gauge;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::store::{now_ms, triage, Db};

/// `commands.confirm_within_secs` in ms, as `serve` configured it: a `sent` command older
/// than this without its webhook counts in `oncehook_provider_commands_unconfirmed`.
static CONFIRM_WITHIN_MS: std::sync::atomic::AtomicI64 =
    std::sync::atomic::AtomicI64::new(3_600_000);

pub fn set_confirm_within(ms: i64) {
    CONFIRM_WITHIN_MS.store(ms, std::sync::atomic::Ordering::Relaxed);
}

/// The exposition text: the database gauges are read now, then everything is rendered.
pub async fn render(handle: &PrometheusHandle, db: &Db) -> anyhow::Result<String> {
    let now = now_ms();
    let (inbox, inbox_oldest) = triage::inbox_waiting(db).await?;
    let (outbox, outbox_oldest) = triage::outbox_waiting(db).await?;
    let (open, oldest_open) = triage::open_stats(db).await?;
    gauge!("oncehook_inbox_backlog").set(inbox as f64);
    gauge!("oncehook_inbox_oldest_waiting_age_seconds").set(age_secs(inbox_oldest, now));
    gauge!("oncehook_outbox_backlog").set(outbox as f64);
    gauge!("oncehook_outbox_oldest_waiting_age_seconds").set(age_secs(outbox_oldest, now));
    gauge!("oncehook_dead_letters_open").set(open as f64);
    gauge!("oncehook_dead_letters_oldest_open_age_seconds").set(age_secs(oldest_open, now));
    // Absent until a check has run: 0 drift would claim a check that never happened.
    if let Some(run) = crate::store::verify::last_run(db).await? {
        gauge!("oncehook_verify_drifting_orders").set(run.drifting_orders as f64);
        gauge!("oncehook_verify_missing_messages").set(run.missing_messages as f64);
        gauge!("oncehook_verify_orders_checked").set(run.orders_checked as f64);
        gauge!("oncehook_verify_last_run_age_seconds").set(age_secs(Some(run.finished_at), now));
    }
    crate::reconcile::gauges(db, now).await?;
    let within = CONFIRM_WITHIN_MS.load(std::sync::atomic::Ordering::Relaxed);
    let commands = crate::store::commands::stats(db, now - within).await?;
    for (state, n) in &commands.by_state {
        gauge!("oncehook_provider_commands", "state" => state.clone()).set(*n as f64);
    }
    gauge!("oncehook_provider_commands_oldest_in_flight_age_seconds")
        .set(age_secs(commands.oldest_in_flight_at, now));
    gauge!("oncehook_provider_commands_unconfirmed").set(commands.sent_too_long as f64);
    Ok(handle.render())
}

fn age_secs(oldest_ms: Option<i64>, now: i64) -> f64 {
    oldest_ms.map_or(0.0, |t| (now - t).max(0) as f64 / 1000.0)
}
