//! Money is counted, status is derived: one test per way the issue found money dropped or
//! a status wrong, over real HTTP with Stripe-shaped bodies at a current API version (and
//! Standard Webhooks bodies where Stripe has no such event).

mod common;

use common::fixtures::*;
use common::{Kind, TestApp};
use serde_json::{json, Value};

both!(
    two_partial_refunds_delivered_newest_first_both_reach_the_ledger,
    two_refunds_stamped_in_the_same_second_both_count,
    charge_refunded_without_a_refund_list_is_counted_once_with_refund_created,
    a_payment_announced_twice_gives_one_state_in_either_order_and_keeps_the_refund_between,
    no_settled_after_a_full_refund_and_no_paid_after_a_dispute,
    sequences_are_compared_only_within_one_resource,
    money_after_a_cancel_is_counted_and_flagged_and_cancel_wins_a_same_second_authorisation,
    a_refund_larger_than_what_is_known_paid_is_recorded_flagged_and_resolved_by_the_payment,
    concurrent_refunds_beyond_the_payment_are_both_counted_and_flagged,
    a_refund_that_fails_later_is_reversed_exactly_once_in_any_order,
    a_won_dispute_reverses_and_a_lost_one_stays,
    checkout_sessions_pay_when_paid_and_pix_pays_later,
);

struct Money {
    status: String,
    paid: i64,
    refunded: i64,
    disputed: i64,
    attention: Vec<String>,
}

async fn money(app: &TestApp, order: &str) -> Money {
    let (status, paid, refunded, disputed, attention): (String, i64, i64, i64, Option<String>) =
        sqlx::query_as(
            "SELECT status, amount_paid, amount_refunded, amount_disputed, attention FROM orders WHERE order_id = $1",
        )
        .bind(order)
        .fetch_one(app.db.reader())
        .await
        .unwrap();
    Money {
        status,
        paid,
        refunded,
        disputed,
        attention: attention
            .map(|a| serde_json::from_str(&a).unwrap())
            .unwrap_or_default(),
    }
}

/// Ledger entries of an order as (entry, resource, counted), oldest first.
async fn ledger(app: &TestApp, order: &str) -> Vec<(String, String, i64)> {
    sqlx::query_as(
        "SELECT entry, external_ref, counted FROM order_ledger WHERE order_id = $1 ORDER BY id",
    )
    .bind(order)
    .fetch_all(app.db.reader())
    .await
    .unwrap()
}

async fn topics(app: &TestApp, order: &str) -> Vec<String> {
    sqlx::query_scalar("SELECT topic FROM outbox WHERE order_id = $1 ORDER BY id")
        .bind(order)
        .fetch_all(app.db.reader())
        .await
        .unwrap()
}

/// Posts each event and processes it before the next: a strict arrival order.
async fn deliver(app: &TestApp, events: &[&Value]) {
    for e in events {
        assert_eq!(app.post_stripe(e).await.status(), 200, "{e}");
        app.process().await;
    }
}

async fn dead_letters(app: &TestApp) -> i64 {
    app.count("SELECT COUNT(*) FROM dead_letters").await
}

async fn two_partial_refunds_delivered_newest_first_both_reach_the_ledger(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let pay = payment_intent_succeeded("evt_p", "pi_1", "ord-1", 10_000, T10_00);
    let older = refund_event(
        "evt_r1",
        "refund.created",
        "pi_1",
        "re_1",
        3_000,
        "succeeded",
        None,
        T10_00 + 60,
    );
    let newer = refund_event(
        "evt_r2",
        "refund.created",
        "pi_1",
        "re_2",
        2_000,
        "succeeded",
        None,
        T10_00 + 120,
    );
    deliver(&app, &[&pay, &newer, &older]).await;
    let m = money(&app, "ord-1").await;
    assert_eq!(
        (m.status.as_str(), m.paid, m.refunded),
        ("partially_refunded", 10_000, 5_000)
    );
    assert_eq!(
        app.event_status("evt_r1").await.0,
        "applied",
        "the older refund is money, not stale"
    );
    assert_eq!(
        ledger(&app, "ord-1").await,
        vec![
            ("payment".into(), "pi_1".into(), 10_000),
            ("refund".into(), "re_2".into(), 2_000),
            ("refund".into(), "re_1".into(), 3_000),
        ]
    );
    assert_eq!(
        topics(&app, "ord-1").await,
        vec![
            "payment.recorded",
            "order.paid",
            "refund.recorded",
            "order.partially_refunded",
            "refund.recorded"
        ]
    );
    // Redelivering either refund changes nothing.
    deliver(&app, &[&older, &newer]).await;
    assert_eq!(ledger(&app, "ord-1").await.len(), 3);
    app.shutdown().await;
}

