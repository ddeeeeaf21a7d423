//! DESIGN.md's invariants 1–6 and 8 over real HTTP, on SQLite and PostgreSQL.

mod common;

use common::fixtures::*;
use common::{snapshot, Kind, TestApp};
use futures::future::join_all;

both!(
    one_delivery_then_three_parallel_leaves_state_as_after_the_first,
    two_event_types_for_one_payment_collapse_into_one_effect,
    newer_refund_first_keeps_the_order_refunded_and_records_one_stale_event,
    outbox_rows_are_counted_per_effect_not_per_response,
    fifty_deliveries_from_sixteen_clients_with_several_workers_give_one_effect,
    two_real_payments_after_a_refund_both_apply,
    same_second_payment_and_refund_end_refunded_in_either_order,
    an_event_naming_only_a_payment_waits_for_the_order_then_applies,
    a_newer_failure_after_payment_is_refused_and_recorded,
    standard_webhooks_sender_is_processed,
    graceful_shutdown_finishes_in_flight_work,
    a_batch_of_receipts_stores_each_event_once_and_logs_every_delivery_in_order,
    the_largest_receipt_batch_the_settings_allow_is_stored,
);

async fn one_delivery_then_three_parallel_leaves_state_as_after_the_first(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let event = payment_intent_succeeded("evt_once", "pi_once", "order-1", 4200, T10_00);
    assert_eq!(app.post_stripe(&event).await.status(), 200);
    app.process().await;
    let after_one = snapshot(&app.db).await;

    let responses = join_all((0..3).map(|_| app.post_stripe(&event))).await;
    for r in responses {
        assert_eq!(r.status(), 200);
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["duplicate"], true, "{body}");
    }
    app.process().await;
    assert_eq!(
        snapshot(&app.db).await,
        after_one,
        "state after 4 deliveries == after 1"
    );
    assert_eq!(app.count("SELECT COUNT(*) FROM processed_effects").await, 1);
    assert_eq!(
        app.count("SELECT COUNT(*) FROM outbox").await,
        2,
        "payment.recorded and order.paid"
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM deliveries").await,
        4,
        "every receipt is logged"
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM deliveries WHERE duplicate = 1")
            .await,
        3
    );
    assert_eq!(app.order_status("order-1").await.as_deref(), Some("paid"));
    app.shutdown().await;
}

async fn two_event_types_for_one_payment_collapse_into_one_effect(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    app.post_stripe(&payment_intent_succeeded(
        "evt_pi", "pi_c", "order-2", 4200, T10_00,
    ))
    .await;
    app.process().await;
    // Older and newer invoice shapes, neither naming the order: found through pi_c.
    app.post_stripe(&invoice_payment_succeeded_old(
        "evt_inv_old",
        "pi_c",
        4200,
        T10_00 + 1,
    ))
    .await;
    app.post_stripe(&invoice_paid_new("evt_inv_new", "pi_c", 4200, T10_00 + 2))
        .await;
    app.process().await;
    assert_eq!(app.count("SELECT COUNT(*) FROM processed_effects").await, 1);
    assert_eq!(app.count("SELECT COUNT(*) FROM order_ledger").await, 1);
    assert_eq!(app.count("SELECT COUNT(*) FROM outbox").await, 2);
    for id in ["evt_inv_old", "evt_inv_new"] {
        let (status, reason) = app.event_status(id).await;
        assert_eq!(status, "duplicate", "{id}");
        assert!(
            reason.unwrap().contains("evt_pi"),
            "the reason names the winning event"
        );
    }
    app.shutdown().await;
}

