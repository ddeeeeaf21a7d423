//! The consistency check on SQLite and PostgreSQL: databases filled through signed webhooks
//! over HTTP, then `oncehook verify --json` run as the real binary. An untouched database has
//! no drift; an order whose stored status and totals were changed behind the processor's
//! back, a lost ledger entry and a ledger entry whose outbox message was deleted are each
//! reported with what the facts say, and the exit status tells a cron job. Entries whose
//! topic goes to no sink, or older than outbox retention, need no message. Checks beside
//! live processing see no half-written order. The periodic job's result is on the rendered
//! overview and in `/metrics`; its interval loads from the TOML a user writes.

mod common;

use std::process::Command;

use common::fixtures::*;
use common::{Kind, TestApp};
use serde_json::Value;

both!(
    an_untouched_database_has_no_drift,
    a_tampered_order_is_reported_with_what_its_facts_give,
    a_ledger_entry_without_its_outbox_message_is_reported,
    the_periodic_check_shows_on_the_overview_and_in_metrics,
    a_check_beside_live_processing_sees_no_half_written_order,
    entries_whose_topic_goes_to_no_sink_need_no_message,
);

#[test]
fn the_check_interval_loads_from_the_toml_a_user_writes() {
    let load = |text: &str| {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("oncehook.toml");
        std::fs::write(&file, text).unwrap();
        oncehook::config::Settings::load(Some(&file), &Default::default())
    };
    assert_eq!(load("").unwrap().verify.interval_minutes, 60, "the default");
    let five = load("[verify]\ninterval_minutes = 5\n").unwrap();
    assert_eq!(
        oncehook::verify::job::interval(&five.verify_scope()),
        Some(std::time::Duration::from_secs(300))
    );
    let off = load("[verify]\ninterval_minutes = 0\n").unwrap();
    assert_eq!(
        oncehook::verify::job::interval(&off.verify_scope()),
        None,
        "0 turns the job off"
    );
    let typo = load("[verify]\ninterval_minute = 5\n").unwrap_err();
    assert!(format!("{typo:#}").contains("interval_minute"), "{typo:#}");
}

/// `oncehook verify --json` against the app's database: exit status and the report.
fn verify(app: &TestApp) -> (i32, Value) {
    verify_with(app, &[])
}