async fn two_refunds_stamped_in_the_same_second_both_count(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let pay = payment_intent_succeeded("evt_p", "pi_1", "ord-s", 10_000, T10_00);
    let a = refund_event(
        "evt_ra",
        "refund.created",
        "pi_1",
        "re_a",
        10_000 - 1,
        "succeeded",
        None,
        T10_00 + 60,
    );
    let b = refund_event(
        "evt_rb",
        "refund.created",
        "pi_1",
        "re_b",
        1,
        "succeeded",
        None,
        T10_00 + 60,
    );
    deliver(&app, &[&pay, &b, &a]).await;
    let m = money(&app, "ord-s").await;
    assert_eq!((m.status.as_str(), m.refunded), ("refunded", 10_000));
    assert_eq!(app.event_status("evt_ra").await.0, "applied");
    app.shutdown().await;
}

async fn charge_refunded_without_a_refund_list_is_counted_once_with_refund_created(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    // Only charge.refunded, as most integrations subscribe: the refund is money.
    let pay = payment_intent_succeeded("evt_p", "pi_1", "ord-c", 10_000, T10_00);
    let total = charge_refunded_total("evt_total", "pi_1", "ord-c", 10_000, 4_000, T10_00 + 60);
    deliver(&app, &[&pay, &total]).await;
    let m = money(&app, "ord-c").await;
    assert_eq!(
        (m.status.as_str(), m.refunded),
        ("partially_refunded", 4_000)
    );
    assert_eq!(app.event_status("evt_total").await.0, "applied");

    // The same refund announced both ways counts once, in either order.
    for (order, first_total) in [("ord-c1", true), ("ord-c2", false)] {
        let pay = payment_intent_succeeded(
            &format!("evt_p_{order}"),
            &format!("pi_{order}"),
            order,
            10_000,
            T10_00,
        );
        let total = charge_refunded_total(
            &format!("evt_t_{order}"),
            &format!("pi_{order}"),
            order,
            10_000,
            4_000,
            T10_00 + 60,
        );
        let refund = refund_event(
            &format!("evt_r_{order}"),
            "refund.created",
            &format!("pi_{order}"),
            &format!("re_{order}"),
            4_000,
            "succeeded",
            None,
            T10_00 + 60,
        );
        if first_total {
            deliver(&app, &[&pay, &total, &refund]).await;
        } else {
            deliver(&app, &[&pay, &refund, &total]).await;
        }
        let m = money(&app, order).await;
        assert_eq!(
            (m.refunded, m.status.as_str()),
            (4_000, "partially_refunded"),
            "{order}"
        );
        let counted: i64 = ledger(&app, order)
            .await
            .iter()
            .filter(|e| e.0.starts_with("refund"))
            .map(|e| e.2)
            .sum();
        assert_eq!(counted, 4_000, "{order}");
    }
    // A later, larger total adds only the difference.
    let more = charge_refunded_total(
        "evt_t_more",
        "pi_ord-c1",
        "ord-c1",
        10_000,
        10_000,
        T10_00 + 90,
    );
    deliver(&app, &[&more]).await;
    let m = money(&app, "ord-c1").await;
    assert_eq!((m.status.as_str(), m.refunded), ("refunded", 10_000));
    assert_eq!(ledger(&app, "ord-c1").await.last().unwrap().2, 6_000);
    app.shutdown().await;
}

