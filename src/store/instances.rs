//! Crash recovery in seconds: every `serve` process is a row in `instances` with a
//! heartbeat, and its claims (inbox rows 'processing', outbox rows 'delivering') carry its
//! id. When an instance's heartbeat is older than `STALE_MS`, any other instance releases
//! its claims at once instead of letting them wait out their lease. SQLite is used by one
//! process: at start-up it releases every earlier claim.
//!
//! On PostgreSQL an instance also holds a liveness lock (a session advisory lock on a
//! connection of its own, named in its `instances` row): PostgreSQL drops it the moment the
//! process's connection closes, kill -9 included, so a restarted instance, or a peer at its
//! next heartbeat, takes back a crashed instance's claims at once rather than after
//! `STALE_MS`. The heartbeat rule stays for instances holding none (older versions) and for
//! a process that hangs with its connections open.
//!
//! Releasing is safe even if the instance was only slow, not dead: every finishing UPDATE
//! is fenced on the claim's attempt number and status, and effects are keyed, so a late
//! finisher changes nothing.

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::Connection;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{now_ms, Backend, Db};

/// How often an instance beats and looks for dead peers.
pub const HEARTBEAT_MS: u64 = 1_000;
/// A heartbeat older than this means the instance is gone.
pub const STALE_MS: i64 = 3_000;

/// Rows released, per queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Released {
    pub inbox: u64,
    pub outbox: u64,
}

/// The advisory lock namespace (`classid` of the two-key form): "oh" + 18 (this issue).
const LIVENESS_CLASS: i32 = 0x6f68_0012;

/// Instances of this process that hold their liveness lock: only those advertise it.
static HOLDING: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Default::default);

/// The lock's `objid` for an instance: derived from its id, so a peer can test it.
fn liveness_key(instance_id: &str) -> i32 {
    let digest = Sha256::digest(instance_id.as_bytes());
    i32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

fn holds_liveness(db: &Db) -> bool {
    HOLDING
        .lock()
        .map(|h| h.contains(db.instance_id()))
        .unwrap_or(false)
}

async fn beat(db: &Db, now: i64) -> anyhow::Result<()> {
    let lock = holds_liveness(db).then(|| i64::from(liveness_key(db.instance_id())));
    sqlx::query(
        "INSERT INTO instances (instance_id, started_at, heartbeat_at, liveness_lock) \
         VALUES ($1, $2, $2, $3) ON CONFLICT (instance_id) DO UPDATE SET \
         heartbeat_at = excluded.heartbeat_at, liveness_lock = excluded.liveness_lock",
    )
    .bind(db.instance_id())
    .bind(now)
    .bind(lock)
    .execute(db.writer())
    .await?;
    Ok(())
}

/// Takes this instance's liveness lock on a PostgreSQL connection of its own and holds it
/// until `shutdown` (reconnecting if that connection breaks). Call before
/// `recover_at_start`, whose first heartbeat then advertises it. `None` on SQLite, or when
/// the lock is taken (a key collision): the heartbeat rule alone applies then.
pub async fn hold_liveness(
    db: &Db,
    shutdown: CancellationToken,
) -> anyhow::Result<Option<JoinHandle<()>>> {
    if db.backend != Backend::Postgres {
        return Ok(None);
    }
    let key = liveness_key(db.instance_id());
    let Some(conn) = take_liveness(db.url(), key).await? else {
        warn!(
            "liveness lock already held by another session; crash recovery waits for the heartbeat"
        );
        return Ok(None);
    };
    if let Ok(mut held) = HOLDING.lock() {
        held.insert(db.instance_id().to_string());
    }
    let db = db.clone();
    Ok(Some(tokio::spawn(async move {
        let mut conn = Some(conn);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(HEARTBEAT_MS * 5)) => {}
                _ = shutdown.cancelled() => break,
            }
            let alive = match conn.as_mut() {
                Some(c) => c.ping().await.is_ok(),
                None => false,
            };
            if !alive {
                warn!("liveness connection lost; taking the lock again");
                conn = take_liveness(db.url(), key).await.ok().flatten();
            }
        }
        // Let go only once the heartbeat has removed our row at shutdown: before that a
        // peer would read the released lock as a crash and take back claims our workers
        // are still finishing.
        for _ in 0..250 {
            let row: Result<Option<i64>, _> =
                sqlx::query_scalar("SELECT heartbeat_at FROM instances WHERE instance_id = $1")
                    .bind(db.instance_id())
                    .fetch_optional(db.writer())
                    .await;
            if !matches!(row, Ok(Some(_))) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if let Ok(mut held) = HOLDING.lock() {
            held.remove(db.instance_id());
        }
        if let Some(conn) = conn {
            let _ = conn.close().await;
        }
    })))
}

async fn take_liveness(url: &str, key: i32) -> anyhow::Result<Option<sqlx::PgConnection>> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, $2)")
        .bind(LIVENESS_CLASS)
        .bind(key)
        .fetch_one(&mut conn)
        .await?;
    Ok(got.then_some(conn))
}

