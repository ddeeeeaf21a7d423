//! Reconciliation against the simulator over real HTTP, both databases: a seeded chaos run
//! with dropped and never-generated events ends, after one reconciliation run, with every
//! order equal to the simulator's truth; a second run changes nothing; late webhooks after
//! the fixes count nothing twice; 429 storms are waited out; bad answers end the run
//! `failed` with its reason, having changed nothing.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::truth::{held_orders, HeldOrder};
use common::{snapshot, Kind, TestApp, STRIPE_SECRET};
use oncehook::config::{Providers, Settings};
use oncehook::domain::retry::RetryPolicy;
use oncehook::pipeline::alerts::Alerter;
use oncehook::provider::signature::SchemeKind;
use oncehook::reconcile::{Options, Reconciler, Report};
use oncehook::simulator::run::{Options as SimOptions, Simulation};
use oncehook::simulator::scenario::Scenario;
use oncehook::simulator::sender::Target;
use oncehook::simulator::truth::Truth;
use oncehook::simulator::ApiFaults;
use sqlx::Row;

const KEY: &str = "sk_test_reconcileKEY0123456789";

struct Sim {
    sim: Arc<Simulation>,
    url: String,
}

/// A simulator whose API listens now (its URL goes into oncehook's config before the run).
async fn listen() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (listener, url)
}

/// Runs a seeded scenario into `target` and serves its API on `listener`.
async fn simulate(
    listener: tokio::net::TcpListener,
    url: String,
    scenario_name: &str,
    orders: usize,
    seed: u64,
    api: ApiFaults,
    target: Option<String>,
) -> Sim {
    let mut scenario = Scenario::builtin(scenario_name).unwrap();
    scenario.api = api;
    let sim = Simulation::new(SimOptions {
        seed,
        orders,
        duration: Duration::ZERO,
        scenario_name: scenario_name.into(),
        scenario,
        start: None,
        database: "sqlite::memory:".into(),
        api_key: KEY.into(),
        target: target.map(|url| Target {
            url,
            scheme: SchemeKind::Stripe,
            secret: STRIPE_SECRET.into(),
        }),
        provider: Default::default(),
    })
    .await
    .unwrap();
    sim.run(&|_, _| {}).await.unwrap();
    let sim = Arc::new(sim);
    tokio::spawn(oncehook::simulator::serve_api(
        sim.shared.clone(),
        listener,
        std::future::pending(),
    ));
    Sim { sim, url }
}