async fn newer_refund_first_keeps_the_order_refunded_and_records_one_stale_event(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    // Refund stamped 10:02 arrives before the payment stamped 10:00.
    app.post_stripe(&charge_refunded(
        "evt_ref",
        "pi_r",
        "re_1",
        "order-3",
        4200,
        T10_00 + 120,
    ))
    .await;
    app.process().await;
    app.post_stripe(&payment_intent_succeeded(
        "evt_pay", "pi_r", "order-3", 4200, T10_00,
    ))
    .await;
    app.process().await;
    assert_eq!(
        app.order_status("order-3").await.as_deref(),
        Some("refunded")
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM stale_events WHERE kind = 'stale'")
            .await,
        1
    );
    let (status, reason) = app.event_status("evt_pay").await;
    assert_eq!(status, "stale");
    let reason = reason.unwrap();
    assert!(reason.contains("arrived after newer news"), "{reason}");
    assert!(reason.contains("its money is in the ledger"), "{reason}");
    let topics: Vec<String> = sqlx::query_scalar("SELECT topic FROM outbox ORDER BY id")
        .fetch_all(app.db.reader())
        .await
        .unwrap();
    assert_eq!(
        topics,
        vec!["refund.recorded", "order.refunded", "payment.recorded"],
        "the late payment is still money: announced as a fact, with no status change"
    );
    assert_eq!(
        app.count("SELECT amount_paid - amount_refunded FROM orders WHERE order_id = 'order-3'")
            .await,
        0
    );
    app.shutdown().await;
}

async fn outbox_rows_are_counted_per_effect_not_per_response(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let pay = payment_intent_succeeded("evt_o1", "pi_o", "order-4", 1000, T10_00);
    let invoice = invoice_payment_succeeded_old("evt_o2", "pi_o", 1000, T10_00);
    let refund_a = charge_refunded("evt_o3", "pi_o", "re_o", "order-4", 1000, T10_00 + 60);
    let refund_b = refund_created("evt_o4", "pi_o", "re_o", 1000, T10_00 + 60);
    let mut ok = 0;
    for round in 0..3 {
        for e in [&pay, &invoice, &refund_a, &refund_b] {
            ok += u32::from(app.post_stripe(e).await.status() == 200);
        }
        if round == 0 {
            app.process().await;
        }
    }
    app.process().await;
    assert_eq!(ok, 12, "12 responses");
    let topics: Vec<String> =
        sqlx::query_scalar::<_, String>("SELECT topic FROM outbox ORDER BY id")
            .fetch_all(app.db.reader())
            .await
            .unwrap();
    assert_eq!(
        topics,
        vec![
            "payment.recorded",
            "order.paid",
            "refund.recorded",
            "order.refunded",
            "refund.recorded"
        ],
        "one message per fact (the refund announced by its charge's total, then by itself, \
         counted once) and per status change, whatever the number of responses"
    );
    assert_eq!(
        app.count("SELECT amount_refunded FROM orders WHERE order_id = 'order-4'")
            .await,
        1000
    );
    assert_eq!(
        app.order_status("order-4").await.as_deref(),
        Some("refunded")
    );
    app.shutdown().await;
}

async fn fifty_deliveries_from_sixteen_clients_with_several_workers_give_one_effect(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.workers = 4;
        // Concurrent ingest writers (PostgreSQL; SQLite has one): duplicates of one event
        // race in different transactions.
        s.receiver.writers = 4;
        // The invoice names only the payment; if it is processed first it waits briefly.
        s.processor.retry.base_ms = 20;
    })
    .await;
    let event = payment_intent_succeeded("evt_storm", "pi_storm", "order-5", 4200, T10_00);
    let invoice = invoice_payment_succeeded_old("evt_storm_inv", "pi_storm", 4200, T10_00);
    let sent = std::sync::atomic::AtomicUsize::new(0);
    let clients = (0..16).map(|_| async {
        let mut statuses = vec![];
        loop {
            let n = sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if n >= 50 {
                return statuses;
            }
            let e = if n % 10 == 9 { &invoice } else { &event };
            statuses.push(app.post_stripe(e).await.status().as_u16());
        }
    });
    let statuses: Vec<u16> = join_all(clients).await.into_iter().flatten().collect();
    assert_eq!(statuses.len(), 50);
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    app.wait_until_processed().await;
    assert_eq!(app.count("SELECT COUNT(*) FROM deliveries").await, 50);
    assert_eq!(app.count("SELECT COUNT(*) FROM inbox_events").await, 2);
    assert_eq!(app.count("SELECT COUNT(*) FROM processed_effects").await, 1);
    assert_eq!(app.count("SELECT COUNT(*) FROM order_ledger").await, 1);
    assert_eq!(app.count("SELECT COUNT(*) FROM outbox").await, 2);
    app.shutdown().await;
}