async fn a_payment_announced_twice_gives_one_state_in_either_order_and_keeps_the_refund_between(
    kind: Kind,
) {
    let app = TestApp::spawn(kind).await;
    let mut states = Vec::new();
    for (order, invoice_first) in [("ord-a", false), ("ord-b", true)] {
        let pi = format!("pi_{order}");
        let mut pay =
            payment_intent_succeeded(&format!("evt_pi_{order}"), &pi, order, 10_000, T10_00);
        pay["api_version"] = json!(CURRENT_API);
        let mut invoice = invoice_paid_new(&format!("evt_in_{order}"), &pi, 10_000, T10_00 + 10);
        invoice["data"]["object"]["metadata"] = json!({"order_id": order});
        // A refund stamped between the two announcements of the payment.
        let refund = refund_event(
            &format!("evt_re_{order}"),
            "refund.created",
            &pi,
            &format!("re_{order}"),
            2_500,
            "succeeded",
            None,
            T10_00 + 5,
        );
        if invoice_first {
            deliver(&app, &[&invoice, &refund, &pay]).await;
        } else {
            deliver(&app, &[&pay, &refund, &invoice]).await;
        }
        let m = money(&app, order).await;
        let kinds: Vec<String> = ledger(&app, order)
            .await
            .into_iter()
            .map(|e| format!("{}:{}", e.0, e.2))
            .collect();
        states.push((m.status, m.paid, m.refunded, kinds));
    }
    assert_eq!(states[0], states[1]);
    assert_eq!(
        states[0],
        (
            "partially_refunded".to_string(),
            10_000,
            2_500,
            vec!["payment:10000".to_string(), "refund:2500".to_string()]
        )
    );
    app.shutdown().await;
}

async fn no_settled_after_a_full_refund_and_no_paid_after_a_dispute(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let sw =
        |kind: &str, data: Value, at: &str| json!({"type": kind, "timestamp": at, "data": data});
    let send = |id: &'static str, body: Value| {
        let app = &app;
        async move {
            assert_eq!(app.post_standard(id, &body).await.status(), 200);
            app.process().await;
        }
    };
    send(
        "m1",
        sw(
            "payment.succeeded",
            json!({"order_id": "ord-st", "payment_id": "pay_1", "amount": 500, "currency": "eur"}),
            "2024-01-01T10:00:00Z",
        ),
    )
    .await;
    send("m2", sw("refund.succeeded", json!({"order_id": "ord-st", "payment_id": "pay_1", "refund_id": "rf_1", "amount": 500, "currency": "eur"}), "2024-01-01T10:01:00Z")).await;
    send(
        "m3",
        sw(
            "payment.settled",
            json!({"order_id": "ord-st", "payment_id": "pay_1", "amount": 500, "currency": "eur"}),
            "2024-01-01T10:02:00Z",
        ),
    )
    .await;
    assert_eq!(money(&app, "ord-st").await.status, "refunded");

    send(
        "m4",
        sw(
            "payment.succeeded",
            json!({"order_id": "ord-dp", "payment_id": "pay_2", "amount": 500, "currency": "eur"}),
            "2024-01-01T10:00:00Z",
        ),
    )
    .await;
    send("m5", sw("dispute.created", json!({"order_id": "ord-dp", "payment_id": "pay_2", "dispute_id": "dp_2", "amount": 500, "currency": "eur"}), "2024-01-01T10:01:00Z")).await;
    send(
        "m6",
        sw(
            "payment.succeeded",
            json!({"order_id": "ord-dp", "payment_id": "pay_3", "amount": 500, "currency": "eur"}),
            "2024-01-01T10:02:00Z",
        ),
    )
    .await;
    let m = money(&app, "ord-dp").await;
    assert_eq!(
        (m.status.as_str(), m.paid, m.disputed),
        ("disputed", 1_000, 500)
    );
    app.shutdown().await;
}

