//! Outbox rows as a queue for the relay: lease, heartbeat, attempts, and the fenced
//! final word (delivered, retry later, or dead-lettered).

use sqlx::any::AnyRow;
use sqlx::Row;

use std::collections::BTreeSet;

use super::dead_letters::{self, NewDeadLetter, STAGE_OUTBOX};
use super::values::{run_values, Val};
use super::Db;
use crate::domain::failure::Failure;

#[derive(Clone, Debug)]
pub struct OutboxItem {
    pub id: i64,
    pub idempotency_key: String,
    pub effect_key: String,
    pub order_id: String,
    pub topic: String,
    pub sink: String,
    pub payload: String,
    pub correlation_id: String,
    pub created_at: i64,
    /// The fence of this lease.
    pub attempt: i64,
    pub retries_base: i64,
}

impl OutboxItem {
    pub fn budget_attempt(&self) -> i64 {
        self.attempt - self.retries_base
    }
}

fn item(row: AnyRow) -> Result<OutboxItem, sqlx::Error> {
    Ok(OutboxItem {
        id: row.try_get("id")?,
        idempotency_key: row.try_get("idempotency_key")?,
        effect_key: row.try_get("effect_key")?,
        order_id: row.try_get("order_id")?,
        topic: row.try_get("topic")?,
        sink: row.try_get("sink")?,
        payload: row.try_get("payload")?,
        correlation_id: row.try_get("correlation_id")?,
        created_at: row.try_get("created_at")?,
        attempt: row.try_get("attempts")?,
        retries_base: row.try_get("retries_base")?,
    })
}

pub async fn claim(
    db: &Db,
    now: i64,
    lease_until: i64,
    limit: i64,
) -> anyhow::Result<Vec<OutboxItem>> {
    let rows = super::queue::claim(
        db.writer(),
        db,
        "outbox",
        "delivering",
        "id, idempotency_key, effect_key, order_id, topic, sink, payload, correlation_id, \
         created_at, attempts, retries_base",
        (now, lease_until, limit),
    )
    .await?;
    let mut claims = rows.into_iter().map(item).collect::<Result<Vec<_>, _>>()?;
    claims.sort_by_key(|c| c.id);
    Ok(claims)
}