async fn two_real_payments_after_a_refund_both_apply(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    app.post_stripe(&payment_intent_succeeded(
        "evt_p1", "pi_first", "order-6", 5000, T10_00,
    ))
    .await;
    app.post_stripe(&charge_refunded(
        "evt_r1",
        "pi_first",
        "re_first",
        "order-6",
        5000,
        T10_00 + 60,
    ))
    .await;
    app.post_stripe(&payment_intent_succeeded(
        "evt_p2",
        "pi_second",
        "order-6",
        5000,
        T10_00 + 120,
    ))
    .await;
    app.process().await;
    assert_eq!(
        app.order_status("order-6").await.as_deref(),
        Some("partially_refunded"),
        "10,000 paid, 5,000 refunded: never 'paid' again as if the refund had not happened"
    );
    let ledger: Vec<(String, String)> =
        sqlx::query_as("SELECT entry, external_ref FROM order_ledger ORDER BY id")
            .fetch_all(app.db.reader())
            .await
            .unwrap();
    assert_eq!(
        ledger,
        vec![
            ("payment".into(), "pi_first".into()),
            ("refund_observed".into(), "pi_first".into()),
            ("payment".into(), "pi_second".into())
        ]
    );
    app.shutdown().await;
}

async fn same_second_payment_and_refund_end_refunded_in_either_order(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    // Payment first, then the refund stamped in the same second.
    app.post_stripe(&payment_intent_succeeded(
        "evt_a1", "pi_a", "order-a", 100, T10_00,
    ))
    .await;
    app.process().await;
    app.post_stripe(&charge_refunded(
        "evt_a2", "pi_a", "re_a", "order-a", 100, T10_00,
    ))
    .await;
    app.process().await;
    // Refund first, then the payment stamped in the same second.
    app.post_stripe(&charge_refunded(
        "evt_b2", "pi_b", "re_b", "order-b", 100, T10_00,
    ))
    .await;
    app.process().await;
    app.post_stripe(&payment_intent_succeeded(
        "evt_b1", "pi_b", "order-b", 100, T10_00,
    ))
    .await;
    app.process().await;
    assert_eq!(
        app.order_status("order-a").await.as_deref(),
        Some("refunded")
    );
    assert_eq!(
        app.order_status("order-b").await.as_deref(),
        Some("refunded")
    );
    assert_eq!(app.event_status("evt_b1").await.0, "stale");
    app.shutdown().await;
}

async fn an_event_naming_only_a_payment_waits_for_the_order_then_applies(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    // The refund.created event has no order id; its payment is not known yet.
    app.post_stripe(&refund_created(
        "evt_early_refund",
        "pi_w",
        "re_w",
        700,
        T10_00 + 60,
    ))
    .await;
    app.process().await;
    let (status, reason) = app.event_status("evt_early_refund").await;
    assert_eq!(status, "pending", "retried later, not guessed");
    assert!(reason.unwrap().contains("order not known yet"));
    app.post_stripe(&payment_intent_succeeded(
        "evt_w_pay",
        "pi_w",
        "order-w",
        700,
        T10_00,
    ))
    .await;
    app.process().await;
    assert_eq!(
        app.event_status("evt_early_refund").await.0,
        "pending",
        "its retry is not due yet"
    );
    app.make_due().await;
    app.process().await;
    assert_eq!(app.event_status("evt_early_refund").await.0, "applied");
    assert_eq!(
        app.order_status("order-w").await.as_deref(),
        Some("refunded")
    );
    app.shutdown().await;
}