/// The same with more arguments (`--limit`, `--config`).
fn verify_with(app: &TestApp, args: &[&str]) -> (i32, Value) {
    let out = run(app, &["--json"], args);
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

fn run(app: &TestApp, format: &[&str], args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .arg("verify")
        .args(format)
        .args(args)
        .args(["--database-url", &app.db_handle.url])
        .env_remove("ONCEHOOK_CONFIG")
        .output()
        .unwrap()
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
    // This binary renders pages (below): no test server runs beside a render.
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
    // This binary renders pages (below): no test server runs beside a render.
    let app = TestApp::spawn(kind).await;
    fill(&app).await;
    let changed = exec(
        &app,
        "UPDATE orders SET status = 'refunded', amount_refunded = 5000 WHERE order_id = 'order-v'",
    )
    .await;
    assert_eq!(changed, 1);
    let (code, report) = verify(&app);
    assert_eq!(code, 3, "drift is exit status 3: {report:#}");
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
    // As a person reads it.
    let text = run(&app, &[], &[]);
    assert_eq!(text.status.code(), Some(3));
    let text = String::from_utf8(text.stdout).unwrap();
    for line in [
        "order order-v: status, totals differ",
        "  stored: refunded paid 5000 refunded 5000 disputed 0",
        "  facts:  partially_refunded paid 5000 refunded 2000 disputed 0",
        "checked 2 orders in ",
        ": 1 drifting, 0 ledger entries without their outbox message",
    ] {
        assert!(text.contains(line), "{line:?} in:\n{text}");
    }

    // A ledger entry lost: the facts still call for it.
    exec(
        &app,
        "DELETE FROM order_ledger WHERE order_id = 'order-w' AND entry = 'payment'",
    )
    .await;
    let (code, report) = verify(&app);
    assert_eq!((code, &report["drifting_orders"]), (3, &Value::from(2)));
    let w = &report["orders"][1];
    assert_eq!(w["order_id"], "order-w");
    assert_eq!(w["differs"], serde_json::json!(["ledger"]));
    assert_eq!(w["ledger"]["paid"], 0);
    assert_eq!(
        w["ledger"]["missing_entries"],
        serde_json::json!([{"entry": "payment", "resource_id": "pi_w", "counted": 1_200}])
    );
    // Listed up to --limit, all counted.
    let (code, report) = verify_with(&app, &["--limit", "1"]);
    assert_eq!((code, &report["drifting_orders"]), (3, &Value::from(2)));
    assert_eq!(report["orders"].as_array().unwrap().len(), 1);
    assert_eq!(report["truncated"], true);
    app.shutdown().await;
}

async fn a_ledger_entry_without_its_outbox_message_is_reported(kind: Kind) {
    // This binary renders pages (below): no test server runs beside a render.
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
    assert_eq!(code, 3, "{report:#}");
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
    // Recorded before retention.outbox_days (30): its delivered message may have been
    // pruned, so it is not missing.
    exec(
        &app,
        &format!(
            "UPDATE order_ledger SET recorded_at = recorded_at - {} WHERE effect_key = '{key}'",
            31 * 86_400_000i64
        ),
    )
    .await;
    let (code, report) = verify(&app);
    assert_eq!((code, &report["missing_messages"]), (0, &Value::from(0)));
    app.shutdown().await;
}

async fn entries_whose_topic_goes_to_no_sink_need_no_message(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.outbox.sinks = vec![];
    })
    .await;
    fill(&app).await;
    assert_eq!(app.count("SELECT COUNT(*) FROM outbox").await, 0);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("oncehook.toml");
    std::fs::write(&config, "[outbox]\nsinks = []\n").unwrap();
    let (code, report) = verify_with(&app, &["--config", config.to_str().unwrap()]);
    assert_eq!(
        (code, &report["missing_messages"]),
        (0, &Value::from(0)),
        "{report:#}"
    );
    // With the default routing (everything to `log`) the same ledger lacks 3 messages.
    let (code, report) = verify(&app);
    assert_eq!((code, &report["missing_messages"]), (3, &Value::from(3)));
    app.shutdown().await;
}

