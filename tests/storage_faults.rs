//! Storage faults: a full disk, an I/O error, a database that goes away. Whatever fails,
//! nothing the server acknowledged is lost, and what it refused lands once when retried.

mod common;

use std::path::{Path, PathBuf};

use oncehook::store::ingest::{store_receipts, Receipt, Stored};
use oncehook::store::Db;

/// A small tmpfs of its own, unmounted on drop. Only root can mount one; elsewhere the
/// drills that need a real full file system say so and stop (CI runs as root).
struct SmallDisk {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(megabytes: u32) -> Option<SmallDisk> {
        Self::mount_with(megabytes, "")
    }

    /// With more mount options (`,uid=…,gid=…,mode=0700` for a PostgreSQL tablespace).
    fn mount_with(megabytes: u32, options: &str) -> Option<SmallDisk> {
        if !nix::unistd::geteuid().is_root() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs as root: the disk-full drills must run there"
            );
            eprintln!("not root: no tmpfs to fill, skipping this disk-full drill");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={megabytes}m{options}"),
                "tmpfs",
            ])
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(status.success(), "mount a {megabytes} MB tmpfs");
        Some(SmallDisk {
            path: dir.path().to_path_buf(),
            _dir: dir,
        })
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// Fills the file system to the last byte with `filler` (like `dd if=/dev/zero`).
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let filler = self.path.join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 4096];
        while file.write_all(&block).is_ok() {}
        // The last partial block too: nothing is left.
        let _ = file.write_all(&[0u8; 1]);
        let _ = file.sync_all();
        filler
    }
}

impl SmallDisk {
    /// Megabytes in use on the file system, as `df` counts them.
    fn used_mb(&self) -> u64 {
        let out = std::process::Command::new("df")
            .args(["--output=used", "-m"])
            .arg(&self.path)
            .output()
            .expect("run df");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}

fn receipt(i: usize) -> Receipt {
    Receipt {
        provider: "stripe".into(),
        event_id: format!("evt_full_{i}"),
        event_type: Some("payment_intent.succeeded".into()),
        api_version: None,
        raw_body: vec![b'x'; 1500],
        correlation_id: format!("c{i}"),
        received_at: i as i64,
        fetched_body: None,
        derived: false,
    }
}

/// The store-level story of issue 44: a commit fails because the disk is full, space comes
/// back, later commits say they succeeded. Every batch `store_receipts` reported committed
/// must be in the database as a fresh connection sees it, before and after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_commit_fails_on_a_full_disk_every_later_commit_is_durable() {
    let Some(disk) = SmallDisk::mount(24) else {
        return;
    };
    let url = format!("sqlite://{}", disk.path().join("oncehook.db").display());
    let db = Db::connect(&url).await.unwrap();
    db.migrate().await.unwrap();

    let mut acknowledged = Vec::new();
    let mut refused = 0;
    let mut next = 0;
    let mut batch = |n: usize| {
        let b: Vec<Receipt> = (next..next + n).map(receipt).collect();
        next += n;
        b
    };
    // Some before, then the disk fills, then commits fail, then space comes back.
    for _ in 0..20 {
        let b = batch(16);
        store_receipts(&db, &b).await.unwrap();
        acknowledged.extend(b.into_iter().map(|r| r.event_id));
    }
    let filler = disk.fill();
    for _ in 0..50 {
        let b = batch(16);
        match store_receipts(&db, &b).await {
            Ok(stored) => {
                assert!(stored.iter().all(|s| *s == Stored::New));
                acknowledged.extend(b.into_iter().map(|r| r.event_id));
            }
            Err(_) => refused += 1,
        }
    }
    assert!(refused > 0, "a full disk refused no commit");
    std::fs::remove_file(filler).unwrap();
    for _ in 0..20 {
        let b = batch(16);
        store_receipts(&db, &b)
            .await
            .expect("space is back: commits succeed again");
        acknowledged.extend(b.into_iter().map(|r| r.event_id));
    }

    let seen = |db: Db| async move {
        let ids: Vec<String> = sqlx::query_scalar("SELECT event_id FROM inbox_events")
            .fetch_all(db.reader())
            .await
            .unwrap();
        db.close().await;
        ids.into_iter().collect::<std::collections::BTreeSet<_>>()
    };
    // A second process's view while the first is still open, then after it closed.
    let other = Db::connect(&url).await.unwrap();
    let while_open = seen(other).await;
    db.close().await;
    let after_restart = seen(Db::connect(&url).await.unwrap()).await;
    for (when, stored) in [
        ("while open", &while_open),
        ("after restart", &after_restart),
    ] {
        let lost: Vec<_> = acknowledged
            .iter()
            .filter(|id| !stored.contains(*id))
            .collect();
        assert!(
            lost.is_empty(),
            "{when}: {} of {} acknowledged events are not stored ({refused} batches refused), \
             e.g. {:?}",
            lost.len(),
            acknowledged.len(),
            lost.iter().take(3).collect::<Vec<_>>()
        );
    }
}

