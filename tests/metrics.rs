//! `/metrics` over HTTP on SQLite and PostgreSQL: each receipt outcome, duplicates,
//! signature failures, processing outcomes and latency, relay outcomes, and the backlog and
//! dead-letter gauges read from the database; on the admin listener only, without a session.
//!
//! The recorder is global to the process, so the two variants take turns and compare
//! counters before and after.

mod common;

use std::collections::BTreeMap;

use common::fixtures::*;
use common::{now_secs, Kind, TestApp};

both!(metrics_count_what_happened_and_read_the_backlog);

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `name{labels} value` lines of the exposition (comments skipped).
async fn scrape(http: &reqwest::Client, base: &str) -> (String, BTreeMap<String, f64>) {
    let response = http.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200, "no session needed");
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let text = response.text().await.unwrap();
    let values = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect();
    (text, values)
}

fn delta(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>, key: &str) -> f64 {
    after.get(key).copied().unwrap_or(0.0) - before.get(key).copied().unwrap_or(0.0)
}

async fn metrics_count_what_happened_and_read_the_backlog(kind: Kind) {
    let _turn = TURN.lock().await;
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.processor.retry.max_attempts = 1;
        s.admin_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let admin = app.server.as_ref().unwrap().admin_url();
    let http = reqwest::Client::new();
    let (_, before) = scrape(&http, &admin).await;

    let pay = payment_intent_succeeded("evt_m_pay", "pi_m", "order-m", 1_000, T10_00);
    assert_eq!(app.post_stripe(&pay).await.status(), 200);
    assert_eq!(app.post_stripe(&pay).await.status(), 200);
    let orphan = refund_created("evt_m_orphan", "pi_m_nobody", "re_m", 100, T10_00);
    assert_eq!(app.post_stripe(&orphan).await.status(), 200);
    let forged = app
        .post_stripe_with(
            pay.to_string().as_bytes(),
            "whsec_wrong_secret_0123456789",
            now_secs(),
        )
        .await;
    assert_eq!(forged.status(), 401);
    let unknown = http
        .post(format!("{}/webhooks/evil%0Aprovider", app.url))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 400);

    // Not processed yet: the backlog gauges see both events waiting.
    let (_, waiting) = scrape(&http, &admin).await;
    assert_eq!(waiting["oncehook_inbox_backlog"], 2.0);
    assert!(waiting["oncehook_inbox_oldest_waiting_age_seconds"] >= 0.0);

    app.process().await;
    let (text, after) = scrape(&http, &admin).await;
    let receipts = |outcome: &str, provider: &str| {
        delta(
            &before,
            &after,
            &format!(
                "oncehook_webhook_receipts_total{{provider=\"{provider}\",outcome=\"{outcome}\"}}"
            ),
        )
    };
    assert_eq!(receipts("accepted", "stripe"), 2.0, "{text}");
    assert_eq!(receipts("duplicate", "stripe"), 1.0);
    assert_eq!(receipts("signature_failed", "stripe"), 1.0);
    assert_eq!(receipts("unknown_provider", "unknown"), 1.0);
    assert!(
        !text.contains("evil"),
        "label values never come from the request"
    );
    assert_eq!(
        delta(
            &before,
            &after,
            "oncehook_webhook_duplicates_total{provider=\"stripe\"}"
        ),
        1.0
    );
    assert_eq!(
        delta(
            &before,
            &after,
            "oncehook_signature_failures_total{provider=\"stripe\"}"
        ),
        1.0
    );
    let processed = |outcome: &str| {
        delta(
            &before,
            &after,
            &format!("oncehook_events_processed_total{{outcome=\"{outcome}\"}}"),
        )
    };
    assert_eq!(processed("applied"), 1.0, "{text}");
    assert_eq!(processed("dead"), 1.0, "{text}");
    assert_eq!(
        delta(&before, &after, "oncehook_processing_latency_seconds_count"),
        2.0
    );
    assert!(text.contains("oncehook_processing_latency_seconds_bucket{le=\"0.005\"}"));
    // What shared the commits: the three stored receipts (the redelivery too), the two
    // events claimed, and the claim that found nothing left (the 0 bucket).
    assert_eq!(
        delta(&before, &after, "oncehook_receipt_commit_events_sum"),
        3.0,
        "{text}"
    );
    assert_eq!(
        delta(&before, &after, "oncehook_processor_claim_events_sum"),
        2.0,
        "{text}"
    );
    assert!(
        delta(
            &before,
            &after,
            "oncehook_processor_claim_events_bucket{le=\"0\"}"
        ) >= 1.0,
        "{text}"
    );

    // Gauges come from the database: nothing waits, one dead letter is open, and the
    // payment's two outbox messages wait for the (disabled) relay.
    assert_eq!(after["oncehook_inbox_backlog"], 0.0);
    assert_eq!(after["oncehook_inbox_oldest_waiting_age_seconds"], 0.0);
    assert_eq!(after["oncehook_dead_letters_open"], 1.0);
    assert!(after["oncehook_dead_letters_oldest_open_age_seconds"] >= 0.0);
    assert_eq!(after["oncehook_outbox_backlog"], 2.0);

    // Relay outcomes, by sink.
    app.relay().run_until_idle().await.unwrap();
    let (_, relayed) = scrape(&http, &admin).await;
    assert_eq!(
        delta(
            &after,
            &relayed,
            "oncehook_relay_deliveries_total{sink=\"log\",outcome=\"delivered\"}"
        ),
        2.0
    );
    assert_eq!(relayed["oncehook_outbox_backlog"], 0.0);

    // Only on the admin listener.
    let on_webhooks = http
        .get(format!("{}/metrics", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(on_webhooks.status(), 404);
    app.shutdown().await;
}
