//! A reconciliation run of the real `oncehook serve` (its periodic job) killed with
//! SIGKILL, or shut down with SIGTERM, in the middle: the next process takes the lease
//! once it expires, resumes the events pass from the saved checkpoint, and the orders still
//! end equal to the simulator's truth; a failed scheduled run is tried again soon.
//! `oncehook reconcile --json` (the CLI) before and after, both databases.

mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::binary::{free_port, Binary};
use common::{Kind, TestDb, STRIPE_SECRET};
use oncehook::simulator::run::{Options as SimOptions, Simulation};
use oncehook::simulator::scenario::Scenario;
use oncehook::simulator::ApiFaults;
use sqlx::Row;

const KEY: &str = "sk_test_crashKEY0123456789";

/// `extra` goes into `[reconcile]`.
fn config(dir: &std::path::Path, api: &str, extra: &str) -> std::path::PathBuf {
    let file = dir.join("oncehook.toml");
    std::fs::write(
        &file,
        format!(
            r#"data_dir = "{}"

[reconcile]
interval = "1h"
page_size = 10
lease_secs = 2
settle_secs = 30
{extra}

# A refund or dispute fetched before its payment waits for it (the events pass reads newest
# first): retries outlast the crash and the takeover.
[processor.retry]
base_ms = 20
cap_ms = 2000
max_attempts = 30
max_retry_after_ms = 1000

[outbox.relay]
enabled = false

[[providers]]
name = "stripe"
scheme = "stripe"
secrets = ["{STRIPE_SECRET}"]
api_base = "{api}"
api_key = "{KEY}"
api_rate_per_sec = 40.0
"#,
            dir.display()
        ),
    )
    .unwrap();
    file
}

async fn serve(db: &TestDb, dir: tempfile::TempDir, config: &std::path::Path) -> Binary {
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args(["serve", "--config"])
        .arg(config)
        .args(["--database-url", &db.url, "--listen", &addr.to_string()])
        .env("RUST_LOG", "info")
        .env_remove("ONCEHOOK_CONFIG")
        .stdout(Stdio::null())
        .stderr(
            std::fs::File::options()
                .create(true)
                .append(true)
                .open(dir.path().join("stderr.log"))
                .unwrap(),
        )
        .spawn()
        .unwrap();
    let base = format!("http://{addr}");
    for _ in 0..200 {
        if let Ok(r) = reqwest::get(format!("{base}/healthz")).await {
            if r.status() == 200 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Binary {
        child,
        base,
        addr,
        dir,
    }
}

fn cli(config: &std::path::Path, db: &TestDb, args: &[&str]) -> (bool, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .arg("reconcile")
        .args(args)
        .args(["--json", "--config"])
        .arg(config)
        .args(["--database-url", &db.url])
        .env_remove("ONCEHOOK_CONFIG")
        .output()
        .unwrap();
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), json)
}

/// Waits up to 120 s for `f`; on a timeout the panic carries the end of the server's log
/// (`server`), so a failure in CI says what the server did.
async fn until<F: std::future::Future<Output = bool>>(
    what: &str,
    server: &Binary,
    mut f: impl FnMut() -> F,
) {
    for _ in 0..1_200 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = std::fs::read_to_string(server.dir.path().join("stderr.log")).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(80).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    panic!(
        "timed out waiting for {what}; the server's log ends:\n{}",
        tail.join("\n")
    );
}

