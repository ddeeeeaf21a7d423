//! The consistency check on SQLite and PostgreSQL: databases filled through signed webhooks
//! over HTTP, then `oncehook verify --json` run as the real binary. An untouched database has
//! no drift; an order whose stored status and totals were changed behind the processor's
//! back, a lost ledger entry and a ledger entry whose outbox message was deleted are each
//! reported with what the facts say, and the exit status tells a cron job.

mod common;

use std::process::Command;

use common::fixtures::*;
use common::{Kind, TestApp};
use serde_json::Value;

both!(
    an_untouched_database_has_no_drift,
    a_tampered_order_is_reported_with_what_its_facts_give,
    a_ledger_entry_without_its_outbox_message_is_reported,
);

/// `oncehook verify --json` against the app's database: exit status and the report.
fn verify(app: &TestApp) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args(["verify", "--json", "--database-url", &app.db_handle.url])
        .env_remove("ONCEHOOK_CONFIG")
        .output()
        .unwrap();
    let code = out.status.code().expect("exited");
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {:?}, stderr {:?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, report)
}

/// Two orders through real webhooks: one paid and partly refunded, one only paid.
async fn fill(app: &TestApp) {
    for body in [
        payment_intent_succeeded("evt_v_pay", "pi_v", "order-v", 5_000, T10_00),
        refund_created("evt_v_refund", "pi_v", "re_v", 2_000, T10_00 + 60),
        payment_intent_succeeded("evt_w_pay", "pi_w", "order-w", 1_200, T10_00),
    ] {
        assert_eq!(app.post_stripe(&body).await.status(), 200);
        app.process().await;
    }
}

async fn exec(app: &TestApp, sql: &str) -> u64 {
    sqlx::query(sql)
        .execute(app.db.writer())
        .await
        .unwrap()
        .rows_affected()
}

async fn an_untouched_database_has_no_drift(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let (code, empty) = verify(&app);
    assert_eq!((code, &empty["orders_checked"]), (0, &Value::from(0)));
    fill(&app).await;
    let (code, report) = verify(&app);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["orders_checked"], 2);
    assert_eq!(report["drifting_orders"], 0);
    assert_eq!(report["missing_messages"], 0);
    assert_eq!(report["orders"], Value::Array(vec![]));
    assert_eq!(report["messages"], Value::Array(vec![]));
    assert_eq!(report["truncated"], false);
    app.shutdown().await;
}

async fn a_tampered_order_is_reported_with_what_its_facts_give(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    fill(&app).await;
    let changed = exec(
        &app,
        "UPDATE orders SET status = 'refunded', amount_refunded = 5000 WHERE order_id = 'order-v'",
    )
    .await;
    assert_eq!(changed, 1);
    let (code, report) = verify(&app);
    assert_eq!(code, 2, "drift is exit status 2: {report:#}");
    assert_eq!(
        (&report["orders_checked"], &report["drifting_orders"]),
        (&Value::from(2), &Value::from(1))
    );
    let drift = &report["orders"][0];
    assert_eq!(drift["order_id"], "order-v");
    assert_eq!(drift["differs"], serde_json::json!(["status", "totals"]));
    assert_eq!(drift["stored"]["status"], "refunded");
    assert_eq!(drift["stored"]["refunded"], 5_000);
    assert_eq!(drift["facts"]["status"], "partially_refunded");
    assert_eq!(
        (&drift["facts"]["paid"], &drift["facts"]["refunded"]),
        (&Value::from(5_000), &Value::from(2_000))
    );
    // The ledger agrees with the facts: it is the cache that drifted.
    assert_eq!(drift["ledger"]["refunded"], 2_000);
    assert_eq!(drift["ledger"]["missing_entries"], Value::Array(vec![]));

    // A ledger entry lost: the facts still call for it.
    exec(
        &app,
        "DELETE FROM order_ledger WHERE order_id = 'order-w' AND entry = 'payment'",
    )
    .await;
    let (code, report) = verify(&app);
    assert_eq!((code, &report["drifting_orders"]), (2, &Value::from(2)));
    let w = &report["orders"][1];
    assert_eq!(w["order_id"], "order-w");
    assert_eq!(w["differs"], serde_json::json!(["ledger"]));
    assert_eq!(w["ledger"]["paid"], 0);
    assert_eq!(
        w["ledger"]["missing_entries"],
        serde_json::json!([{"entry": "payment", "resource_id": "pi_w", "counted": 1_200}])
    );
    app.shutdown().await;
}

async fn a_ledger_entry_without_its_outbox_message_is_reported(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    fill(&app).await;
    let key: String = sqlx::query_scalar(
        "SELECT effect_key FROM order_ledger WHERE order_id = 'order-v' AND entry = 'refund'",
    )
    .fetch_one(app.db.reader())
    .await
    .unwrap();
    let deleted = exec(
        &app,
        &format!("DELETE FROM outbox WHERE effect_key = '{key}'"),
    )
    .await;
    assert_eq!(deleted, 1, "one message per entry, to the default sink");
    let (code, report) = verify(&app);
    assert_eq!(code, 2, "{report:#}");
    assert_eq!(
        (&report["drifting_orders"], &report["missing_messages"]),
        (&Value::from(0), &Value::from(1))
    );
    assert_eq!(
        report["messages"],
        serde_json::json!([{
            "order_id": "order-v", "entry": "refund", "resource_id": "re_v",
            "effect_key": key, "topic": "refund.recorded"
        }])
    );
    app.shutdown().await;
}