async fn sequences_are_compared_only_within_one_resource(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let body = |kind: &str, data: Value| json!({"type": kind, "timestamp": "2024-01-01T10:00:00Z", "data": data});
    // Same second; the payment's sequence (9) is larger than the refund's (1), which says
    // nothing about which came first: they are different resources.
    let refund = body(
        "refund.succeeded",
        json!({"order_id": "ord-q", "payment_id": "pay_q", "refund_id": "rf_q", "amount": 700, "currency": "eur", "sequence": 1}),
    );
    let pay = body(
        "payment.succeeded",
        json!({"order_id": "ord-q", "payment_id": "pay_q", "amount": 700, "currency": "eur", "sequence": 9}),
    );
    for (id, b) in [("q1", &refund), ("q2", &pay)] {
        assert_eq!(app.post_standard(id, b).await.status(), 200);
        app.process().await;
    }
    let m = money(&app, "ord-q").await;
    assert_eq!(
        (m.status.as_str(), m.paid, m.refunded),
        ("refunded", 700, 700)
    );
    app.shutdown().await;
}

async fn money_after_a_cancel_is_counted_and_flagged_and_cancel_wins_a_same_second_authorisation(
    kind: Kind,
) {
    let app = TestApp::spawn(kind).await;
    let cancel = payment_intent_event(
        "evt_c",
        "payment_intent.canceled",
        "pi_1",
        "ord-x",
        900,
        T10_00,
    );
    let fail = payment_intent_event(
        "evt_f",
        "payment_intent.payment_failed",
        "pi_2",
        "ord-x",
        900,
        T10_00 + 10,
    );
    let mut pay = payment_intent_succeeded("evt_p", "pi_2", "ord-x", 900, T10_00 + 20);
    pay["api_version"] = json!(CURRENT_API);
    deliver(&app, &[&cancel, &fail, &pay]).await;
    let m = money(&app, "ord-x").await;
    assert_eq!(
        (m.status.as_str(), m.paid),
        ("paid", 900),
        "money is never dropped"
    );
    assert!(
        m.attention
            .iter()
            .any(|a| a.starts_with("payment_after_cancel")),
        "{:?}",
        m.attention
    );
    assert_eq!(dead_letters(&app).await, 0);

    // The same facts in the opposite order: the same state and the same flag.
    let cancel = payment_intent_event(
        "evt_c2",
        "payment_intent.canceled",
        "pi_3",
        "ord-y",
        900,
        T10_00,
    );
    let fail = payment_intent_event(
        "evt_f2",
        "payment_intent.payment_failed",
        "pi_4",
        "ord-y",
        900,
        T10_00 + 10,
    );
    let mut pay = payment_intent_succeeded("evt_p2", "pi_4", "ord-y", 900, T10_00 + 20);
    pay["api_version"] = json!(CURRENT_API);
    deliver(&app, &[&pay, &fail, &cancel]).await;
    let n = money(&app, "ord-y").await;
    assert_eq!(
        (n.status, n.paid, n.attention.len()),
        (m.status, m.paid, m.attention.len())
    );

    // A cancel and an authorisation in the same second: canceled, in either order.
    for (order, cancel_first) in [("ord-z1", true), ("ord-z2", false)] {
        let auth = payment_intent_event(
            &format!("evt_a_{order}"),
            "payment_intent.amount_capturable_updated",
            &format!("pi_{order}"),
            order,
            900,
            T10_00,
        );
        let cancel = payment_intent_event(
            &format!("evt_x_{order}"),
            "payment_intent.canceled",
            &format!("pi_{order}"),
            order,
            900,
            T10_00,
        );
        if cancel_first {
            deliver(&app, &[&cancel, &auth]).await;
        } else {
            deliver(&app, &[&auth, &cancel]).await;
        }
        assert_eq!(money(&app, order).await.status, "canceled", "{order}");
    }
    app.shutdown().await;
}

