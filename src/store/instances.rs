//! Crash recovery in seconds: every `serve` process is a row in `instances` with a
//! heartbeat, and its claims (inbox rows 'processing', outbox rows 'delivering') carry its
//! id. When an instance's heartbeat is older than `STALE_MS`, any other instance releases
//! its claims at once instead of letting them wait out their lease. SQLite is used by one
//! process: at start-up it releases every earlier claim.
//!
//! Releasing is safe even if the instance was only slow, not dead: every finishing UPDATE
//! is fenced on the claim's attempt number and status, and effects are keyed, so a late
//! finisher changes nothing.

use std::time::Duration;

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

async fn beat(db: &Db, now: i64) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO instances (instance_id, started_at, heartbeat_at) VALUES ($1, $2, $2) \
         ON CONFLICT (instance_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at",
    )
    .bind(db.instance_id())
    .bind(now)
    .execute(db.writer())
    .await?;
    Ok(())
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

/// Releases the claims of every instance whose heartbeat is older than `STALE_MS`, and
/// forgets those instances.
pub async fn release_dead_peers(db: &Db, now: i64) -> anyhow::Result<Released> {
    let dead: Vec<String> = sqlx::query_scalar(
        "SELECT instance_id FROM instances WHERE heartbeat_at < $1 AND instance_id <> $2",
    )
    .bind(now - STALE_MS)
    .bind(db.instance_id())
    .fetch_all(db.writer())
    .await?;
    let mut total = Released::default();
    for id in dead {
        let r = release(db, "claimed_by = $2", Some(&id), now).await?;
        sqlx::query("DELETE FROM instances WHERE instance_id = $1 AND heartbeat_at < $2")
            .bind(&id)
            .bind(now - STALE_MS)
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
            if let Err(e) = beat(&db, now).await {
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
