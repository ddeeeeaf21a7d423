//! SQLite: the receipts' commit also applies the oldest due events
//! (`processor.apply_with_receipts`, `Processor::apply_with_receipts`). Checked through the
//! path a provider uses (signed HTTP deliveries to a running server): an event is applied
//! by the very commit that acknowledges it; a failure to apply loses nothing and is taken
//! over by the workers; and the state after the same deliveries equals the state the
//! workers alone produce.

mod common;

use common::fixtures::{payment_intent_succeeded, refund_created, T10_00};
use common::{snapshot, Kind, TestApp};

async fn live_app(apply_with_receipts: bool) -> TestApp {
    TestApp::spawn_with(Kind::Sqlite, |s| {
        s.processor.apply_with_receipts = apply_with_receipts;
        s.outbox.relay.enabled = false;
    })
    .await
}

/// Over three orders, a refund before its payment (its order is not known yet: it waits
/// for a retry), the payment, and a redelivery of the payment: the deliveries both servers
/// get, in this order.
fn deliveries() -> Vec<serde_json::Value> {
    let mut all = Vec::new();
    for o in 0..3 {
        let (order, pi) = (format!("order-awr-{o}"), format!("pi_awr_{o}"));
        let t = T10_00 + o * 100;
        all.push(refund_created(
            &format!("evt_awr_re_{o}"),
            &pi,
            &format!("re_awr_{o}"),
            300,
            t + 20,
        ));
        all.push(payment_intent_succeeded(
            &format!("evt_awr_pi_{o}"),
            &pi,
            &order,
            1_000,
            t,
        ));
        all.push(payment_intent_succeeded(
            &format!("evt_awr_pi_{o}"),
            &pi,
            &order,
            1_000,
            t,
        ));
    }
    all
}

#[tokio::test]
async fn an_event_is_applied_by_the_commit_that_acknowledges_it() {
    let app = live_app(true).await;
    let event = payment_intent_succeeded("evt_awr_1", "pi_awr_1", "order-awr-1", 4_200, T10_00);
    let answer = app.post_stripe(&event).await;
    assert_eq!(answer.status(), 200);
    // Read at once: the workers only see a row once its receipt committed, and that
    // commit already filed it.
    assert_eq!(app.event_status("evt_awr_1").await.0, "applied");
    assert_eq!(
        app.order_status("order-awr-1").await.as_deref(),
        Some("paid")
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM order_ledger WHERE order_id = 'order-awr-1'")
            .await,
        1
    );
    let once = snapshot(&app.db).await;

    // A redelivery stores a delivery row and changes nothing else.
    assert_eq!(app.post_stripe(&event).await.status(), 200);
    assert_eq!(snapshot(&app.db).await, once);
    assert_eq!(
        app.count("SELECT COUNT(*) FROM deliveries WHERE event_id = 'evt_awr_1'")
            .await,
        2
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_failure_to_apply_keeps_the_receipt_and_the_workers_take_it_over() {
    let app = live_app(true).await;
    // Every effect insert fails until the trigger is dropped: the applying inside the
    // receipts' transaction fails, and so do the workers' attempts.
    sqlx::raw_sql(
        "CREATE TRIGGER awr_no_effects BEFORE INSERT ON processed_effects \
         BEGIN SELECT RAISE(ABORT, 'injected: no effects'); END",
    )
    .execute(app.db.writer())
    .await
    .unwrap();
    let event = payment_intent_succeeded("evt_awr_2", "pi_awr_2", "order-awr-2", 4_200, T10_00);
    let body = event.to_string();
    let answer = app
        .post_stripe_with(body.as_bytes(), common::STRIPE_SECRET, common::now_secs())
        .await;
    assert_eq!(
        answer.status(),
        200,
        "the receipt is committed without its effect"
    );

    let stored: Vec<u8> =
        sqlx::query_scalar("SELECT raw_body FROM inbox_events WHERE event_id = 'evt_awr_2'")
            .fetch_one(app.db.reader())
            .await
            .unwrap();
    assert_eq!(stored, body.as_bytes(), "the raw body, byte for byte");
    assert_eq!(
        app.count("SELECT COUNT(*) FROM deliveries WHERE event_id = 'evt_awr_2'")
            .await,
        1
    );
    assert_eq!(app.count("SELECT COUNT(*) FROM processed_effects").await, 0);
    assert_ne!(app.event_status("evt_awr_2").await.0, "applied");

    sqlx::raw_sql("DROP TRIGGER awr_no_effects")
        .execute(app.db.writer())
        .await
        .unwrap();
    app.make_due().await;
    app.wait_until_processed().await;
    assert_eq!(app.event_status("evt_awr_2").await.0, "applied");
    assert_eq!(
        app.order_status("order-awr-2").await.as_deref(),
        Some("paid")
    );
    assert_eq!(app.count("SELECT COUNT(*) FROM processed_effects").await, 1);
    app.shutdown().await;
}

#[tokio::test]
async fn the_same_deliveries_give_the_state_the_workers_alone_give() {
    let mut states = Vec::new();
    for apply_with_receipts in [true, false] {
        let app = live_app(apply_with_receipts).await;
        for event in deliveries() {
            assert_eq!(app.post_stripe(&event).await.status(), 200);
        }
        // The refunds that came before their payment wait for a retry a minute later: make
        // every waiting event due until none is left.
        let waiting = "SELECT COUNT(*) FROM inbox_events WHERE status IN ('pending', 'processing')";
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while app.count(waiting).await > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "events still waiting after 20 s"
            );
            app.make_due().await;
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        states.push(snapshot(&app.db).await);
        app.shutdown().await;
    }
    let (with_receipts, workers_alone) = (&states[0], &states[1]);
    assert_eq!(with_receipts.orders.len(), 3);
    assert_eq!(
        with_receipts.money,
        vec![
            ("order-awr-0".to_string(), 1_000, 300, 0, None),
            ("order-awr-1".to_string(), 1_000, 300, 0, None),
            ("order-awr-2".to_string(), 1_000, 300, 0, None),
        ]
    );
    assert_eq!(with_receipts, workers_alone);
}
