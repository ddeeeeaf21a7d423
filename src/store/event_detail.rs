//! One inbox event with everything the event page shows: the raw body, every delivery,
//! earlier errors, the effect its key names and any dead letter it became.

use sqlx::Row;

use super::read::rfc3339;
use super::Db;

pub struct EventDetailRow {
    pub id: i64,
    pub provider: String,
    pub event_id: String,
    pub event_type: Option<String>,
    pub api_version: Option<String>,
    pub status: String,
    pub reason: Option<String>,
    pub order_id: Option<String>,
    pub effect_key: Option<String>,
    pub attempts: i64,
    pub correlation_id: String,
    pub received_at: String,
    pub processed_at: Option<String>,
    pub raw_body: Vec<u8>,
    /// JSON array of {"at", "class", "error"}, oldest first, when it failed before.
    pub error_history: Option<String>,
    /// (received_at, duplicate, correlation_id)
    pub deliveries: Vec<(String, bool, String)>,
    /// The effect its key names: (transition, event that won, outcome, at).
    pub effect: Option<(String, String, String, String)>,
    /// Dead letters it became: (id, status).
    pub dead_letters: Vec<(i64, String)>,
}

pub async fn event(db: &Db, id: i64) -> anyhow::Result<Option<EventDetailRow>> {
    let Some(row) = sqlx::query(
        "SELECT id, provider, event_id, event_type, api_version, status, reason, order_id, \
         effect_key, attempts, correlation_id, received_at, processed_at, raw_body, error_history \
         FROM inbox_events WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(db.reader())
    .await?
    else {
        return Ok(None);
    };
    let provider: String = row.try_get(1)?;
    let event_id: String = row.try_get(2)?;
    let effect_key: Option<String> = row.try_get(8)?;
    let deliveries = sqlx::query(
        "SELECT received_at, duplicate, correlation_id FROM deliveries \
         WHERE provider = $1 AND event_id = $2 ORDER BY id",
    )
    .bind(&provider)
    .bind(&event_id)
    .fetch_all(db.reader())
    .await?
    .iter()
    .map(|r| {
        Ok((
            rfc3339(r.try_get(0)?),
            r.try_get::<i64, _>(1)? != 0,
            r.try_get(2)?,
        ))
    })
    .collect::<Result<_, sqlx::Error>>()?;
    let effect = match &effect_key {
        Some(key) => sqlx::query(
            "SELECT transition, event_id, outcome, applied_at FROM processed_effects WHERE effect_key = $1",
        )
        .bind(key)
        .fetch_optional(db.reader())
        .await?
        .map(|r| -> Result<_, sqlx::Error> {
            Ok((
                r.try_get(0)?,
                r.try_get(1)?,
                r.try_get(2)?,
                rfc3339(r.try_get(3)?),
            ))
        })
        .transpose()?,
        None => None,
    };
    let dead_letters = sqlx::query(
        "SELECT id, status FROM dead_letters WHERE stage = 'processor' AND source_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(db.reader())
    .await?
    .iter()
    .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
    .collect::<Result<_, sqlx::Error>>()?;
    Ok(Some(EventDetailRow {
        id: row.try_get(0)?,
        provider,
        event_id,
        event_type: row.try_get(3)?,
        api_version: row.try_get(4)?,
        status: row.try_get(5)?,
        reason: row.try_get(6)?,
        order_id: row.try_get(7)?,
        effect_key,
        attempts: row.try_get(9)?,
        correlation_id: row.try_get(10)?,
        received_at: rfc3339(row.try_get(11)?),
        processed_at: row.try_get::<Option<i64>, _>(12)?.map(rfc3339),
        raw_body: row.try_get(13)?,
        error_history: row.try_get(14)?,
        deliveries,
        effect,
        dead_letters,
    }))
}
