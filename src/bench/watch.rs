//! Receipt-to-effect latency as a reader sees it. The inbox's `processed_at` is stamped
//! when an event's work starts, before its commit (and, with group commit, before the
//! commit of the whole group), so it would flatter the numbers. This watcher polls for
//! newly finished events and stamps each with the time it first became visible.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::store::{now_ms, Db};

/// How often the watcher looks: the measured latencies are late by up to this much.
pub const POLL: Duration = Duration::from_millis(2);

/// Watches inbox rows with `id > after_id` until `stop`, then one last look. Returns
/// (visible at − received at) in milliseconds for every event seen finished.
pub fn spawn(
    db: Db,
    after_id: i64,
    stop: CancellationToken,
) -> JoinHandle<anyhow::Result<Vec<i64>>> {
    tokio::spawn(async move {
        // Every row at or below the watermark has been seen finished; rows are read in id
        // order, so gaps in the ids (rolled-back inserts) do not stall it.
        let mut watermark = after_id;
        let mut seen = std::collections::HashSet::new();
        let mut latencies = Vec::new();
        loop {
            let last_look = stop.is_cancelled();
            let rows: Vec<(i64, i64, Option<i64>)> = sqlx::query_as(
                "SELECT id, received_at, processed_at FROM inbox_events WHERE id > $1 ORDER BY id",
            )
            .bind(watermark)
            .fetch_all(db.reader())
            .await?;
            let now = now_ms();
            let mut contiguous = true;
            for (id, received_at, processed_at) in rows {
                let finished = processed_at.is_some();
                if finished && seen.insert(id) {
                    latencies.push(now - received_at);
                }
                contiguous &= finished;
                if contiguous {
                    watermark = id;
                    seen.remove(&id);
                }
            }
            if last_look {
                return Ok(latencies);
            }
            tokio::time::sleep(POLL).await;
        }
    })
}