/// Whether an instance that advertises a liveness lock still holds it: if we can take it,
/// its session is gone (we let go of it at once).
async fn liveness_released(db: &Db, key: i64) -> anyhow::Result<bool> {
    let Ok(key) = i32::try_from(key) else {
        return Ok(false);
    };
    let mut conn = db.writer().acquire().await?;
    let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, $2)")
        .bind(LIVENESS_CLASS)
        .bind(key)
        .fetch_one(&mut *conn)
        .await?;
    if got {
        sqlx::query("SELECT pg_advisory_unlock($1, $2)")
            .bind(LIVENESS_CLASS)
            .bind(key)
            .execute(&mut *conn)
            .await?;
    }
    Ok(got)
}

/// Releases the claims whose `claimed_by` matches `filter` (a SQL condition on
/// `claimed_by` with `$2` as its parameter, if any).
async fn release(db: &Db, filter: &str, param: Option<&str>, now: i64) -> anyhow::Result<Released> {
    let mut released = Released::default();
    for (table, claimed, slot) in [
        ("inbox_events", "processing", &mut released.inbox),
        ("outbox", "delivering", &mut released.outbox),
    ] {
        let sql = format!(
            "UPDATE {table} SET status = 'pending', next_attempt_at = $1, claimed_by = NULL \
             WHERE status = '{claimed}' AND {filter}"
        );
        let mut query = sqlx::query(&sql).bind(now);
        if let Some(p) = param {
            query = query.bind(p);
        }
        *slot = query.execute(db.writer()).await?.rows_affected();
    }
    Ok(released)
}

/// At start-up, before any worker claims: on SQLite (one process) every earlier claim is
/// released; on PostgreSQL this instance registers, and claims of instances already dead
/// are released.
pub async fn recover_at_start(db: &Db) -> anyhow::Result<Released> {
    let now = now_ms();
    let released = match db.backend {
        Backend::Sqlite => {
            let r = release(
                db,
                "(claimed_by IS NULL OR claimed_by <> $2)",
                Some(db.instance_id()),
                now,
            )
            .await?;
            sqlx::query("DELETE FROM instances WHERE instance_id <> $1")
                .bind(db.instance_id())
                .execute(db.writer())
                .await?;
            r
        }
        Backend::Postgres => release_dead_peers(db, now).await?,
    };
    beat(db, now).await?;
    if released != Released::default() {
        info!(
            inbox = released.inbox,
            outbox = released.outbox,
            "released claims of a stopped instance"
        );
    }
    Ok(released)
}

/// Releases the claims of every instance that is gone (its liveness lock released, or its
/// heartbeat older than `STALE_MS`), and forgets those instances.
pub async fn release_dead_peers(db: &Db, now: i64) -> anyhow::Result<Released> {
    let peers: Vec<(String, i64, Option<i64>)> = sqlx::query_as(
        "SELECT instance_id, heartbeat_at, liveness_lock FROM instances WHERE instance_id <> $1",
    )
    .bind(db.instance_id())
    .fetch_all(db.writer())
    .await?;
    let mut dead = Vec::new();
    for (id, heartbeat_at, lock) in peers {
        let stale = heartbeat_at < now - STALE_MS;
        let released = match lock {
            Some(key) if !stale => liveness_released(db, key).await?,
            _ => false,
        };
        if stale || released {
            dead.push((id, heartbeat_at));
        }
    }
    let mut total = Released::default();
    for (id, heartbeat_at) in dead {
        let r = release(db, "claimed_by = $2", Some(&id), now).await?;
        // Only the row as we judged it: a live instance that beat meanwhile stays.
        sqlx::query("DELETE FROM instances WHERE instance_id = $1 AND heartbeat_at = $2")
            .bind(&id)
            .bind(heartbeat_at)
            .execute(db.writer())
            .await?;
        if r != Released::default() {
            warn!(instance = %id, inbox = r.inbox, outbox = r.outbox,
                  "instance stopped heartbeating: released its claims");
        }
        total.inbox += r.inbox;
        total.outbox += r.outbox;
    }
    Ok(total)
}

/// Heartbeats and watches for dead peers until `shutdown`, then removes this instance's
/// row (its claims were finished by the graceful stop).
pub fn spawn_heartbeat(db: Db, shutdown: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(HEARTBEAT_MS));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.cancelled() => break,
            }
            let now = now_ms();
            // The heartbeat is also the probe that sees the disk come back (store::health).
            if let Err(e) = db
                .health()
                .record(super::health::Writer::Heartbeat, beat(&db, now).await)
            {
                warn!(error = %e, "heartbeat failed");
                continue;
            }
            if db.backend == Backend::Postgres {
                if let Err(e) = release_dead_peers(&db, now).await {
                    warn!(error = %e, "releasing claims of stopped instances failed");
                }
            }
        }
        let _ = sqlx::query("DELETE FROM instances WHERE instance_id = $1")
            .bind(db.instance_id())
            .execute(db.writer())
            .await;
    })
}
