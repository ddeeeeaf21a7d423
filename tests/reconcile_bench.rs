//! The reconciliation bench (opt-in): one run over a simulator holding N orders' events
//! (about 7 per order) that were never delivered, the worst case: every event is a
//! `missing_event` to fetch and ingest, and every order's objects are compared after.
//! Prints time, API calls and the test process's peak RSS (server and simulator included).
//!
//! `ONCEHOOK_RECONCILE_BENCH_ORDERS=14000 cargo test --release --test reconcile_bench -- --ignored --nocapture`

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Kind, TestApp};
use oncehook::config::Providers;
use oncehook::domain::retry::RetryPolicy;
use oncehook::pipeline::alerts::Alerter;
use oncehook::reconcile::{Options, Reconciler};
use oncehook::simulator::run::{Options as SimOptions, Simulation};
use oncehook::simulator::scenario::Scenario;

const KEY: &str = "sk_test_benchKEY0123456789";

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore]
async fn reconcile_bench() {
    let orders: usize = std::env::var("ONCEHOOK_RECONCILE_BENCH_ORDERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(14_000);
    let kind = if std::env::var("ONCEHOOK_RECONCILE_BENCH_POSTGRES").is_ok() {
        Kind::Postgres
    } else {
        Kind::Sqlite
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let mut scenario = Scenario::builtin("steady").unwrap();
    scenario.faults = Default::default();
    let started = Instant::now();
    let sim = Simulation::new(SimOptions {
        seed: 1,
        orders,
        duration: Duration::ZERO,
        scenario_name: "steady".into(),
        scenario,
        start: None,
        database: "sqlite::memory:".into(),
        api_key: KEY.into(),
        target: None,
        provider: Default::default(),
    })
    .await
    .unwrap();
    sim.run(&|_, _| {}).await.unwrap();
    let sim = Arc::new(sim);
    let events = sim.shared.db.count_events().await.unwrap();
    eprintln!(
        "simulated {orders} orders, {events} events in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    tokio::spawn(oncehook::simulator::serve_api(
        sim.shared.clone(),
        listener,
        std::future::pending(),
    ));
    let app = TestApp::spawn_with(kind, |s| {
        let p = &mut s.providers[0];
        p.api.base = url.clone();
        p.api.key = Some(KEY.into());
        p.api.rate_per_sec = 100_000.0;
        p.api.retry = RetryPolicy {
            base_ms: 5,
            cap_ms: 50,
            max_attempts: 10,
            max_retry_after_ms: 1_000,
        };
        s.reconcile.interval = oncehook::reconcile::Interval::parse("0").unwrap();
        s.reconcile.settle_secs = 1_800;
        s.outbox.relay.enabled = false;
        s.processor.retry.base_ms = 50;
        s.processor.retry.cap_ms = 2_000;
        s.processor.retry.max_attempts = 40;
    })
    .await;
    let r = Reconciler {
        db: app.db.clone(),
        settings: Arc::new(app.settings.reconcile_scope()),
        providers: Arc::new(Providers::build(&app.settings.providers).unwrap()),
        alerter: Alerter::log_only(),
    };
    let options = Options {
        provider: "stripe".into(),
        since: None,
        dry_run: false,
        source: "cli",
        ..Default::default()
    };
    let before = oncehook::simulator::ApiStats::get(&sim.shared.stats.api_requests);
    let t = Instant::now();
    let report = r.run(&options, Default::default(), &|_| {}).await.unwrap();
    let first = t.elapsed();
    let http_calls = oncehook::simulator::ApiStats::get(&sim.shared.stats.api_requests) - before;
    assert_eq!(report.status, "succeeded", "{:?}", report.error);
    eprintln!(
        "first run ({kind:?}): {:.1} s, {} events and {} objects compared, {} API calls ({} HTTP requests), {} diffs, {} fixed; peak RSS {:.0} MiB",
        first.as_secs_f64(),
        report.counts.events_compared,
        report.counts.objects_compared,
        report.counts.api_calls,
        http_calls,
        report.counts.diffs_found,
        report.counts.fixed,
        peak_rss_mib()
    );
    let t = Instant::now();
    let second = r.run(&options, Default::default(), &|_| {}).await.unwrap();
    eprintln!(
        "second run: {:.1} s, {} events and {} objects compared, {} API calls, {} diffs; peak RSS {:.0} MiB",
        t.elapsed().as_secs_f64(),
        second.counts.events_compared,
        second.counts.objects_compared,
        second.counts.api_calls,
        second.counts.diffs_found,
        peak_rss_mib()
    );
    assert_eq!(second.counts.diffs_found, 0);
    app.shutdown().await;
}