// ---- Drills: the real binary under load while the storage fails ----

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::binary::{post_payment, Binary};
use common::TestDb;
use tokio_util::sync::CancellationToken;

/// Senders posting distinct payments at once, as a provider's retries would.
const SENDERS: usize = 16;

/// What the senders saw: which payments were answered 200, which were not.
#[derive(Default)]
struct Seen {
    acked: BTreeSet<usize>,
    refused: BTreeSet<usize>,
    /// Refusals that were 503 with a `Retry-After` (the rest: errors of the connection).
    retry_after: usize,
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// `SENDERS` tasks posting `evt_{tag}_{i}` until `stop`.
fn load(base: &str, tag: &'static str, stop: CancellationToken) -> tokio::task::JoinHandle<Seen> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..SENDERS)
        .map(|_| {
            let (base, seen, next, stop) =
                (base.to_string(), seen.clone(), next.clone(), stop.clone());
            tokio::spawn(async move {
                let http = client();
                while !stop.is_cancelled() {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let body = common::fixtures::payment_intent_succeeded(
                        &format!("evt_{tag}_{i}"),
                        &format!("pi_{tag}_{i}"),
                        &format!("order-{tag}-{i}"),
                        100,
                        common::fixtures::T10_00,
                    )
                    .to_string();
                    let sig = oncehook::provider::signature::stripe::sign(
                        common::STRIPE_SECRET,
                        common::now_secs(),
                        body.as_bytes(),
                    );
                    let answer = http
                        .post(format!("{base}/webhooks/stripe"))
                        .header("stripe-signature", sig)
                        .body(body)
                        .send()
                        .await;
                    let mut seen = seen.lock().unwrap();
                    match answer {
                        Ok(r) if r.status() == 200 => {
                            seen.acked.insert(i);
                        }
                        Ok(r) => {
                            if r.status() == 503 && r.headers().contains_key("retry-after") {
                                seen.retry_after += 1;
                            }
                            seen.refused.insert(i);
                        }
                        Err(_) => {
                            seen.refused.insert(i);
                        }
                    }
                }
            })
        })
        .collect();
    tokio::spawn(async move {
        for t in tasks {
            t.await.unwrap();
        }
        Arc::try_unwrap(seen).ok().unwrap().into_inner().unwrap()
    })
}

/// What `/healthz` answered while the drill ran.
#[derive(Default, Debug)]
struct HealthSeen {
    /// The first 503's body.
    unavailable: Option<String>,
    retry_after: bool,
}

fn watch_health(base: &str, stop: CancellationToken) -> tokio::task::JoinHandle<HealthSeen> {
    let base = base.to_string();
    tokio::spawn(async move {
        let http = client();
        let mut seen = HealthSeen::default();
        while !stop.is_cancelled() {
            if let Ok(r) = http.get(format!("{base}/healthz")).send().await {
                if r.status() == 503 && seen.unavailable.is_none() {
                    seen.retry_after = r.headers().contains_key("retry-after");
                    seen.unavailable = Some(r.text().await.unwrap_or_default());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        seen
    })
}

/// Runs `fault` under load, then retries every refused payment until it is acknowledged,
/// waits until everything is applied and checks: every payment is stored once, applied
/// once (one ledger entry of 100, one effect, two outbox messages), and `oncehook verify`
/// is clean. Returns what the senders and `/healthz` saw.
async fn drill<F, Fut>(db: &TestDb, tag: &'static str, fault: F) -> (Seen, HealthSeen, String)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let server = Binary::start(db, "[processor]\npoll_interval_ms = 50\n").await;
    let stop = CancellationToken::new();
    let senders = load(&server.base, tag, stop.clone());
    let health = watch_health(&server.base, stop.clone());
    fault().await;
    stop.cancel();
    let seen = senders.await.unwrap();
    let health = health.await.unwrap();

    // Space (or the database) is back: the server says so by itself.
    let http = client();
    let back = Instant::now();
    loop {
        if let Ok(r) = http.get(format!("{}/healthz", server.base)).send().await {
            if r.status() == 200 {
                break;
            }
        }
        assert!(
            back.elapsed() < Duration::from_secs(60),
            "/healthz still not 200 a minute after the fault ended:\n{}",
            std::fs::read_to_string(server.dir.path().join("stderr.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The providers' retries: every refused payment is sent again until acknowledged.
    for &i in &seen.refused {
        let mut tries = 0;
        loop {
            match post_payment(&http, &server.base, tag, i).await {
                Ok(200) => break,
                other => {
                    tries += 1;
                    assert!(
                        tries < 100,
                        "evt_{tag}_{i} still refused when retried: {other:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    let store = db.connect().await;
    let settled = Instant::now();
    while common::count(
        &store,
        "SELECT COUNT(*) FROM inbox_events WHERE status <> 'applied'",
    )
    .await
        > 0
    {
        assert!(
            settled.elapsed() < Duration::from_secs(60),
            "events left unapplied a minute after the fault:\n{}",
            std::fs::read_to_string(server.dir.path().join("stderr.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = http
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let log = server.stop();

    let sent: BTreeSet<String> = seen
        .acked
        .iter()
        .chain(&seen.refused)
        .map(|i| format!("evt_{tag}_{i}"))
        .collect();
    let stored: BTreeSet<String> =
        sqlx::query_scalar("SELECT event_id FROM inbox_events WHERE status = 'applied'")
            .fetch_all(store.reader())
            .await
            .unwrap()
            .into_iter()
            .collect();
    let lost: Vec<_> = seen
        .acked
        .iter()
        .map(|i| format!("evt_{tag}_{i}"))
        .filter(|id| !stored.contains(id))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged payments are not applied, e.g. {:?}\n{log}",
        lost.len(),
        seen.acked.len(),
        &lost[..lost.len().min(3)]
    );
    assert_eq!(stored, sent, "stored exactly what was sent, each once");
    // Applied once each: compared with the model "one payment of 100 per order".
    let per_order: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT order_id, COUNT(*), CAST(SUM(amount) AS BIGINT) FROM order_ledger GROUP BY order_id",
    )
    .fetch_all(store.reader())
    .await
    .unwrap();
    assert_eq!(per_order.len(), sent.len(), "one order per payment");
    for (order, entries, total) in &per_order {
        assert_eq!((*entries, *total), (1, 100), "{order}: one payment of 100");
    }
    let n = sent.len() as i64;
    assert_eq!(
        common::count(&store, "SELECT COUNT(*) FROM processed_effects").await,
        n
    );
    assert_eq!(
        common::count(&store, "SELECT COUNT(*) FROM outbox").await,
        2 * n,
        "a payment.recorded and an order.paid message per payment"
    );
    store.close().await;
    let verify = std::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args(["verify", "--database-url", &db.url])
        .env_remove("ONCEHOOK_CONFIG")
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "oncehook verify: {}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    eprintln!(
        "{tag}: {} acknowledged, {} refused ({} with 503 + Retry-After) and landed when \
         retried, 0 lost; /healthz: {:?}",
        seen.acked.len(),
        seen.refused.len(),
        seen.retry_after,
        health
    );
    (seen, health, metrics)
}

/// The drill of issue 44 on the embedded default: the database's file system fills to
/// the last byte under load, then space comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_disk_full_under_load_loses_nothing_acknowledged() {
    let Some(disk) = SmallDisk::mount(160) else {
        return;
    };
    let db = TestDb::sqlite_at(&disk.path().join("oncehook.db"));
    let (seen, health, metrics) = drill(&db, "full", || async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let filler = disk.fill();
        tokio::time::sleep(Duration::from_secs(3)).await;
        std::fs::remove_file(filler).unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
    })
    .await;
    assert!(!seen.refused.is_empty(), "a full disk refused nothing");
    assert!(seen.retry_after > 0, "refusals carry Retry-After");
    let reason = health
        .unavailable
        .expect("/healthz answered 503 while full");
    assert!(reason.contains("the disk is full"), "{reason}");
    assert!(health.retry_after);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("oncehook_commit_failures_total")
                && l.contains("cause=\"disk_full\"")),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l == "oncehook_database_commit_failing 0"),
        "all clear again: {metrics}"
    );
}

/// PostgreSQL drills restart the cluster or end every backend of their database: one at a
/// time (the restart reaches every connection on the machine).
static POSTGRES_DRILL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Every backend of the drill's database is terminated, three times, under load.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_terminated_backends_under_load_lose_nothing_acknowledged() {
    let Some(base) = common::postgres_base_url() else {
        return;
    };
    let _turn = POSTGRES_DRILL.lock().await;
    let db = TestDb::new(common::Kind::Postgres).await;
    let name = db.postgres_name().unwrap().to_string();
    let admin = common::connect_admin(&base).await;
    let mut terminated = 0u64;
    drill(&db, "terminated", || async {
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            terminated += sqlx::query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = $1 AND pid <> pg_backend_pid()",
            )
            .bind(&name)
            .execute(&admin)
            .await
            .unwrap()
            .rows_affected();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    })
    .await;
    assert!(terminated >= 3, "terminated {terminated} backends");
}

/// The PostgreSQL cluster restarts under load (`pg_ctlcluster … restart`, as root).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_restart_under_load_loses_nothing_acknowledged() {
    if common::postgres_base_url().is_none() {
        return;
    }
    let Some(cluster) = local_cluster() else {
        return;
    };
    let _turn = POSTGRES_DRILL.lock().await;
    let db = TestDb::new(common::Kind::Postgres).await;
    let (seen, health, _) = drill(&db, "restart", || async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let status = std::process::Command::new("pg_ctlcluster")
            .args([&cluster.0, &cluster.1, "restart"])
            .status()
            .unwrap();
        assert!(status.success(), "pg_ctlcluster restart");
        tokio::time::sleep(Duration::from_secs(2)).await;
    })
    .await;
    assert!(!seen.acked.is_empty());
    eprintln!("restart: /healthz {health:?}");
}

/// The local cluster serving 127.0.0.1:5432 (version, name) when this is root on a Debian
/// PostgreSQL; `None` (and a note) elsewhere, except in CI, where the drill must run.
fn local_cluster() -> Option<(String, String)> {
    let root = nix::unistd::geteuid().is_root();
    let listed = std::process::Command::new("pg_lsclusters")
        .arg("-h")
        .output()
        .ok()
        .filter(|o| o.status.success());
    let cluster = listed.and_then(|o| {
        String::from_utf8_lossy(&o.stdout).lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 3 && f[2] == "5432" && f[3] == "online")
                .then(|| (f[0].to_string(), f[1].to_string()))
        })
    });
    match (root, cluster) {
        (true, Some(c)) => Some(c),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs as root beside a local PostgreSQL: the restart drill must run there"
            );
            eprintln!("not root or no local cluster: skipping the PostgreSQL restart drill");
            None
        }
    }
}

