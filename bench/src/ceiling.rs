//! The same-run ceilings: what the database does with the receiver's and the processor's
//! writes, one event per transaction, with nothing in front of it. PostgreSQL through
//! pgbench and the scripts in scripts/bench/; SQLite through a bare sqlx loop on one
//! connection with the oncehook schema and the server's pragmas (WAL, synchronous=FULL).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;
use sha2::{Digest, Sha256};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection, Executor, Row};

use super::fixture::FreshDb;

pub const PG_INGEST: &str = include_str!("../../scripts/bench/pg_ingest.sql");
pub const PG_INGEST_TX: &str = include_str!("../../scripts/bench/pg_ingest_tx.sql");
pub const PG_PROCESS: &str = include_str!("../../scripts/bench/pg_process.sql");
pub const PG_PROCESS_BATCH: &str = include_str!("../../scripts/bench/pg_process_batch.sql");

/// One pgbench run.
#[derive(Clone, Debug)]
pub struct Pgbench {
    pub tps: f64,
    pub latency_ms: Option<f64>,
}

/// The outbox payload the processor writes for a payment (same fields and size).
pub fn outbox_payload() -> String {
    json!({
        "type": "order.paid",
        "order_id": "ord_0123456789_12345",
        "status": "paid",
        "transition": "pay",
        "amount": 4200,
        "currency": "EUR",
        "external_ref": "pi_3P0123456789000012345",
        "provider": "stripe",
        "event_id": "evt_3P0123456789000012345",
        "event_type": "payment_intent.succeeded",
        "occurred_at_ms": 1_718_900_000_000i64,
        "effect_key": hex::encode(Sha256::digest(b"key")),
        "idempotency_key": hex::encode(Sha256::digest(b"outbox")),
    })
    .to_string()
}

