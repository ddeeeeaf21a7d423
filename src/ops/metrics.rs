//! Prometheus metrics (`/metrics` on the admin listener). Counters and the latency
//! histogram are recorded where things happen (receiver, processor after its commit,
//! relay) through the `metrics` facade; backlog and dead-letter gauges are read from the
//! database at scrape time, so they are right even for work other instances did; so is the
//! newest consistency check's result (src/verify/).

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Receipt to effect, seconds: from a few milliseconds (an idle processor) to minutes (a
/// backlog, retries).
const LATENCY_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];
const PROCESSING_LATENCY: &str = "oncehook_processing_latency_seconds";
/// Events per commit, 0 (an empty claim) to a full backlog claim: powers of two, because
/// what a commit costs is mostly fixed and the question is how many events share it.
const BATCH_BUCKETS: [f64; 10] = [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
const RECEIPT_BATCH: &str = "oncehook_receipt_commit_events";
const CLAIM_BATCH: &str = "oncehook_processor_claim_events";

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process's Prometheus recorder, installed on first use. `None` when another global
/// recorder was installed first (then the facade's calls go there, and `/metrics` says so).
pub fn handle() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let installed = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(PROCESSING_LATENCY.into()), &LATENCY_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(RECEIPT_BATCH.into()), &BATCH_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(CLAIM_BATCH.into()), &BATCH_BUCKETS)
                })
                .and_then(PrometheusBuilder::install_recorder);
            match installed {
                Ok(handle) => {
                    describe();
                    let upkeep = handle.clone();
                    // Histogram samples are folded into their buckets here, not per scrape.
                    std::thread::Builder::new()
                        .name("metrics-upkeep".into())
                        .spawn(move || loop {
                            std::thread::sleep(Duration::from_secs(5));
                            upkeep.run_upkeep();
                        })
                        .ok();
                    Some(handle)
                }
                Err(error) => {
                    tracing::warn!(%error, "metrics recorder not installed; /metrics is empty");
                    None
                }
            }
        })
        .clone()
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        "oncehook_webhook_receipts_total",
        "Webhook requests by provider and outcome (accepted, duplicate, signature_failed, rejected, unavailable, unknown_provider)"
    );
    describe_counter!(
        "oncehook_webhook_duplicates_total",
        "Redeliveries of an event already stored (acknowledged, nothing done)"
    );
    describe_counter!(
        "oncehook_signature_failures_total",
        "Requests refused by the signature check"
    );
    describe_counter!(
        "oncehook_events_processed_total",
        "Events filed by the processor, by outcome (applied, duplicate, stale, refused, ignored, dead, retry)"
    );
    describe_counter!(
        "oncehook_processor_batch_fallbacks_total",
        "Set-based batches the processor could not apply as one and processed one event at a time"
    );
    describe_histogram!(
        PROCESSING_LATENCY,
        Unit::Seconds,
        "From receipt to the event being filed (applied, duplicate, stale, ignored or dead)"
    );
    describe_histogram!(
        RECEIPT_BATCH,
        "Receipts stored per commit of the receiver's writers (a commit's fixed cost is shared by these)"
    );
    describe_histogram!(
        CLAIM_BATCH,
        "Events per processor claim, 0 for a claim that found nothing due"
    );
    describe_counter!(
        "oncehook_relay_deliveries_total",
        "Outbox delivery attempts by sink and outcome (delivered, retry, dead, fenced)"
    );
    describe_gauge!(
        "oncehook_inbox_backlog",
        "Events waiting to be processed (pending or claimed)"
    );
    describe_gauge!(
        "oncehook_inbox_oldest_waiting_age_seconds",
        Unit::Seconds,
        "Age of the oldest event waiting to be processed (0 when none)"
    );
    describe_gauge!(
        "oncehook_outbox_backlog",
        "Outbox messages waiting to be delivered"
    );
    describe_gauge!(
        "oncehook_outbox_oldest_waiting_age_seconds",
        Unit::Seconds,
        "Age of the oldest outbox message waiting (0 when none)"
    );
    describe_gauge!("oncehook_dead_letters_open", "Open dead letters");
    describe_gauge!(
        "oncehook_verify_drifting_orders",
        "Orders whose stored status, totals or ledger differ from their facts, at the newest consistency check"
    );
    describe_gauge!(
        "oncehook_verify_missing_messages",
        "Ledger entries without their outbox message, at the newest consistency check"
    );
    describe_gauge!(
        "oncehook_verify_orders_checked",
        "Orders the newest consistency check compared"
    );
    describe_gauge!(
        "oncehook_verify_last_run_age_seconds",
        Unit::Seconds,
        "Age of the newest consistency check (absent until one has run)"
    );
    describe_counter!(
        "oncehook_commit_failures_total",
        "Write transactions the database refused, by writer (receipts, processor, relay, heartbeat, …) and cause (disk_full, io_error, unreachable, other)"
    );
    describe_counter!(
        "oncehook_write_connections_discarded_total",
        "Write connections closed on release because they were still inside a transaction (after a failed commit)"
    );
    describe_gauge!(
        "oncehook_database_commit_failing",
        "1 while the database cannot commit (the same state /healthz answers 503 for), else 0"
    );
    describe_gauge!(
        "oncehook_dead_letters_oldest_open_age_seconds",
        Unit::Seconds,
        "Age of the oldest open dead letter (0 when none)"
    );
}

