//! The inbox as a queue: claim due rows with a lease, then finish each one with an UPDATE
//! fenced on the claim's attempt number, so a worker whose lease expired cannot overwrite
//! the work of the worker that claimed the row after it.

use sqlx::any::AnyRow;
use sqlx::{Any, AnyConnection, Connection, Executor, Row};

use super::Db;

/// An inbox row claimed for processing.
#[derive(Clone, Debug)]
pub struct Claimed {
    pub id: i64,
    pub provider: String,
    pub event_id: String,
    pub raw_body: Vec<u8>,
    pub correlation_id: String,
    pub event_type: Option<String>,
    pub received_at: i64,
    /// The fence: this claim's attempt number.
    pub attempt: i64,
    /// `attempt` at the last redrive: attempts since then count against the retry limit.
    pub retries_base: i64,
    /// Errors of earlier attempts (JSON array), if any.
    pub error_history: Option<String>,
}

impl Claimed {
    /// Attempts that count against the retry limit (1 on the first).
    pub fn budget_attempt(&self) -> i64 {
        self.attempt - self.retries_base
    }
}

/// How an event was filed. The strings are the inbox `status` column's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filed {
    Applied,
    Duplicate,
    Stale,
    Refused,
    Ignored,
    /// In the dead-letter queue.
    Dead,
}

impl Filed {
    pub fn as_str(self) -> &'static str {
        match self {
            Filed::Applied => "applied",
            Filed::Duplicate => "duplicate",
            Filed::Stale => "stale",
            Filed::Refused => "refused",
            Filed::Ignored => "ignored",
            Filed::Dead => "dead",
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
        event_type: row.try_get("event_type")?,
        received_at: row.try_get("received_at")?,
        attempt: row.try_get("attempts")?,
        retries_base: row.try_get("retries_base")?,
        error_history: row.try_get("error_history")?,
    })
}

/// Claims up to `limit` due rows (new, retry due, or lease expired) until `lease_until`,
/// in a commit of its own.
pub async fn claim(
    db: &Db,
    now: i64,
    lease_until: i64,
    limit: i64,
) -> anyhow::Result<Vec<Claimed>> {
    claim_in(db.writer(), db, now, lease_until, limit).await
}

/// The same claim through `executor`: inside the caller's transaction (`queue::claim`),
/// for a batch that is claimed and applied in one commit.
pub async fn claim_in<'e, E>(
    executor: E,
    db: &Db,
    now: i64,
    lease_until: i64,
    limit: i64,
) -> anyhow::Result<Vec<Claimed>>
where
    E: Executor<'e, Database = Any>,
{
    let rows = super::queue::claim(
        executor,
        db,
        "inbox_events",
        "processing",
        "id, provider, event_id, event_type, raw_body, correlation_id, received_at, attempts, \
         retries_base, error_history",
        (now, lease_until, limit),
    )
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

/// Puts a claimed row back in the queue, due at `next_attempt_at`, with the reason shown
/// and, when it was a failure, added to the row's error history.
pub async fn retry_later(
    conn: &mut AnyConnection,
    claim: &Claimed,
    next_attempt_at: i64,
    reason: &str,
    failure: Option<crate::failure::ErrorClass>,
) -> anyhow::Result<bool> {
    let history = match failure {
        Some(class) => Some(super::dead_letters::append_history(
            claim.error_history.as_deref(),
            super::now_ms(),
            class,
            reason,
        )),
        None => claim.error_history.clone(),
    };
    let done = sqlx::query(
        "UPDATE inbox_events SET status = 'pending', next_attempt_at = $1, reason = $2, \
         error_history = $5 WHERE id = $3 AND attempts = $4 AND status = 'processing'",
    )
    .bind(next_attempt_at)
    .bind(reason)
    .bind(claim.id)
    .bind(claim.attempt)
    .bind(history)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Moves a claimed event to the dead-letter queue: the inbox row is filed `dead` and the
/// dead letter written in one transaction. Returns the dead letter's id, or `None` when
/// the claim was fenced off.
pub async fn dead_letter(
    conn: &mut AnyConnection,
    claim: &Claimed,
    failure: &crate::failure::Failure,
    order_id: Option<&str>,
    resolve_by: i64,
) -> anyhow::Result<Option<i64>> {
    let now = super::now_ms();
    let mut tx = conn.begin().await?;
    if !file(
        &mut *tx,
        claim,
        Filed::Dead,
        Some(&failure.message),
        order_id,
        None,
        now,
    )
    .await?
    {
        return Ok(None);
    }
    let id = super::dead_letters::put(
        &mut tx,
        &super::dead_letters::NewDeadLetter {
            stage: super::dead_letters::STAGE_PROCESSOR,
            sink: None,
            source_id: claim.id,
            provider: Some(&claim.provider),
            event_id: Some(&claim.event_id),
            event_type: claim.event_type.as_deref(),
            order_id,
            payload: &claim.raw_body,
            class: failure.class,
            error: &failure.message,
            earlier_errors: claim.error_history.as_deref(),
            attempts: claim.attempt,
            first_attempt_at: claim.received_at,
            correlation_id: &claim.correlation_id,
            now,
            resolve_by,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(Some(id))
}
