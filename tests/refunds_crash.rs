//! Kill -9 the real binary while its relay waits for the provider's answer to a refund
//! (the provider makes the refund after the kill), restart it: the relay sends the same
//! `Idempotency-Key`, the simulator answers with the refund it already made, and the
//! provider holds exactly one refund. The refund is asked for with `oncehook order refund`
//! and read back with `oncehook order show --json`, as a person on the shell would.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Kind, TestDb};
use oncehook::config::ProviderApiSettings;
use oncehook::domain::retry::RetryPolicy;
use oncehook::provider::api::ApiClient;
use oncehook::provider::signature::SchemeKind;
use oncehook::simulator::run::{Options, Simulation};
use oncehook::simulator::scenario::{Delivery, Scenario};
use oncehook::simulator::sender::Target;
use oncehook::simulator::ApiFaults;

both!(killed_between_send_and_mark_the_restart_sends_the_same_key_and_refunds_once);

const SIM_KEY: &str = "sk_test_crashKEY0123456789";
const SIM_SECRET: &str = "whsec_crash_test_secret_0123";
/// How long the simulator works on a refund before making it: the kill lands inside.
const PROVIDER_LATENCY_MS: u64 = 1_500;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn oncehook(config: &std::path::Path, db: &TestDb) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_oncehook"));
    c.arg("--config")
        .arg(config)
        .args(["--database-url", &db.url])
        .env_remove("ONCEHOOK_CONFIG");
    c
}

fn serve(config: &std::path::Path, db: &TestDb, port: u16, log: &std::path::Path) -> Child {
    oncehook(config, db)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("start oncehook")
}