/// A webhook request's outcome. `provider` must be a configured name or `"unknown"`: label
/// values come from a fixed set, never from the request.
pub fn receipt(provider: &str, outcome: &'static str) {
    counter!("oncehook_webhook_receipts_total", "provider" => provider.to_string(), "outcome" => outcome)
        .increment(1);
    match outcome {
        "duplicate" => {
            counter!("oncehook_webhook_duplicates_total", "provider" => provider.to_string())
                .increment(1)
        }
        "signature_failed" => {
            counter!("oncehook_signature_failures_total", "provider" => provider.to_string())
                .increment(1)
        }
        _ => {}
    }
}

/// An event filed by the processor (recorded after its transaction committed).
pub fn processed(outcome: &'static str, received_at_ms: i64, now: i64) {
    counter!("oncehook_events_processed_total", "outcome" => outcome).increment(1);
    if outcome != "retry" {
        let secs = (now - received_at_ms).max(0) as f64 / 1000.0;
        histogram!(PROCESSING_LATENCY).record(secs);
    }
}

/// A write transaction failed: `writer` and `cause` come from fixed sets
/// (`store::health`), never from the error's text.
pub fn commit_failed(writer: &'static str, cause: &'static str) {
    counter!("oncehook_commit_failures_total", "writer" => writer, "cause" => cause).increment(1);
}

/// A write connection was closed on release instead of reused (`store::connections`).
pub fn connection_discarded() {
    counter!("oncehook_write_connections_discarded_total").increment(1);
}

/// Whether the database can commit now (`store::health`).
pub fn commit_failing(failing: bool) {
    gauge!("oncehook_database_commit_failing").set(if failing { 1.0 } else { 0.0 });
}

/// One commit of the receiver's writer stored `receipts` receipts.
pub fn receipt_commit(receipts: usize) {
    histogram!(RECEIPT_BATCH).record(receipts as f64);
}

/// One processor claim took `events` events (0: nothing was due).
pub fn claim(events: usize) {
    histogram!(CLAIM_BATCH).record(events as f64);
}

/// A set-based batch processed one event at a time instead.
pub fn batch_fallback() {
    counter!("oncehook_processor_batch_fallbacks_total").increment(1);
}

/// One outbox delivery attempt's outcome.
pub fn relayed(sink: &str, outcome: &'static str) {
    counter!("oncehook_relay_deliveries_total", "sink" => sink.to_string(), "outcome" => outcome)
        .increment(1);
}

/// A reconciliation run ended (`succeeded` or `failed`).
pub fn reconciliation_run(status: &'static str) {
    counter!("oncehook_reconciliation_runs_total", "status" => status).increment(1);
}

/// A reconciliation diff was found.
pub fn reconciliation_diff(kind: &str) {
    counter!("oncehook_reconciliation_diffs_found_total", "kind" => kind.to_string()).increment(1);
}