async fn a_refund_larger_than_what_is_known_paid_is_recorded_flagged_and_resolved_by_the_payment(
    kind: Kind,
) {
    let app = TestApp::spawn(kind).await;
    let refund = refund_event(
        "evt_r",
        "refund.created",
        "pi_1",
        "re_1",
        6_000,
        "succeeded",
        Some("ord-r"),
        T10_00 + 60,
    );
    deliver(&app, &[&refund]).await;
    let m = money(&app, "ord-r").await;
    assert_eq!((m.status.as_str(), m.refunded), ("refunded", 6_000));
    assert!(
        m.attention[0].starts_with("refund_exceeds_paid"),
        "{:?}",
        m.attention
    );
    assert_eq!(
        dead_letters(&app).await,
        0,
        "a real refund is never dead-lettered for arriving early"
    );
    let pay = payment_intent_succeeded("evt_p", "pi_1", "ord-r", 10_000, T10_00);
    deliver(&app, &[&pay]).await;
    let m = money(&app, "ord-r").await;
    assert_eq!(
        (m.status.as_str(), m.paid, m.refunded),
        ("partially_refunded", 10_000, 6_000)
    );
    assert!(m.attention.is_empty(), "{:?}", m.attention);
    app.shutdown().await;
}

async fn concurrent_refunds_beyond_the_payment_are_both_counted_and_flagged(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| s.processor.workers = 4).await;
    let pay = payment_intent_succeeded("evt_p", "pi_1", "ord-k", 10_000, T10_00);
    assert_eq!(app.post_stripe(&pay).await.status(), 200);
    app.wait_until_processed().await;
    let a = refund_event(
        "evt_ka",
        "refund.created",
        "pi_1",
        "re_a",
        6_000,
        "succeeded",
        None,
        T10_00 + 60,
    );
    let b = refund_event(
        "evt_kb",
        "refund.created",
        "pi_1",
        "re_b",
        6_000,
        "succeeded",
        None,
        T10_00 + 61,
    );
    let (ra, rb) = futures::join!(app.post_stripe(&a), app.post_stripe(&b));
    assert_eq!((ra.status().as_u16(), rb.status().as_u16()), (200, 200));
    app.wait_until_processed().await;
    let m = money(&app, "ord-k").await;
    assert_eq!((m.status.as_str(), m.refunded), ("refunded", 12_000));
    assert!(
        m.attention[0].starts_with("refund_exceeds_paid: 12000 refunded but only 10000"),
        "{:?}",
        m.attention
    );
    assert_eq!(ledger(&app, "ord-k").await.len(), 3);
    app.shutdown().await;
}

async fn a_refund_that_fails_later_is_reversed_exactly_once_in_any_order(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let orders = [
        ("ord-f1", [0usize, 1, 2, 3]),
        ("ord-f2", [3, 2, 1, 0]),
        ("ord-f3", [0, 3, 1, 2]),
    ];
    for (order, arrival) in orders {
        let pi = format!("pi_{order}");
        let re = format!("re_{order}");
        let events = [
            payment_intent_succeeded(&format!("e0_{order}"), &pi, order, 10_000, T10_00),
            refund_event(
                &format!("e1_{order}"),
                "refund.created",
                &pi,
                &re,
                4_000,
                "pending",
                None,
                T10_00 + 60,
            ),
            refund_event(
                &format!("e2_{order}"),
                "refund.updated",
                &pi,
                &re,
                4_000,
                "succeeded",
                None,
                T10_00 + 61,
            ),
            refund_event(
                &format!("e3_{order}"),
                "charge.refund.updated",
                &pi,
                &re,
                4_000,
                "failed",
                None,
                T10_00 + 62,
            ),
        ];
        for i in arrival {
            assert_eq!(app.post_stripe(&events[i]).await.status(), 200);
            app.process().await;
        }
        // Events naming only the payment that arrived before it wait; let them run now.
        app.make_due().await;
        app.process().await;
        let m = money(&app, order).await;
        assert_eq!(
            (m.status.as_str(), m.paid, m.refunded),
            ("paid", 10_000, 0),
            "{order}"
        );
        let entries: Vec<(String, i64)> = ledger(&app, order)
            .await
            .into_iter()
            .map(|e| (e.0, e.2))
            .collect();
        assert_eq!(
            entries.iter().filter(|e| e.0 == "refund").count()
                + entries.iter().filter(|e| e.0 == "refund_reversal").count(),
            2,
            "{order}: {entries:?}"
        );
        let t = topics(&app, order).await;
        assert_eq!(
            t.iter().filter(|t| *t == "refund.reversed").count(),
            1,
            "{order}: {t:?}"
        );
    }
    // A refund failed before it ever succeeded was never money.
    let pay = payment_intent_succeeded("e0_g", "pi_g", "ord-g", 10_000, T10_00);
    let pending = refund_event(
        "e1_g",
        "refund.created",
        "pi_g",
        "re_g",
        4_000,
        "pending",
        None,
        T10_00 + 60,
    );
    let failed = refund_event(
        "e2_g",
        "refund.failed",
        "pi_g",
        "re_g",
        4_000,
        "failed",
        None,
        T10_00 + 61,
    );
    deliver(&app, &[&pay, &pending, &failed]).await;
    assert_eq!(ledger(&app, "ord-g").await.len(), 1, "only the payment");
    assert_eq!(dead_letters(&app).await, 0);
    app.shutdown().await;
}

