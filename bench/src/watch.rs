//! Receipt-to-effect latency as a reader sees it. The inbox's `processed_at` is stamped
//! when an event's work starts, before its commit (and, with group commit, before the
//! commit of the whole group), so it would flatter the numbers. This watcher polls for
//! newly finished events and stamps each with the time it first became visible.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use oncehook::store::{now_ms, Db};

/// How often the watcher looks: the measured latencies are late by up to this much. (At
/// 2 ms, reading the unfinished tail 500 times a second took a visible share of the
/// database's CPU from the server it measures.)
pub const POLL: Duration = Duration::from_millis(5);

/// Rows read per look at most, so an overload does not make each look slower too; the
/// backlog is then counted apart.
const PAGE: i64 = 2_000;

/// How often the watcher looks while at least `BEHIND` events it has seen are unfinished.
/// Each look reads the rows from the oldest unfinished one on, so a backlog made every
/// look read a full page: 400,000 rows a second at `POLL`, PostgreSQL CPU taken from the
/// server it measures, and the more the server fell behind the more it was taken (a probe
/// at 4,000/s that fell behind once ran away, backlog 363 → 28,420; BENCHMARKS.md). So far
/// behind, a latency is hundreds of milliseconds already, and the coarser look only makes
/// it later (never earlier) by up to this much.
pub const POLL_BEHIND: Duration = Duration::from_millis(50);

/// Unfinished events seen in one look from which the watcher looks every `POLL_BEHIND`.
pub const BEHIND: usize = 500;

/// The pause before the next look, after a look that saw `unfinished` events unfinished.
pub fn next_look_after(unfinished: usize) -> Duration {
    if unfinished >= BEHIND {
        POLL_BEHIND
    } else {
        POLL
    }
}

/// What the watcher saw.
#[derive(Default)]
pub struct Watched {
    /// (received at, visible at − received at), milliseconds, for every event seen finished.
    pub latencies: Vec<(i64, i64)>,
    /// (milliseconds since the watcher started, events received and not yet finished), about
    /// once a second: the backlog.
    pub backlog: Vec<(i64, usize)>,
    /// (received at, `processed_at` − received at), milliseconds, for the same events: the
    /// server's own stamps, which no slow look of the watcher can delay (but which end when
    /// the event's work starts, not at its commit).
    pub stamped: Vec<(i64, i64)>,
    /// The longest time between the starts of two looks: every event finished meanwhile is
    /// stamped late by up to that much.
    pub gaps: LookGaps,
}

impl Watched {
    pub fn latency_ms(&self) -> impl Iterator<Item = i64> + '_ {
        self.latencies.iter().map(|(_, ms)| *ms)
    }
}

/// The longest wait between two looks of the watcher.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct LookGaps {
    last: Option<i64>,
    /// (when the look that ended the gap started, ms since the epoch; the gap, ms).
    pub longest: Option<(i64, i64)>,
}

impl LookGaps {
    /// A look starts at `now` (ms).
    pub fn look(&mut self, now: i64) {
        if let Some(last) = self.last {
            let gap = now - last;
            if self.longest.is_none_or(|(_, longest)| gap > longest) {
                self.longest = Some((now, gap));
            }
        }
        self.last = Some(now);
    }
}

/// p99 receipt → effect of the events received in each second since `from_ms`.
pub fn p99_by_second(watched: &Watched, from_ms: i64) -> Vec<(i64, u64)> {
    p99_by_second_of(&watched.latencies, from_ms)
}

/// p99 of the (received at, ms) samples received in each second since `from_ms`.
pub fn p99_by_second_of(samples: &[(i64, i64)], from_ms: i64) -> Vec<(i64, u64)> {
    let mut seconds: std::collections::BTreeMap<i64, Vec<u64>> = Default::default();
    for (received_at, ms) in samples {
        if *received_at >= from_ms {
            seconds
                .entry((received_at - from_ms) / 1000)
                .or_default()
                .push((*ms).max(0) as u64);
        }
    }
    seconds
        .into_iter()
        .map(|(second, mut l)| {
            l.sort_unstable();
            let i = ((l.len() as f64 * 0.99).ceil() as usize).clamp(1, l.len()) - 1;
            (second, l[i])
        })
        .collect()
}

/// Watches inbox rows with `id > after_id` until `stop`, then one last look.
pub fn spawn(
    db: Db,
    after_id: i64,
    stop: CancellationToken,
) -> JoinHandle<anyhow::Result<Watched>> {
    tokio::spawn(async move {
        // Every row at or below the watermark has been seen finished; rows are read in id
        // order, so gaps in the ids (rolled-back inserts) do not stall it.
        let mut watermark = after_id;
        let mut seen = std::collections::HashSet::new();
        let mut watched = Watched::default();
        let started = now_ms();
        let mut next_sample = started;
        loop {
            let last_look = stop.is_cancelled();
            watched.gaps.look(now_ms());
            let rows: Vec<(i64, i64, Option<i64>)> = sqlx::query_as(
                "SELECT id, received_at, processed_at FROM inbox_events WHERE id > $1 ORDER BY id \
                 LIMIT $2",
            )
            .bind(watermark)
            .bind(PAGE)
            .fetch_all(db.reader())
            .await?;
            let now = now_ms();
            let mut contiguous = true;
            let mut unfinished = 0;
            let full_page = rows.len() as i64 == PAGE;
            for (id, received_at, processed_at) in rows {
                let finished = processed_at.is_some();
                if let Some(processed_at) = processed_at {
                    if seen.insert(id) {
                        watched.latencies.push((received_at, now - received_at));
                        watched
                            .stamped
                            .push((received_at, processed_at - received_at));
                    }
                }
                unfinished += usize::from(!finished);
                contiguous &= finished;
                if contiguous {
                    watermark = id;
                    seen.remove(&id);
                }
            }
            if now >= next_sample {
                if full_page {
                    let n: i64 = sqlx::query_scalar(
                        "SELECT COUNT(*) FROM inbox_events WHERE id > $1 AND processed_at IS NULL",
                    )
                    .bind(watermark)
                    .fetch_one(db.reader())
                    .await?;
                    unfinished = n as usize;
                }
                watched.backlog.push((now - started, unfinished));
                next_sample += 1000;
            }
            if last_look {
                return Ok(watched);
            }
            tokio::time::sleep(next_look_after(unfinished)).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_gap_between_looks_is_kept_with_when_it_ended() {
        let mut gaps = LookGaps::default();
        assert_eq!(gaps.longest, None);
        gaps.look(1_000);
        assert_eq!(gaps.longest, None, "one look is no gap yet");
        for now in [1_006, 1_012, 1_400, 1_406, 1_500] {
            gaps.look(now);
        }
        assert_eq!(gaps.longest, Some((1_400, 388)));
    }

    #[test]
    fn the_watcher_looks_less_often_only_while_far_behind() {
        assert_eq!(next_look_after(0), POLL);
        assert_eq!(next_look_after(BEHIND - 1), POLL);
        assert_eq!(next_look_after(BEHIND), POLL_BEHIND);
        assert_eq!(next_look_after(PAGE as usize), POLL_BEHIND);
        assert!(POLL < POLL_BEHIND);
    }

    #[test]
    fn each_second_gets_the_p99_of_the_events_received_in_it() {
        let mut samples: Vec<(i64, i64)> = (0..100).map(|i| (10_000 + i, i)).collect();
        samples.push((11_500, 7));
        samples.push((9_999, 1_000));
        assert_eq!(p99_by_second_of(&samples, 10_000), vec![(0, 98), (1, 7)]);
    }
}
