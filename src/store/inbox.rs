//! The inbox as a queue: claim due rows with a lease, then finish each one with an UPDATE
//! fenced on the claim's attempt number, so a worker whose lease expired cannot overwrite
//! the work of the worker that claimed the row after it.

use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};

use super::Db;

/// An inbox row claimed for processing.
#[derive(Clone, Debug)]
pub struct Claimed {
    pub id: i64,
    pub provider: String,
    pub event_id: String,
    pub raw_body: Vec<u8>,
    pub correlation_id: String,
    /// The fence: this claim's attempt number.
    pub attempt: i64,
}

/// How an event was filed. The strings are the inbox `status` column's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filed {
    Applied,
    Duplicate,
    Stale,
    Refused,
    Ignored,
    Failed,
}

impl Filed {
    pub fn as_str(self) -> &'static str {
        match self {
            Filed::Applied => "applied",
            Filed::Duplicate => "duplicate",
            Filed::Stale => "stale",
            Filed::Refused => "refused",
            Filed::Ignored => "ignored",
            Filed::Failed => "failed",
        }
    }
}

fn claimed(row: AnyRow) -> Result<Claimed, sqlx::Error> {
    Ok(Claimed {
        id: row.try_get("id")?,
        provider: row.try_get("provider")?,
        event_id: row.try_get("event_id")?,
        raw_body: row.try_get("raw_body")?,
        correlation_id: row.try_get("correlation_id")?,
        attempt: row.try_get("attempts")?,
    })
}

/// Claims up to `limit` due rows (new, retry due, or lease expired) until `lease_until`.
pub async fn claim(
    db: &Db,
    now: i64,
    lease_until: i64,
    limit: i64,
) -> anyhow::Result<Vec<Claimed>> {
    let sql = format!(
        "UPDATE inbox_events SET status = 'processing', attempts = attempts + 1, \
         next_attempt_at = $1 \
         WHERE id IN (SELECT id FROM inbox_events \
             WHERE status IN ('pending', 'processing') AND next_attempt_at <= $2 \
             ORDER BY next_attempt_at, id LIMIT $3 {}) \
         RETURNING id, provider, event_id, raw_body, correlation_id, attempts",
        db.skip_locked()
    );
    let rows = sqlx::query(&sql)
        .bind(lease_until)
        .bind(now)
        .bind(limit)
        .fetch_all(db.writer())
        .await?;
    let mut claims = rows
        .into_iter()
        .map(claimed)
        .collect::<Result<Vec<_>, _>>()?;
    claims.sort_by_key(|c| c.id);
    Ok(claims)
}

/// The final word on an event. Returns false when the claim was fenced off (another
/// worker owns the row now): the caller must roll back.
pub async fn file<'e, E>(
    executor: E,
    claim: &Claimed,
    filed: Filed,
    reason: Option<&str>,
    order_id: Option<&str>,
    effect_key: Option<&str>,
    now: i64,
) -> anyhow::Result<bool>
where
    E: Executor<'e, Database = Any>,
{
    let done = sqlx::query(
        "UPDATE inbox_events SET status = $1, reason = $2, order_id = $3, effect_key = $4, \
         processed_at = $5 WHERE id = $6 AND attempts = $7 AND status = 'processing'",
    )
    .bind(filed.as_str())
    .bind(reason)
    .bind(order_id)
    .bind(effect_key)
    .bind(now)
    .bind(claim.id)
    .bind(claim.attempt)
    .execute(executor)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Puts a claimed row back in the queue, due at `next_attempt_at`, with the reason shown.
pub async fn retry_later(
    db: &Db,
    claim: &Claimed,
    next_attempt_at: i64,
    reason: &str,
) -> anyhow::Result<bool> {
    let done = sqlx::query(
        "UPDATE inbox_events SET status = 'pending', next_attempt_at = $1, reason = $2 \
         WHERE id = $3 AND attempts = $4 AND status = 'processing'",
    )
    .bind(next_attempt_at)
    .bind(reason)
    .bind(claim.id)
    .bind(claim.attempt)
    .execute(db.writer())
    .await?;
    Ok(done.rows_affected() == 1)
}
