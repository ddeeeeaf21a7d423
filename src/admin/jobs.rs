//! Bulk redrives as they run: how far each is, so the person who started one (and anyone
//! else opening the dead-letter page on this instance) sees progress, then its summary.
//! In memory: the durable record is the per-item `redrives` and `audit_log` rows that
//! every redrive writes anyway.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use app::backend::RedriveJobView;

use crate::store::{now_ms, read::rfc3339};

/// Finished jobs kept for the page, newest first.
const KEEP: usize = 10;

pub struct Job {
    id: u64,
    actor: String,
    selection: String,
    started_at: i64,
    total: AtomicUsize,
    done: AtomicUsize,
    /// (finished at, summary) once it ended.
    end: Mutex<Option<(i64, String)>>,
}

impl Job {
    pub fn progress(&self, done: usize, total: usize) {
        self.total.store(total, Ordering::Relaxed);
        self.done.store(done, Ordering::Relaxed);
    }

    pub fn finish(&self, summary: String) {
        *self.end.lock().unwrap_or_else(|e| e.into_inner()) = Some((now_ms(), summary));
    }

    fn view(&self) -> RedriveJobView {
        let end = self.end.lock().unwrap_or_else(|e| e.into_inner()).clone();
        RedriveJobView {
            id: self.id,
            actor: self.actor.clone(),
            selection: self.selection.clone(),
            total: self.total.load(Ordering::Relaxed),
            done: self.done.load(Ordering::Relaxed),
            started_at: rfc3339(self.started_at),
            finished_at: end.as_ref().map(|(at, _)| rfc3339(*at)),
            summary: end.map(|(_, summary)| summary),
        }
    }
}

#[derive(Default)]
pub struct RedriveJobs {
    next: AtomicU64,
    jobs: Mutex<VecDeque<Arc<Job>>>,
}

impl RedriveJobs {
    pub fn start(&self, actor: &str, selection: &str) -> Arc<Job> {
        let job = Arc::new(Job {
            id: self.next.fetch_add(1, Ordering::Relaxed) + 1,
            actor: actor.to_string(),
            selection: selection.to_string(),
            started_at: now_ms(),
            total: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            end: Mutex::new(None),
        });
        let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        jobs.push_front(job.clone());
        // Running jobs are never dropped; the oldest finished ones are.
        while jobs.len() > KEEP {
            let Some(oldest_finished) = jobs
                .iter()
                .rposition(|j| j.end.lock().map(|e| e.is_some()).unwrap_or(true))
            else {
                break;
            };
            jobs.remove(oldest_finished);
        }
        job
    }

    /// Newest first.
    pub fn list(&self) -> Vec<RedriveJobView> {
        let jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        jobs.iter().map(|j| j.view()).collect()
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
    fn running_jobs_are_kept_and_old_finished_ones_dropped() {
        let jobs = RedriveJobs::default();
        let running = jobs.start("ada", "class=unknown");
        for _ in 0..15 {
            jobs.start("bob", "").finish("1 requeued".into());
        }
        let list = jobs.list();
        assert_eq!(list.len(), KEEP);
        assert!(list
            .iter()
            .any(|j| j.id == running.id && j.finished_at.is_none()));
        running.progress(3, 7);
        let view = jobs
            .list()
            .into_iter()
            .find(|j| j.id == running.id)
            .unwrap();
        assert_eq!((view.done, view.total), (3, 7));
    }
}
