//! Reconciliation of a Mercado Pago provider against the simulator over real HTTP, both
//! databases: a seeded chaos run whose notifications are often dropped for good (orders
//! missing entirely, payments stuck in an old state) ends, after one reconciliation run
//! through `GET /v1/payments/search`, with every order equal to the simulator's truth in
//! status, facts and ledger money; a second run changes nothing; every notification sent
//! again afterwards counts nothing twice. Then the search's edges: an empty window, and a
//! provider that refuses the search (a 4xx ends the run `failed`, saying why, having
//! changed nothing).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::truth::{held_orders, HeldOrder};
use common::{snapshot, Kind, TestApp};
use oncehook::config::{ProviderSettings, Providers, Settings};
use oncehook::domain::retry::RetryPolicy;
use oncehook::pipeline::alerts::Alerter;
use oncehook::provider::signature::SchemeKind;
use oncehook::reconcile::{Options, Reconciler, Report};
use oncehook::simulator::run::{Options as SimOptions, Simulation};
use oncehook::simulator::scenario::Scenario;
use oncehook::simulator::sender::Target;
use oncehook::simulator::truth::Truth;
use oncehook::simulator::{ApiFaults, Provider};
use sqlx::Row;

const MP_SECRET: &str = "mp-reconcile-webhook-secret";
const MP_TOKEN: &str = "APP_USR-reconcile-access-token";

async fn listen() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (listener, url)
}

/// A seeded Mercado Pago run into `target`, its API served on `listener` meanwhile (the
/// receiver fetches every notification's payment from it) and after.
async fn simulate(
    listener: tokio::net::TcpListener,
    orders: usize,
    seed: u64,
    drop: f64,
    target: Option<String>,
) -> Arc<Simulation> {
    let mut scenario = Scenario::builtin("chaos").unwrap();
    scenario.faults.drop = drop;
    scenario.api = ApiFaults {
        rate_429: 0.04,
        rate_5xx: 0.04,
        retry_after_secs: 0,
        ..ApiFaults::default()
    };
    let sim = Arc::new(
        Simulation::new(SimOptions {
            seed,
            orders,
            // Changes happen over real seconds, so notifications fetch payments in
            // between states (a partial refund before the next).
            duration: Duration::from_secs(if orders > 0 { 4 } else { 0 }),
            scenario_name: "chaos".into(),
            scenario,
            start: None,
            database: "sqlite::memory:".into(),
            api_key: MP_TOKEN.into(),
            target: target.map(|url| Target {
                url,
                scheme: SchemeKind::MercadoPago,
                secret: MP_SECRET.into(),
            }),
            provider: Provider::MercadoPago,
        })
        .await
        .unwrap(),
    );
    tokio::spawn(oncehook::simulator::serve_api(
        sim.shared.clone(),
        listener,
        std::future::pending(),
    ));
    sim.run(&|_, _| {}).await.unwrap();
    sim
}

fn with_mercadopago(s: &mut Settings, url: &str) {
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
    mp.api.base = url.into();
    mp.api.key = Some(MP_TOKEN.into());
    mp.api.rate_per_sec = 5_000.0;
    mp.api.timeout_ms = 5_000;
    mp.api.retry = RetryPolicy {
        base_ms: 5,
        cap_ms: 50,
        max_attempts: 10,
        max_retry_after_ms: 1_000,
    };
    s.providers.push(mp);
    s.reconcile.interval = oncehook::reconcile::Interval::parse("0").unwrap();
    s.reconcile.settle_secs = 60;
    s.outbox.relay.enabled = false;
    s.processor.retry.base_ms = 20;
    s.processor.retry.cap_ms = 400;
    s.processor.retry.max_attempts = 14;
}

fn reconciler(app: &TestApp) -> Reconciler {
    Reconciler {
        db: app.db.clone(),
        settings: Arc::new(app.settings.reconcile_scope()),
        providers: Arc::new(Providers::build(&app.settings.providers).unwrap()),
        alerter: Alerter::log_only(),
    }
}