/// Extends the lease of a long send; false when the lease was lost (fenced).
pub async fn heartbeat(db: &Db, item: &OutboxItem, lease_until: i64) -> anyhow::Result<bool> {
    let done = sqlx::query(
        "UPDATE outbox SET next_attempt_at = $1 WHERE id = $2 AND attempts = $3 AND status = 'delivering'",
    )
    .bind(lease_until)
    .bind(item.id)
    .bind(item.attempt)
    .execute(db.writer())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// What one send attempt looked like, for the attempts log.
#[derive(Clone, Debug, Default)]
pub struct AttemptRecord {
    pub started_at: i64,
    pub duration_ms: i64,
    pub status_code: Option<i64>,
    pub error: Option<String>,
    pub response_excerpt: Option<String>,
    /// What the other side made (a provider command's refund id), on success.
    pub object_id: Option<String>,
}

pub async fn record_attempt(db: &Db, item: &OutboxItem, a: &AttemptRecord) -> anyhow::Result<()> {
    let mut tx = db.writer().begin().await?;
    run_values(&mut tx, ATTEMPTS_INSERT, "", 7, &[attempt_row(item, a)]).await?;
    tx.commit().await?;
    Ok(())
}

const ATTEMPTS_INSERT: &str = "INSERT INTO outbox_attempts (outbox_id, attempt, started_at, \
    duration_ms, status_code, error, response_excerpt) VALUES ";

fn attempt_row(item: &OutboxItem, a: &AttemptRecord) -> Vec<Val> {
    vec![
        item.id.into(),
        item.attempt.into(),
        a.started_at.into(),
        a.duration_ms.into(),
        a.status_code.into(),
        a.error.clone().into(),
        a.response_excerpt.clone().into(),
    ]
}

/// Marks the rows of successful sends delivered and logs their attempts, all in one
/// transaction (one commit for a whole claim instead of one per row: with two messages
/// per event, per-row commits were most of the relay's and much of the database's work),
/// so the log and the rows never disagree. Fenced per row: a row whose lease was lost to
/// another relay is not marked (its attempt is still logged). Returns the ids marked.
pub async fn mark_delivered(
    db: &Db,
    sent: &[(&OutboxItem, &AttemptRecord)],
    now: i64,
) -> anyhow::Result<BTreeSet<i64>> {
    if sent.is_empty() {
        return Ok(BTreeSet::new());
    }
    let mut tx = db.writer().begin().await?;
    let fences: Vec<Vec<Val>> = sent
        .iter()
        .map(|(item, _)| vec![item.id.into(), item.attempt.into(), now.into()])
        .collect();
    let (marked, _) = run_values(
        &mut tx,
        "WITH v (vid, vattempt, vnow) AS (VALUES ",
        ") UPDATE outbox SET status = 'delivered', delivered_at = v.vnow, last_error = NULL \
         FROM v WHERE id = v.vid AND attempts = v.vattempt AND status = 'delivering' \
         RETURNING id",
        3,
        &fences,
    )
    .await?;
    let marked = marked
        .iter()
        .map(|row| row.try_get::<i64, _>(0))
        .collect::<Result<BTreeSet<_>, _>>()?;
    let attempts: Vec<Vec<Val>> = sent.iter().map(|(item, a)| attempt_row(item, a)).collect();
    run_values(&mut tx, ATTEMPTS_INSERT, "", 7, &attempts).await?;
    for (item, attempt) in sent {
        if let (true, Some(object_id)) = (
            marked.contains(&item.id) && item.topic == crate::domain::commands::REFUND_TOPIC,
            &attempt.object_id,
        ) {
            super::commands::mark_sent_in(&mut tx, item.id, object_id, now).await?;
        }
    }
    tx.commit().await?;
    Ok(marked)
}

pub async fn retry_later(
    db: &Db,
    item: &OutboxItem,
    next_attempt_at: i64,
    error: &str,
) -> anyhow::Result<bool> {
    let done = sqlx::query(
        "UPDATE outbox SET status = 'pending', next_attempt_at = $1, last_error = $2 \
         WHERE id = $3 AND attempts = $4 AND status = 'delivering'",
    )
    .bind(next_attempt_at)
    .bind(error)
    .bind(item.id)
    .bind(item.attempt)
    .execute(db.writer())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Moves the row to the dead-letter queue (one transaction); `None` when fenced off.
pub async fn dead_letter(
    db: &Db,
    item: &OutboxItem,
    failure: &Failure,
    now: i64,
    resolve_by: i64,
) -> anyhow::Result<Option<i64>> {
    let mut tx = db.writer().begin().await?;
    let filed = sqlx::query(
        "UPDATE outbox SET status = 'dead', last_error = $1 WHERE id = $2 AND attempts = $3 AND status = 'delivering'",
    )
    .bind(&failure.message)
    .bind(item.id)
    .bind(item.attempt)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if filed == 0 {
        return Ok(None);
    }
    // The attempts log is the history of this item's errors.
    let earlier: Vec<serde_json::Value> = sqlx::query(
        "SELECT started_at, error, status_code FROM outbox_attempts WHERE outbox_id = $1 AND error IS NOT NULL ORDER BY id",
    )
    .bind(item.id)
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(|r| {
        Ok(serde_json::json!({
            "at": r.try_get::<i64, _>(0)?,
            "error": r.try_get::<String, _>(1)?,
            "status_code": r.try_get::<Option<i64>, _>(2)?,
        }))
    })
    .collect::<Result<_, sqlx::Error>>()?;
    let earlier = serde_json::Value::Array(earlier).to_string();
    if item.topic == crate::domain::commands::REFUND_TOPIC {
        super::commands::mark_failed_in(&mut tx, item.id, &failure.message, now).await?;
    }
    let id = dead_letters::put(
        &mut tx,
        &NewDeadLetter {
            stage: STAGE_OUTBOX,
            sink: Some(&item.sink),
            source_id: item.id,
            provider: None,
            event_id: None,
            event_type: Some(&item.topic),
            order_id: Some(&item.order_id),
            payload: item.payload.as_bytes(),
            class: failure.class,
            error: &failure.message,
            earlier_errors: Some(&earlier),
            attempts: item.attempt,
            first_attempt_at: item.created_at,
            correlation_id: &item.correlation_id,
            now,
            resolve_by,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(Some(id))
}
