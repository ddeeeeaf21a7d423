//! A seeded chaos run of `oncehook simulate` (the real binary) into a real oncehook
//! server, both databases: once the simulator has finished and the processor has drained,
//! every order whose events all arrived equals the simulator's truth (status, totals per
//! kind, its facts, one ledger entry per effect), and the orders whose final states were
//! never delivered (dropped, or never generated) are exactly the ones that differ.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::truth::{held_orders, HeldOrder};
use common::{Kind, TestApp, STRIPE_SECRET};
use oncehook::simulator::truth::Truth;
use sqlx::Row;

async fn simulate(app: &TestApp, orders: usize, seed: u64) -> Truth {
    let dir = tempfile::tempdir().unwrap();
    let truth_file = dir.path().join("truth.json");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args([
            "simulate",
            "--scenario",
            "chaos",
            "--no-api",
            "--duration",
            "0",
        ])
        .args(["--orders", &orders.to_string(), "--seed", &seed.to_string()])
        .arg("--target")
        .arg(format!("{}/webhooks/stripe", app.url))
        .arg("--truth")
        .arg(&truth_file)
        .env("ONCEHOOK_SIMULATE_SECRET", STRIPE_SECRET)
        .env_remove("ONCEHOOK_CONFIG")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("truth:"), "the report: {stdout}");
    serde_json::from_slice(&std::fs::read(&truth_file).unwrap()).unwrap()
}

/// Waits until nothing is pending or being processed (retries of events whose order is
/// not known yet included), bounded.
async fn drained(app: &TestApp) {
    for _ in 0..2_400 {
        let busy = app
            .count("SELECT COUNT(*) FROM inbox_events WHERE status IN ('pending', 'processing')")
            .await;
        if busy == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("oncehook did not drain within 120 s");
}

async fn chaos_run(kind: Kind, orders: usize, seed: u64) {
    let app = TestApp::spawn_with(kind, |s| {
        s.outbox.relay.enabled = false;
        // A refund or dispute that overtook its payment waits for it; one whose payment
        // never arrives ends in the dead-letter queue within seconds.
        s.processor.retry.base_ms = 20;
        s.processor.retry.cap_ms = 400;
        s.processor.retry.max_attempts = 14;
    })
    .await;
    let truth = simulate(&app, orders, seed).await;
    drained(&app).await;

    // The faults happened.
    let s = &truth.sent;
    assert!(
        s.duplicates > 0 && s.delayed > 0 && s.resends > 0 && s.dropped > 0,
        "{s:?}"
    );
    assert!(truth.events.never_generated > 0, "{:?}", truth.events);
    // Events too old to apply are kept as dead letters, never lost.
    assert!(s.legacy_version > 0, "{s:?}");
    let filed = app
        .count("SELECT COUNT(*) FROM dead_letters WHERE last_error LIKE '%API version%'")
        .await;
    assert!(filed > 0, "legacy events in the dead-letter queue");
    assert!(truth.incomplete_orders > 0 && truth.complete_orders > orders / 2);
    assert_eq!(truth.orders.len(), orders);
    // Every delivery is remembered; duplicates collapse in the inbox.
    let deliveries = app.count("SELECT COUNT(*) FROM deliveries").await;
    let inbox = app.count("SELECT COUNT(*) FROM inbox_events").await;
    assert_eq!(deliveries as u64, s.delivered, "one delivery row per 2xx");
    assert!(inbox < deliveries);

    let seen = held_orders(&app.db).await;
    let mut wrong = Vec::new();
    let mut incomplete_but_equal = Vec::new();
    for o in &truth.orders {
        let expected = HeldOrder::expected(o);
        let equal = seen.get(&o.order_id) == Some(&expected);
        if o.complete && !equal {
            wrong.push(format!(
                "{}: truth {expected:?}\n  oncehook {:?}",
                o.order_id,
                seen.get(&o.order_id)
            ));
        }
        if !o.complete && equal {
            incomplete_but_equal.push(o.order_id.clone());
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} complete orders differ from the truth:\n{}",
        wrong.len(),
        truth.complete_orders,
        wrong[..wrong.len().min(5)].join("\n")
    );
    assert!(
        incomplete_but_equal.is_empty(),
        "orders with a final state never delivered cannot match: {incomplete_but_equal:?}"
    );
    assert!(
        seen.keys()
            .all(|id| truth.orders.iter().any(|o| &o.order_id == id)),
        "oncehook knows no order the simulator did not make"
    );

    // One ledger entry per fact: no entry kind recorded twice for one resource (running
    // totals excepted: each observation is its own entry), and the ledger's money of a
    // complete order adds up to the truth's totals per kind.
    let dup: Vec<String> = sqlx::query(
        "SELECT order_id, entry, external_ref FROM order_ledger WHERE entry <> 'refund_observed'
         GROUP BY order_id, entry, external_ref HAVING COUNT(*) > 1",
    )
    .fetch_all(app.db.reader())
    .await
    .unwrap()
    .iter()
    .map(|r| {
        format!(
            "{} {} {}",
            r.get::<String, _>(0),
            r.get::<String, _>(1),
            r.get::<String, _>(2)
        )
    })
    .collect();
    assert!(dup.is_empty(), "entries recorded twice: {dup:#?}");
    let mut ledger: BTreeMap<String, (i64, i64, i64)> = BTreeMap::new();
    for r in sqlx::query("SELECT order_id, entry, counted FROM order_ledger")
        .fetch_all(app.db.reader())
        .await
        .unwrap()
    {
        let money = ledger.entry(r.get(0)).or_default();
        let counted: i64 = r.get(2);
        match r.get::<String, _>(1).as_str() {
            "payment" => money.0 += counted,
            "refund" | "refund_reversal" | "refund_observed" => money.1 += counted,
            _ => money.2 += counted,
        }
    }
    for o in truth.orders.iter().filter(|o| o.complete) {
        assert_eq!(
            ledger.get(&o.order_id).copied().unwrap_or_default(),
            (o.paid, o.refunded, o.disputed),
            "{}: the ledger's money per kind",
            o.order_id
        );
    }
    app.shutdown().await;
}

/// The default suite's run: small, seeded.
async fn a_seeded_chaos_run_matches_the_truth(kind: Kind) {
    chaos_run(kind, 300, 20_261_201).await;
}

both!(a_seeded_chaos_run_matches_the_truth);

/// The run of 2,000 payments (42 s for both databases on two cores):
/// `cargo test --test simulator_chaos -- --ignored`.
mod large {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore]
    async fn sqlite_2000_payments() {
        chaos_run(Kind::Sqlite, 2_000, 42).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore]
    async fn postgres_2000_payments() {
        if common::postgres_base_url().is_none() {
            return;
        }
        chaos_run(Kind::Postgres, 2_000, 42).await;
    }
}