async fn a_newer_failure_after_payment_is_refused_and_recorded(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    app.post_stripe(&payment_intent_succeeded(
        "evt_f1", "pi_f", "order-f", 100, T10_00,
    ))
    .await;
    // The same payment intent "fails" later: a regression the model never applies.
    app.post_stripe(&payment_intent_failed(
        "evt_f2",
        "pi_f",
        "order-f",
        T10_00 + 30,
    ))
    .await;
    // Another attempt failing later is a fact about that attempt and changes nothing.
    app.post_stripe(&payment_intent_failed(
        "evt_f3",
        "pi_f2",
        "order-f",
        T10_00 + 40,
    ))
    .await;
    app.process().await;
    assert_eq!(app.order_status("order-f").await.as_deref(), Some("paid"));
    let (status, reason) = app.event_status("evt_f2").await;
    assert_eq!(status, "refused");
    assert!(reason.unwrap().contains("would undo its pay"));
    assert_eq!(app.event_status("evt_f3").await.0, "applied");
    assert_eq!(
        app.count(
            "SELECT COUNT(*) FROM stale_events WHERE kind = 'refused' AND event_id = 'evt_f2'"
        )
        .await,
        1,
        "recorded for people to read"
    );
    assert_eq!(app.count("SELECT COUNT(*) FROM dead_letters").await, 0);
    assert_eq!(
        app.count("SELECT amount_paid FROM orders WHERE order_id = 'order-f'")
            .await,
        100
    );
    app.shutdown().await;
}

async fn standard_webhooks_sender_is_processed(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let body = serde_json::json!({
        "type": "payment.succeeded", "timestamp": "2024-01-01T10:00:00Z",
        "data": {"order_id": "order-sw", "payment_id": "pay_sw", "amount": 990, "currency": "usd", "sequence": 1}
    });
    assert_eq!(app.post_standard("msg_sw_1", &body).await.status(), 200);
    assert_eq!(app.post_standard("msg_sw_1", &body).await.status(), 200);
    app.process().await;
    assert_eq!(app.order_status("order-sw").await.as_deref(), Some("paid"));
    assert_eq!(app.count("SELECT COUNT(*) FROM inbox_events").await, 1);
    assert_eq!(app.count("SELECT COUNT(*) FROM deliveries").await, 2);
    app.shutdown().await;
}

async fn graceful_shutdown_finishes_in_flight_work(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| s.processor.workers = 2).await;
    let app_ref = &app;
    let posts = (0..20).map(|i| {
        let e = payment_intent_succeeded(
            &format!("evt_g{i}"),
            &format!("pi_g{i}"),
            &format!("order-g{i}"),
            100,
            T10_00,
        );
        async move { app_ref.post_stripe(&e).await.status().as_u16() }
    });
    let statuses = join_all(posts).await;
    assert!(statuses.iter().all(|s| *s == 200));
    let db = app.db_handle.connect().await;
    let mut app = app;
    app.server.take().unwrap().shutdown().await.unwrap();
    // Nothing is left claimed by a worker that is gone.
    assert_eq!(
        common::count(
            &db,
            "SELECT COUNT(*) FROM inbox_events WHERE status = 'processing'"
        )
        .await,
        0
    );
    assert_eq!(
        common::count(&db, "SELECT COUNT(*) FROM inbox_events").await,
        20
    );
}

fn receipt(event_id: &str, body: &str, received_at: i64) -> oncehook::store::ingest::Receipt {
    oncehook::store::ingest::Receipt {
        provider: "stripe".into(),
        event_id: event_id.into(),
        event_type: Some("payment_intent.succeeded".into()),
        api_version: Some("2024-06-20".into()),
        raw_body: body.as_bytes().to_vec(),
        correlation_id: format!("corr-{event_id}-{received_at}"),
        received_at,
        fetched_body: None,
        derived: false,
    }
}

