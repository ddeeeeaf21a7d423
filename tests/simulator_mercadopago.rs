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
use oncehook::provider::signature::SchemeKind;
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

/// The simulator's client, as oncehook's relay uses it.
fn mp_client(api_port: u16) -> oncehook::provider::api::ApiClient {
    let mut api = oncehook::config::ProviderApiSettings {
        base: format!("http://127.0.0.1:{api_port}"),
        key: Some(MP_TOKEN.into()),
        rate_per_sec: 1_000.0,
        ..Default::default()
    };
    api.retry.max_attempts = 1;
    oncehook::provider::api::ApiClient::new(&api)
        .unwrap()
        .for_mercadopago()
}

async fn mp_payment(api_port: u16, id: &str) -> serde_json::Value {
    reqwest::Client::new()
        .get(format!("http://127.0.0.1:{api_port}/v1/payments/{id}"))
        .bearer_auth(MP_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn order_money(app: &TestApp, order: &str) -> (String, i64, i64) {
    let r =
        sqlx::query("SELECT status, amount_paid, amount_refunded FROM orders WHERE order_id = $1")
            .bind(order)
            .fetch_one(app.db.reader())
            .await
            .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

/// The commands' states once the first `n` are confirmed (bounded wait).
async fn confirmed(app: &TestApp, n: usize) -> Vec<String> {
    let mut states = vec![];
    for _ in 0..200 {
        states = sqlx::query_scalar::<_, String>("SELECT state FROM provider_commands ORDER BY id")
            .fetch_all(app.db.reader())
            .await
            .unwrap();
        if states.len() >= n && states[..n].iter().all(|s| s == "confirmed") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    states
}

/// Refunds through Mercado Pago's API: an operator's partial then full refund of a paid
/// order go out through the relay as `POST /v1/payments/{id}/refunds` under the command's
/// `X-Idempotency-Key`, the simulator makes each once, and its notification brings the
/// refund back into the order (BRL centavos); the same key again replays the same refund
/// (a lost answer retried makes one refund), and more than is left is refused.
async fn refunds_go_to_mercado_pagos_api_once(kind: Kind) {
    use app::backend::{AdminBackend, Operator, RefundRequest, Role};
    let api_port = free_port();
    let app = TestApp::spawn_with(kind, |s| {
        s.outbox.relay.poll_interval_ms = 50;
        s.processor.retry.base_ms = 20;
        s.processor.retry.cap_ms = 200;
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
        mp.api.rate_per_sec = 1_000.0;
        mp.api.retry.base_ms = 10;
        mp.api.retry.cap_ms = 100;
        s.providers.push(mp);
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let truth_file = dir.path().join("truth.json");
    let mut sim = tokio::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args(["simulate", "--provider", "mercadopago", "--keep-serving"])
        .args(["--api-listen", &format!("127.0.0.1:{api_port}")])
        .args(["--api-key", MP_TOKEN, "--duration", "2", "--orders", "40"])
        .args(["--seed", "45"])
        .arg("--target")
        .arg(format!("{}/webhooks/mercadopago", app.url))
        .arg("--truth")
        .arg(&truth_file)
        .env("ONCEHOOK_SIMULATE_SECRET", MP_SECRET)
        .env_remove("ONCEHOOK_CONFIG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for _ in 0..600 {
        if std::fs::metadata(&truth_file).is_ok_and(|m| m.len() > 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let truth: Truth = serde_json::from_slice(&std::fs::read(&truth_file).unwrap()).unwrap();
    drained(&app).await;
    let order = truth
        .orders
        .iter()
        .find(|o| {
            o.status == "paid" && o.payments.iter().filter(|p| p.amount_received > 0).count() == 1
        })
        .expect("a paid order");
    let payment = order
        .payments
        .iter()
        .find(|p| p.amount_received > 0)
        .unwrap();
    assert_eq!(
        order_money(&app, &order.order_id).await,
        ("paid".into(), order.paid, 0)
    );

    let operator = app.acting::<Operator>("olga", Role::Operator).await;
    let ask = |amount: Option<i64>| {
        let (backend, operator, order_id) =
            (app.backend(), operator.clone(), order.order_id.clone());
        async move {
            backend
                .request_refund(
                    &operator,
                    &order_id,
                    RefundRequest {
                        amount,
                        reason: "devolução".into(),
                    },
                )
                .await
        }
    };
    let wait_refunded = |want: i64| {
        let app = &app;
        let order_id = order.order_id.clone();
        async move {
            for _ in 0..200 {
                if order_money(app, &order_id).await.2 == want {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let ledger: Vec<(String, String, i64, i64)> = sqlx::query_as(
                "SELECT entry, external_ref, amount, counted FROM order_ledger WHERE order_id = $1",
            )
            .bind(&order_id)
            .fetch_all(app.db.reader())
            .await
            .unwrap();
            let facts: Vec<(String, String, String, Option<i64>)> = sqlx::query_as(
                "SELECT kind, resource_id, state, amount FROM order_facts WHERE order_id = $1",
            )
            .bind(&order_id)
            .fetch_all(app.db.reader())
            .await
            .unwrap();
            panic!(
                "{order_id}: refunded never reached {want}: {:?}\nledger {ledger:?}\nfacts {facts:?}",
                order_money(app, &order_id).await
            );
        }
    };
    // A partial refund of 12,34 reais, then the rest.
    ask(Some(1_234)).await.unwrap();
    wait_refunded(1_234).await;
    let p = mp_payment(api_port, &payment.id).await;
    assert_eq!(p["refunds"].as_array().unwrap().len(), 1, "{p}");
    assert_eq!(p["transaction_amount_refunded"], serde_json::json!(12.34));
    assert_eq!(p["status_detail"], "partially_refunded");
    // Confirmed by its refund's own id, listed in the fetched payment; until then oncehook
    // holds the command's amount back from what is left.
    assert_eq!(confirmed(&app, 1).await, ["confirmed"]);
    let second = ask(None).await.unwrap();
    assert_eq!(second.amount, order.paid - 1_234, "the rest");
    wait_refunded(order.paid).await;
    assert_eq!(
        order_money(&app, &order.order_id).await,
        ("refunded".into(), order.paid, order.paid)
    );
    let p = mp_payment(api_port, &payment.id).await;
    assert_eq!(p["status"], "refunded");
    assert_eq!(
        p["refunds"].as_array().unwrap().len(),
        2,
        "one refund per command: {p}"
    );
    let keys: Vec<String> = sqlx::query_scalar(
        "SELECT o.idempotency_key FROM provider_commands c JOIN outbox o ON o.id = c.outbox_id ORDER BY c.id",
    )
    .fetch_all(app.db.reader())
    .await
    .unwrap();
    assert_eq!(keys.len(), 2);
    assert_eq!(confirmed(&app, 2).await, ["confirmed", "confirmed"]);
    // The relay's retry of the first command, as after a lost answer: the same refund.
    let client = mp_client(api_port);
    let replay = client
        .mercadopago_refund_once(&payment.id, Some(1_234), &keys[0])
        .await
        .unwrap();
    assert_eq!(replay["id"], p["refunds"][0]["id"]);
    assert_eq!(
        mp_payment(api_port, &payment.id).await["refunds"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // Another paid order: more than is left is refused, permanently, and makes nothing.
    let other = truth
        .orders
        .iter()
        .find(|o| {
            o.order_id != order.order_id
                && o.status == "paid"
                && o.payments.iter().filter(|p| p.amount_received > 0).count() == 1
        })
        .expect("a second paid order");
    let other_payment = other
        .payments
        .iter()
        .find(|p| p.amount_received > 0)
        .unwrap();
    let (refused, _) = client
        .mercadopago_refund_once(&other_payment.id, Some(other.paid + 1), "key-too-much")
        .await
        .unwrap_err();
    assert_eq!(refused.status(), Some(400), "{refused}");
    assert!(!refused.is_transient());
    assert!(mp_payment(api_port, &other_payment.id).await["refunds"]
        .as_array()
        .unwrap()
        .is_empty());
    // Mercado Pago's API only: its notifications are no Stripe events list.
    let stripe_events = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{api_port}/v1/events"))
        .bearer_auth(MP_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(stripe_events.status(), 404);
    sim.kill().await.unwrap();
    app.shutdown().await;
}

both!(
    a_mercado_pago_run_ends_equal_to_the_truth,
    a_seeded_mercado_pago_chaos_run_ends_equal_to_the_truth,
    refunds_go_to_mercado_pagos_api_once
);
