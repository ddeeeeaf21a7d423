//! Bulk redrives as they run. Each is a row in `redrive_jobs` (store::redrive_jobs) that
//! the running instance writes every `REPORT_EVERY_MS` and closes with a summary, so the
//! dead-letter page of every instance shows its progress; the per-item record is the
//! `redrives` and `audit_log` rows every redrive writes anyway.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use app::backend::RedriveJobView;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::pipeline::redrive::RedriveResult;
use crate::store::redrive_jobs::{self, JobRow, REPORT_EVERY_MS};
use crate::store::{now_ms, read::rfc3339, Db};

/// `total` before the selection is known.
const UNKNOWN: usize = usize::MAX;

/// How far a running redrive is: set by its progress callback, written by `report_while`.
pub struct Progress {
    done: AtomicUsize,
    total: AtomicUsize,
    /// Wakes the reporter when the total becomes known, so "0 of N" is written at once.
    counted: Notify,
}

impl Default for Progress {
    fn default() -> Self {
        Self {
            done: AtomicUsize::new(0),
            total: AtomicUsize::new(UNKNOWN),
            counted: Notify::new(),
        }
    }
}

impl Progress {
    pub fn set(&self, done: usize, total: usize) {
        self.done.store(done, Ordering::Relaxed);
        if self.total.swap(total, Ordering::Relaxed) == UNKNOWN {
            self.counted.notify_one();
        }
    }

    fn get(&self) -> (usize, Option<usize>) {
        let total = self.total.load(Ordering::Relaxed);
        (
            self.done.load(Ordering::Relaxed),
            (total != UNKNOWN).then_some(total),
        )
    }
}

/// Runs `work` (a bulk redrive feeding `progress`) as job `id`: its row is written when the
/// total is known and every `REPORT_EVERY_MS` (a heartbeat even when nothing moved), then
/// closed with the summary. A failed progress write is logged and never stops the redrive.
///
/// The writes come from their own task, so `work` keeps being polled meanwhile: on SQLite
/// the write pool is one connection, which `work` may hold mid-transaction, and a report
/// awaited in between would wait for it forever.
pub async fn report_while(
    db: &Db,
    id: i64,
    progress: Arc<Progress>,
    work: impl Future<Output = anyhow::Result<Vec<RedriveResult>>>,
) -> anyhow::Result<Vec<RedriveResult>> {
    let stop = CancellationToken::new();
    let reporter = tokio::spawn({
        let (db, progress, stop) = (db.clone(), progress.clone(), stop.clone());
        async move {
            let mut tick = tokio::time::interval(Duration::from_millis(REPORT_EVERY_MS));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {}
                    _ = progress.counted.notified() => {}
                }
                let (done, total) = progress.get();
                if let Err(e) = redrive_jobs::report(&db, id, done, total, now_ms()).await {
                    warn!(error = %e, job = id, "writing a bulk redrive's progress failed");
                }
            }
        }
    });
    let results = work.await;
    stop.cancel();
    // The last report lands before the summary, never after it.
    let _ = reporter.await;
    let summary = match &results {
        Ok(results) => summary(results.iter().map(|r| r.outcome.as_str())),
        Err(_) => "stopped by an error (see the server log); what was done stays done".into(),
    };
    let (done, total) = progress.get();
    if let Err(e) =
        redrive_jobs::finish(db, id, done, total.unwrap_or(done), &summary, now_ms()).await
    {
        warn!(error = %e, job = id, "recording the end of a bulk redrive failed");
    }
    results
}

/// A job's row as the dead-letter page shows it.
pub fn view(job: JobRow, now: i64) -> RedriveJobView {
    RedriveJobView {
        id: job.id as u64,
        interrupted: job.interrupted(now),
        actor: job.actor,
        selection: job.selection,
        total: job.total.unwrap_or(0) as usize,
        done: job.done as usize,
        started_at: rfc3339(job.started_at),
        finished_at: job.finished_at.map(rfc3339),
        summary: job.summary,
    }
}

/// "998 requeued, 2 skipped": outcomes counted by their first word.
pub fn summary<'a>(outcomes: impl IntoIterator<Item = &'a str>) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for outcome in outcomes {
        let word = outcome
            .split(|c: char| c == ':' || c.is_whitespace())
            .next()
            .unwrap_or(outcome);
        *counts.entry(word).or_default() += 1;
    }
    if counts.is_empty() {
        return "nothing matched".into();
    }
    let mut parts: Vec<(usize, &str)> = counts.into_iter().map(|(w, n)| (n, w)).collect();
    parts.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    parts
        .into_iter()
        .map(|(n, word)| format!("{n} {word}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_summed_by_their_first_word() {
        let outcomes = [
            "requeued",
            "skipped: status is resolved",
            "requeued",
            "requeued",
        ];
        assert_eq!(summary(outcomes), "3 requeued, 1 skipped");
        assert_eq!(summary([]), "nothing matched");
    }

    #[test]
    fn progress_knows_when_its_total_is_known() {
        let progress = Progress::default();
        assert_eq!(progress.get(), (0, None));
        progress.set(0, 7);
        progress.set(3, 7);
        assert_eq!(progress.get(), (3, Some(7)));
    }
}