/// A seeded chaos history of `orders` orders of which nothing was delivered: every event
/// is one the reconciler must fetch.
async fn simulation(orders: usize) -> Arc<Simulation> {
    let mut scenario = Scenario::builtin("chaos").unwrap();
    scenario.api = ApiFaults::default();
    let sim = Simulation::new(SimOptions {
        seed: 11,
        orders,
        duration: Duration::ZERO,
        scenario_name: "chaos".into(),
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
    Arc::new(sim)
}

/// The simulator's provider API on `listener`, until the test ends.
fn serve_api(sim: &Simulation, listener: tokio::net::TcpListener) {
    tokio::spawn(oncehook::simulator::serve_api(
        sim.shared.clone(),
        listener,
        std::future::pending(),
    ));
}

/// How the first server ends in the middle of its run.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Stop {
    /// SIGKILL: the run stays marked running; the next run marks it interrupted.
    Kill,
    /// SIGTERM: a graceful shutdown; the run records itself interrupted, with no alert.
    Term,
}

async fn killed_mid_run_resumes_from_the_checkpoint(kind: Kind) {
    stopped_mid_run_resumes_from_the_checkpoint(kind, Stop::Kill).await
}

async fn shut_down_mid_run_is_interrupted_not_failed_and_resumes(kind: Kind) {
    stopped_mid_run_resumes_from_the_checkpoint(kind, Stop::Term).await
}

async fn stopped_mid_run_resumes_from_the_checkpoint(kind: Kind, how: Stop) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = format!("http://{}", listener.local_addr().unwrap());
    let sim = simulation(60).await;
    serve_api(&sim, listener);
    let truth = sim.truth().await.unwrap();

    let db = TestDb::new(kind).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &api, "retry_secs = 1");
    // The database exists once a server migrated it; the CLI migrates too.
    let (ok, dry) = cli(&config, &db, &["--dry-run", "--provider", "stripe"]);
    assert!(ok, "{dry}");
    let run = &dry["runs"][0];
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["dry_run"], true);
    let diffs = run["diffs"].as_array().unwrap();
    assert!(!diffs.is_empty());
    for key in [
        "kind",
        "order_id",
        "provider_event_id",
        "object_id",
        "state",
        "detail",
    ] {
        assert!(diffs[0].get(key).is_some(), "{key} in {}", diffs[0]);
    }
    assert!(diffs
        .iter()
        .all(|d| d["kind"] == "missing_event" && d["state"] == "open"));
    let listed = run["events_compared"].as_i64().unwrap();

    let conn = db.connect().await;
    let first = serve(&db, dir, &config).await;
    until("the run to save its checkpoint", &first, || async {
        sqlx::query(
            "SELECT COUNT(*) FROM reconciliation_runs r JOIN reconciliation_checkpoints c \
             ON c.provider = r.provider WHERE r.status = 'running' AND r.events_compared >= 50 \
             AND c.pass_cursor IS NOT NULL",
        )
        .fetch_one(conn.reader())
        .await
        .map(|r| r.get::<i64, _>(0) > 0)
        .unwrap_or(false)
    })
    .await;
    let mut first = first;
    match how {
        Stop::Kill => first.child.kill().unwrap(),
        Stop::Term => nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(first.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap(),
    }
    first.child.wait().unwrap();
    let (status, killed_at, error): (String, i64, Option<String>) =
        sqlx::query("SELECT status, events_compared, error FROM reconciliation_runs")
            .fetch_one(conn.reader())
            .await
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .unwrap();
    assert!(killed_at < listed, "stopped before the pass ended");
    if how == Stop::Term {
        // The run recorded its own end: interrupted by the shutdown, not failed, and
        // nobody was alerted.
        assert_eq!(status, "interrupted", "{error:?}");
        assert!(
            error
                .as_deref()
                .unwrap_or_default()
                .contains("shutting down"),
            "{error:?}"
        );
        let log = std::fs::read_to_string(first.dir.path().join("stderr.log")).unwrap();
        assert!(log.contains("reconciliation run interrupted"), "{log}");
        assert!(!log.contains("reconciliation run failed"), "{log}");
        assert!(
            !log.contains("stage=reconciliation"),
            "an alert at shutdown: {log}"
        );
    } else {
        assert_eq!(status, "running");
    }

    let dir = std::mem::replace(&mut first.dir, tempfile::tempdir().unwrap());
    drop(first);
    let second = serve(&db, dir, &config).await;
    until("a run to succeed after the crash", &second, || async {
        sqlx::query("SELECT COUNT(*) FROM reconciliation_runs WHERE status = 'succeeded'")
            .fetch_one(conn.reader())
            .await
            .map(|r| r.get::<i64, _>(0) > 0)
            .unwrap_or(false)
    })
    .await;
    let runs: Vec<(String, i64, Option<String>)> =
        sqlx::query("SELECT status, events_compared, error FROM reconciliation_runs ORDER BY id")
            .fetch_all(conn.reader())
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
    assert_eq!(runs[0].0, "interrupted", "{runs:?}");
    assert_eq!(runs[1].0, "succeeded", "{runs:?}");
    // It resumed where the first stopped, not from the top (the kill may fall between
    // saving the position and the counts: a page either way).
    assert!(runs[1].1 < listed, "{runs:?} of {listed}");
    assert!(runs[0].1 + runs[1].1 + 10 >= listed, "{runs:?} of {listed}");
    until("the processor to drain", &second, || async {
        sqlx::query("SELECT COUNT(*) FROM inbox_events WHERE status IN ('pending', 'processing')")
            .fetch_one(conn.reader())
            .await
            .map(|r| r.get::<i64, _>(0) == 0)
            .unwrap_or(false)
    })
    .await;
    // Every order that has a fact equals the truth.
    let mut wrong = Vec::new();
    for o in truth.orders.iter().filter(|o| !o.facts.is_empty()) {
        let row = sqlx::query(
            "SELECT status, amount_paid, amount_refunded, amount_disputed FROM orders WHERE order_id = $1",
        )
        .bind(&o.order_id)
        .fetch_optional(conn.reader())
        .await
        .unwrap();
        let got = row.map(|r| {
            (
                r.get::<String, _>(0),
                r.get::<i64, _>(1),
                r.get::<i64, _>(2),
                r.get::<i64, _>(3),
            )
        });
        let want = (o.status.clone(), o.paid, o.refunded, o.disputed);
        if got.as_ref() != Some(&want) {
            wrong.push(format!("{}: {got:?} != {want:?}", o.order_id));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");

    // The CLI's run now finds nothing: the crash fixed nothing twice.
    let (ok, again) = cli(&config, &db, &["--provider", "stripe"]);
    assert!(ok, "{again}");
    assert_eq!(again["runs"][0]["status"], "succeeded", "{again}");
    assert_eq!(again["runs"][0]["diffs_found"], 0, "{again}");
    let dup: i64 = sqlx::query(
        "SELECT COUNT(*) FROM (SELECT order_id, entry, external_ref FROM order_ledger \
         WHERE entry <> 'refund_observed' GROUP BY order_id, entry, external_ref HAVING COUNT(*) > 1) d",
    )
    .fetch_one(conn.reader())
    .await
    .unwrap()
    .get(0);
    assert_eq!(dup, 0, "a ledger entry recorded twice");
    second.stop();
}

/// The provider's API is down when `serve`'s scheduled run starts (nothing listens on its
/// port): that run fails, and the job tries again after `retry_secs`, backing off, instead
/// of an hour later (`interval`); once the API answers, a run succeeds.
async fn a_failed_scheduled_run_is_tried_again_before_the_interval(kind: Kind) {
    let port = free_port();
    let api = format!("http://127.0.0.1:{port}");
    let sim = simulation(5).await;
    let db = TestDb::new(kind).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &api, "retry_secs = 1");
    let server = serve(&db, dir, &config).await;
    let conn = db.connect().await;
    let count = |status: &'static str| {
        let conn = &conn;
        async move {
            sqlx::query("SELECT COUNT(*) FROM reconciliation_runs WHERE status = $1")
                .bind(status)
                .fetch_one(conn.reader())
                .await
                .map(|r| r.get::<i64, _>(0))
                .unwrap_or(0)
        }
    };
    until("a run to fail while the API is down", &server, || async {
        count("failed").await >= 2
    })
    .await;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    serve_api(&sim, listener);
    until("a run to succeed once the API is up", &server, || async {
        count("succeeded").await > 0
    })
    .await;
    let runs: Vec<(String, Option<String>, i64, i64)> = sqlx::query(
        "SELECT status, error, started_at, COALESCE(finished_at, 0) FROM reconciliation_runs \
         ORDER BY id",
    )
    .fetch_all(conn.reader())
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect();
    let (last, failed) = runs.split_last().unwrap();
    assert_eq!(last.0, "succeeded", "{runs:?}");
    assert!(failed.len() >= 2, "{runs:?}");
    assert!(failed.iter().all(|r| r.0 == "failed"), "{runs:?}");
    // The reason names the unreachable API.
    let reason = failed[0].1.as_deref().unwrap_or_default();
    assert!(
        reason.contains("127.0.0.1") || reason.contains("connect"),
        "{reason}"
    );
    // Each retry waited at least its step (1 s, then 2 s, ...): no tight loop.
    for (i, pair) in failed.windows(2).enumerate() {
        let waited = pair[1].2 - pair[0].3;
        assert!(
            waited >= 1_000 << i,
            "retry {i} after {waited} ms: {runs:?}"
        );
    }
    server.stop();
}

both!(
    killed_mid_run_resumes_from_the_checkpoint,
    shut_down_mid_run_is_interrupted_not_failed_and_resumes,
    a_failed_scheduled_run_is_tried_again_before_the_interval
);
