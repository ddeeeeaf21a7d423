//! Retention: finished inbox rows (with their deliveries) and delivered outbox rows (with
//! their attempts) are pruned after a configurable age. Dead letters outlive what they
//! came from and are never pruned while open; their source rows are kept while they are.
//! `processed_effects` is never pruned: it is the memory that makes a late redelivery a
//! duplicate.

use std::time::Duration;

use serde::Serialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::pipeline::settings::RetentionSettings;
use crate::store::{now_ms, Db};

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Pruned {
    pub inbox_events: u64,
    pub deliveries: u64,
    pub outbox: u64,
    pub outbox_attempts: u64,
    pub dead_letters: u64,
}

const DAY_MS: i64 = 86_400_000;

pub async fn prune(db: &Db, settings: &RetentionSettings, now: i64) -> anyhow::Result<Pruned> {
    let inbox_cutoff = now - settings.inbox_days * DAY_MS;
    let outbox_cutoff = now - settings.outbox_days * DAY_MS;
    let dead_cutoff = now - settings.dead_letter_days * DAY_MS;
    let mut tx = db.writer().begin().await?;
    let mut pruned = Pruned::default();
    let open_source = |stage: &str, table: &str| {
        format!(
            "NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.stage = '{stage}' AND d.source_id = {table}.id \
             AND d.status IN ('open', 'redriven'))"
        )
    };
    pruned.inbox_events = sqlx::query(&format!(
        "DELETE FROM inbox_events WHERE received_at < $1 AND status NOT IN ('pending', 'processing') AND {}",
        open_source("processor", "inbox_events")
    ))
    .bind(inbox_cutoff)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    // The delivery log goes with its event, never before it.
    pruned.deliveries = sqlx::query(
        "DELETE FROM deliveries WHERE received_at < $1 AND NOT EXISTS (SELECT 1 FROM inbox_events i \
         WHERE i.provider = deliveries.provider AND i.event_id = deliveries.event_id)",
    )
    .bind(inbox_cutoff)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    pruned.outbox_attempts = sqlx::query(
        "DELETE FROM outbox_attempts WHERE outbox_id IN (SELECT id FROM outbox WHERE status = 'delivered' AND delivered_at < $1)",
    )
    .bind(outbox_cutoff)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    pruned.outbox =
        sqlx::query("DELETE FROM outbox WHERE status = 'delivered' AND delivered_at < $1")
            .bind(outbox_cutoff)
            .execute(&mut *tx)
            .await?
            .rows_affected();
    pruned.dead_letters = sqlx::query(
        "DELETE FROM dead_letters WHERE status IN ('resolved', 'discarded') AND updated_at < $1",
    )
    .bind(dead_cutoff)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    // The API's idempotency keys live 24 h whatever the retention age.
    crate::store::idempotency::prune(db, now - crate::store::idempotency::KEY_HOURS * 3_600_000)
        .await?;
    Ok(pruned)
}

pub fn spawn_pruner(
    db: Db,
    settings: RetentionSettings,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let every = Duration::from_secs(settings.interval_secs.max(1));
        loop {
            match prune(&db, &settings, now_ms()).await {
                Ok(p) if p != Pruned::default() => info!(?p, "pruned"),
                Ok(_) => {}
                Err(error) => warn!(error = format!("{error:#}"), "pruning failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    })
}
