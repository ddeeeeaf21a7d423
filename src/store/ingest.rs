//! Writes a batch of received events in ONE transaction: the inbox rows (a redelivery is a
//! no-op insert under UNIQUE (provider, event_id)), a delivery-log row for every receipt,
//! and the wake-up. Batching concurrent requests into one commit is how ingest scales
//! without weakening durability.

use std::collections::HashSet;

use sha2::{Digest, Sha256};
use sqlx::Row;

use super::{values_list, Backend, Db, WAKE_CHANNEL};

/// An authenticated request, ready to store.
#[derive(Clone, Debug)]
pub struct Receipt {
    pub provider: String,
    pub event_id: String,
    pub event_type: Option<String>,
    pub api_version: Option<String>,
    pub raw_body: Vec<u8>,
    pub correlation_id: String,
    pub received_at: i64,
    /// What the receiver fetched from the provider's API for a thin notification (Mercado
    /// Pago's payment): what the processor maps instead of `raw_body`, which stays the
    /// delivery as it came.
    pub fetched_body: Option<Vec<u8>>,
    /// One of the facts a fetched payment holds, stored as an event of its own
    /// (`<notification id>:<fact>`): no request the provider made, so it has no row in
    /// the delivery log, which lists (and the duplicate rate counts) the provider's
    /// requests only; the notification it came with has that row.
    pub derived: bool,
}

/// Whether this receipt created the inbox row or repeated an event already stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    New,
    Duplicate,
}

/// Stores the receipts and returns, in the same order, whether each was new. Either all
/// are committed or none is (the caller answers 503 to all of them then).
pub async fn store_receipts(db: &Db, receipts: &[Receipt]) -> anyhow::Result<Vec<Stored>> {
    if receipts.is_empty() {
        return Ok(vec![]);
    }
    if db.backend == Backend::Postgres {
        return store_receipts_in_one_statement(db, receipts).await;
    }
    let mut tx = db.receipts.begin().await?;
    let outcomes = store_receipts_in(&mut tx, db.backend, receipts).await?;
    tx.commit().await?;
    Ok(outcomes)
}

/// PostgreSQL: the receipts, their delivery log and the wake-up as one statement, which is
/// its own transaction: one round trip to the database per batch instead of five (BEGIN,
/// two INSERTs, the NOTIFY, COMMIT). Measured (BENCHMARKS.md, issue 18): with the processor
/// beside it on two cores, the receipt writer spent 55 % of each transaction idle, waiting
/// for the server to send its next statement. `fetch_all` returns after PostgreSQL's
/// ReadyForQuery, i.e. after the commit (durable: the pool's `synchronous_commit = on`).
async fn store_receipts_in_one_statement(
    db: &Db,
    receipts: &[Receipt],
) -> anyhow::Result<Vec<Stored>> {
    let first = first_of_their_event(receipts);
    let sql = format!(
        "WITH batch (n, provider, event_id, event_type, api_version, raw_body, \
             correlation_id, received_at, body_sha256, first, fetched_body, derived) AS (VALUES {}), \
         inserted AS (INSERT INTO inbox_events (provider, event_id, event_type, api_version, \
             raw_body, correlation_id, received_at, status, next_attempt_at, fetched_body) \
             SELECT provider, event_id, event_type, api_version, raw_body, correlation_id, \
                 received_at, 'pending', received_at, fetched_body FROM batch WHERE first ORDER BY n \
             ON CONFLICT (provider, event_id) DO NOTHING RETURNING provider, event_id), \
         logged AS (INSERT INTO deliveries (provider, event_id, duplicate, correlation_id, \
             body_sha256, received_at) \
             SELECT b.provider, b.event_id, \
                 CASE WHEN b.first AND i.event_id IS NOT NULL THEN 0 ELSE 1 END, \
                 b.correlation_id, b.body_sha256, b.received_at \
             FROM batch b LEFT JOIN inserted i \
                 ON i.provider = b.provider AND i.event_id = b.event_id \
             WHERE NOT b.derived ORDER BY b.n) \
         SELECT provider, event_id, pg_notify('{WAKE_CHANNEL}', '') FROM inserted",
        values_list(Backend::Postgres, receipts.len(), 12)
    );
    let mut query = sqlx::query(&sql);
    for (n, (r, first)) in receipts.iter().zip(&first).enumerate() {
        query = bind_inbox_columns(query.bind(n as i64), r)
            .bind(hex::encode(Sha256::digest(&r.raw_body)))
            .bind(*first)
            .bind(&r.fetched_body)
            .bind(r.derived);
    }
    // One notification per new event in the statement; PostgreSQL folds identical ones
    // within a transaction into one.
    let inserted = inserted_keys(query.fetch_all(&db.receipts).await?)?;
    Ok(outcomes(receipts, &first, &inserted))
}