async fn a_won_dispute_reverses_and_a_lost_one_stays(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    for (order, outcome) in [("ord-won", "won"), ("ord-lost", "lost")] {
        let pi = format!("pi_{order}");
        let pay = payment_intent_succeeded(&format!("p_{order}"), &pi, order, 8_000, T10_00);
        let opened = dispute_created(
            &format!("d_{order}"),
            &pi,
            &format!("dp_{order}"),
            8_000,
            T10_00 + 60,
        );
        let closed = dispute_closed(
            &format!("c_{order}"),
            &pi,
            &format!("dp_{order}"),
            8_000,
            outcome,
            T10_00 + 600,
        );
        // The close arrives before the opening.
        deliver(&app, &[&pay, &closed, &opened]).await;
    }
    let won = money(&app, "ord-won").await;
    assert_eq!((won.status.as_str(), won.disputed), ("paid", 0));
    let lost = money(&app, "ord-lost").await;
    assert_eq!((lost.status.as_str(), lost.disputed), ("disputed", 8_000));
    assert_eq!(
        topics(&app, "ord-won").await,
        vec![
            "payment.recorded",
            "order.paid",
            "dispute.opened",
            "dispute.closed"
        ]
    );
    app.shutdown().await;
}

async fn checkout_sessions_pay_when_paid_and_pix_pays_later(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let card = checkout_session(
        "evt_cs1",
        "checkout.session.completed",
        "pi_card",
        "ord-card",
        10_990,
        "paid",
        T10_00,
    );
    deliver(&app, &[&card]).await;
    let m = money(&app, "ord-card").await;
    assert_eq!((m.status.as_str(), m.paid), ("paid", 10_990));

    let pix_done = checkout_session(
        "evt_cs2",
        "checkout.session.completed",
        "pi_pix",
        "ord-pix",
        10_990,
        "unpaid",
        T10_00,
    );
    deliver(&app, &[&pix_done]).await;
    assert_eq!(app.event_status("evt_cs2").await.0, "ignored");
    let pix_paid = checkout_session(
        "evt_cs3",
        "checkout.session.async_payment_succeeded",
        "pi_pix",
        "ord-pix",
        10_990,
        "paid",
        T10_00 + 300,
    );
    deliver(&app, &[&pix_paid]).await;
    let m = money(&app, "ord-pix").await;
    assert_eq!((m.status.as_str(), m.paid), ("paid", 10_990));

    let boleto = checkout_session(
        "evt_cs4",
        "checkout.session.async_payment_failed",
        "pi_bol",
        "ord-bol",
        5_000,
        "unpaid",
        T10_00,
    );
    deliver(&app, &[&boleto]).await;
    assert_eq!(money(&app, "ord-bol").await.status, "failed");
    app.shutdown().await;
}
