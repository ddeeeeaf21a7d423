//! The CLI as an operator uses it, alerts under a storm, and two instances sharing one
//! PostgreSQL (receiver in one, processor in the other, woken by NOTIFY).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::fixtures::*;
use common::peers::Merchant;
use common::{Kind, TestApp};

both!(
    order_show_and_events_list_print_the_documented_json,
    serve_warns_when_autovacuum_is_off_and_the_hot_tables_carry_their_own_settings,
);

/// `oncehook serve` says at start-up that PostgreSQL's autovacuum is off (as on the
/// machine the benchmarks run on), and says nothing when it is on or on SQLite; the queue
/// tables carry migration 0013's autovacuum settings; with autovacuum off, the server
/// vacuums the queues, orders and facts itself every `processor.vacuum_secs`.
async fn serve_warns_when_autovacuum_is_off_and_the_hot_tables_carry_their_own_settings(
    kind: Kind,
) {
    let db = common::TestDb::new(kind).await;
    let store = db.connect().await;
    let server = common::binary::Binary::start(&db, "[processor]\nvacuum_secs = 1\n").await;
    // The last vacuum of each table the processor rewrites, as PostgreSQL records it.
    let vacuumed = || async {
        let at: Vec<Option<i64>> = sqlx::query_scalar(
            "SELECT (extract(epoch FROM last_vacuum) * 1000)::bigint FROM pg_stat_user_tables \
             WHERE relname IN ('inbox_events', 'outbox', 'orders', 'order_facts')",
        )
        .fetch_all(store.reader())
        .await
        .unwrap();
        at.len() == 4 && at.iter().all(Option::is_some)
    };
    let autovacuum_off = kind == Kind::Postgres && {
        let setting: String = sqlx::query_scalar("SELECT current_setting('autovacuum')")
            .fetch_one(store.reader())
            .await
            .unwrap();
        setting == "off"
    };
    if autovacuum_off {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !vacuumed().await {
            assert!(
                Instant::now() < deadline,
                "the hot tables were not vacuumed within 20 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let log = server.stop();
    let warned = log.contains("PostgreSQL runs with autovacuum = off");
    match kind {
        Kind::Sqlite => assert!(!warned, "{log}"),
        Kind::Postgres => {
            assert_eq!(warned, autovacuum_off, "{log}");
            assert!(!log.contains("hot-table vacuum failed"), "{log}");
            for table in ["inbox_events", "outbox"] {
                let options: String = sqlx::query_scalar(
                    "SELECT array_to_string(reloptions, ',') FROM pg_class WHERE relname = $1",
                )
                .bind(table)
                .fetch_one(store.reader())
                .await
                .unwrap();
                assert!(
                    options.contains("autovacuum_vacuum_scale_factor=0.01")
                        && options.contains("autovacuum_vacuum_cost_delay=0"),
                    "{table}: {options}"
                );
            }
        }
    }
    store.close().await;
}

fn cli(app: &TestApp, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args(args)
        .args(["--database-url", &app.db_handle.url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

async fn order_show_and_events_list_print_the_documented_json(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let pay = payment_intent_succeeded("evt_cli_1", "pi_cli", "order-cli", 4200, T10_00);
    app.post_stripe(&pay).await;
    app.post_stripe(&pay).await;
    app.post_stripe(&charge_refunded(
        "evt_cli_2",
        "pi_cli",
        "re_cli",
        "order-cli",
        4200,
        T10_00 + 60,
    ))
    .await;
    app.process().await;
    let order = cli(&app, &["order", "show", "order-cli", "--json"]);
    assert_eq!(order["order_id"], "order-cli");
    assert_eq!(order["status"], "refunded");
    assert_eq!(order["currency"], "EUR");
    assert_eq!(order["amount_paid"], 4200);
    assert_eq!(order["amount_refunded"], 4200);
    assert_eq!(order["amount_disputed"], 0);
    assert_eq!(order["net"], 0);
    assert!(
        order["why"].as_str().unwrap().starts_with(
            "refunded: 42.00 EUR of 42.00 EUR refunded by the charge's refunded total"
        ),
        "{}",
        order["why"]
    );
    assert!(order["attention"].as_array().unwrap().is_empty());
    for key in [
        "facts",
        "effects",
        "stale_events",
        "ledger",
        "outbox",
        "deliveries",
    ] {
        assert!(order[key].is_array(), "{key} missing: {order}");
    }
    let effect = &order["effects"][0];
    for key in [
        "key",
        "transition",
        "external_ref",
        "event_id",
        "applied_at",
    ] {
        assert!(!effect[key].is_null(), "effect.{key} missing: {effect}");
    }
    assert_eq!(
        order["deliveries"].as_array().unwrap().len(),
        3,
        "duplicates included"
    );
    assert_eq!(order["ledger"].as_array().unwrap().len(), 2);
    let events = cli(&app, &["events", "list", "--json", "--order", "order-cli"]);
    assert_eq!(events.as_array().unwrap().len(), 2);
    assert_eq!(events[1]["deliveries"], 2);
    let refunds = cli(
        &app,
        &["events", "list", "--json", "--type", "charge.refunded"],
    );
    assert_eq!(refunds.as_array().unwrap().len(), 1);
    let missing = Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args([
            "order",
            "show",
            "nope",
            "--database-url",
            &app.db_handle.url,
        ])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no order \"nope\""));
    app.shutdown().await;
}

#[tokio::test]
async fn an_alert_storm_sends_a_summary_not_a_post_per_item() {
    let receiver = Merchant::start(vec![]).await;
    let (alerter, task) =
        oncehook::pipeline::alerts::Alerter::start(oncehook::pipeline::alerts::AlertSettings {
            webhook_url: Some(receiver.url.clone()),
            min_interval_secs: 1,
        });
    for id in 0..200 {
        alerter.dead_lettered(oncehook::pipeline::alerts::DeadLetterAlert {
            dead_letter_id: id,
            stage: "processor".into(),
            class: "permanent".into(),
            error: "body is not JSON".into(),
            event_id: Some(format!("evt_{id}")),
            order_id: None,
        });
    }
    drop(alerter);
    task.await.unwrap();
    let posts = receiver.received();
    assert!(
        (1..=2).contains(&posts.len()),
        "{} posts for 200 dead letters",
        posts.len()
    );
    let texts: Vec<String> = posts
        .iter()
        .map(|p| {
            serde_json::from_str::<serde_json::Value>(&p.body).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        texts
            .iter()
            .any(|t| t.contains("items entered the dead-letter queue")),
        "{texts:?}"
    );
}

/// Receiver and processor in two processes' worth of servers on one PostgreSQL: the
/// processor polls only every minute, so a prompt effect proves the NOTIFY wake-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_notify_wakes_a_processor_in_another_instance() {
    if common::postgres_base_url().is_none() {
        return;
    }
    let receiver = TestApp::spawn_with(Kind::Postgres, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
    })
    .await;
    let mut settings = receiver.settings.clone();
    settings.receiver.enabled = false;
    settings.processor.enabled = true;
    settings.processor.poll_interval_ms = 60_000;
    let worker = oncehook::server::start(settings).await.unwrap();
    // Let the worker finish its first (empty) round and its LISTEN start.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sent = Instant::now();
    let e = payment_intent_succeeded("evt_notify", "pi_notify", "order-notify", 100, T10_00);
    assert_eq!(receiver.post_stripe(&e).await.status(), 200);
    let mut applied = false;
    while sent.elapsed() < Duration::from_secs(10) {
        if receiver.order_status("order-notify").await.as_deref() == Some("paid") {
            applied = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        applied,
        "not processed within 10 s although the poll interval is 60 s"
    );
    worker.shutdown().await.unwrap();
    receiver.shutdown().await;
}