/// oncehook's stripe provider talking to the API at `url`.
fn with_api(s: &mut Settings, url: &str) {
    let p = &mut s.providers[0];
    p.api.base = url.into();
    p.api.key = Some(KEY.into());
    p.api.rate_per_sec = 10_000.0;
    p.api.timeout_ms = 5_000;
    p.api.retry = RetryPolicy {
        base_ms: 5,
        cap_ms: 50,
        max_attempts: 10,
        max_retry_after_ms: 5_000,
    };
    // Tests drive the runs themselves.
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
            provider: "stripe".into(),
            since: None,
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

/// Every order of the truth as oncehook holds it, and the ledger's money per kind.
async fn differing(db: &oncehook::store::Db, truth: &Truth) -> Vec<String> {
    let seen = held_orders(db).await;
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
    let mut wrong = Vec::new();
    for o in &truth.orders {
        let expected = HeldOrder::expected(o);
        // An order that never had a fact (opened, nobody paid) is no order for oncehook.
        if o.facts.is_empty() && !seen.contains_key(&o.order_id) {
            continue;
        }
        if seen.get(&o.order_id) != Some(&expected) {
            wrong.push(format!(
                "{}: truth {expected:?}\n  oncehook {:?}",
                o.order_id,
                seen.get(&o.order_id)
            ));
        } else if ledger.get(&o.order_id).copied().unwrap_or_default()
            != (o.paid, o.refunded, o.disputed)
        {
            wrong.push(format!("{}: the ledger's money differs", o.order_id));
        }
    }
    wrong
}

/// The webhook the provider would have sent for a fixed object's state, posted late.
async fn post_late_webhooks(app: &TestApp, sim_url: &str, fixed: &[(String, String)]) -> usize {
    let http = reqwest::Client::new();
    let mut posted = 0;
    for (n, (object_id, _)) in fixed.iter().enumerate() {
        let (path, event_type) = if object_id.starts_with("pi_") {
            ("payment_intents", "payment_intent.succeeded")
        } else if object_id.starts_with("re_") {
            ("refunds", "refund.updated")
        } else {
            ("disputes", "charge.dispute.closed")
        };
        let object: serde_json::Value = http
            .get(format!("{sim_url}/v1/{path}/{object_id}"))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if path == "payment_intents" && object["status"] != "succeeded" {
            continue;
        }
        if path == "disputes" && !matches!(object["status"].as_str(), Some("won" | "lost")) {
            continue;
        }
        let body = serde_json::json!({
            "id": format!("evt_late_{n}"), "object": "event", "api_version": "2025-03-31.basil",
            "created": common::now_secs(), "type": event_type, "data": {"object": object},
        });
        assert_eq!(app.post_stripe(&body).await.status(), 200);
        posted += 1;
    }
    posted
}

async fn chaos_then_reconcile(kind: Kind) {
    let (listener, url) = listen().await;
    let app = TestApp::spawn_with(kind, |s| with_api(s, &url)).await;
    let api = ApiFaults {
        rate_429: 0.05,
        rate_5xx: 0.05,
        retry_after_secs: 0,
        ..ApiFaults::default()
    };
    let sim = simulate(
        listener,
        url.clone(),
        "chaos",
        300,
        20_261_201,
        api,
        Some(format!("{}/webhooks/stripe", app.url)),
    )
    .await;
    drained(&app).await;
    let truth = sim.sim.truth().await.unwrap();
    assert!(truth.sent.dropped > 0 && truth.events.never_generated > 0);
    let before = differing(&app.db, &truth).await;
    assert!(!before.is_empty(), "the chaos lost something to reconcile");

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
    let after = differing(&app.db, &truth).await;
    assert!(
        after.is_empty(),
        "{} orders still differ after one reconciliation run ({} differed before):\n{}\nrun: {:?}",
        after.len(),
        before.len(),
        after[..after.len().min(5)].join("\n"),
        first.diffs.iter().take(10).collect::<Vec<_>>()
    );
    let kinds: Vec<&str> = first.diffs.iter().map(|d| d.kind.as_str()).collect();
    assert!(kinds.contains(&"missing_event"), "{kinds:?}");
    assert!(kinds.contains(&"missing_fact"), "{kinds:?}");
    assert!(first.counts.fixed > 0 && first.counts.api_calls > 0);
    // Every fix is on its diff; automatic kinds are all fixed.
    let open_auto = app
        .count(
            "SELECT COUNT(*) FROM reconciliation_diffs WHERE state = 'open' \
             AND kind IN ('missing_event', 'missing_fact')",
        )
        .await;
    assert_eq!(open_auto, 0);
    // The flaky API answered 429 and 5xx; the run waited them out.
    assert!(oncehook::simulator::ApiStats::get(&sim.sim.shared.stats.api_429) > 0);

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

    // Late webhooks for what was fixed from the objects count nothing twice.
    let fixed: Vec<(String, String)> = sqlx::query(
        "SELECT object_id, subject FROM reconciliation_diffs WHERE kind = 'missing_fact' \
         AND state = 'fixed' ORDER BY id",
    )
    .fetch_all(app.db.reader())
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    let money = snapshot(&app.db).await;
    let posted = post_late_webhooks(&app, &sim.url, &fixed).await;
    assert!(posted > 0, "no late webhook to post for {fixed:?}");
    drained(&app).await;
    let late = snapshot(&app.db).await;
    assert_eq!(late.ledger, money.ledger, "a late webhook moved money");
    assert_eq!(late.money, money.money);
    assert_eq!(late.facts, money.facts);
    assert!(differing(&app.db, &truth).await.is_empty());
    app.shutdown().await;
}

/// A storm of 429s (with `Retry-After`) is waited out: the run succeeds, slower.
async fn a_429_storm_is_honoured(kind: Kind) {
    let (listener, url) = listen().await;
    let app = TestApp::spawn_with(kind, |s| {
        with_api(s, &url);
        s.providers[0].api.retry.max_attempts = 30;
    })
    .await;
    let api = ApiFaults {
        rate_429: 0.5,
        retry_after_secs: 1,
        ..ApiFaults::default()
    };
    let sim = simulate(listener, url, "steady", 5, 3, api, None).await;
    let started = std::time::Instant::now();
    let report = reconcile(&reconciler(&app), false).await;
    assert_eq!(report.status, "succeeded", "{:?}", report.error);
    let stats = &sim.sim.shared.stats;
    let answered_429 = oncehook::simulator::ApiStats::get(&stats.api_429);
    assert!(answered_429 > 0);
    // Each 429 said "Retry-After: 1": the client waited at least that per refusal in a row.
    assert!(started.elapsed() >= Duration::from_secs(1));
    // Nothing was delivered: every event is a missing one, fetched and ingested.
    assert!(report.counts.fixed > 0);
    drained(&app).await;
    app.shutdown().await;
}

/// A provider API that answers badly, served by a test server.
#[derive(Clone, Copy, Debug)]
enum Bad {
    Html,
    Truncated,
    MissingFields,
    TooLarge,
    Unauthorized,
}

async fn bad_api(bad: Bad) -> String {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let (listener, url) = listen().await;
    let app = axum::Router::new().fallback(move || async move {
        let event = |n: usize| {
            serde_json::json!({"id": format!("evt_bad_{n}"), "object": "event", "type": "payment_intent.succeeded",
                "api_version": "2025-03-31.basil", "created": common::now_secs() - 60,
                "data": {"object": {"id": format!("pi_bad_{n}"), "object": "payment_intent", "amount": 100,
                    "amount_received": 100, "currency": "usd", "status": "succeeded",
                    "metadata": {"order_id": format!("ord_bad_{n}")}}}})
        };
        match bad {
            Bad::Html => (
                StatusCode::OK,
                [("content-type", "text/html")],
                "<html><body>502 Bad Gateway</body></html>".to_string(),
            )
                .into_response(),
            Bad::Truncated => {
                let body = serde_json::json!({"object": "list", "data": [event(1)], "has_more": false})
                    .to_string();
                (StatusCode::OK, body[..body.len() / 2].to_string()).into_response()
            }
            Bad::MissingFields => {
                let mut e = event(1);
                e["data"]["object"].as_object_mut().unwrap().remove("id");
                axum::Json(serde_json::json!({"object": "list", "data": [e], "has_more": false}))
                    .into_response()
            }
            Bad::TooLarge => axum::Json(serde_json::json!({"object": "list",
                "data": (0..150).map(event).collect::<Vec<_>>(), "has_more": false}))
            .into_response(),
            Bad::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                axum::Json(serde_json::json!({"error": {"type": "invalid_request_error",
                    "message": "Invalid API Key provided: sk_test_****"}})),
            )
                .into_response(),
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// An alert receiver: the bodies posted to it.
async fn alert_sink() -> (String, Arc<Mutex<Vec<String>>>) {
    let got: Arc<Mutex<Vec<String>>> = Arc::default();
    let (listener, url) = listen().await;
    let store = got.clone();
    let app = axum::Router::new().fallback(move |body: String| {
        let store = store.clone();
        async move {
            store.lock().unwrap().push(body);
            "ok"
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, got)
}

async fn bad_answers_fail_the_run_and_change_nothing(kind: Kind) {
    for (bad, says) in [
        (Bad::Html, "unexpected answer"),
        (Bad::Truncated, "unexpected answer"),
        (Bad::MissingFields, "lacks what its mapping needs"),
        (
            Bad::TooLarge,
            "a page of 150 events where 100 were asked for",
        ),
        (Bad::Unauthorized, "401"),
    ] {
        let url = bad_api(bad).await;
        let app = TestApp::spawn_with(kind, |s| with_api(s, &url)).await;
        let (alerts_url, alerts) = alert_sink().await;
        let (alerter, task) = Alerter::start(oncehook::pipeline::alerts::AlertSettings {
            webhook_url: Some(alerts_url),
            min_interval_secs: 0,
        });
        let r = Reconciler {
            alerter,
            ..reconciler(&app)
        };
        let state = snapshot(&app.db).await;
        let report = reconcile(&r, false).await;
        assert_eq!(report.status, "failed", "{bad:?}");
        let error = report.error.clone().unwrap_or_default();
        assert!(error.contains(says), "{bad:?}: {error}");
        assert!(error.contains("compared 0 events"), "{bad:?}: {error}");
        // Never half a fix: nothing ingested, no diff, the checkpoint where it was.
        assert_eq!(snapshot(&app.db).await, state, "{bad:?}");
        assert_eq!(
            app.count("SELECT COUNT(*) FROM reconciliation_diffs").await,
            0
        );
        assert_eq!(
            app.count("SELECT COUNT(*) FROM reconciliation_checkpoints WHERE event_id IS NOT NULL")
                .await,
            0
        );
        let row = sqlx::query("SELECT status, error FROM reconciliation_runs WHERE id = $1")
            .bind(report.run_id.unwrap())
            .fetch_one(app.db.reader())
            .await
            .unwrap();
        assert_eq!(row.get::<String, _>(0), "failed");
        assert_eq!(
            row.get::<Option<String>, _>(1).as_deref(),
            Some(error.as_str())
        );
        // The key never shows in the reason.
        assert!(!error.contains(KEY));
        // An alert went out.
        drop(r);
        task.await.unwrap();
        let posted = alerts.lock().unwrap().clone();
        assert!(
            posted.iter().any(|b| b.contains("reconciliation")),
            "{bad:?}: alerts {posted:?}"
        );
        app.shutdown().await;
    }
}

/// With `reconcile.auto_fix = false` every diff waits for a person; a resolve needs a
/// reason and is audited.
async fn without_auto_fix_diffs_stay_open(kind: Kind) {
    let (listener, url) = listen().await;
    let app = TestApp::spawn_with(kind, |s| {
        with_api(s, &url);
        s.reconcile.auto_fix = false;
    })
    .await;
    let _sim = simulate(listener, url, "steady", 3, 5, ApiFaults::default(), None).await;
    let state = snapshot(&app.db).await;
    let report = reconcile(&reconciler(&app), false).await;
    assert_eq!(report.status, "succeeded", "{:?}", report.error);
    assert!(report.counts.diffs_found > 0);
    assert_eq!(report.counts.fixed, 0);
    assert_eq!(snapshot(&app.db).await, state, "nothing was ingested");
    // /metrics reads the open diffs and the last success from the database.
    let metrics = app.metrics().await;
    let gauge = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    assert_eq!(
        gauge("oncehook_reconciliation_open_diffs{kind=\"missing_event\"}"),
        Some(
            report.counts.diffs_found as f64
                - gauge("oncehook_reconciliation_open_diffs{kind=\"missing_fact\"}").unwrap_or(0.0)
        ),
        "{metrics}"
    );
    assert!(gauge("oncehook_reconciliation_last_success_age_seconds").is_some());
    assert!(metrics.contains("oncehook_reconciliation_runs_total"));
    // The same through /api/v1, as a script reads and acts.
    let viewer = app.token("script", "viewer").await;
    let operator = app.token("oncall", "operator").await;
    let get = |path: String, token: String| {
        let http = app.http.clone();
        let url = format!("{}{path}", app.url);
        async move {
            let r = http.get(url).bearer_auth(token).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.json::<serde_json::Value>().await.unwrap()
        }
    };
    let runs = get("/api/v1/reconciliation/runs".into(), viewer.clone()).await;
    assert_eq!(runs["runs"][0]["id"], report.run_id.unwrap());
    assert_eq!(runs["runs"][0]["status"], "succeeded");
    let open = runs["open"].as_array().unwrap();
    let total: i64 = open.iter().map(|k| k["count"].as_i64().unwrap()).sum();
    assert_eq!(total, report.counts.diffs_found);
    let missing_events = open
        .iter()
        .find(|k| k["kind"] == "missing_event")
        .map(|k| k["count"].as_i64().unwrap())
        .unwrap();
    let all = missing_events as usize;
    // Keyset pages of one: every diff once, newest first.
    let mut seen = Vec::new();
    let mut before = String::new();
    loop {
        let page = get(
            format!("/api/v1/reconciliation/diffs?state=open&kind=missing_event&limit=1{before}"),
            viewer.clone(),
        )
        .await;
        let diffs = page["diffs"].as_array().unwrap().clone();
        seen.extend(diffs.iter().map(|d| d["id"].as_i64().unwrap()));
        for d in &diffs {
            assert!(
                d["provider_event_id"].is_string() && d["detail"].is_string(),
                "{d}"
            );
        }
        match page["next_before"].as_i64() {
            Some(b) => before = format!("&before={b}"),
            None => break,
        }
    }
    seen.dedup();
    assert_eq!(seen.len(), all, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] > w[1]));
    let id = seen[0];
    let resolve = |token: String, body: serde_json::Value| {
        let http = app.http.clone();
        let url = format!("{}/api/v1/reconciliation/diffs/{id}/resolve", app.url);
        async move {
            http.post(url)
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(
        resolve(viewer.clone(), serde_json::json!({"reason": "x"})).await,
        403
    );
    assert_eq!(
        resolve(operator.clone(), serde_json::json!({"reason": " "})).await,
        422
    );
    assert_eq!(
        resolve(
            operator.clone(),
            serde_json::json!({"reason": "known test payment"})
        )
        .await,
        200
    );
    assert_eq!(
        resolve(operator.clone(), serde_json::json!({"reason": "again"})).await,
        422,
        "only an open diff is resolved"
    );
    let d = oncehook::store::reconcile::diff(&app.db, id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            d.state.as_str(),
            d.resolution.as_deref(),
            d.closed_by.as_deref()
        ),
        ("resolved", Some("known test payment"), Some("token:oncall"))
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM audit_log WHERE action = 'reconciliation.resolve'")
            .await,
        1
    );
    let doc: serde_json::Value = app
        .http
        .get(format!("{}/api/v1/openapi.json", app.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for path in [
        "/api/v1/reconciliation/runs",
        "/api/v1/reconciliation/diffs",
        "/api/v1/reconciliation/diffs/{id}/resolve",
    ] {
        assert!(
            doc["paths"].get(path).is_some(),
            "{path} in the OpenAPI document"
        );
    }
    app.shutdown().await;
}

/// Two instances asking at once: one runs, the other is told a run is under way.
async fn one_run_at_a_time(kind: Kind) {
    let (listener, url) = listen().await;
    let app = TestApp::spawn_with(kind, |s| {
        with_api(s, &url);
        // Slow enough that the first run still holds the lease when the second asks.
        s.providers[0].api.rate_per_sec = 20.0;
    })
    .await;
    let _sim = simulate(listener, url, "steady", 10, 9, ApiFaults::default(), None).await;
    let (a, b) = (reconciler(&app), reconciler(&app));
    let options = Options {
        provider: "stripe".into(),
        since: None,
        dry_run: false,
        source: "cli",
        ..Default::default()
    };
    let (x, y) = tokio::join!(
        a.run(&options, Default::default(), &|_| {}),
        b.run(&options, Default::default(), &|_| {})
    );
    let (ran, refused) = match (x, y) {
        (Ok(r), Err(e)) | (Err(e), Ok(r)) => (r, e),
        (x, y) => panic!(
            "exactly one run: {:?} / {:?}",
            x.map(|r| r.status),
            y.map(|r| r.status)
        ),
    };
    assert_eq!(ran.status, "succeeded", "{:?}", ran.error);
    let busy = refused
        .downcast_ref::<oncehook::reconcile::NotStarted>()
        .expect("refused as busy");
    assert!(
        busy.to_string().contains("another reconciliation"),
        "{busy}"
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM reconciliation_runs").await,
        1
    );
    // Once it ended, the lease is free again.
    assert_eq!(reconcile(&a, false).await.status, "succeeded");
    drained(&app).await;
    app.shutdown().await;
}

#[test]
fn reconcile_keys_load_from_toml() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("oncehook.toml");
    std::fs::write(
        &file,
        "[reconcile]\ninterval = \"5m\"\nauto_fix = false\noverlap_secs = 60\nretry_secs = 15\n",
    )
    .unwrap();
    let s = Settings::load(Some(&file), &Default::default()).unwrap();
    assert_eq!(s.reconcile.interval.0, Duration::from_secs(300));
    assert_eq!(s.reconcile.retry_secs, 15);
    assert!(!s.reconcile.auto_fix);
    assert_eq!(s.reconcile.overlap_secs, 60);
    // Each refusal names the key at fault.
    for (toml, key) in [
        ("interval = \"5 weeks\"", "interval"),
        ("page_size = 500", "reconcile.page_size"),
        ("retry_secs = 0", "reconcile.retry_secs"),
    ] {
        std::fs::write(&file, format!("[reconcile]\n{toml}\n")).unwrap();
        let e = Settings::load(Some(&file), &Default::default())
            .err()
            .unwrap_or_else(|| panic!("{toml} was accepted"))
            .to_string();
        assert!(e.contains(key), "{toml}: {e}");
    }
}

/// The `/reconciliation` page as people use it, with and without JavaScript (forms posted
/// as a browser does): run now, the open diffs grouped by kind, a one-click fix that
/// ingests the event through the inbox (the order appears, its story says "reconciled"), a
/// resolve with a reason in the history; a viewer sees no buttons and a forged form is
/// refused and audited; the overview counts the open diffs.
async fn the_page_runs_fixes_and_resolves(kind: Kind) {
    use app::api::{FixReconciliationDiff, ResolveReconciliationDiff, StartReconciliation};
    use app::backend::Role;
    use leptos::server_fn::ServerFn;
    let (listener, url) = listen().await;
    let app = TestApp::spawn_with(kind, |s| {
        with_api(s, &url);
        s.reconcile.auto_fix = false;
    })
    .await;
    let _sim = simulate(listener, url, "steady", 3, 5, ApiFaults::default(), None).await;
    let viewer = app.sign_in("vera", Role::Viewer).await;
    let operator = app.sign_in("otto", Role::Operator).await;

    let (status, html) = app.page("/reconciliation", &operator).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("id=\"no-open-diffs\""), "{html}");
    assert!(html.contains("last successful run never"), "{html}");
    assert!(html.contains("id=\"run-now\""));

    // A viewer's forged "Run now" is refused before anything runs, and audited.
    let (status, _) = app
        .post_form(
            StartReconciliation::PATH,
            &viewer,
            None,
            &[("provider", "stripe")],
        )
        .await;
    assert_eq!(status, 403);
    assert_eq!(
        app.count("SELECT COUNT(*) FROM reconciliation_runs").await,
        0
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM audit_log WHERE action = 'reconciliation.run.refused'")
            .await,
        1
    );

    // Run now without JavaScript: the form's POST answers with a redirect back.
    let (status, body) = app
        .post_form(
            StartReconciliation::PATH,
            &operator,
            Some("/reconciliation"),
            &[("provider", "stripe")],
        )
        .await;
    assert!((300..400).contains(&status), "{status} {body}");
    let mut run = None;
    for _ in 0..600 {
        let runs = oncehook::store::reconcile::list_runs(&app.db, None, None, 5)
            .await
            .unwrap();
        if let Some(r) = runs.first().filter(|r| r.status != "running") {
            run = Some(r.clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let run = run.expect("the run ended within 30 s");
    assert_eq!(
        (run.status.as_str(), run.source.as_str()),
        ("succeeded", "dashboard")
    );
    assert!(run.diffs_found > 0 && run.fixed == 0, "{run:?}");
    assert_eq!(
        app.count(
            "SELECT COUNT(*) FROM audit_log WHERE action = 'reconciliation.run' AND actor = 'otto'"
        )
        .await,
        1
    );

    // The open diffs, grouped by kind, with the count and a Fix button per fixable row.
    let (_, html) = app.page("/reconciliation", &operator).await;
    assert!(html.contains("id=\"kind-missing_event\""), "{html}");
    assert!(html.contains(&format!("id=\"run-{}\"", run.id)));
    assert!(html.contains("button primary fix"));
    let open = |app: &TestApp| {
        let db = app.db.clone();
        async move {
            oncehook::store::reconcile::list_diffs(
                &db,
                &oncehook::store::reconcile::DiffFilter {
                    state: Some("open".into()),
                    kind: Some("missing_event".into()),
                    limit: 100,
                    ..Default::default()
                },
            )
            .await
            .unwrap()
        }
    };
    let before = open(&app).await;
    assert_eq!(
        before.len() as i64,
        run.diffs_found
            - app
                .count("SELECT COUNT(*) FROM reconciliation_diffs WHERE kind <> 'missing_event'")
                .await
    );
    let (_, viewer_html) = app.page("/reconciliation", &viewer).await;
    assert!(viewer_html.contains("id=\"kind-missing_event\""));
    assert!(!viewer_html.contains("button primary fix") && !viewer_html.contains("id=\"run-now\""));

    // One-click fix of the payment's event: ingested through the inbox, the order appears.
    let payment = before
        .iter()
        .find(|d| d.detail.starts_with("payment_intent.succeeded"))
        .expect("a missing payment event")
        .clone();
    let id = payment.id.to_string();
    let (status, _) = app
        .post_form(FixReconciliationDiff::PATH, &viewer, None, &[("id", &id)])
        .await;
    assert_eq!(status, 403, "a viewer fixes nothing");
    let (status, body) = app
        .post_form(FixReconciliationDiff::PATH, &operator, None, &[("id", &id)])
        .await;
    assert_eq!(status, 200, "{body}");
    let fixed: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(fixed["state"], "fixed", "{fixed}");
    assert_eq!(fixed["closed_by"], "otto");
    let event_id = payment.provider_event_id.clone().unwrap();
    assert_eq!(
        app.count(&format!(
            "SELECT COUNT(*) FROM inbox_events WHERE event_id = '{event_id}' AND correlation_id LIKE 'reconciliation:run-%'"
        ))
        .await,
        1,
        "fetched from the API and ingested"
    );
    drained(&app).await;
    let order_id = payment.order_id.clone().unwrap();
    let (status, html) = app.page(&format!("/orders/{order_id}"), &operator).await;
    assert_eq!(status, 200);
    assert!(html.contains("data-kind=\"reconciled\""), "{html}");
    assert!(html.contains("by otto"), "{html}");
    assert_eq!(open(&app).await.len(), before.len() - 1);
    // Fixing it again is refused: it is fixed already. Nothing is ingested twice.
    let (status, body) = app
        .post_form(FixReconciliationDiff::PATH, &operator, None, &[("id", &id)])
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("fixed already"), "{body}");
    assert_eq!(
        app.count(&format!(
            "SELECT COUNT(*) FROM inbox_events WHERE event_id = '{event_id}'"
        ))
        .await,
        1
    );
    assert_eq!(
        app.count(
            "SELECT COUNT(*) FROM audit_log WHERE action = 'reconciliation.fix' AND actor = 'otto'"
        )
        .await,
        1
    );

    // Resolve another with a reason, as the no-JS form does; it moves to the history.
    let other = open(&app).await[0].id.to_string();
    let (status, _) = app
        .post_form(
            ResolveReconciliationDiff::PATH,
            &operator,
            Some("/reconciliation"),
            &[("id", &other), ("reason", "test order, never shipped")],
        )
        .await;
    assert!((300..400).contains(&status));
    let (_, history) = app.page("/reconciliation?state=resolved", &operator).await;
    assert!(
        history.contains(&format!("id=\"diff-{other}\"")),
        "{history}"
    );
    assert!(history.contains("test order, never shipped"));
    let (_, fixed_list) = app.page("/reconciliation?state=fixed", &viewer).await;
    assert!(fixed_list.contains(&format!("id=\"diff-{id}\"")));

    // Filters and keyset pages live in the URL.
    let newest = open(&app).await;
    if newest.len() >= 2 {
        let (_, page) = app
            .page(
                &format!(
                    "/reconciliation?state=open&kind=missing_event&before={}",
                    newest[0].id
                ),
                &viewer,
            )
            .await;
        assert!(!page.contains(&format!("id=\"diff-{}\"", newest[0].id)));
        assert!(page.contains(&format!("id=\"diff-{}\"", newest[1].id)));
    }

    // The overview counts what is open, and the last successful run.
    let token = app.token("kpis", "viewer").await;
    let (_, overview) = app.api_get("/api/v1/overview?range=1h", Some(&token)).await;
    let open_now = app
        .count("SELECT COUNT(*) FROM reconciliation_diffs WHERE state = 'open'")
        .await;
    assert_eq!(
        overview["reconciliation"]["open_diffs"], open_now,
        "{overview}"
    );
    assert!(overview["reconciliation"]["last_success_age_secs"].is_i64());
    app.shutdown().await;
}

both!(
    the_page_runs_fixes_and_resolves,
    chaos_then_reconcile,
    a_429_storm_is_honoured,
    bad_answers_fail_the_run_and_change_nothing,
    without_auto_fix_diffs_stay_open,
    one_run_at_a_time,
);
