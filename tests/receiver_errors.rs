//! Bad input gets a clear error and loses nothing; unauthenticated input stores nothing.

mod common;

use std::time::Duration;

use common::fixtures::*;
use common::{now_secs, Kind, TestApp, WriteLock, STRIPE_OLD_SECRET, STRIPE_SECRET};

both!(
    bad_signature_is_401_and_stores_nothing,
    stale_timestamp_is_401_and_stores_nothing,
    missing_or_malformed_signature_header_is_400,
    unknown_provider_is_400,
    rotated_secret_is_accepted,
    oversize_body_is_413_and_stores_nothing,
    malformed_json_with_a_valid_signature_is_kept_and_filed,
    unsupported_api_version_and_unknown_type_are_kept_and_filed,
    database_unable_to_commit_gives_503_then_recovers,
    correlation_id_is_carried_to_the_rows,
    ten_thousand_signature_candidates_are_400_and_store_nothing,
    a_content_length_above_the_limit_is_413_before_the_body_is_read,
    a_nul_character_in_an_id_is_kept_and_filed_not_a_503,
);

async fn nothing_stored(app: &TestApp) {
    assert_eq!(app.count("SELECT COUNT(*) FROM inbox_events").await, 0);
    assert_eq!(app.count("SELECT COUNT(*) FROM deliveries").await, 0);
}

async fn error_text(r: reqwest::Response) -> String {
    let body: serde_json::Value = r.json().await.unwrap();
    body["error"].as_str().unwrap().to_string()
}

async fn bad_signature_is_401_and_stores_nothing(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let body = payment_intent_succeeded("evt_bad", "pi", "o", 1, T10_00).to_string();
    let r = app
        .post_stripe_with(body.as_bytes(), "whsec_wrong", now_secs())
        .await;
    assert_eq!(r.status(), 401);
    let text = error_text(r).await;
    assert!(text.contains("no signature matches"), "{text}");
    assert!(
        !text.contains(STRIPE_SECRET) && !text.contains("whsec_wrong"),
        "no secret in errors"
    );
    nothing_stored(&app).await;
    app.shutdown().await;
}

async fn stale_timestamp_is_401_and_stores_nothing(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let body = payment_intent_succeeded("evt_old", "pi", "o", 1, T10_00).to_string();
    let r = app
        .post_stripe_with(body.as_bytes(), STRIPE_SECRET, now_secs() - 301)
        .await;
    assert_eq!(r.status(), 401);
    assert!(error_text(r).await.contains("tolerance"));
    nothing_stored(&app).await;
    app.shutdown().await;
}

async fn missing_or_malformed_signature_header_is_400(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let r = app.post_raw("stripe", vec![], b"{}".to_vec()).await;
    assert_eq!(r.status(), 400);
    assert!(error_text(r).await.contains("missing stripe-signature"));
    let r = app
        .post_raw(
            "stripe",
            vec![("stripe-signature".into(), "nonsense".into())],
            b"{}".to_vec(),
        )
        .await;
    assert_eq!(r.status(), 400);
    let r = app
        .post_raw(
            "acme",
            vec![("webhook-id".into(), "m".into())],
            b"{}".to_vec(),
        )
        .await;
    assert_eq!(r.status(), 400);
    nothing_stored(&app).await;
    app.shutdown().await;
}

async fn unknown_provider_is_400(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let r = app.post_raw("paypal", vec![], b"{}".to_vec()).await;
    assert_eq!(r.status(), 400);
    assert!(error_text(r).await.contains("unknown provider"));
    nothing_stored(&app).await;
    app.shutdown().await;
}

async fn rotated_secret_is_accepted(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let body = payment_intent_succeeded("evt_rot", "pi_rot", "o-rot", 1, T10_00).to_string();
    let r = app
        .post_stripe_with(body.as_bytes(), STRIPE_OLD_SECRET, now_secs())
        .await;
    assert_eq!(r.status(), 200);
    app.process().await;
    assert_eq!(app.order_status("o-rot").await.as_deref(), Some("paid"));
    app.shutdown().await;
}

async fn oversize_body_is_413_and_stores_nothing(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.receiver.max_body_bytes = 4096;
    })
    .await;
    let mut event = payment_intent_succeeded("evt_big", "pi", "o", 1, T10_00);
    event["data"]["object"]["description"] = serde_json::json!("x".repeat(5000));
    let r = app.post_stripe(&event).await;
    assert_eq!(r.status(), 413);
    nothing_stored(&app).await;
    // Just under the limit is fine.
    event["data"]["object"]["description"] = serde_json::json!("x".repeat(3000));
    assert_eq!(app.post_stripe(&event).await.status(), 200);
    app.shutdown().await;
}

