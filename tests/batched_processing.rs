//! Many events per processing transaction (one savepoint each) must give exactly the state
//! that one transaction per event gives: every outcome on its own, a failing event's writes
//! undone without touching its neighbours, and later events seeing earlier ones of the
//! same batch.

mod common;

use common::fixtures::*;
use common::{snapshot, Kind, Snapshot, TestApp};
use serde_json::json;

both!(
    a_mixed_batch_in_one_transaction_equals_one_transaction_per_event,
    an_aborted_group_transaction_is_reported_not_silently_rolled_back,
);

/// Every kind of outcome, in an order where later events depend on earlier ones.
fn mixed_events() -> Vec<serde_json::Value> {
    let mut unmapped = payment_intent_succeeded("evt_m_unmapped", "pi_x", "order-x", 1, T10_00);
    unmapped["type"] = json!("customer.created");
    let mut in_dollars = refund_created("evt_m_usd", "pi_b", "re_usd", 5, T10_00 + 70);
    in_dollars["data"]["object"]["currency"] = json!("usd");
    vec![
        // applied; remembers pi_b for the events below
        payment_intent_succeeded("evt_m_pay", "pi_b", "order-b", 100, T10_00),
        // the same payment under another event type: duplicate
        invoice_paid_new("evt_m_invoice", "pi_b", 100, T10_00 + 1),
        // names only pi_b: resolved through the reference written earlier in this batch;
        // refunds more than was paid: recorded and flagged, never dropped
        refund_created("evt_m_too_much", "pi_b", "re_big", 999_999, T10_00 + 60),
        // another currency: business failure, dead letter, its writes rolled back alone
        in_dollars,
        // a failure after the payment succeeded: a refused regression, recorded
        payment_intent_failed("evt_m_failed", "pi_b", "order-b", T10_00 + 30),
        // refunded total stamped 10:02, then the payment stamped 10:00: the payment is
        // stale, and its money counted
        charge_refunded("evt_m_refund", "pi_c", "re_c", "order-c", 50, T10_00 + 120),
        payment_intent_succeeded("evt_m_late_pay", "pi_c", "order-c", 50, T10_00),
        // names only a payment nobody has mentioned: retried later
        refund_created("evt_m_orphan", "pi_nobody", "re_o", 10, T10_00),
        // not in the mapping: ignored
        unmapped,
        // a partial refund that fits: applied after the failures above were rolled back
        refund_created("evt_m_refund_b", "pi_b", "re_b", 40, T10_00 + 90),
    ]
}

struct Outcome {
    state: Snapshot,
    dead_letters: Vec<(String, String)>,
    waiting: Vec<String>,
}

async fn process_mixed(kind: Kind, events_per_transaction: usize) -> Outcome {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.processor.claim_batch = 32;
        s.processor.events_per_transaction = Some(events_per_transaction);
    })
    .await;
    for event in mixed_events() {
        assert_eq!(app.post_stripe(&event).await.status(), 200);
    }
    let claimed = app.processor().run_once(&Default::default()).await.unwrap();
    assert_eq!(claimed, 10, "one claim takes the whole set");
    let rows = |sql: &'static str| {
        let pool = app.db.reader().clone();
        async move {
            sqlx::query_as::<_, (String, String)>(sql)
                .fetch_all(&pool)
                .await
                .unwrap()
        }
    };
    let outcome = Outcome {
        state: snapshot(&app.db).await,
        dead_letters: rows("SELECT event_id, error_class FROM dead_letters ORDER BY event_id")
            .await,
        waiting: rows(
            "SELECT event_id, status FROM inbox_events WHERE status = 'pending' ORDER BY event_id",
        )
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect(),
    };
    app.shutdown().await;
    outcome
}

async fn a_mixed_batch_in_one_transaction_equals_one_transaction_per_event(kind: Kind) {
    let batched = process_mixed(kind, 32).await;
    let single = process_mixed(kind, 1).await;
    assert_eq!(batched.state, single.state);
    assert_eq!(batched.dead_letters, single.dead_letters);
    assert_eq!(batched.waiting, single.waiting);

    // And the state is the right one, not merely the same one.
    let status = |id: &str| {
        batched
            .state
            .inbox
            .iter()
            .find(|(event, _, _)| event == id)
            .map(|(_, status, _)| status.clone())
            .unwrap()
    };
    assert_eq!(status("evt_m_pay"), "applied");
    assert_eq!(status("evt_m_invoice"), "duplicate");
    assert_eq!(status("evt_m_too_much"), "applied");
    assert_eq!(status("evt_m_usd"), "dead");
    assert_eq!(status("evt_m_failed"), "refused");
    assert_eq!(status("evt_m_refund"), "applied");
    assert_eq!(status("evt_m_late_pay"), "stale");
    assert_eq!(status("evt_m_orphan"), "pending");
    assert_eq!(status("evt_m_unmapped"), "ignored");
    assert_eq!(status("evt_m_refund_b"), "applied");
    assert_eq!(
        batched.dead_letters,
        vec![("evt_m_usd".to_string(), "business".to_string())]
    );
    assert_eq!(batched.waiting, vec!["evt_m_orphan".to_string()]);
    let orders: Vec<(&str, &str)> = batched
        .state
        .orders
        .iter()
        .map(|(id, status, _, _)| (id.as_str(), status.as_str()))
        .collect();
    assert_eq!(
        orders,
        vec![("order-b", "refunded"), ("order-c", "refunded")]
    );
    assert_eq!(
        batched.state.effects.len(),
        6,
        "pay b, too-much refund, refused failure, refund b, refunded total c, stale pay c: \
         only the mismatched key stays free"
    );
    assert_eq!(
        batched.state.ledger.len(),
        5,
        "payment b, refunds re_big and re_b, refunded total c, payment c"
    );
    assert_eq!(
        batched.state.stale.len(),
        2,
        "the late payment and the refusal"
    );
}

/// On PostgreSQL a statement failing outside a savepoint aborts the transaction and COMMIT
/// then rolls back without an error; the group commit must see that, not report success.
async fn an_aborted_group_transaction_is_reported_not_silently_rolled_back(kind: Kind) {
    use sqlx::Connection;
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
    })
    .await;
    let mut conn = app.db.writer().acquire().await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("INSERT INTO audit_log (actor, action, target, at) VALUES ('t', 'a', 'x', 1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let failed =
        sqlx::query("INSERT INTO audit_log (actor, action, target, at) VALUES (NULL, 'a', 'x', 1)")
            .execute(&mut *tx)
            .await;
    assert!(failed.is_err(), "NOT NULL violation");
    let committed = oncehook::store::commit_checked(tx).await;
    drop(conn);
    let kept = app
        .count("SELECT COUNT(*) FROM audit_log WHERE actor = 't'")
        .await;
    match kind {
        // The failed statement aborted everything: reported as an error, nothing kept.
        Kind::Postgres => {
            assert!(committed.is_err());
            assert_eq!(kept, 0);
        }
        // SQLite undoes only the failed statement: the rest commits.
        Kind::Sqlite => {
            committed.unwrap();
            assert_eq!(kept, 1);
        }
    }
    app.shutdown().await;
}
