//! Read models for the CLI and the dashboard. Every list is keyset-paginated on an
//! indexed id so pages stay fast at millions of rows.

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::{bind_all, Db, SqlArg};

pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

fn time(row: &AnyRow, col: &str) -> Result<String, sqlx::Error> {
    Ok(rfc3339(row.try_get(col)?))
}

fn opt_time(row: &AnyRow, col: &str) -> Result<Option<String>, sqlx::Error> {
    Ok(row.try_get::<Option<i64>, _>(col)?.map(rfc3339))
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct EventRow {
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
    pub deliveries: i64,
    pub correlation_id: String,
    pub received_at: String,
    pub processed_at: Option<String>,
}

pub(super) const EVENT_COLUMNS: &str = "i.id, i.provider, i.event_id, i.event_type, i.api_version, i.status, \
    i.reason, i.order_id, i.effect_key, i.attempts, i.correlation_id, i.received_at, i.processed_at, \
    (SELECT COUNT(*) FROM deliveries d WHERE d.provider = i.provider AND d.event_id = i.event_id) AS deliveries";

pub(super) fn event_row(row: AnyRow) -> Result<EventRow, sqlx::Error> {
    Ok(EventRow {
        id: row.try_get("id")?,
        provider: row.try_get("provider")?,
        event_id: row.try_get("event_id")?,
        event_type: row.try_get("event_type")?,
        api_version: row.try_get("api_version")?,
        status: row.try_get("status")?,
        reason: row.try_get("reason")?,
        order_id: row.try_get("order_id")?,
        effect_key: row.try_get("effect_key")?,
        attempts: row.try_get("attempts")?,
        deliveries: row.try_get("deliveries")?,
        correlation_id: row.try_get("correlation_id")?,
        received_at: time(&row, "received_at")?,
        processed_at: opt_time(&row, "processed_at")?,
    })
}

#[derive(Clone, Debug, Default)]
pub struct EventFilter {
    pub provider: Option<String>,
    pub status: Option<String>,
    pub event_type: Option<String>,
    pub order_id: Option<String>,
    pub event_id: Option<String>,
    /// The correlation id of any of the event's deliveries.
    pub correlation_id: Option<String>,
    /// Received at or after / before these Unix ms.
    pub since: Option<i64>,
    pub until: Option<i64>,
    /// Keyset cursor: only events with a smaller inbox id.
    pub before: Option<i64>,
    pub limit: i64,
}

/// Latest events first.
pub async fn list_events(db: &Db, filter: &EventFilter) -> anyhow::Result<Vec<EventRow>> {
    let rows = filtered_events(db, filter, EVENT_COLUMNS).await?;
    Ok(rows.into_iter().map(event_row).collect::<Result<_, _>>()?)
}

/// These events (by inbox id), in the order given.
pub async fn list_events_by_id(db: &Db, ids: &[i64]) -> anyhow::Result<Vec<EventRow>> {
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let placeholders: Vec<String> = (1..=ids.len()).map(|n| format!("${n}")).collect();
    let sql = format!(
        "SELECT {EVENT_COLUMNS} FROM inbox_events i WHERE i.id IN ({})",
        placeholders.join(", ")
    );
    let args = ids.iter().map(|id| SqlArg::Int(*id)).collect();
    let mut rows: Vec<EventRow> = bind_all(sqlx::query(&sql), args)
        .fetch_all(db.reader())
        .await?
        .into_iter()
        .map(event_row)
        .collect::<Result<_, _>>()?;
    rows.sort_by_key(|r| ids.iter().position(|id| *id == r.id));
    Ok(rows)
}

/// Ids and raw bodies of the latest events matching the filter (for filters on payload
/// fields: the full rows are read only for the matches).
pub async fn list_event_bodies(
    db: &Db,
    filter: &EventFilter,
) -> anyhow::Result<Vec<(i64, Vec<u8>)>> {
    let rows = filtered_events(db, filter, "i.id, i.raw_body").await?;
    rows.into_iter()
        .map(|row| Ok((row.try_get("id")?, row.try_get("raw_body")?)))
        .collect()
}

async fn filtered_events(
    db: &Db,
    filter: &EventFilter,
    columns: &str,
) -> anyhow::Result<Vec<AnyRow>> {
    let mut conn = db.reader().acquire().await?;
    let ids = ids_of_event(&mut conn, filter).await?;
    let (sql, args) = events_query(filter, ids.as_deref(), columns);
    Ok(bind_all(sqlx::query(&sql), args)
        .fetch_all(&mut *conn)
        .await?)
}

/// The probe behind a filter on an event id without its provider: the inbox has no index
/// on event_id alone (one would cost every receipt a random page write), so this walks the
/// few distinct providers along the UNIQUE (provider, event_id) key, a seek each, and
/// probes that key once per provider. Each probe is a correlated scalar subquery, so no
/// planner can make it a walk of the whole index.
const EVENT_PROBE: &str = "WITH RECURSIVE providers(name) AS ( \
       SELECT (SELECT provider FROM inbox_events ORDER BY provider LIMIT 1) \
       UNION ALL \
       SELECT (SELECT provider FROM inbox_events WHERE provider > providers.name \
               ORDER BY provider LIMIT 1) \
       FROM providers WHERE providers.name IS NOT NULL) \
     SELECT (SELECT e.id FROM inbox_events e \
             WHERE e.provider = providers.name AND e.event_id = $1) AS id \
     FROM providers WHERE providers.name IS NOT NULL";

/// The inbox ids of the filter's event under each provider (at most one each), when the
/// filter names an event id without its provider; `None` otherwise.
async fn ids_of_event(
    conn: &mut sqlx::AnyConnection,
    filter: &EventFilter,
) -> anyhow::Result<Option<Vec<i64>>> {
    let (Some(event_id), None) = (&filter.event_id, &filter.provider) else {
        return Ok(None);
    };
    let ids: Vec<Option<i64>> = sqlx::query_scalar(EVENT_PROBE)
        .bind(event_id)
        .fetch_all(&mut *conn)
        .await?;
    Ok(Some(ids.into_iter().flatten().collect()))
}

/// The plan the database picks for the inbox's query with `filter`, one step a line
/// (SQLite's `EXPLAIN QUERY PLAN`, PostgreSQL's `EXPLAIN`): how tests and the bench check
/// that a filter is served by an index. Runs on `conn`, so a caller can set planner options.
pub async fn plan_of_events(
    db: &Db,
    conn: &mut sqlx::AnyConnection,
    filter: &EventFilter,
) -> anyhow::Result<String> {
    let (explain, column) = match db.backend {
        super::Backend::Sqlite => ("EXPLAIN QUERY PLAN", 3),
        super::Backend::Postgres => ("EXPLAIN", 0),
    };
    let mut lines: Vec<String> = Vec::new();
    let ids = ids_of_event(&mut *conn, filter).await?;
    let mut statements = Vec::new();
    if let Some(event_id) = ids.as_ref().and(filter.event_id.as_ref()) {
        lines.push("-- the event id's probe:".into());
        statements.push((
            EVENT_PROBE.to_string(),
            vec![SqlArg::Text(event_id.clone())],
        ));
    }
    statements.push(events_query(filter, ids.as_deref(), EVENT_COLUMNS));
    for (i, (sql, args)) in statements.into_iter().enumerate() {
        if i > 0 {
            lines.push("-- the page:".into());
        }
        let rows = bind_all(sqlx::query(&format!("{explain} {sql}")), args)
            .fetch_all(&mut *conn)
            .await?;
        for row in &rows {
            lines.push(row.try_get::<String, _>(column)?);
        }
    }
    Ok(lines.join("\n"))
}

/// The inbox page's statement; `event_ids`: what `ids_of_event` found, when it applies.
fn events_query(
    filter: &EventFilter,
    event_ids: Option<&[i64]>,
    columns: &str,
) -> (String, Vec<SqlArg>) {
    let mut clauses = Vec::new();
    let mut args: Vec<SqlArg> = Vec::new();
    for (col, value) in [
        ("i.provider", filter.provider.as_ref()),
        ("i.status", filter.status.as_ref()),
        ("i.event_type", filter.event_type.as_ref()),
        ("i.order_id", filter.order_id.as_ref()),
        // Without a provider, the event id is found by `ids_of_event`.
        (
            "i.event_id",
            filter.provider.as_ref().and(filter.event_id.as_ref()),
        ),
    ] {
        if let Some(v) = value {
            args.push(SqlArg::Text(v.clone()));
            clauses.push(format!("{col} = ${}", args.len()));
        }
    }
    if let Some(ids) = event_ids {
        // The event under each provider, by id (the ids come from `ids_of_event`).
        if ids.is_empty() {
            clauses.push("1 = 0".to_string());
        } else {
            let mut list = Vec::new();
            for id in ids {
                args.push(SqlArg::Int(*id));
                list.push(format!("${}", args.len()));
            }
            clauses.push(format!("i.id IN ({})", list.join(", ")));
        }
    }
    if let Some(correlation_id) = &filter.correlation_id {
        args.push(SqlArg::Text(correlation_id.clone()));
        // Uncorrelated, so both planners start from deliveries_correlation.
        clauses.push(format!(
            "(i.provider, i.event_id) IN \
             (SELECT d.provider, d.event_id FROM deliveries d WHERE d.correlation_id = ${})",
            args.len()
        ));
    }
    if let Some(since) = filter.since {
        args.push(SqlArg::Int(since));
        clauses.push(format!("i.received_at >= ${}", args.len()));
    }
    if let Some(until) = filter.until {
        args.push(SqlArg::Int(until));
        clauses.push(format!("i.received_at < ${}", args.len()));
    }
    // With a time filter the page is in received order, which inbox_events_received
    // serves without reading (and sorting) the rest of the window; ids and receipt times
    // grow together, so it is the inbox's order but for near-simultaneous events. The
    // cursor is still an id:
    // the page goes on below that event's (received_at, id), or below its nearest older
    // neighbour's if it was pruned.
    let by_time = filter.since.is_some() || filter.until.is_some();
    let order = if by_time {
        if let Some(before) = filter.before {
            args.push(SqlArg::Int(before));
            args.push(SqlArg::Int(before));
            let (a, b) = (args.len() - 1, args.len());
            clauses.push(format!(
                "(i.received_at, i.id) < ((SELECT c.received_at FROM inbox_events c \
                 WHERE c.id <= ${a} ORDER BY c.id DESC LIMIT 1), ${b})"
            ));
        }
        "i.received_at DESC, i.id DESC"
    } else {
        args.push(SqlArg::Int(filter.before.unwrap_or(i64::MAX)));
        clauses.push(format!("i.id < ${}", args.len()));
        "i.id DESC"
    };
    args.push(SqlArg::Int(filter.limit.clamp(1, 5_000)));
    let sql = format!(
        "SELECT {columns} FROM inbox_events i WHERE {} \
         ORDER BY {order} LIMIT ${}",
        if clauses.is_empty() {
            "1 = 1".to_string()
        } else {
            clauses.join(" AND ")
        },
        args.len()
    );
    (sql, args)
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct EffectRow {
    pub key: String,
    pub transition: String,
    pub external_ref: String,
    pub provider: String,
    /// The event that won the key.
    pub event_id: String,
    pub outcome: String,
    pub applied_at: String,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct StaleRow {
    pub provider: String,
    pub event_id: String,
    pub transition: String,
    pub kind: String,
    pub reason: String,
    pub order_status: String,
    pub amount: Option<i64>,
    pub currency: Option<String>,
    pub occurred_at: String,
    pub recorded_at: String,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LedgerRow {
    /// payment | refund | refund_reversal | refund_observed | dispute | dispute_closed
    pub entry: String,
    /// What the entry adds to its total (signed; a reversal is negative).
    pub counted: i64,
    /// The payment a refund entry belongs to.
    pub group_ref: Option<String>,
    /// The transition of the event that brought the entry.
    pub transition: String,
    pub status_after: String,
    pub amount: Option<i64>,
    pub currency: Option<String>,
    pub external_ref: String,
    pub effect_key: String,
    pub provider: String,
    pub event_id: String,
    pub occurred_at: String,
    pub recorded_at: String,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OutboxRow {
    pub id: i64,
    pub idempotency_key: String,
    pub effect_key: String,
    pub topic: String,
    pub sink: String,
    pub status: String,
    pub attempts: i64,
    pub payload: serde_json::Value,
    pub created_at: String,
    pub delivered_at: Option<String>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DeliveryRow {
    pub id: i64,
    pub provider: String,
    pub event_id: String,
    pub duplicate: bool,
    pub correlation_id: String,
    pub received_at: String,
}

/// One provider resource of the order and its latest state.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FactRow {
    pub kind: String,
    pub resource_id: String,
    pub parent_ref: Option<String>,
    pub state: String,
    pub amount: Option<i64>,
    pub money_seen: bool,
    pub at: String,
    pub event_id: String,
}

/// Everything known about one order: what `oncehook order show` prints.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OrderView {
    pub order_id: String,
    pub status: String,
    /// One sentence built from the facts: why the order is in this status.
    pub why: String,
    pub currency: Option<String>,
    /// Money totals in minor units of `currency`, derived from the facts.
    pub amount_paid: i64,
    pub amount_refunded: i64,
    pub amount_disputed: i64,
    /// paid − refunded − disputed
    pub net: i64,
    /// What a person should look at (e.g. a refund larger than what is known to be paid).
    pub attention: Vec<String>,
    pub facts: Vec<FactRow>,
    pub last_event_id: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub effects: Vec<EffectRow>,
    pub stale_events: Vec<StaleRow>,
    pub ledger: Vec<LedgerRow>,
    pub outbox: Vec<OutboxRow>,
    pub events: Vec<EventRow>,
    pub deliveries: Vec<DeliveryRow>,
}

pub async fn order_view(db: &Db, order_id: &str) -> anyhow::Result<Option<OrderView>> {
    order_view_in(db, order_id, app::locale::Locale::en).await
}

/// [`order_view`] with its "why" sentence in the viewer's language.
pub async fn order_view_in(
    db: &Db,
    order_id: &str,
    loc: app::locale::Locale,
) -> anyhow::Result<Option<OrderView>> {
    // One snapshot: the status, totals, facts and story of one moment, even while the
    // processor commits this order's next event (a page read in between showed a refund in
    // its sentence and not in its totals).
    let mut tx = super::snapshot(db).await?;
    let Some(order) = sqlx::query(
        "SELECT order_id, status, currency, last_event_id, created_at, updated_at, amount_paid, \
         amount_refunded, amount_disputed, attention FROM orders WHERE order_id = $1",
    )
    .bind(order_id)
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(None);
    };

    let effects = sqlx::query(
        "SELECT effect_key, transition, external_ref, provider, event_id, outcome, applied_at \
         FROM processed_effects WHERE order_id = $1 ORDER BY applied_at, effect_key",
    )
    .bind(order_id)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|r| {
        Ok(EffectRow {
            key: r.try_get("effect_key")?,
            transition: r.try_get("transition")?,
            external_ref: r.try_get("external_ref")?,
            provider: r.try_get("provider")?,
            event_id: r.try_get("event_id")?,
            outcome: r.try_get("outcome")?,
            applied_at: time(&r, "applied_at")?,
        })
    })
    .collect::<Result<_, sqlx::Error>>()?;

    let stale_events = sqlx::query(
        "SELECT provider, event_id, transition, kind, reason, order_status, amount, currency, \
         occurred_at, recorded_at FROM stale_events WHERE order_id = $1 ORDER BY id",
    )
    .bind(order_id)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|r| {
        Ok(StaleRow {
            provider: r.try_get("provider")?,
            event_id: r.try_get("event_id")?,
            transition: r.try_get("transition")?,
            kind: r.try_get("kind")?,
            reason: r.try_get("reason")?,
            order_status: r.try_get("order_status")?,
            amount: r.try_get("amount")?,
            currency: r.try_get("currency")?,
            occurred_at: time(&r, "occurred_at")?,
            recorded_at: time(&r, "recorded_at")?,
        })
    })
    .collect::<Result<_, sqlx::Error>>()?;

    let ledger = sqlx::query(
        "SELECT entry, counted, group_ref, transition, status_after, amount, currency, external_ref, \
         effect_key, provider, event_id, occurred_at, recorded_at FROM order_ledger \
         WHERE order_id = $1 ORDER BY id",
    )
    .bind(order_id)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|r| {
        Ok(LedgerRow {
            entry: r.try_get("entry")?,
            counted: r.try_get("counted")?,
            group_ref: r.try_get("group_ref")?,
            transition: r.try_get("transition")?,
            status_after: r.try_get("status_after")?,
            amount: r.try_get("amount")?,
            currency: r.try_get("currency")?,
            external_ref: r.try_get("external_ref")?,
            effect_key: r.try_get("effect_key")?,
            provider: r.try_get("provider")?,
            event_id: r.try_get("event_id")?,
            occurred_at: time(&r, "occurred_at")?,
            recorded_at: time(&r, "recorded_at")?,
        })
    })
    .collect::<Result<_, sqlx::Error>>()?;

    let facts = sqlx::query(
        "SELECT kind, resource_id, parent_ref, state, amount, money_seen, at_ms, event_id \
         FROM order_facts WHERE order_id = $1 ORDER BY at_ms, kind, resource_id",
    )
    .bind(order_id)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|r| {
        Ok(FactRow {
            kind: r.try_get("kind")?,
            resource_id: r.try_get("resource_id")?,
            parent_ref: r.try_get("parent_ref")?,
            state: r.try_get("state")?,
            amount: r.try_get("amount")?,
            money_seen: r.try_get::<i64, _>("money_seen")? != 0,
            at: time(&r, "at_ms")?,
            event_id: r.try_get("event_id")?,
        })
    })
    .collect::<Result<_, sqlx::Error>>()?;

    let outbox = sqlx::query(
        "SELECT id, idempotency_key, effect_key, topic, sink, status, attempts, payload, \
         created_at, delivered_at FROM outbox WHERE order_id = $1 ORDER BY id",
    )
    .bind(order_id)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|r| {
        let payload: String = r.try_get("payload")?;
        Ok(OutboxRow {
            id: r.try_get("id")?,
            idempotency_key: r.try_get("idempotency_key")?,
            effect_key: r.try_get("effect_key")?,
            topic: r.try_get("topic")?,
            sink: r.try_get("sink")?,
            status: r.try_get("status")?,
            attempts: r.try_get("attempts")?,
            payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::String(payload)),
            created_at: time(&r, "created_at")?,
            delivered_at: opt_time(&r, "delivered_at")?,
        })
    })
    .collect::<Result<_, sqlx::Error>>()?;

    let events = list_events(
        db,
        &EventFilter {
            order_id: Some(order_id.to_string()),
            limit: 1000,
            ..Default::default()
        },
    )
    .await?;

    let deliveries = sqlx::query(
        "SELECT d.id, d.provider, d.event_id, d.duplicate, d.correlation_id, d.received_at \
         FROM deliveries d JOIN inbox_events i ON i.provider = d.provider AND i.event_id = d.event_id \
         WHERE i.order_id = $1 ORDER BY d.id",
    )
    .bind(order_id)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|r| {
        Ok(DeliveryRow {
            id: r.try_get("id")?,
            provider: r.try_get("provider")?,
            event_id: r.try_get("event_id")?,
            duplicate: r.try_get::<i64, _>("duplicate")? != 0,
            correlation_id: r.try_get("correlation_id")?,
            received_at: time(&r, "received_at")?,
        })
    })
    .collect::<Result<_, sqlx::Error>>()?;

    let why = {
        let facts = super::effects::load_facts(&mut tx, order_id).await?;
        let currency: Option<String> = order.try_get("currency")?;
        let mut why = crate::domain::money::explain_in(
            loc,
            &facts,
            &crate::domain::project(&facts),
            currency.as_deref(),
        );
        why.push_str(&super::commands::why_note_in(db, order_id, loc).await?);
        why
    };
    let paid: i64 = order.try_get("amount_paid")?;
    let refunded: i64 = order.try_get("amount_refunded")?;
    let disputed: i64 = order.try_get("amount_disputed")?;
    let attention: Option<String> = order.try_get("attention")?;
    Ok(Some(OrderView {
        order_id: order.try_get("order_id")?,
        status: order.try_get("status")?,
        why,
        currency: order.try_get("currency")?,
        amount_paid: paid,
        amount_refunded: refunded,
        amount_disputed: disputed,
        net: paid - refunded - disputed,
        attention: attention
            .map(|a| serde_json::from_str(&a))
            .transpose()?
            .unwrap_or_default(),
        facts,
        last_event_id: order.try_get("last_event_id")?,
        created_at: time(&order, "created_at")?,
        updated_at: time(&order, "updated_at")?,
        effects,
        stale_events,
        ledger,
        outbox,
        events,
        deliveries,
    }))
}
