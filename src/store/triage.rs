//! Reads for the dashboard's dead-letter page that the CLI does not need: open count and
//! oldest age, and recent redrives with what became of their items.

use sqlx::Row;

use super::read::rfc3339;
use super::Db;

/// Open dead letters and the creation time (Unix ms) of the oldest.
pub async fn open_stats(db: &Db) -> anyhow::Result<(i64, Option<i64>)> {
    let row =
        sqlx::query("SELECT COUNT(*), MIN(created_at) FROM dead_letters WHERE status = 'open'")
            .fetch_one(db.reader())
            .await?;
    Ok((row.try_get(0)?, row.try_get(1)?))
}

/// How long dead letters closed since `since_ms` (redriven, resolved or discarded) stayed
/// open: (how many, mean ms, p95 ms). A closed dead letter's `updated_at` is its closing.
pub async fn time_to_close(
    db: &Db,
    since_ms: i64,
) -> anyhow::Result<(i64, Option<i64>, Option<i64>)> {
    const CLOSED: &str = "status IN ('redriven', 'resolved', 'discarded') AND updated_at >= $1";
    let row = sqlx::query(&format!(
        "SELECT COUNT(*), CAST(AVG(updated_at - created_at) AS BIGINT) FROM dead_letters WHERE {CLOSED}"
    ))
    .bind(since_ms)
    .fetch_one(db.reader())
    .await?;
    let (count, mean): (i64, Option<i64>) = (row.try_get(0)?, row.try_get(1)?);
    if count == 0 {
        return Ok((0, None, None));
    }
    // The nearest-rank p95: the ceil(0.95 n)-th smallest.
    let rank = ((count as f64) * 0.95).ceil() as i64 - 1;
    let p95: i64 = sqlx::query(&format!(
        "SELECT updated_at - created_at FROM dead_letters WHERE {CLOSED} \
         ORDER BY updated_at - created_at LIMIT 1 OFFSET $2"
    ))
    .bind(since_ms)
    .bind(rank.max(0))
    .fetch_one(db.reader())
    .await?
    .try_get(0)?;
    Ok((count, mean, Some(p95)))
}

pub struct RecentRedrive {
    pub dead_letter_id: i64,
    pub event_id: Option<String>,
    pub actor: String,
    pub reason: Option<String>,
    pub outcome: String,
    pub at: String,
    pub current_status: Option<String>,
}

/// The latest real (not dry-run) redrives, newest first, with their item's status now.
pub async fn recent_redrives(db: &Db, limit: i64) -> anyhow::Result<Vec<RecentRedrive>> {
    let rows = sqlx::query(
        "SELECT r.dead_letter_id, d.event_id, r.actor, r.reason, r.outcome, r.at, \
                COALESCE(i.status, o.status) \
         FROM redrives r \
         JOIN dead_letters d ON d.id = r.dead_letter_id \
         LEFT JOIN inbox_events i ON d.stage = 'processor' AND i.id = d.source_id \
         LEFT JOIN outbox o ON d.stage = 'outbox' AND o.id = d.source_id \
         WHERE r.dry_run = 0 ORDER BY r.id DESC LIMIT $1",
    )
    .bind(limit)
    .fetch_all(db.reader())
    .await?;
    rows.iter()
        .map(|r| {
            Ok(RecentRedrive {
                dead_letter_id: r.try_get(0)?,
                event_id: r.try_get(1)?,
                actor: r.try_get(2)?,
                reason: r.try_get(3)?,
                outcome: r.try_get(4)?,
                at: rfc3339(r.try_get(5)?),
                current_status: r.try_get(6)?,
            })
        })
        .collect()
}

/// A real (not dry-run) redrive of one of an order's dead letters.
#[derive(Clone, Debug, PartialEq)]
pub struct OrderRedrive {
    pub dead_letter_id: i64,
    pub actor: String,
    pub reason: Option<String>,
    pub outcome: String,
    pub at: String,
}

/// The redrives of an order's dead letters, oldest first.
pub async fn redrives_of_order(db: &Db, order_id: &str) -> anyhow::Result<Vec<OrderRedrive>> {
    let rows = sqlx::query(&format!(
        "SELECT r.dead_letter_id, r.actor, r.reason, r.outcome, r.at FROM redrives r \
         WHERE r.dead_letter_id IN ({}) AND r.dry_run = 0 ORDER BY r.id",
        super::dead_letters::ORDER_DEAD_LETTER_IDS
    ))
    .bind(order_id)
    .fetch_all(db.reader())
    .await?;
    rows.iter()
        .map(|r| {
            Ok(OrderRedrive {
                dead_letter_id: r.try_get(0)?,
                actor: r.try_get(1)?,
                reason: r.try_get(2)?,
                outcome: r.try_get(3)?,
                at: rfc3339(r.try_get(4)?),
            })
        })
        .collect()
}

/// Events waiting to be processed (pending or claimed) and the receipt time (Unix ms) of
/// the oldest.
pub async fn inbox_waiting(db: &Db) -> anyhow::Result<(i64, Option<i64>)> {
    count_and_oldest(
        db,
        "SELECT COUNT(*), MIN(received_at) FROM inbox_events \
         WHERE status IN ('pending', 'processing')",
    )
    .await
}

/// Outbox messages waiting to be delivered and the creation time (Unix ms) of the oldest.
pub async fn outbox_waiting(db: &Db) -> anyhow::Result<(i64, Option<i64>)> {
    count_and_oldest(
        db,
        "SELECT COUNT(*), MIN(created_at) FROM outbox WHERE status IN ('pending', 'delivering')",
    )
    .await
}

async fn count_and_oldest(db: &Db, sql: &str) -> anyhow::Result<(i64, Option<i64>)> {
    let row = sqlx::query(sql).fetch_one(db.reader()).await?;
    Ok((row.try_get(0)?, row.try_get(1)?))
}

/// One dead letter's error history (JSON array, as the processor or relay kept it) and its
/// real (not dry-run) redrives, oldest first; `None` when there is no such dead letter.
pub async fn history(
    db: &Db,
    id: i64,
) -> anyhow::Result<Option<(String, Vec<super::dead_letters::RedriveRecord>)>> {
    let Some(row) = sqlx::query("SELECT error_history FROM dead_letters WHERE id = $1")
        .bind(id)
        .fetch_optional(db.reader())
        .await?
    else {
        return Ok(None);
    };
    let redrives = sqlx::query(
        "SELECT actor, reason, outcome, at FROM redrives \
         WHERE dead_letter_id = $1 AND dry_run = 0 ORDER BY id",
    )
    .bind(id)
    .fetch_all(db.reader())
    .await?
    .iter()
    .map(|r| {
        Ok(super::dead_letters::RedriveRecord {
            actor: r.try_get(0)?,
            reason: r.try_get(1)?,
            outcome: r.try_get(2)?,
            at: rfc3339(r.try_get(3)?),
        })
    })
    .collect::<Result<_, sqlx::Error>>()?;
    Ok(Some((row.try_get(0)?, redrives)))
}

/// Open dead letters whose deadline is before `at` (Unix ms).
pub async fn open_due_before(db: &Db, at: i64) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT COUNT(*) FROM dead_letters WHERE status = 'open' AND resolve_by < $1",
    )
    .bind(at)
    .fetch_one(db.reader())
    .await?)
}