async fn reconcile(r: &Reconciler, dry_run: bool) -> Report {
    r.run(
        &Options {
            provider: "mercadopago".into(),
            dry_run,
            source: "cli",
            ..Default::default()
        },
        Default::default(),
        &|_| {},
    )
    .await
    .unwrap()
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

/// The ledger's money per order: (paid, refunded, disputed).
async fn ledger(db: &oncehook::store::Db) -> BTreeMap<String, (i64, i64, i64)> {
    let mut ledger: BTreeMap<String, (i64, i64, i64)> = BTreeMap::new();
    for r in sqlx::query("SELECT order_id, entry, counted FROM order_ledger")
        .fetch_all(db.reader())
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
    ledger
}

/// The orders of the truth that oncehook holds otherwise (status, totals, facts, ledger),
/// and how many of them it does not hold at all.
async fn differing(db: &oncehook::store::Db, truth: &Truth) -> (Vec<String>, usize) {
    let seen = held_orders(db).await;
    let ledger = ledger(db).await;
    let (mut wrong, mut missing) = (Vec::new(), 0);
    for o in &truth.orders {
        // An order whose payments only ever waited (a Pix QR code still pending) has no
        // fact: no order for oncehook either.
        if o.facts.is_empty() && !seen.contains_key(&o.order_id) {
            continue;
        }
        let expected = HeldOrder::expected(o);
        match seen.get(&o.order_id) {
            None => {
                missing += 1;
                wrong.push(format!("{}: missing (truth {expected:?})", o.order_id));
            }
            Some(held) if held != &expected => wrong.push(format!(
                "{}: truth {expected:?}\n  oncehook {held:?}",
                o.order_id
            )),
            Some(_) => {
                let money = ledger.get(&o.order_id).copied().unwrap_or_default();
                if money != (o.paid, o.refunded, o.disputed) {
                    wrong.push(format!(
                        "{}: the ledger holds {money:?}, the truth ({}, {}, {})",
                        o.order_id, o.paid, o.refunded, o.disputed
                    ));
                }
            }
        }
    }
    (wrong, missing)
}

/// Money in the ledger over all orders against the truth's totals.
async fn totals(db: &oncehook::store::Db) -> (i64, i64, i64) {
    ledger(db)
        .await
        .values()
        .fold((0, 0, 0), |t, m| (t.0 + m.0, t.1 + m.1, t.2 + m.2))
}

async fn chaos_then_reconcile(kind: Kind) {
    let (listener, url) = listen().await;
    let app = TestApp::spawn_with(kind, |s| with_mercadopago(s, &url)).await;
    let sim = simulate(
        listener,
        300,
        20_261_245,
        0.3,
        Some(format!("{}/webhooks/mercadopago", app.url)),
    )
    .await;
    drained(&app).await;
    let truth = sim.truth().await.unwrap();
    let want = (
        truth.totals.paid,
        truth.totals.refunded,
        truth.totals.disputed,
    );
    assert!(truth.sent.dropped > 0 && truth.events.never_generated > 0);
    assert!(want.0 > 0 && want.1 > 0 && want.2 > 0, "{want:?}");
    let (before, missing) = differing(&app.db, &truth).await;
    let money_before = totals(&app.db).await;
    eprintln!(
        "{kind:?}: before reconciliation {} of {} orders differ from the truth ({missing} missing entirely); ledger {money_before:?}, truth {want:?} (paid, refunded, disputed centavos); {} notifications generated, {} dropped, {} never generated",
        before.len(),
        truth.orders.len(),
        truth.events.generated,
        truth.sent.dropped,
        truth.events.never_generated,
    );
    assert!(missing > 0, "the chaos lost whole orders to reconcile");
    assert_ne!(money_before, want);

    // A dry run finds what differs and changes nothing.
    let r = reconciler(&app);
    let state = snapshot(&app.db).await;
    let dry = reconcile(&r, true).await;
    assert_eq!(dry.status, "succeeded", "{:?}", dry.error);
    assert!(dry.counts.diffs_found > 0 && dry.counts.fixed == 0);
    assert_eq!(snapshot(&app.db).await, state);
    assert_eq!(
        app.count("SELECT COUNT(*) FROM reconciliation_diffs").await,
        0
    );

    let first = reconcile(&r, false).await;
    assert_eq!(first.status, "succeeded", "{:?}", first.error);
    drained(&app).await;
    let (after, _) = differing(&app.db, &truth).await;
    assert!(
        after.is_empty(),
        "{} orders still differ after one reconciliation run ({} differed before):\n{}\nrun: {:?}",
        after.len(),
        before.len(),
        after[..after.len().min(5)].join("\n"),
        first.diffs.iter().take(10).collect::<Vec<_>>()
    );
    assert_eq!(
        totals(&app.db).await,
        want,
        "the ledger's money equals the truth's"
    );
    let kinds: Vec<&str> = first.diffs.iter().map(|d| d.kind.as_str()).collect();
    assert!(kinds.iter().all(|k| *k == "missing_fact"), "{kinds:?}");
    assert!(first.counts.fixed > 0 && first.counts.objects_compared > 0);
    // One call a page of 100: more than one page.
    assert!(first.counts.api_calls > 1, "{:?}", first.counts);
    assert_eq!(
        app.count(
            "SELECT COUNT(*) FROM reconciliation_diffs WHERE state = 'open' AND kind = 'missing_fact'"
        )
        .await,
        0
    );
    // Each fix went in through the inbox, under the run's correlation id.
    let ingested = app
        .count("SELECT COUNT(*) FROM inbox_events WHERE correlation_id LIKE 'reconciliation:run-%'")
        .await;
    assert!(ingested >= first.counts.fixed, "{ingested}");
    let api = &truth.api;
    eprintln!(
        "{kind:?}: run {:?}: {} payment facts compared, {} API calls, {} diffs, {} fixed; after it every order equals the truth, ledger {:?}; simulator API {} requests ({} 429, {} 5xx) by then",
        first.run_id,
        first.counts.objects_compared,
        first.counts.api_calls,
        first.counts.diffs_found,
        first.counts.fixed,
        totals(&app.db).await,
        api.requests,
        api.answered_429,
        api.answered_5xx,
    );

    // A second run over the same window changes nothing and adds no diff.
    let state = snapshot(&app.db).await;
    let diffs = app.count("SELECT COUNT(*) FROM reconciliation_diffs").await;
    let second = reconcile(&r, false).await;
    assert_eq!(second.status, "succeeded", "{:?}", second.error);
    assert_eq!((second.counts.diffs_found, second.counts.fixed), (0, 0));
    drained(&app).await;
    assert_eq!(snapshot(&app.db).await, state);
    assert_eq!(
        app.count("SELECT COUNT(*) FROM reconciliation_diffs").await,
        diffs
    );

    // Every notification of the run sent again, late (the dropped ones included): each
    // fetches its payment as it is now, whose facts reconciliation brought already.
    let sender = sim.sender.as_ref().unwrap();
    let (events, _) = sim
        .shared
        .db
        .events(&oncehook::simulator::store::EventFilter {
            limit: 1_000_000,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!events.is_empty());
    for e in &events {
        sender.submit(&oncehook::simulator::engine::NewEvent {
            id: e.id.clone(),
            event_type: e.event_type.clone(),
            created: e.created,
            order_id: e.order_id.clone(),
            resource: e.resource.clone(),
            state: e.state.clone(),
            json: e.body.clone().into(),
        });
    }
    sender.drain().await;
    drained(&app).await;
    let late = snapshot(&app.db).await;
    assert_eq!(late.ledger, state.ledger, "a late notification moved money");
    assert_eq!(late.money, state.money);
    assert_eq!(late.facts, state.facts);
    assert!(differing(&app.db, &truth).await.0.is_empty());
    app.shutdown().await;
}

/// A window with no payment: one call, nothing found, the run succeeds.
async fn an_empty_window_is_one_call_and_no_diff(kind: Kind) {
    let (listener, url) = listen().await;
    let app = TestApp::spawn_with(kind, |s| with_mercadopago(s, &url)).await;
    let _sim = simulate(listener, 0, 7, 0.0, None).await;
    let report = reconcile(&reconciler(&app), false).await;
    assert_eq!(report.status, "succeeded", "{:?}", report.error);
    assert_eq!(
        (
            report.counts.api_calls,
            report.counts.objects_compared,
            report.counts.diffs_found
        ),
        (1, 0, 0)
    );
    app.shutdown().await;
}

/// A search Mercado Pago refuses (here: 400, its error object) ends the run `failed` with
/// the status and the provider's message, at once (no retry), having changed nothing.
async fn a_refused_search_fails_the_run_clearly(kind: Kind) {
    use axum::http::StatusCode;
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    let api = axum::Router::new().fallback(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        async {
            (
                StatusCode::BAD_REQUEST,
                axum::Json(serde_json::json!({"message": "Invalid sort value.", "error": "bad_request",
                    "status": 400, "cause": [{"code": 1003, "description": "Invalid sort value."}]})),
            )
        }
    });
    let (listener, url) = listen().await;
    tokio::spawn(async move { axum::serve(listener, api).await.unwrap() });
    let app = TestApp::spawn_with(kind, |s| with_mercadopago(s, &url)).await;
    let state = snapshot(&app.db).await;
    let report = reconcile(&reconciler(&app), false).await;
    assert_eq!(report.status, "failed");
    let error = report.error.unwrap();
    assert!(
        error.contains("400 bad_request (1003): Invalid sort value."),
        "{error}"
    );
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "a 4xx is not retried"
    );
    assert_eq!(snapshot(&app.db).await, state);
    assert_eq!(
        app.count("SELECT COUNT(*) FROM reconciliation_runs WHERE status = 'failed'")
            .await,
        1
    );
    app.shutdown().await;
}

both!(
    chaos_then_reconcile,
    an_empty_window_is_one_call_and_no_diff,
    a_refused_search_fails_the_run_clearly
);