async fn wait_healthy(base: &str) {
    for _ in 0..200 {
        if let Ok(r) = reqwest::get(format!("{base}/healthz")).await {
            if r.status() == 200 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("server did not become healthy");
}

async fn query_i64(db: &oncehook::store::Db, sql: &str) -> i64 {
    common::count(db, sql).await
}

async fn killed_between_send_and_mark_the_restart_sends_the_same_key_and_refunds_once(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.connect().await;
    let sim_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sim_url = format!("http://{}", sim_listener.local_addr().unwrap());
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");

    // The TOML a user writes: the simulator as the provider, its API as the provider's.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("oncehook.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"{}\"\n\
             [processor]\npoll_interval_ms = 50\n\
             [outbox.relay]\npoll_interval_ms = 50\nlease_secs = 2\n\
             [[providers]]\nname = \"sim\"\nscheme = \"stripe\"\nsecrets = [\"{SIM_SECRET}\"]\n\
             api_base = \"{sim_url}\"\napi_key = \"{SIM_KEY}\"\napi_timeout_ms = 10000\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let log = dir.path().join("first.log");
    let mut child = serve(&config, &db, port, &log);
    wait_healthy(&base).await;

    let mut scenario = Scenario::builtin("steady").unwrap();
    scenario.faults = Default::default();
    scenario.api = ApiFaults {
        refund_latency_ms: PROVIDER_LATENCY_MS,
        ..ApiFaults::default()
    };
    // Webhooks missed while oncehook is down are retried until it is back.
    scenario.delivery = Delivery {
        concurrency: 8,
        timeout_ms: 2_000,
        retry_base_ms: 100,
        retry_cap_ms: 500,
        max_attempts: 100,
    };
    let sim = Arc::new(
        Simulation::new(Options {
            seed: 23,
            orders: 12,
            duration: Duration::ZERO,
            scenario_name: "steady".into(),
            scenario,
            start: None,
            database: "sqlite::memory:".into(),
            api_key: SIM_KEY.into(),
            target: Some(Target {
                url: format!("{base}/webhooks/sim"),
                scheme: SchemeKind::Stripe,
                secret: SIM_SECRET.into(),
            }),
            provider: Default::default(),
        })
        .await
        .unwrap(),
    );
    sim.run(&|_, _| {}).await.unwrap();
    tokio::spawn(oncehook::simulator::serve_api(
        sim.shared.clone(),
        sim_listener,
        std::future::pending(),
    ));
    let truth = sim.truth().await.unwrap();
    let order = truth
        .orders
        .iter()
        .find(|o| o.status == "paid" && o.refunds.is_empty() && o.payments.len() == 1)
        .expect("a paid order")
        .clone();
    let pi = order.payments[0].id.clone();
    let began = Instant::now();
    while query_i64(
        &store,
        "SELECT COUNT(*) FROM inbox_events WHERE status IN ('pending', 'processing')",
    )
    .await
        > 0
        || query_i64(&store, "SELECT COUNT(*) FROM orders").await == 0
    {
        assert!(began.elapsed() < Duration::from_secs(20), "not processed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Ask on the shell.
    let amount = order.paid / 2;
    let asked = oncehook(&config, &db)
        .args([
            "order",
            "refund",
            &order.order_id,
            "--amount",
            &amount.to_string(),
            "--reason",
            "parcel lost",
            "--actor",
            "olga",
        ])
        .output()
        .unwrap();
    assert!(
        asked.status.success(),
        "{}",
        String::from_utf8_lossy(&asked.stderr)
    );
    let said = String::from_utf8_lossy(&asked.stdout);
    let key = format!("order:{}:refund:1", order.order_id);
    assert!(said.contains(&key), "{said}");

    // The relay has claimed the row and is waiting for the provider: kill -9.
    let began = Instant::now();
    while query_i64(
        &store,
        "SELECT COUNT(*) FROM outbox WHERE topic = 'provider_command.refund' AND status = 'delivering'",
    )
    .await
        == 0
    {
        assert!(began.elapsed() < Duration::from_secs(10), "never sent");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(PROVIDER_LATENCY_MS / 3)).await;
    child.kill().unwrap();
    child.wait().unwrap();
    // The provider finishes its work without anyone listening.
    tokio::time::sleep(Duration::from_millis(PROVIDER_LATENCY_MS)).await;
    let client = ApiClient::new(&ProviderApiSettings {
        base: sim_url.clone(),
        key: Some(SIM_KEY.into()),
        timeout_ms: 5_000,
        rate_per_sec: 1_000.0,
        retry: RetryPolicy {
            base_ms: 5,
            cap_ms: 50,
            max_attempts: 4,
            max_retry_after_ms: 1_000,
        },
    })
    .unwrap();
    assert_eq!(client.refunds_of(&pi).await.unwrap().len(), 1);
    let state: String = sqlx::query_scalar("SELECT state FROM provider_commands")
        .fetch_one(store.reader())
        .await
        .unwrap();
    assert_eq!(state, "requested", "the answer never reached oncehook");

    // Restart: the lease runs out, the same key goes again, the provider replays.
    let mut child = serve(&config, &db, port, &dir.path().join("second.log"));
    wait_healthy(&base).await;
    let began = Instant::now();
    let mut state = String::new();
    while began.elapsed() < Duration::from_secs(30) {
        state = sqlx::query_scalar("SELECT state FROM provider_commands")
            .fetch_one(store.reader())
            .await
            .unwrap();
        if state == "confirmed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let shown = oncehook(&config, &db)
        .args(["order", "show", &order.order_id, "--json"])
        .output()
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        state,
        "confirmed",
        "{}",
        std::fs::read_to_string(dir.path().join("second.log")).unwrap_or_default()
    );
    let refunds = client.refunds_of(&pi).await.unwrap();
    assert_eq!(refunds.len(), 1, "exactly one refund at the provider");
    assert_eq!(refunds[0].amount, amount);
    let attempts = query_i64(
        &store,
        "SELECT attempts FROM outbox WHERE topic = 'provider_command.refund'",
    )
    .await;
    assert_eq!(attempts, 2, "sent before the kill and once after");
    let json: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(json["amount_refunded"], amount, "counted once");
    assert_eq!(json["commands"][0]["state"], "confirmed");
    assert_eq!(json["commands"][0]["idempotency_key"], key);
    assert_eq!(json["commands"][0]["requested_by"], "olga");
    assert_eq!(
        json["commands"][0]["provider_object_id"],
        refunds[0].id.as_str()
    );
}