/// The drill's database lives in a tablespace on a small tmpfs, which fills under load.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_full_tablespace_under_load_loses_nothing_acknowledged() {
    let Some(base) = common::postgres_base_url() else {
        return;
    };
    if local_cluster().is_none() {
        return;
    }
    let _turn = POSTGRES_DRILL.lock().await;
    let id = |flag: &str| {
        let out = std::process::Command::new("id")
            .args([flag, "postgres"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // Room for the drill's own data once the filler is gone: one run stores about 9 KB a
    // payment (45 MB for 5,165), and on a 64 MB disk a run of 7,153 filled it for real, so
    // the retries after the fault were refused (503) by a disk the data itself had filled.
    let disk = SmallDisk::mount_with(
        256,
        &format!(",uid={},gid={},mode=0700", id("-u"), id("-g")),
    )
    .expect("root can mount");
    let space = format!("oncehook_small_{}", std::process::id());
    let admin = common::connect_admin(&base).await;
    sqlx::query(&format!(
        "CREATE TABLESPACE {space} LOCATION '{}'",
        disk.path().display()
    ))
    .execute(&admin)
    .await
    .unwrap();
    let db = TestDb::postgres_with(&format!("TABLESPACE {space}")).await;
    let (seen, health, metrics) = drill(&db, "tablespace", || async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let filler = disk.fill();
        tokio::time::sleep(Duration::from_secs(3)).await;
        std::fs::remove_file(filler).unwrap();
        eprintln!(
            "tablespace: {} MB used once the filler was removed",
            disk.used_mb()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    })
    .await;
    let used = disk.used_mb();
    eprintln!("tablespace: {used} MB used after the drill");
    assert!(
        used < 200,
        "the drill's data ({used} MB) nearly fills the 256 MB disk: retries would meet a real full disk"
    );
    drop(db);
    sqlx::query(&format!("DROP TABLESPACE {space}"))
        .execute(&admin)
        .await
        .unwrap();
    assert!(
        !seen.refused.is_empty(),
        "a full tablespace refused nothing"
    );
    let reason = health
        .unavailable
        .expect("/healthz answered 503 while full");
    assert!(reason.contains("the disk is full"), "{reason}");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("oncehook_commit_failures_total")
                && l.contains("cause=\"disk_full\"")),
        "{metrics}"
    );
}

