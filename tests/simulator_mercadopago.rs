//! `oncehook simulate --provider mercadopago` (the real binary) into a real oncehook
//! server, both databases: the simulator's orders as Mercado Pago payments (Pix paid or
//! expired, boletos, cards with declined attempts, full and partial refunds, chargebacks),
//! announced by signed thin notifications that the receiver completes through the
//! simulator's `GET /v1/payments/{id}`. Once the run and the processor are done, every
//! order equals the simulator's truth: status, money paid, refunded and disputed, its facts
//! and the ledger's money per kind, in BRL centavos.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::truth::{held_orders, HeldOrder};
use common::{Kind, TestApp};
use oncehook::config::ProviderSettings;
use oncehook::signature::SchemeKind;
use oncehook::simulator::truth::Truth;
use sqlx::Row;

const MP_SECRET: &str = "mp-simulated-webhook-secret";
const MP_TOKEN: &str = "APP_USR-simulated-access-token";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn simulate(app: &TestApp, api_port: u16, scenario: &str, orders: usize, seed: u64) -> Truth {
    let dir = tempfile::tempdir().unwrap();
    let truth_file = dir.path().join("truth.json");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args([
            "simulate",
            "--provider",
            "mercadopago",
            "--scenario",
            scenario,
        ])
        .args(["--api-listen", &format!("127.0.0.1:{api_port}")])
        .args(["--api-key", MP_TOKEN])
        // Mercado Pago notifies each change as it happens: the run's weeks pass in seconds,
        // so most notifications are fetched before the next change of their payment.
        .args(["--duration", "8"])
        .args(["--orders", &orders.to_string(), "--seed", &seed.to_string()])
        .arg("--target")
        .arg(format!("{}/webhooks/mercadopago", app.url))
        .arg("--truth")
        .arg(&truth_file)
        .env("ONCEHOOK_SIMULATE_SECRET", MP_SECRET)
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
    eprintln!("{stdout}");
    serde_json::from_slice(&std::fs::read(&truth_file).unwrap()).unwrap()
}

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

async fn spawn(kind: Kind, api_port: u16) -> TestApp {
    TestApp::spawn_with(kind, |s| {
        s.outbox.relay.enabled = false;
        s.processor.retry.base_ms = 20;
        s.processor.retry.cap_ms = 400;
        s.processor.retry.max_attempts = 14;
        let mut mp = ProviderSettings {
            name: "mercadopago".into(),
            scheme: SchemeKind::MercadoPago,
            secrets: vec![MP_SECRET.into()],
            tolerance_secs: 300,
            mapping: None,
            events: Default::default(),
            api: Default::default(),
            signature: None,
        };
        mp.api.base = format!("http://127.0.0.1:{api_port}");
        mp.api.key = Some(MP_TOKEN.into());
        mp.api.rate_per_sec = 2_000.0;
        mp.api.retry.base_ms = 10;
        mp.api.retry.cap_ms = 100;
        mp.api.retry.max_attempts = 6;
        mp.api.retry.max_retry_after_ms = 100;
        s.providers.push(mp);
    })
    .await
}

/// Runs `scenario` and compares every order oncehook holds with the truth.
async fn run_and_compare(kind: Kind, scenario: &str, orders: usize, seed: u64) -> Truth {
    let api_port = free_port();
    let app = spawn(kind, api_port).await;
    let truth = simulate(&app, api_port, scenario, orders, seed).await;
    drained(&app).await;
    assert_eq!(truth.orders.len() as f64, truth.totals.orders as f64);
    assert!(truth.totals.paid > 0 && truth.totals.refunded > 0 && truth.totals.disputed > 0);

    let seen = held_orders(&app.db).await;
    let mut wrong = Vec::new();
    for o in truth.orders.iter().filter(|o| o.complete) {
        let expected = HeldOrder::expected(o);
        if seen.get(&o.order_id) != Some(&expected) {
            wrong.push(format!(
                "{}: truth {expected:?}\n  oncehook {:?}",
                o.order_id,
                seen.get(&o.order_id)
            ));
        }
    }
    let incomplete_equal = truth
        .orders
        .iter()
        .filter(|o| !o.complete && seen.get(&o.order_id) == Some(&HeldOrder::expected(o)))
        .count();
    assert!(
        wrong.is_empty(),
        "{} of {} complete orders differ from the truth:\n{}",
        wrong.len(),
        truth.complete_orders,
        wrong[..wrong.len().min(5)].join("\n")
    );
    assert!(
        seen.keys()
            .all(|id| truth.orders.iter().any(|o| &o.order_id == id)),
        "oncehook knows no order the simulator did not make"
    );
    // The money of every complete order, in the ledger, per kind.
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
    let (mut paid, mut refunded, mut disputed) = (0, 0, 0);
    for o in truth.orders.iter().filter(|o| o.complete) {
        assert_eq!(
            ledger.get(&o.order_id).copied().unwrap_or_default(),
            (o.paid, o.refunded, o.disputed),
            "{}: the ledger's money per kind",
            o.order_id
        );
        paid += o.paid;
        refunded += o.refunded;
        disputed += o.disputed;
    }
    eprintln!(
        "{kind:?} {scenario}: {} orders: {} complete, equal to the truth, and {incomplete_equal} of the incomplete equal too: paid {paid}, refunded {refunded}, disputed {disputed} centavos; {} notifications generated, {} delivered, API {} requests ({} 429, {} 5xx)",
        truth.orders.len(),
        truth.complete_orders,
        truth.events.generated,
        truth.sent.delivered,
        truth.api.requests,
        truth.api.answered_429,
        truth.api.answered_5xx,
    );
    app.shutdown().await;
    truth
}

/// Everyday traffic: every order's Mercado Pago payments end in oncehook as they are.
async fn a_mercado_pago_run_ends_equal_to_the_truth(kind: Kind) {
    let truth = run_and_compare(kind, "steady", 300, 20_261_207).await;
    let statuses = &truth.totals.by_status;
    for s in [
        "paid",
        "refunded",
        "partially_refunded",
        "disputed",
        "failed",
        "canceled",
    ] {
        assert!(
            statuses.get(s).copied().unwrap_or(0) > 0,
            "{s}: {statuses:?}"
        );
    }
    assert_eq!(truth.incomplete_orders, 0, "nothing lost in a steady run");
}

/// A seeded chaos run: duplicates, reordering, delays, resends, notifications dropped and
/// changes never announced, the payments API answering 429 and 5xx. Every order whose
/// final statuses were announced by a delivered notification equals the truth, money
/// included, and so do most of the others: a later notification of the same payment
/// fetches everything a lost one would have.
async fn a_seeded_mercado_pago_chaos_run_ends_equal_to_the_truth(kind: Kind) {
    let truth = run_and_compare(kind, "chaos", 300, 20_261_208).await;
    let s = &truth.sent;
    assert!(
        s.duplicates > 0 && s.delayed > 0 && s.resends > 0 && s.dropped > 0,
        "{s:?}"
    );
    assert!(truth.events.never_generated > 0, "{:?}", truth.events);
    assert!(
        truth.api.answered_429 > 0 && truth.api.answered_5xx > 0,
        "{:?}",
        truth.api
    );
    assert!(truth.complete_orders > truth.orders.len() * 9 / 10);
}

both!(
    a_mercado_pago_run_ends_equal_to_the_truth,
    a_seeded_mercado_pago_chaos_run_ends_equal_to_the_truth
);
