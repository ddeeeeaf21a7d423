//! The simulator's webhooks: retried with backoff after non-2xx answers and timeouts,
//! given up after the last attempt; Standard Webhooks for a second provider into a real
//! server; the same seed replays the same run; `oncehook simulate`'s options and their
//! errors.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Kind, TestApp, SW_SECRET};
use oncehook::provider::signature::SchemeKind;
use oncehook::simulator::run::{Options, Simulation};
use oncehook::simulator::scenario::{Delivery, Scenario};
use oncehook::simulator::sender::Target;
use oncehook::simulator::store::EventFilter;

const SECRET: &str = "whsec_simulator_test_secret_0123";

fn options(orders: usize, seed: u64, target: Option<Target>, delivery: Delivery) -> Options {
    let mut scenario = Scenario::builtin("steady").unwrap();
    scenario.faults = Default::default();
    scenario.delivery = delivery;
    Options {
        seed,
        orders,
        duration: Duration::ZERO,
        scenario_name: "steady".into(),
        scenario,
        start: Some(1_760_000_000),
        database: "sqlite::memory:".into(),
        api_key: "sk_test_x".into(),
        target,
        provider: Default::default(),
    }
}

/// A receiver answering each request with `answer(n)`, n the how-manyeth delivery of that
/// event id (1-based); `None` means: never answer in time.
async fn receiver(
    answer: fn(usize) -> Option<u16>,
) -> (String, Arc<Mutex<HashMap<String, usize>>>) {
    let seen: Arc<Mutex<HashMap<String, usize>>> = Default::default();
    let log = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: axum::body::Bytes| {
            let log = log.clone();
            async move {
                let event: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let id = event["id"].as_str().unwrap().to_string();
                let n = {
                    let mut log = log.lock().unwrap();
                    let n = log.entry(id).or_default();
                    *n += 1;
                    *n
                };
                match answer(n) {
                    Some(status) => axum::http::StatusCode::from_u16(status).unwrap(),
                    None => {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        axum::http::StatusCode::OK
                    }
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

fn fast_retries(max_attempts: u32) -> Delivery {
    Delivery {
        concurrency: 16,
        timeout_ms: 300,
        retry_base_ms: 10,
        retry_cap_ms: 40,
        max_attempts,
    }
}

fn target(url: String) -> Option<Target> {
    Some(Target {
        url,
        scheme: SchemeKind::Stripe,
        secret: SECRET.into(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_deliveries_are_retried_with_backoff_until_answered() {
    // First attempt 500, second never answered in time, third 200.
    let (url, seen) = receiver(|n| match n {
        1 => Some(500),
        2 => None,
        _ => Some(200),
    })
    .await;
    let sim = Simulation::new(options(20, 3, target(url), fast_retries(5)))
        .await
        .unwrap();
    sim.run(&|_, _| {}).await.unwrap();
    let truth = sim.truth().await.unwrap();
    let events = truth.events.generated;
    assert!(events > 40);
    let s = &truth.sent;
    assert_eq!(s.attempts, 3 * events, "{s:?}");
    assert_eq!(
        (s.delivered, s.failed_attempts, s.retries),
        (events, 2 * events, 2 * events)
    );
    assert_eq!(s.gave_up, 0);
    assert!(seen.lock().unwrap().values().all(|n| *n == 3));
    assert_eq!(
        truth.incomplete_orders, 0,
        "every final state delivered in the end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_never_answered_2xx_is_given_up_and_its_orders_are_incomplete() {
    let (url, seen) = receiver(|_| Some(503)).await;
    let sim = Simulation::new(options(10, 4, target(url), fast_retries(3)))
        .await
        .unwrap();
    sim.run(&|_, _| {}).await.unwrap();
    let truth = sim.truth().await.unwrap();
    let events = truth.events.generated;
    assert_eq!(truth.sent.attempts, 3 * events);
    assert_eq!((truth.sent.delivered, truth.sent.gave_up), (0, events));
    assert!(seen.lock().unwrap().values().all(|n| *n == 3));
    assert_eq!(truth.complete_orders, 0);
    assert!(truth.orders.iter().all(|o| !o.lost.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_seed_replays_the_same_run() {
    let log = |sim: &Simulation| {
        let db = sim.shared.db.clone();
        async move {
            db.events(&EventFilter {
                limit: 1_000_000,
                ..Default::default()
            })
            .await
            .unwrap()
            .0
            .into_iter()
            .map(|e| (e.id, e.body))
            .collect::<Vec<_>>()
        }
    };
    let mut runs = Vec::new();
    for seed in [11, 11, 12] {
        let mut o = options(150, seed, None, Delivery::default());
        o.scenario = Scenario::builtin("chaos").unwrap();
        let sim = Simulation::new(o).await.unwrap();
        sim.run(&|_, _| {}).await.unwrap();
        runs.push((log(&sim).await, sim.truth().await.unwrap().orders));
    }
    assert!(!runs[0].0.is_empty());
    assert_eq!(runs[0], runs[1], "same seed, same events and truth");
    assert_ne!(runs[0].0, runs[2].0, "another seed, another run");
}

async fn standard_webhooks_reach_a_second_provider(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.outbox.relay.enabled = false;
        s.processor.retry.base_ms = 20;
        s.processor.retry.cap_ms = 200;
    })
    .await;
    let sim = Simulation::new(options(
        60,
        5,
        Some(Target {
            url: format!("{}/webhooks/acme", app.url),
            scheme: SchemeKind::StandardWebhooks,
            secret: SW_SECRET.into(),
        }),
        Delivery::default(),
    ))
    .await
    .unwrap();
    sim.run(&|_, _| {}).await.unwrap();
    let truth = sim.truth().await.unwrap();
    assert!(
        truth.sent.delivered > 60 && truth.sent.failed_attempts == 0,
        "{:?}",
        truth.sent
    );
    app.wait_until_processed().await;
    assert_eq!(
        app.count("SELECT COUNT(*) FROM inbox_events WHERE provider <> 'acme'")
            .await,
        0
    );
    for o in &truth.orders {
        let row: (String, i64, i64, i64) = sqlx::query_as(
            "SELECT status, amount_paid, amount_refunded, amount_disputed FROM orders WHERE order_id = $1",
        )
        .bind(&o.order_id)
        .fetch_one(app.db.reader())
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", o.order_id));
        assert_eq!(
            row,
            (o.status.clone(), o.paid, o.refunded, o.disputed),
            "{}",
            o.order_id
        );
    }
    app.shutdown().await;
}

both!(standard_webhooks_reach_a_second_provider);

fn simulate(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .arg("simulate")
        .args(args)
        .env_remove("ONCEHOOK_CONFIG")
        .env_remove("ONCEHOOK_SIMULATE_SECRET")
        .output()
        .unwrap()
}

#[test]
fn help_names_every_option() {
    let out = simulate(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for option in [
        "--target",
        "--secret",
        "--scheme",
        "--api-listen",
        "--no-api",
        "--api-key",
        "--database",
        "--scenario",
        "--scenario-file",
        "--rate",
        "--duration",
        "--orders",
        "--seed",
        "--start",
        "--truth",
        "--keep-serving",
        "steady",
        "storm",
        "chaos",
        "standard-webhooks",
    ] {
        assert!(help.contains(option), "{option} missing from:\n{help}");
    }
}

#[test]
fn bad_options_and_scenario_files_are_errors_naming_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let bad_file = dir.path().join("bad.toml");
    std::fs::write(&bad_file, "[faults]\ndrop = 2.0\n").unwrap();
    let typo_file = dir.path().join("typo.toml");
    std::fs::write(&typo_file, "[delivery]\nmax_attempt = 2\n").unwrap();
    let bad = bad_file.to_str().unwrap();
    let typo = typo_file.to_str().unwrap();
    for (args, named) in [
        (vec!["--rate=-1", "--no-api"], "--rate"),
        (vec!["--rate=0", "--no-api"], "--rate"),
        (vec!["--rate", "fast"], "--rate"),
        (vec!["--scenario", "calm"], "--scenario"),
        (vec!["--duration", "0", "--no-api"], "--orders"),
        (vec!["--orders", "0", "--no-api"], "--orders"),
        (
            vec!["--secret", "whsec_abcdefghijklmnopqrstuvwx"],
            "--target",
        ),
        (
            vec!["--target", "http://127.0.0.1:1/h", "--no-api"],
            "--secret",
        ),
        (
            vec![
                "--target",
                "http://127.0.0.1:1/h",
                "--secret",
                "short",
                "--no-api",
            ],
            "--secret",
        ),
        (vec!["--scenario-file", bad, "--no-api"], "faults.drop"),
        (vec!["--scenario-file", typo, "--no-api"], "max_attempt"),
        (
            vec!["--scenario-file", "/nonexistent.toml", "--no-api"],
            "--scenario-file",
        ),
    ] {
        let out = simulate(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(err.contains(named), "{args:?}: {err}");
    }
}

#[test]
fn a_database_file_keeps_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sim.db");
    let args = [
        "--no-api",
        "--orders",
        "5",
        "--duration",
        "0",
        "--database",
        file.to_str().unwrap(),
    ];
    let first = simulate(&args);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(file.exists());
    let second = simulate(&args);
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains("--database") && err.contains("already holds a run"),
        "{err}"
    );
}

#[test]
fn a_run_without_a_target_prints_its_truth_and_writes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("truth.json");
    let out = simulate(&[
        "--no-api",
        "--orders",
        "40",
        "--duration",
        "0",
        "--seed",
        "1",
        "--truth",
        file.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("truth: 40 orders"), "{stdout}");
    // Piped: no progress line (its template draws "changes ·").
    assert!(!String::from_utf8_lossy(&out.stderr).contains("changes ·"));
    let truth: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(truth["orders"].as_array().unwrap().len(), 40);
    assert_eq!(truth["seed"], 1);
    for key in [
        "status", "paid", "refunded", "disputed", "payments", "refunds", "disputes", "facts",
        "complete", "lost",
    ] {
        assert!(truth["orders"][0].get(key).is_some(), "{key}");
    }
}

/// The simulator's own sending rate to a receiver that answers at once (BENCHMARKS.md):
/// `cargo test --test simulator_webhooks -- --ignored --nocapture sending_rate`.
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn sending_rate() {
    // Answers at once: reads the body (so the connection is reused) and says 200.
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(|_: axum::body::Bytes| async { axum::http::StatusCode::OK }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let orders = 5_000;
    // The same run without sending: what generating and storing the events costs alone.
    let unsent = Simulation::new(options(orders, 6, None, fast_retries(1)))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    unsent.run(&|_, _| {}).await.unwrap();
    let generating = started.elapsed();
    let mut delivery = fast_retries(1);
    delivery.concurrency = 64;
    let sim = Simulation::new(options(orders, 6, target(url), delivery))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    sim.run(&|_, _| {}).await.unwrap();
    let elapsed = started.elapsed();
    let sent = sim.truth().await.unwrap().sent;
    assert_eq!(sent.delivered, sent.attempts);
    println!(
        "generated and stored the events alone in {:.2} s; sent {} signed webhooks in {:.2} s: {:.0}/s",
        generating.as_secs_f64(),
        sent.attempts,
        elapsed.as_secs_f64(),
        sent.attempts as f64 / elapsed.as_secs_f64()
    );
}

/// `--keep-serving`: the run ends, its truth is printed, and the API still answers with the
/// run's events until a process manager's SIGTERM stops it cleanly.
#[tokio::test]
async fn keep_serving_serves_the_api_after_the_run_until_sigterm() {
    use std::io::{BufRead, BufReader};
    let port = common::binary::free_port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args([
            "simulate",
            "--orders",
            "20",
            "--duration",
            "0",
            "--seed",
            "5",
        ])
        .args(["--api-key", "sk_test_keep", "--keep-serving"])
        .args(["--api-listen", &format!("127.0.0.1:{port}")])
        .env_remove("ONCEHOOK_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (finished_tx, finished_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if line.contains("run finished") {
                let _ = finished_tx.send(());
            }
        }
    });
    finished_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the run finishes and says it keeps serving");
    // Well after the run: still serving, with every event the run generated.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let client = oncehook::provider::api::ApiClient::new(&oncehook::config::ProviderApiSettings {
        base: format!("http://127.0.0.1:{port}"),
        key: Some("sk_test_keep".into()),
        rate_per_sec: 1_000.0,
        ..Default::default()
    })
    .unwrap();
    let events = client
        .event_pages(Default::default())
        .collect()
        .await
        .expect("the API answers after the run");
    assert!(events.len() >= 20, "{} events", events.len());
    assert!(child.try_wait().unwrap().is_none(), "still running");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "SIGTERM stops it within 10 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
}
