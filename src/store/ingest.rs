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
    let mut tx = db.receipt_writer().begin().await?;
    let outcomes = store_receipts_in(&mut tx, db.backend, receipts).await?;
    tx.commit().await?;
    Ok(outcomes)
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
    // The first receipt of an event within the batch tries the insert; later ones in the
    // same batch are duplicates by definition.
    let mut seen = HashSet::new();
    let firsts: Vec<&Receipt> = receipts
        .iter()
        .filter(|r| seen.insert((r.provider.as_str(), r.event_id.as_str())))
        .collect();
    let sql = format!(
        "INSERT INTO inbox_events (provider, event_id, event_type, api_version, raw_body, \
         correlation_id, received_at, status, next_attempt_at) VALUES {} \
         ON CONFLICT (provider, event_id) DO NOTHING RETURNING provider, event_id",
        values_list(backend, firsts.len(), 9)
    );
    let mut insert = sqlx::query(&sql);
    for r in &firsts {
        insert = insert
            .bind(&r.provider)
            .bind(&r.event_id)
            .bind(&r.event_type)
            .bind(&r.api_version)
            .bind(&r.raw_body)
            .bind(&r.correlation_id)
            .bind(r.received_at)
            .bind("pending")
            .bind(r.received_at);
    }
    let inserted: HashSet<(String, String)> = insert
        .fetch_all(&mut **tx)
        .await?
        .into_iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
        .collect::<Result<_, sqlx::Error>>()?;

    let mut claimed_new = HashSet::new();
    let outcomes: Vec<Stored> = receipts
        .iter()
        .map(|r| {
            let key = (r.provider.clone(), r.event_id.clone());
            if inserted.contains(&key) && claimed_new.insert(key) {
                Stored::New
            } else {
                Stored::Duplicate
            }
        })
        .collect();

    let sql = format!(
        "INSERT INTO deliveries (provider, event_id, duplicate, correlation_id, body_sha256, \
         received_at) VALUES {}",
        values_list(backend, receipts.len(), 6)
    );
    let mut log = sqlx::query(&sql);
    for (r, stored) in receipts.iter().zip(&outcomes) {
        log = log
            .bind(&r.provider)
            .bind(&r.event_id)
            .bind(i64::from(*stored == Stored::Duplicate))
            .bind(&r.correlation_id)
            .bind(hex::encode(Sha256::digest(&r.raw_body)))
            .bind(r.received_at);
    }
    log.execute(&mut **tx).await?;

    if backend == Backend::Postgres && outcomes.contains(&Stored::New) {
        // Delivered on commit, to workers in other processes too.
        sqlx::query(&format!("SELECT pg_notify('{WAKE_CHANNEL}', '')"))
            .execute(&mut **tx)
            .await?;
    }
    Ok(outcomes)
}