async fn malformed_json_with_a_valid_signature_is_kept_and_filed(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let raw = b"{\"id\": \"evt_broken\", \"type\": \"payment_intent.succ\xffeeded\", oops".to_vec();
    let r = app.post_stripe_with(&raw, STRIPE_SECRET, now_secs()).await;
    assert_eq!(
        r.status(),
        200,
        "a signed body is acknowledged whatever it holds"
    );
    let ack: serde_json::Value = r.json().await.unwrap();
    let event_id = ack["event_id"].as_str().unwrap().to_string();
    assert!(
        event_id.starts_with("sha256:"),
        "a stable id from the body: {event_id}"
    );
    // A redelivery of the same bytes collapses onto the same row.
    app.post_stripe_with(&raw, STRIPE_SECRET, now_secs()).await;
    assert_eq!(app.count("SELECT COUNT(*) FROM inbox_events").await, 1);
    app.process().await;
    let (status, reason) = app.event_status(&event_id).await;
    assert_eq!(status, "dead");
    assert!(reason.unwrap().contains("not JSON"));
    assert_eq!(
        app.count(
            "SELECT COUNT(*) FROM dead_letters WHERE error_class = 'permanent' AND status = 'open'"
        )
        .await,
        1
    );
    let kept: Vec<u8> = sqlx::query_scalar("SELECT raw_body FROM inbox_events")
        .fetch_one(app.db.reader())
        .await
        .unwrap();
    assert_eq!(kept, raw, "raw body kept byte-exact");
    app.shutdown().await;
}

async fn unsupported_api_version_and_unknown_type_are_kept_and_filed(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let mut old = payment_intent_succeeded("evt_v_old", "pi_v", "o-v", 1, T10_00);
    old["api_version"] = serde_json::json!("2019-02-19");
    let mut unknown = payment_intent_succeeded("evt_cust", "pi_v", "o-v", 1, T10_00);
    unknown["type"] = serde_json::json!("customer.created");
    let mut no_id = payment_intent_succeeded("x", "pi_v", "o-v", 1, T10_00);
    no_id.as_object_mut().unwrap().remove("id");
    for e in [&old, &unknown, &no_id] {
        assert_eq!(app.post_stripe(e).await.status(), 200);
    }
    app.process().await;
    let (status, reason) = app.event_status("evt_v_old").await;
    assert_eq!(status, "dead");
    assert!(reason
        .unwrap()
        .contains("unsupported API version \"2019-02-19\""));
    let (status, reason) = app.event_status("evt_cust").await;
    assert_eq!(status, "ignored");
    assert!(reason.unwrap().contains("customer.created"));
    assert_eq!(
        app.count("SELECT COUNT(*) FROM inbox_events").await,
        3,
        "all kept"
    );
    assert_eq!(
        app.order_status("o-v").await.as_deref(),
        Some("paid"),
        "the id-less one still maps"
    );
    app.shutdown().await;
}

/// Holds the inbox table's write lock from another connection, so the receiver cannot
/// commit: it must answer 503 within its commit timeout, and 200 once the lock is gone.
async fn database_unable_to_commit_gives_503_then_recovers(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.receiver.commit_timeout_ms = 700;
    })
    .await;
    let lock = WriteLock::take(&app, "inbox_events").await;

    let event = payment_intent_succeeded("evt_down", "pi_d", "o-d", 1, T10_00);
    let r = app.post_stripe(&event).await;
    assert_eq!(r.status(), 503, "never 200 on hope");
    assert_eq!(r.headers()["retry-after"], "5");
    assert!(error_text(r).await.contains("could not commit"));

    lock.release().await;
    // The provider retries: accepted now (possibly as a duplicate of the late commit).
    let mut status = 0;
    for _ in 0..50 {
        status = app.post_stripe(&event).await.status().as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200, "recovers once the database commits again");
    app.process().await;
    assert_eq!(app.count("SELECT COUNT(*) FROM inbox_events").await, 1);
    assert_eq!(app.count("SELECT COUNT(*) FROM processed_effects").await, 1);
    assert_eq!(app.order_status("o-d").await.as_deref(), Some("paid"));
    app.shutdown().await;
}