fn number_after(output: &str, prefix: &str) -> Option<f64> {
    output.lines().find_map(|l| {
        let rest = l.trim().strip_prefix(prefix)?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Runs one of the committed scripts (written to `dir` first, so the binary carries them).
pub async fn pgbench(
    program: &Path,
    dir: &Path,
    (script_name, script): (&str, &str),
    url: &str,
    clients: usize,
    duration: Duration,
    vars: &[(&str, &str)],
) -> anyhow::Result<Pgbench> {
    let path: PathBuf = dir.join(script_name);
    std::fs::write(&path, script).with_context(|| format!("writing {}", path.display()))?;
    let mut command = tokio::process::Command::new(program);
    command
        .arg("-n")
        // The set-based script creates a temporary table, which prepared mode cannot plan
        // ahead of.
        .args([
            "-M",
            if script_name.contains("batch") {
                "extended"
            } else {
                "prepared"
            },
        ])
        .arg("-f")
        .arg(&path)
        .args(["-c", &clients.to_string()])
        .args(["-j", &clients.min(super::sys::cores()).to_string()])
        .args(["-T", &duration.as_secs().max(1).to_string()]);
    for (k, v) in vars {
        command.arg("-D").arg(format!("{k}={v}"));
    }
    command
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let output = command
        .output()
        .await
        .with_context(|| format!("running {}", program.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(
        output.status.success(),
        "pgbench {script_name} with {clients} clients failed ({}):\n{stderr}{stdout}",
        output.status
    );
    let tps = number_after(&stdout, "tps =")
        .with_context(|| format!("no tps in pgbench's output:\n{stdout}"))?;
    let failed = number_after(&stdout, "number of failed transactions:").unwrap_or(0.0);
    anyhow::ensure!(
        failed == 0.0,
        "pgbench {script_name}: {failed} failed transactions:\n{stdout}"
    );
    Ok(Pgbench {
        tps,
        latency_ms: number_after(&stdout, "latency average ="),
    })
}

/// Fills a migrated PostgreSQL database with `rows` claimed inbox rows for pg_process.sql.
pub async fn prepare_pg_processing(url: &str, rows: u64, body: &[u8]) -> anyhow::Result<()> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    conn.execute("CREATE SEQUENCE bench_inbox_ids").await?;
    sqlx::query(
        "INSERT INTO inbox_events (provider, event_id, event_type, api_version, raw_body, \
         correlation_id, received_at, status, attempts, next_attempt_at) \
         SELECT 'stripe', 'evt_' || g, 'payment_intent.succeeded', '2024-06-20', $1, \
         'corr_' || g, 0, 'processing', 1, 9000000000000 FROM generate_series(1, $2) AS g",
    )
    .bind(body)
    .bind(rows as i64)
    .execute(&mut conn)
    .await?;
    conn.execute("ANALYZE").await?;
    conn.close().await?;
    Ok(())
}

async fn sqlite(db: &FreshDb) -> anyhow::Result<sqlx::SqliteConnection> {
    let path = db.sqlite_path.as_ref().context("a SQLite database")?;
    let mut conn = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(5))
        .connect()
        .await
        .context("opening the SQLite ceiling database")?;
    sqlx::migrate!("../migrations/sqlite")
        .run(&mut conn)
        .await
        .context("migrating the SQLite ceiling database")?;
    Ok(conn)
}

/// The SQLite library sqlx links (its bundled copy, usually), not the sqlite3 on PATH.
pub async fn sqlite_version() -> String {
    let version = async {
        let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:").await?;
        let v: String = sqlx::query_scalar("SELECT sqlite_version()")
            .fetch_one(&mut conn)
            .await?;
        anyhow::Ok(v)
    };
    version.await.unwrap_or_else(|_| "unknown".into())
}

const INBOX_INSERT: &str = "INSERT INTO inbox_events (provider, event_id, event_type, \
    api_version, raw_body, correlation_id, received_at, status, next_attempt_at) VALUES ";
const INBOX_CONFLICT: &str =
    " ON CONFLICT (provider, event_id) DO NOTHING RETURNING provider, event_id";
const DELIVERY_INSERT: &str = "INSERT INTO deliveries (provider, event_id, duplicate, \
    correlation_id, body_sha256, received_at) VALUES ";

/// The SQLite ingest ceiling: inbox row + delivery row per event, `per_tx` events per
/// transaction, for `duration`. Returns events per second.
pub async fn sqlite_ingest(
    db: &FreshDb,
    body: &[u8],
    per_tx: usize,
    duration: Duration,
) -> anyhow::Result<f64> {
    let mut conn = sqlite(db).await?;
    let sha = hex::encode(Sha256::digest(body));
    let inbox_sql = format!(
        "{INBOX_INSERT}{}{INBOX_CONFLICT}",
        oncehook::store::values_list(oncehook::store::Backend::Sqlite, per_tx, 9)
    );
    let delivery_sql = format!(
        "{DELIVERY_INSERT}{}",
        oncehook::store::values_list(oncehook::store::Backend::Sqlite, per_tx, 6)
    );
    let start = Instant::now();
    let mut n: u64 = 0;
    while start.elapsed() < duration {
        let now = oncehook::store::now_ms();
        let mut tx = conn.begin().await?;
        let mut inbox = sqlx::query(&inbox_sql);
        for i in 0..per_tx as u64 {
            inbox = inbox
                .bind("stripe")
                .bind(format!("evt_ceiling_{}", n + i))
                .bind("payment_intent.succeeded")
                .bind("2024-06-20")
                .bind(body)
                .bind(format!("corr_{}", n + i))
                .bind(now)
                .bind("pending")
                .bind(now);
        }
        let inserted = inbox.fetch_all(&mut *tx).await?.len();
        let mut log = sqlx::query(&delivery_sql);
        for i in 0..per_tx as u64 {
            log = log
                .bind("stripe")
                .bind(format!("evt_ceiling_{}", n + i))
                .bind(i64::from(inserted == 0))
                .bind(format!("corr_{}", n + i))
                .bind(&sha)
                .bind(now);
        }
        log.execute(&mut *tx).await?;
        tx.commit().await?;
        n += per_tx as u64;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    conn.close().await?;
    Ok(rate)
}

/// The SQLite processing ceiling: the processing transaction's statements (as in
/// pg_process.sql) one event per transaction on one connection. Returns events per second.
pub async fn sqlite_processing(
    db: &FreshDb,
    body: &[u8],
    duration: Duration,
    rows: u64,
) -> anyhow::Result<f64> {
    let mut conn = sqlite(db).await?;
    {
        let mut tx = conn.begin().await?;
        for g in 1..=rows as i64 {
            sqlx::query(
                "INSERT INTO inbox_events (id, provider, event_id, event_type, api_version, \
                 raw_body, correlation_id, received_at, status, attempts, next_attempt_at) \
                 VALUES ($1, 'stripe', 'evt_' || $1, 'payment_intent.succeeded', '2024-06-20', \
                 $2, 'corr_' || $1, 0, 'processing', 1, 9000000000000)",
            )
            .bind(g)
            .bind(body)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
    }
    let payload = outbox_payload();
    let occurred: i64 = 1_718_900_000_000;
    let start = Instant::now();
    let mut id: i64 = 0;
    while start.elapsed() < duration && (id as u64) < rows {
        id += 1;
        let now = oncehook::store::now_ms();
        let order = format!("ord_{id}");
        let pi = format!("pi_{id}");
        let event = format!("evt_{id}");
        let key = hex::encode(Sha256::digest(format!("pay|{order}|{pi}")));
        let mut tx = conn.begin().await?;
        let won = sqlx::query(
            "INSERT INTO processed_effects (effect_key, transition, order_id, external_ref, \
             provider, event_id, outcome, applied_at) VALUES ($1, 'pay', $2, $3, 'stripe', $4, \
             'applied', $5) ON CONFLICT (effect_key) DO NOTHING RETURNING effect_key",
        )
        .bind(&key)
        .bind(&order)
        .bind(&pi)
        .bind(&event)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        anyhow::ensure!(won.is_some(), "effect keys are fresh");
        // A new order is written with its final state; its one fact beside it.
        sqlx::query(
            "INSERT INTO orders (order_id, status, currency, amount_paid, amount_refunded, \
             amount_disputed, attention, last_event_at, last_event_id, created_at, updated_at) \
             VALUES ($1, 'paid', 'EUR', 4200, 0, 0, NULL, $2, $3, $4, $4) \
             ON CONFLICT (order_id) DO NOTHING",
        )
        .bind(&order)
        .bind(occurred)
        .bind(&event)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO order_facts (kind, resource_id, parent_ref, state, at_ms, sequence, \
             rank, amount, money_seen, canceled_at, class, order_id, provider, event_id, \
             created_at, updated_at) VALUES ('payment', $1, NULL, 'pay', $2, NULL, 4, 4200, 1, \
             NULL, 1, $3, 'stripe', $4, $5, $5) ON CONFLICT (order_id, kind, resource_id) DO NOTHING",
        )
        .bind(&pi)
        .bind(occurred)
        .bind(&order)
        .bind(&event)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO order_ledger (order_id, transition, status_after, amount, currency, \
             external_ref, effect_key, provider, event_id, occurred_at, recorded_at, entry, \
             group_ref, counted) \
             VALUES ($1, 'pay', 'paid', 4200, 'EUR', $2, $3, 'stripe', $4, $5, $6, 'payment', \
             NULL, 4200)",
        )
        .bind(&order)
        .bind(&pi)
        .bind(&key)
        .bind(&event)
        .bind(occurred)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        // Two messages: the fact (payment.recorded) and the status change (order.paid).
        for topic in ["payment.recorded", "order.paid"] {
            sqlx::query(
                "INSERT INTO outbox (idempotency_key, effect_key, order_id, topic, sink, payload, \
                 correlation_id, status, next_attempt_at, created_at) \
                 VALUES ($1, $2, $3, $4, 'log', $5, $6, 'pending', $7, $7)",
            )
            .bind(hex::encode(Sha256::digest(format!("{key}|log|{topic}"))))
            .bind(&key)
            .bind(&order)
            .bind(topic)
            .bind(&payload)
            .bind(format!("corr_{id}"))
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query(
            "INSERT INTO payment_refs (provider, reference, order_id) VALUES ('stripe', $1, $2) \
             ON CONFLICT (provider, reference) DO NOTHING",
        )
        .bind(&pi)
        .bind(&order)
        .execute(&mut *tx)
        .await?;
        let filed = sqlx::query(
            "UPDATE inbox_events SET status = 'applied', reason = NULL, order_id = $1, \
             effect_key = $2, processed_at = $3 WHERE id = $4 AND attempts = 1 \
             AND status = 'processing'",
        )
        .bind(&order)
        .bind(&key)
        .bind(now)
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        anyhow::ensure!(filed == 1, "inbox row {id} is claimed");
        tx.commit().await?;
    }
    let rate = id as f64 / start.elapsed().as_secs_f64();
    let applied: i64 = conn
        .fetch_one("SELECT COUNT(*) FROM inbox_events WHERE status = 'applied'")
        .await?
        .try_get(0)?;
    anyhow::ensure!(applied == id, "{applied} of {id} rows filed");
    conn.close().await?;
    Ok(rate)
}