/// Whether each receipt is the first of its event in the batch: only that one tries the
/// insert; the later ones are duplicates by definition.
fn first_of_their_event(receipts: &[Receipt]) -> Vec<bool> {
    let mut seen = HashSet::new();
    receipts
        .iter()
        .map(|r| seen.insert((r.provider.as_str(), r.event_id.as_str())))
        .collect()
}

/// The inbox columns a receipt brings, in the order both statements list them: provider,
/// event id, type, API version, body, correlation id, received at.
fn bind_inbox_columns<'q>(
    query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    r: &'q Receipt,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    query
        .bind(&r.provider)
        .bind(&r.event_id)
        .bind(&r.event_type)
        .bind(&r.api_version)
        .bind(&r.raw_body)
        .bind(&r.correlation_id)
        .bind(r.received_at)
}

/// The (provider, event id) of the rows an inbox insert returned.
fn inserted_keys(rows: Vec<sqlx::any::AnyRow>) -> Result<HashSet<(String, String)>, sqlx::Error> {
    rows.into_iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
        .collect()
}

/// New: the first receipt of its event in the batch, whose row the insert created;
/// every other receipt is a duplicate.
fn outcomes(
    receipts: &[Receipt],
    first: &[bool],
    inserted: &HashSet<(String, String)>,
) -> Vec<Stored> {
    receipts
        .iter()
        .zip(first)
        .map(|(r, first)| {
            if *first && inserted.contains(&(r.provider.clone(), r.event_id.clone())) {
                Stored::New
            } else {
                Stored::Duplicate
            }
        })
        .collect()
}

/// `store_receipts` inside the caller's transaction: nothing is durable, and nobody may be
/// answered, before the caller commits.
pub async fn store_receipts_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    backend: Backend,
    receipts: &[Receipt],
) -> anyhow::Result<Vec<Stored>> {
    if receipts.is_empty() {
        return Ok(vec![]);
    }
    let first = first_of_their_event(receipts);
    let firsts: Vec<&Receipt> = receipts
        .iter()
        .zip(&first)
        .filter_map(|(r, first)| first.then_some(r))
        .collect();
    let sql = format!(
        "INSERT INTO inbox_events (provider, event_id, event_type, api_version, raw_body, \
         correlation_id, received_at, status, next_attempt_at, fetched_body) VALUES {} \
         ON CONFLICT (provider, event_id) DO NOTHING RETURNING provider, event_id",
        values_list(backend, firsts.len(), 10)
    );
    let mut insert = sqlx::query(&sql);
    for r in firsts {
        insert = bind_inbox_columns(insert, r)
            .bind("pending")
            .bind(r.received_at)
            .bind(&r.fetched_body);
    }
    let inserted = inserted_keys(insert.fetch_all(&mut **tx).await?)?;
    let outcomes = outcomes(receipts, &first, &inserted);

    let delivered: Vec<(&Receipt, &Stored)> = receipts
        .iter()
        .zip(&outcomes)
        .filter(|(r, _)| !r.derived)
        .collect();
    if !delivered.is_empty() {
        log_deliveries(tx, backend, &delivered).await?;
    }

    if backend == Backend::Postgres && outcomes.contains(&Stored::New) {
        // Delivered on commit, to workers in other processes too.
        sqlx::query(&format!("SELECT pg_notify('{WAKE_CHANNEL}', '')"))
            .execute(&mut **tx)
            .await?;
    }
    Ok(outcomes)
}

/// The delivery log's rows for the provider's requests among the receipts.
async fn log_deliveries(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    backend: Backend,
    delivered: &[(&Receipt, &Stored)],
) -> anyhow::Result<()> {
    let sql = format!(
        "INSERT INTO deliveries (provider, event_id, duplicate, correlation_id, body_sha256, \
         received_at) VALUES {}",
        values_list(backend, delivered.len(), 6)
    );
    let mut log = sqlx::query(&sql);
    for (r, stored) in delivered {
        log = log
            .bind(&r.provider)
            .bind(&r.event_id)
            .bind(i64::from(**stored == Stored::Duplicate))
            .bind(&r.correlation_id)
            .bind(hex::encode(Sha256::digest(&r.raw_body)))
            .bind(r.received_at);
    }
    log.execute(&mut **tx).await?;
    Ok(())
}
