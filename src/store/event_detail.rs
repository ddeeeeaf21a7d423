//! One inbox event with everything the event page shows: the raw body, every delivery,
//! earlier errors, the effect its key names and any dead letter it became.

use sqlx::Row;

use super::read::{event_row, rfc3339, EventRow, EVENT_COLUMNS};
use super::Db;

pub struct EventDetailRow {
    /// The event as the inbox lists it.
    pub event: EventRow,
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
    let Some(row) = sqlx::query(&format!(
        "SELECT {EVENT_COLUMNS}, i.raw_body, i.error_history FROM inbox_events i WHERE i.id = $1"
    ))
    .bind(id)
    .fetch_optional(db.reader())
    .await?
    else {
        return Ok(None);
    };
    let raw_body: Vec<u8> = row.try_get("raw_body")?;
    let error_history: Option<String> = row.try_get("error_history")?;
    let event = event_row(row)?;
    let (provider, event_id, effect_key) = (&event.provider, &event.event_id, &event.effect_key);
    let deliveries = sqlx::query(
        "SELECT received_at, duplicate, correlation_id FROM deliveries \
         WHERE provider = $1 AND event_id = $2 ORDER BY id",
    )
    .bind(provider)
    .bind(event_id)
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
    let effect = match effect_key {
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
        event,
        raw_body,
        error_history,
        deliveries,
        effect,
        dead_letters,
    }))
}