async fn correlation_id_is_carried_to_the_rows(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let body = payment_intent_succeeded("evt_corr", "pi_corr", "o-corr", 1, T10_00).to_string();
    let sig =
        oncehook::provider::signature::stripe::sign(STRIPE_SECRET, now_secs(), body.as_bytes());
    let r = app
        .post_raw(
            "stripe",
            vec![
                ("stripe-signature".into(), sig),
                ("x-request-id".into(), "req-abc-123".into()),
            ],
            body.into_bytes(),
        )
        .await;
    assert_eq!(r.headers()["x-correlation-id"], "req-abc-123");
    app.process().await;
    assert_eq!(
        app.count("SELECT COUNT(*) FROM inbox_events WHERE correlation_id = 'req-abc-123'")
            .await,
        1
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM deliveries WHERE correlation_id = 'req-abc-123'")
            .await,
        1
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM outbox WHERE correlation_id = 'req-abc-123'")
            .await,
        2,
        "payment.recorded and order.paid"
    );
    app.shutdown().await;
}

async fn ten_thousand_signature_candidates_are_400_and_store_nothing(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let body = payment_intent_succeeded("evt_many", "pi", "o", 1, T10_00).to_string();
    let good =
        oncehook::provider::signature::stripe::sign(STRIPE_SECRET, now_secs(), body.as_bytes());
    let v1 = good.split("v1=").nth(1).unwrap();
    for header in [
        // Empty candidates (each once decoded to an empty tag)…
        format!("t={}{}", now_secs(), ",v1=".repeat(10_000)),
        // …and well-formed wrong ones, even with a valid one among them.
        format!(
            "t={}{},v1={v1}",
            now_secs(),
            format!(",v1={}", "ab".repeat(32)).repeat(40)
        ),
    ] {
        let r = app
            .post_raw(
                "stripe",
                vec![("stripe-signature".into(), header)],
                body.clone().into_bytes(),
            )
            .await;
        assert_eq!(r.status(), 400);
    }
    let acme = vec![
        ("webhook-id".to_string(), "msg_many".to_string()),
        ("webhook-timestamp".to_string(), now_secs().to_string()),
        (
            "webhook-signature".to_string(),
            "v1, ".repeat(10_000).trim().to_string(),
        ),
    ];
    let r = app.post_raw("acme", acme, b"{}".to_vec()).await;
    assert_eq!(r.status(), 400);
    nothing_stored(&app).await;
    app.shutdown().await;
}

async fn a_content_length_above_the_limit_is_413_before_the_body_is_read(kind: Kind) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.receiver.max_body_bytes = 4096;
    })
    .await;
    let addr = app.url.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    // Announces 100 MB and sends none of it: the answer must not wait for the body.
    stream
        .write_all(
            b"POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
              stripe-signature: t=1,v1=00\r\ncontent-length: 100000000\r\n\r\n",
        )
        .await
        .unwrap();
    let mut answer = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(3), stream.read(&mut answer))
        .await
        .expect("answered without reading the body")
        .unwrap();
    let head = String::from_utf8_lossy(&answer[..n]).to_string();
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    nothing_stored(&app).await;
    app.shutdown().await;
}

/// PostgreSQL text cannot hold U+0000: an id carrying one must not fail the commit (a 503
/// the provider would retry forever) nor take the other receipts of its batch down with it.
async fn a_nul_character_in_an_id_is_kept_and_filed_not_a_503(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let raw = br#"{"id": "evt_\u0000nul", "type": "payment_intent.succ\u0000eeded", "data": {"object": {"id": "pi_\u0000", "metadata": {"order_id": "o\u0000"}}}}"#.to_vec();
    let next = payment_intent_succeeded("evt_next_to_nul", "pi_nul", "order-nul", 1_000, 100);
    let (hostile, neighbour) = tokio::join!(
        app.post_stripe_with(&raw, STRIPE_SECRET, now_secs()),
        app.post_stripe(&next),
    );
    assert_eq!(hostile.status(), 200, "a signed body is acknowledged");
    assert_eq!(neighbour.status(), 200, "its batch neighbour too");
    let ack: serde_json::Value = hostile.json().await.unwrap();
    let event_id = ack["event_id"].as_str().unwrap().to_string();
    assert!(event_id.starts_with("sha256:"), "a stable id: {event_id}");
    app.process().await;
    let (status, reason) = app.event_status(&event_id).await;
    assert_eq!(status, "dead", "{reason:?}");
    assert_eq!(app.event_status("evt_next_to_nul").await.0, "applied");
    app.shutdown().await;
}