/// Waits (bounded) for a recorded run that `accept`s.
async fn wait_for_run(
    db: &oncehook::store::Db,
    accept: impl Fn(&oncehook::store::verify::RunRecord) -> bool,
) -> oncehook::store::verify::RunRecord {
    for _ in 0..400 {
        if let Some(run) = oncehook::store::verify::last_run(db).await.unwrap() {
            if accept(&run) {
                return run;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("no such consistency check recorded within 10 s");
}

/// The value of one unlabelled series in `/metrics`.
async fn metric(app: &TestApp, name: &str) -> Option<f64> {
    let text = app
        .http
        .get(format!("{}/metrics", app.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .map(|v| v.parse().unwrap())
}

async fn the_periodic_check_shows_on_the_overview_and_in_metrics(kind: Kind) {
    let mut app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.verify.interval_minutes = 60;
    })
    .await;
    // No run recorded yet: the job runs at start, on the empty database.
    let first = wait_for_run(&app.db, |r| r.source == "serve").await;
    assert_eq!((first.orders_checked, first.drifting_orders), (0, 0));
    let viewer = app.sign_in("vera", app::backend::Role::Viewer).await;
    let (status, html) = app.page("/", &viewer).await;
    assert_eq!(status, 200);
    assert!(html.contains("id=\"kpi-drift\""), "{html}");
    assert!(html.contains("drift: 0 orders, checked "), "{html}");
    assert_eq!(
        metric(&app, "oncehook_verify_drifting_orders").await,
        Some(0.0)
    );

    fill(&app).await;
    exec(
        &app,
        "UPDATE orders SET status = 'refunded', amount_refunded = 5000 WHERE order_id = 'order-v'",
    )
    .await;
    // Within the interval nothing runs again; an hour later (the run aged) a restarted
    // server's job finds the run due at once.
    exec(
        &app,
        "UPDATE verify_runs SET finished_at = finished_at - 3600000",
    )
    .await;
    app.server.take().unwrap().shutdown().await.unwrap();
    let server = oncehook::server::start(app.settings.clone()).await.unwrap();
    app.url = server.url();
    app.db = server.db.clone();
    app.server = Some(server);
    let run = wait_for_run(&app.db, |r| r.orders_checked == 2).await;
    assert_eq!((run.drifting_orders, run.missing_messages), (1, 0));
    assert_eq!(run.sample, vec!["order-v".to_string()]);

    let viewer = app.sign_in("victor", app::backend::Role::Viewer).await;
    let (_, html) = app.page("/", &viewer).await;
    assert!(html.contains("drift: 1 order, checked "), "{html}");
    assert!(
        html.contains("id=\"kpi-drift\" class=\"kpi kpi-bad\""),
        "{html}"
    );
    assert!(
        html.contains("href=\"/orders/order-v\""),
        "links to the drifting order: {html}"
    );
    assert_eq!(
        metric(&app, "oncehook_verify_drifting_orders").await,
        Some(1.0)
    );
    assert_eq!(
        metric(&app, "oncehook_verify_orders_checked").await,
        Some(2.0)
    );
    assert_eq!(
        metric(&app, "oncehook_verify_missing_messages").await,
        Some(0.0)
    );
    app.shutdown().await;
}

/// The processor writes an order's facts, ledger, messages and row in one transaction; the
/// check reads each page in one snapshot, so it never compares a row from before a commit
/// with facts from after it. Refunds are processed while checks run back to back.
async fn a_check_beside_live_processing_sees_no_half_written_order(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.outbox.relay.enabled = false;
        s.processor.poll_interval_ms = 5;
    })
    .await;
    const ORDERS: usize = 120;
    for i in 0..ORDERS {
        let pay = payment_intent_succeeded(
            &format!("evt_l_pay_{i}"),
            &format!("pi_l_{i}"),
            &format!("order-l-{i:03}"),
            5_000,
            T10_00,
        );
        assert_eq!(app.post_stripe(&pay).await.status(), 200);
    }
    app.wait_until_processed().await;
    let traffic = {
        let (url, http) = (app.url.clone(), app.http.clone());
        tokio::spawn(async move {
            for i in 0..ORDERS {
                let body = refund_created(
                    &format!("evt_l_re_{i}"),
                    &format!("pi_l_{i}"),
                    &format!("re_l_{i}"),
                    1_000,
                    T10_00 + 60,
                )
                .to_string();
                let t = common::now_secs();
                let sig = oncehook::provider::signature::stripe::sign(
                    common::STRIPE_SECRET,
                    t,
                    body.as_bytes(),
                );
                let r = http
                    .post(format!("{url}/webhooks/stripe"))
                    .header("stripe-signature", sig)
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
            }
        })
    };
    let mut runs = 0;
    loop {
        let done = traffic.is_finished();
        let scope = app.settings.verify_scope();
        let mut options = oncehook::verify::Options::new(&scope, oncehook::store::now_ms());
        // Small pages: more page boundaries for a commit to fall between.
        options.page_size = 7;
        let report = oncehook::verify::run(&app.db, &options).await.unwrap();
        assert_eq!(report.orders_checked, ORDERS as i64);
        assert!(
            report.is_clean(),
            "run {runs}: {}",
            oncehook::verify::render_text(&report)
        );
        runs += 1;
        if done {
            break;
        }
    }
    traffic.await.unwrap();
    app.wait_until_processed().await;
    let refunded = app
        .count("SELECT COUNT(*) FROM orders WHERE status = 'partially_refunded'")
        .await;
    assert_eq!(refunded, ORDERS as i64, "the refunds were processed");
    assert!(runs > 1, "checks ran while refunds were processed");
    app.shutdown().await;
}
