//! The consistency check's reads (src/verify/): orders in keyset pages by id, each page with
//! its facts, ledger and outbox keys read in one snapshot; and the runs' results.
//!
//! A page is one read transaction (REPEATABLE READ on PostgreSQL; SQLite's read transaction
//! is a snapshot in WAL mode): the processor writes an order's facts, ledger, outbox rows
//! and `orders` row in one transaction, so a snapshot never sees half of it and a check
//! running beside live traffic reports no drift that is not there.

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use sqlx::Row;

use super::effects::{entry_row, fact_row, FACT_COLUMNS};
use super::Db;
use crate::domain::{Entry, Fact};

/// The `orders` row as stored (the status as text: an unknown one is drift too).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Stored {
    pub status: String,
    pub paid: i64,
    pub refunded: i64,
    pub disputed: i64,
    pub attention: Vec<String>,
}

/// One ledger row with what the message check needs.
#[derive(Clone, Debug)]
pub struct LedgerRow {
    pub entry: Entry,
    pub effect_key: String,
    pub recorded_at: i64,
}

#[derive(Clone, Debug)]
pub struct OrderState {
    pub order_id: String,
    pub stored: Stored,
    pub facts: Vec<Fact>,
    pub ledger: Vec<LedgerRow>,
}

pub struct Page {
    /// In id order; empty when there are no orders after the cursor.
    pub orders: Vec<OrderState>,
    /// The effect keys of every outbox row of the page's orders.
    pub message_keys: HashSet<String>,
}

/// The next `limit` orders after `after` (by order id) with their facts, ledger and outbox
/// keys. Each read is a range over an index on `order_id` (the orders and facts primary
/// keys, and the ledger's and outbox's unique `(order_id, key)` indexes), so a page costs
/// the same at any depth.
pub async fn page(db: &Db, after: Option<&str>, limit: i64) -> anyhow::Result<Page> {
    // One snapshot for the page's four reads.
    let mut tx = super::snapshot(db).await?;
    let columns = "order_id, status, amount_paid, amount_refunded, amount_disputed, attention";
    let rows = match after {
        Some(after) => {
            sqlx::query(&format!(
                "SELECT {columns} FROM orders WHERE order_id > $1 ORDER BY order_id LIMIT $2"
            ))
            .bind(after)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?
        }
        None => {
            sqlx::query(&format!(
                "SELECT {columns} FROM orders ORDER BY order_id LIMIT $1"
            ))
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?
        }
    };
    let mut orders = Vec::with_capacity(rows.len());
    for row in rows {
        let attention: Option<String> = row.try_get(5)?;
        orders.push(OrderState {
            order_id: row.try_get(0)?,
            stored: Stored {
                status: row.try_get(1)?,
                paid: row.try_get(2)?,
                refunded: row.try_get(3)?,
                disputed: row.try_get(4)?,
                attention: attention.map(|a| parse_attention(&a)).unwrap_or_default(),
            },
            facts: Vec::new(),
            ledger: Vec::new(),
        });
    }
    let (Some(first), Some(last)) = (orders.first(), orders.last()) else {
        tx.commit().await?;
        return Ok(Page {
            orders,
            message_keys: HashSet::new(),
        });
    };
    let (first, last) = (first.order_id.clone(), last.order_id.clone());
    let at: HashMap<String, usize> = orders
        .iter()
        .enumerate()
        .map(|(i, o)| (o.order_id.clone(), i))
        .collect();

    let facts = sqlx::query(&format!(
        "SELECT order_id, {FACT_COLUMNS} FROM order_facts WHERE order_id >= $1 AND order_id <= $2 \
         ORDER BY order_id, kind, resource_id"
    ))
    .bind(&first)
    .bind(&last)
    .fetch_all(&mut *tx)
    .await?;
    for row in facts {
        let order_id: String = row.try_get("order_id")?;
        // Facts of an order without its row are not a projection to check.
        if let Some(&i) = at.get(&order_id) {
            orders[i].facts.push(fact_row(row)?);
        }
    }

    let ledger = sqlx::query(
        "SELECT entry, external_ref, group_ref, amount, counted, order_id, effect_key, recorded_at \
         FROM order_ledger WHERE order_id >= $1 AND order_id <= $2 ORDER BY order_id, id",
    )
    .bind(&first)
    .bind(&last)
    .fetch_all(&mut *tx)
    .await?;
    for row in ledger {
        let order_id: String = row.try_get(5)?;
        let effect_key: String = row.try_get(6)?;
        let recorded_at: i64 = row.try_get(7)?;
        if let Some(&i) = at.get(&order_id) {
            orders[i].ledger.push(LedgerRow {
                entry: entry_row(row)?,
                effect_key,
                recorded_at,
            });
        }
    }

    let message_keys = sqlx::query_scalar::<_, String>(
        "SELECT DISTINCT effect_key FROM outbox WHERE order_id >= $1 AND order_id <= $2",
    )
    .bind(&first)
    .bind(&last)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .collect();
    tx.commit().await?;
    Ok(Page {
        orders,
        message_keys,
    })
}

/// The stored attention list; text that is not one reads as itself, so it differs.
fn parse_attention(raw: &str) -> Vec<String> {
    serde_json::from_str(raw).unwrap_or_else(|_| vec![raw.to_string()])
}

/// A finished run, as the overview and `/metrics` show the newest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunRecord {
    /// `serve` (the periodic job) or `cli` (`oncehook verify`).
    pub source: String,
    pub started_at: i64,
    pub finished_at: i64,
    pub orders_checked: i64,
    pub drifting_orders: i64,
    pub missing_messages: i64,
    /// The first drifting order ids (at most `SAMPLE`).
    pub sample: Vec<String>,
}

/// Drifting order ids a run keeps for the overview's links.
pub const SAMPLE: usize = 10;
/// Runs kept; older ones are deleted as new ones are recorded.
const KEEP: i64 = 100;

pub async fn record(db: &Db, run: &RunRecord) -> anyhow::Result<()> {
    let mut tx = db.writer().begin().await?;
    sqlx::query(
        "INSERT INTO verify_runs (source, started_at, finished_at, orders_checked, \
         drifting_orders, missing_messages, sample) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(&run.source)
    .bind(run.started_at)
    .bind(run.finished_at)
    .bind(run.orders_checked)
    .bind(run.drifting_orders)
    .bind(run.missing_messages)
    .bind(serde_json::to_string(&run.sample)?)
    .execute(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM verify_runs WHERE id <= (SELECT MAX(id) FROM verify_runs) - $1")
        .bind(KEEP)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// The newest finished run, if any.
pub async fn last_run(db: &Db) -> anyhow::Result<Option<RunRecord>> {
    let row = sqlx::query(
        "SELECT source, started_at, finished_at, orders_checked, drifting_orders, \
         missing_messages, sample FROM verify_runs ORDER BY finished_at DESC, id DESC LIMIT 1",
    )
    .fetch_optional(db.reader())
    .await?;
    let Some(row) = row else { return Ok(None) };
    let sample: String = row.try_get(6)?;
    Ok(Some(RunRecord {
        source: row.try_get(0)?,
        started_at: row.try_get(1)?,
        finished_at: row.try_get(2)?,
        orders_checked: row.try_get(3)?,
        drifting_orders: row.try_get(4)?,
        missing_messages: row.try_get(5)?,
        sample: serde_json::from_str(&sample).unwrap_or_default(),
    }))
}