/// A real SQLITE_FULL: a connection limited to the pages the file has, asked to grow it.
async fn a_disk_full_error(url: &str) -> anyhow::Error {
    use sqlx::ConnectOptions;
    let options: sqlx::sqlite::SqliteConnectOptions = url.parse().unwrap();
    let mut conn = options.connect().await.unwrap();
    let pages: i64 = sqlx::query_scalar("PRAGMA page_count")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    sqlx::query(&format!("PRAGMA max_page_count = {pages}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let error = sqlx::query("CREATE TABLE filler AS SELECT randomblob(1000000) AS b")
        .execute(&mut conn)
        .await
        .expect_err("the file may not grow");
    anyhow::Error::from(error).context("ingest commit")
}

/// While a writer cannot commit, the overview starts with a red banner saying why and
/// since when; the writer's next commit takes it away.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn while_commits_fail_the_overview_shows_why_and_since_when() {
    use oncehook::store::health::{Cause, Writer};
    let app = common::TestApp::spawn(common::Kind::Sqlite).await;
    let cookie = app.sign_in("ana", app::backend::Role::Viewer).await;
    let (status, page) = app.page("/", &cookie).await;
    assert_eq!(status, 200);
    assert!(!page.contains("storage-outage"), "no banner while healthy");

    let error = a_disk_full_error(&app.db_handle.url).await;
    assert_eq!(Cause::of(&error), Cause::DiskFull, "{error:#}");
    app.db
        .health()
        .failed(Writer::Receipts, &error, oncehook::store::now_ms() - 90_000);
    let (_, page) = app.page("/", &cookie).await;
    assert!(page.contains("id=\"storage-outage\""), "{page}");
    assert!(
        page.contains("The database cannot commit: the disk is full"),
        "{page}"
    );
    assert!(page.contains("1 min ago") || page.contains("90 s ago") || page.contains("ago"));
    let health = app
        .http
        .get(format!("{}/healthz", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 503);
    assert_eq!(health.headers()["retry-after"], "5");
    assert!(health.text().await.unwrap().contains("the disk is full"));

    app.db
        .health()
        .succeeded(Writer::Receipts, oncehook::store::now_ms());
    let (_, page) = app.page("/", &cookie).await;
    assert!(!page.contains("storage-outage"), "all clear by itself");
    let health = app
        .http
        .get(format!("{}/healthz", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}

/// One alert when commits start failing, one when they succeed again; an outage that
/// starts again within `min_interval_secs` is logged, not posted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_alerts_once_and_once_more_when_it_ends() {
    use oncehook::store::health::{CommitHealth, Writer};
    let posts = Arc::new(Mutex::new(Vec::<String>::new()));
    let hook = {
        let posts = posts.clone();
        axum::Router::new().route(
            "/hook",
            axum::routing::post(move |axum::Json(body): axum::Json<serde_json::Value>| {
                let posts = posts.clone();
                async move {
                    posts
                        .lock()
                        .unwrap()
                        .push(body["text"].as_str().unwrap_or_default().to_string());
                }
            }),
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, hook).await });

    let health = Arc::new(CommitHealth::default());
    let stop = CancellationToken::new();
    let watcher = oncehook::pipeline::alerts::watch_commits(
        oncehook::pipeline::alerts::AlertSettings {
            webhook_url: Some(url),
            min_interval_secs: 60,
        },
        health.subscribe(),
        stop.clone(),
    );
    let wait_for = |n: usize| {
        let posts = posts.clone();
        async move {
            for _ in 0..100 {
                if posts.lock().unwrap().len() >= n {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let error = anyhow::anyhow!("database or disk is full");
    let now = oncehook::store::now_ms();
    for i in 0..50 {
        health.failed(Writer::Receipts, &error, now + i);
    }
    wait_for(1).await;
    health.succeeded(Writer::Receipts, now + 5_000);
    wait_for(2).await;
    // It starts again at once: logged, not posted (and so its end is not posted either).
    health.failed(Writer::Processor, &error, now + 6_000);
    health.succeeded(Writer::Processor, now + 7_000);
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.cancel();
    watcher.await.unwrap();
    let posts = posts.lock().unwrap().clone();
    assert_eq!(posts.len(), 2, "{posts:?}");
    assert!(posts[0].contains("cannot commit"), "{}", posts[0]);
    assert!(posts[1].contains("commits again"), "{}", posts[1]);
}