/// One ingest commit holding a new event twice, another new event, and an event stored by
/// an earlier commit: each event is stored once, with the first receipt's body, and every
/// receipt is in the delivery log, in the order received, duplicates marked.
async fn a_batch_of_receipts_stores_each_event_once_and_logs_every_delivery_in_order(kind: Kind) {
    use oncehook::store::ingest::{store_receipts, Stored};
    let app = TestApp::spawn_with(kind, |s| s.processor.enabled = false).await;
    let earlier = store_receipts(&app.db, &[receipt("evt_c", "c-first", 1)])
        .await
        .unwrap();
    assert_eq!(earlier, [Stored::New]);
    let batch = [
        receipt("evt_a", "a-first", 2),
        receipt("evt_b", "b-first", 3),
        receipt("evt_a", "a-again", 4),
        receipt("evt_c", "c-again", 5),
    ];
    let stored = store_receipts(&app.db, &batch).await.unwrap();
    assert_eq!(
        stored,
        [
            Stored::New,
            Stored::New,
            Stored::Duplicate,
            Stored::Duplicate
        ]
    );
    let inbox: Vec<(String, Vec<u8>, String, i64, String, i64)> = sqlx::query_as(
        "SELECT event_id, raw_body, correlation_id, received_at, status, next_attempt_at \
         FROM inbox_events ORDER BY id",
    )
    .fetch_all(app.db.reader())
    .await
    .unwrap();
    let pending = |id: &str, body: &str, at: i64| {
        (
            id.to_string(),
            body.as_bytes().to_vec(),
            format!("corr-{id}-{at}"),
            at,
            "pending".to_string(),
            at,
        )
    };
    assert_eq!(
        inbox,
        [
            pending("evt_c", "c-first", 1),
            pending("evt_a", "a-first", 2),
            pending("evt_b", "b-first", 3)
        ]
    );
    let log: Vec<(String, i64, String, String, i64)> = sqlx::query_as(
        "SELECT event_id, duplicate, correlation_id, body_sha256, received_at \
         FROM deliveries ORDER BY id",
    )
    .fetch_all(app.db.reader())
    .await
    .unwrap();
    let entry = |id: &str, duplicate: i64, body: &str, at: i64| {
        use sha2::Digest;
        (
            id.to_string(),
            duplicate,
            format!("corr-{id}-{at}"),
            hex::encode(sha2::Sha256::digest(body.as_bytes())),
            at,
        )
    };
    assert_eq!(
        log,
        [
            entry("evt_c", 0, "c-first", 1),
            entry("evt_a", 0, "a-first", 2),
            entry("evt_b", 0, "b-first", 3),
            entry("evt_a", 1, "a-again", 4),
            entry("evt_c", 1, "c-again", 5),
        ]
    );
    app.shutdown().await;
}

/// A commit of `receiver.max_batch` receipts at its largest allowed value binds within
/// what one statement may carry, on both databases.
async fn the_largest_receipt_batch_the_settings_allow_is_stored(kind: Kind) {
    use oncehook::config::MAX_RECEIPT_BATCH;
    use oncehook::store::ingest::{store_receipts, Stored};
    let app = TestApp::spawn_with(kind, |s| s.processor.enabled = false).await;
    let batch: Vec<_> = (0..MAX_RECEIPT_BATCH)
        .map(|n| receipt(&format!("evt_{n}"), "{}", n as i64))
        .collect();
    let stored = store_receipts(&app.db, &batch).await.unwrap();
    assert!(stored.iter().all(|s| *s == Stored::New));
    assert_eq!(
        app.count("SELECT COUNT(*) FROM inbox_events").await,
        MAX_RECEIPT_BATCH as i64
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM deliveries WHERE duplicate = 0")
            .await,
        MAX_RECEIPT_BATCH as i64
    );
    app.shutdown().await;
}
