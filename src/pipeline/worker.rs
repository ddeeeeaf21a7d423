//! The life of a queue worker (processor, relay): do a round of work; when a round finds
//! nothing, sleep until woken, until the poll interval passes, or until shutdown.

use std::future::Future;
use std::time::Duration;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{warn, Instrument};

/// Spawns `count` copies of a worker's loop, each in a tracing span `kind{n}`.
pub fn spawn_n<W, F, Fut>(
    worker: Arc<W>,
    count: usize,
    span: fn(usize) -> tracing::Span,
    run: F,
) -> Vec<JoinHandle<()>>
where
    W: Send + Sync + 'static,
    F: Fn(Arc<W>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    (0..count.max(1))
        .map(|n| tokio::spawn(run(worker.clone()).instrument(span(n))))
        .collect()
}

/// Wake-ups go to one idle worker, not all; a worker whose claim came back full calls
/// this right after claiming, so a peer starts on what may still be waiting.
pub fn recruit_if_full(wake: &Notify, claimed: usize, claim_batch: i64) {
    if claimed as i64 >= claim_batch {
        wake.notify_one();
    }
}

/// Turns the wake-ups of a live stream into fewer, larger claims. Each ingest commit wakes
/// a worker; without this, every commit's few events became a batch of their own, and the
/// per-batch statements (not the per-event work) took the database's CPU. The first idle
/// worker woken waits `linger` before it claims, so what arrives meanwhile joins its
/// batch; workers woken while it waits stay idle (its claim takes their events). A worker
/// whose claim came back partial gathers the same way before its next claim. While
/// claims come back full there is a backlog, and nobody waits.
#[derive(Debug)]
pub struct Gather {
    linger: Duration,
    gathering: AtomicBool,
    backlogged: AtomicBool,
}

impl Gather {
    pub fn new(linger: Duration) -> Self {
        Gather {
            linger,
            gathering: AtomicBool::new(false),
            backlogged: AtomicBool::new(false),
        }
    }

    /// Notes how many items a claim of `claim_batch` took: a full claim means a backlog.
    pub fn claimed(&self, claimed: usize, claim_batch: i64) {
        self.backlogged
            .store(claimed as i64 >= claim_batch, Ordering::Relaxed);
    }

    /// Whether the last claim came back full.
    pub fn backlogged(&self) -> bool {
        self.backlogged.load(Ordering::Relaxed)
    }

    /// After a wake-up: waits out the linger and returns true (claim now), or returns
    /// false at once when another worker is already gathering (stay idle).
    async fn before_claim(&self, shutdown: &CancellationToken) -> bool {
        if self.linger.is_zero() || self.backlogged.load(Ordering::Relaxed) {
            return true;
        }
        if self.gathering.swap(true, Ordering::AcqRel) {
            return false;
        }
        tokio::select! {
            _ = tokio::time::sleep(self.linger) => {}
            _ = shutdown.cancelled() => {}
        }
        self.gathering.store(false, Ordering::Release);
        true
    }
}

/// How many workers claim, and how much, while claims come back full (a backlog). Every
/// worker then claims a larger batch, cheaper per event. While events also keep arriving,
/// only a few of them claim: every worker claiming at once takes the database's CPU from
/// the receiver beside it (on two cores, four PostgreSQL sessions of the processor against
/// the receipt writer's one), and a burst is then acknowledged slower than the inbox could
/// take it. Without a backlog (claims come back partial) every worker claims the usual
/// batch, so a live stream keeps all of them for its latency; once the receiver is quiet,
/// every worker drains the backlog. Measured in BENCHMARKS.md (issue 18).
#[derive(Debug)]
pub struct Rounds {
    usual_batch: i64,
    backlog_workers: usize,
    backlog_batch: i64,
    claiming: AtomicUsize,
}

/// A worker's claim in progress; it ends when dropped.
#[derive(Debug)]
pub struct Round<'a> {
    rounds: &'a Rounds,
    /// How many items this claim may take.
    pub limit: i64,
}

impl Drop for Round<'_> {
    fn drop(&mut self) {
        self.rounds.claiming.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Rounds {
    pub fn new(usual_batch: i64, backlog_workers: usize, backlog_batch: i64) -> Self {
        Rounds {
            usual_batch: usual_batch.max(1),
            backlog_workers: backlog_workers.max(1),
            backlog_batch: backlog_batch.max(1),
            claiming: AtomicUsize::new(0),
        }
    }

    /// A worker about to claim: its claim's size, or `None` while `backlogged`, events are
    /// `arriving` and enough workers claim already (stay idle until woken).
    pub fn start(&self, backlogged: bool, arriving: bool) -> Option<Round<'_>> {
        let before = self.claiming.fetch_add(1, Ordering::AcqRel);
        if backlogged && arriving && before >= self.backlog_workers {
            self.claiming.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Round {
            rounds: self,
            limit: if backlogged {
                self.backlog_batch
            } else {
                self.usual_batch
            },
        })
    }
}

/// `round` returns how many items it handled; errors are logged and count as idle.
pub async fn run_loop<F, Fut>(wake: &Notify, poll: Duration, shutdown: &CancellationToken, round: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<usize>>,
{
    run_gathering_loop(wake, poll, shutdown, None, round).await
}

/// `run_loop` whose wake-ups go through `gather` (when given) before a round starts.
pub async fn run_gathering_loop<F, Fut>(
    wake: &Notify,
    poll: Duration,
    shutdown: &CancellationToken,
    gather: Option<&Gather>,
    mut round: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<usize>>,
{
    while !shutdown.is_cancelled() {
        match round().await {
            Ok(0) => {}
            // After a partial claim (a live stream, not a backlog) the worker gathers
            // before it claims again, as after a wake-up: claiming at once took only what
            // arrived during the last batch (PostgreSQL at 2,500 events/s: 364 claims a
            // second of 7 events each; gathering: 139 of 18, 12 % less of its CPU, p99
            // unchanged; BENCHMARKS.md, 2026-12-05 evening). If a peer is gathering
            // already, its claim takes these events and this worker waits to be woken.
            // A full claim (a backlog) is followed at once. Waiting for a wake-up instead
            // was measured and not kept (2026-12-03): worse p99 on SQLite.
            Ok(_) => match gather {
                Some(gather) if !gather.backlogged() => {
                    if gather.before_claim(shutdown).await {
                        continue;
                    }
                }
                _ => continue,
            },
            Err(error) => warn!(error = format!("{error:#}"), "worker round failed"),
        }
        loop {
            // Only an idle worker waits for a wake-up, so `notify_one` reaches a worker
            // that is free rather than one busy with a batch. Nothing is lost in between:
            // a `notify_one` with nobody waiting leaves a permit that this wait then takes.
            let notified = wake.notified();
            let woken = tokio::select! {
                _ = notified => true,
                _ = tokio::time::sleep(poll) => false,
                _ = shutdown.cancelled() => false,
            };
            match gather {
                Some(gather) if woken && !gather.before_claim(shutdown).await => continue,
                _ => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_a_backlog_only_the_backlog_workers_claim_and_they_claim_more() {
        let rounds = Rounds::new(32, 2, 128);
        // No backlog: every worker claims the usual batch, events arriving or not.
        let usual: Vec<Round> = (0..4).map(|_| rounds.start(false, true).unwrap()).collect();
        assert!(usual.iter().all(|r| r.limit == 32));
        drop(usual);
        // A backlog while events arrive: two claim, larger batches; a third stays idle
        // until one ends.
        let first = rounds.start(true, true).unwrap();
        let second = rounds.start(true, true).unwrap();
        assert_eq!((first.limit, second.limit), (128, 128));
        assert!(rounds.start(true, true).is_none());
        drop(first);
        let third = rounds.start(true, true).expect("a slot came free");
        assert_eq!(third.limit, 128);
        assert!(rounds.start(true, true).is_none());
        // The receiver quiet: every worker drains the backlog, in larger batches.
        let fourth = rounds.start(true, false).expect("nothing arriving");
        assert_eq!(fourth.limit, 128);
        drop((second, third, fourth));
        // Workers still busy with usual claims when a backlog shows count against it.
        let busy: Vec<Round> = (0..3).map(|_| rounds.start(false, true).unwrap()).collect();
        assert!(rounds.start(true, true).is_none(), "three claim already");
        drop(busy);
        assert_eq!(rounds.start(true, true).unwrap().limit, 128);
    }

    #[tokio::test]
    async fn a_wake_up_ends_the_idle_wait_and_shutdown_ends_the_loop() {
        let wake = Arc::new(Notify::new());
        let shutdown = CancellationToken::new();
        let rounds = Arc::new(AtomicUsize::new(0));
        let task = {
            let (wake, shutdown, rounds) = (wake.clone(), shutdown.clone(), rounds.clone());
            tokio::spawn(async move {
                run_loop(&wake, Duration::from_secs(3600), &shutdown, || {
                    rounds.fetch_add(1, Ordering::SeqCst);
                    async { Ok(0) }
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            rounds.load(Ordering::SeqCst),
            1,
            "idle: waits for a wake-up, not a poll"
        );
        wake.notify_one();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(rounds.load(Ordering::SeqCst), 2);
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .unwrap()
            .unwrap();
    }

    /// A worker whose round is held until `release` is notified, counting its rounds;
    /// every round reports no work.
    fn held_worker(
        wake: &Arc<Notify>,
        shutdown: &CancellationToken,
        release: Option<Arc<Notify>>,
    ) -> Arc<AtomicUsize> {
        let rounds = Arc::new(AtomicUsize::new(0));
        let (wake, shutdown, counter) = (wake.clone(), shutdown.clone(), rounds.clone());
        tokio::spawn(async move {
            run_loop(&wake, Duration::from_secs(3600), &shutdown, || {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let release = release.clone();
                async move {
                    if let (0, Some(release)) = (n, release) {
                        release.notified().await;
                    }
                    Ok(0)
                }
            })
            .await
        });
        rounds
    }

    #[tokio::test]
    async fn a_wake_up_reaches_the_idle_worker_not_the_busy_one() {
        let wake = Arc::new(Notify::new());
        let shutdown = CancellationToken::new();
        let release = Arc::new(Notify::new());
        let busy = held_worker(&wake, &shutdown, Some(release.clone()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        let idle = held_worker(&wake, &shutdown, None);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            (busy.load(Ordering::SeqCst), idle.load(Ordering::SeqCst)),
            (1, 1)
        );
        wake.notify_one();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            idle.load(Ordering::SeqCst),
            2,
            "the idle worker took the wake-up"
        );
        release.notify_one();
        shutdown.cancel();
    }

    #[tokio::test]
    async fn a_wake_up_while_every_worker_is_busy_is_kept_for_the_next_idle_one() {
        let wake = Arc::new(Notify::new());
        let shutdown = CancellationToken::new();
        let release = Arc::new(Notify::new());
        let rounds = held_worker(&wake, &shutdown, Some(release.clone()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        wake.notify_one();
        release.notify_one();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            rounds.load(Ordering::SeqCst),
            2,
            "the wake-up sent during the busy round started another one"
        );
        shutdown.cancel();
    }

    /// `count` workers sharing `gather`; the rounds of all of them are counted together.
    /// With `claimed` 0 each round reports no work at once; otherwise each takes 1 ms and
    /// claims `claimed` of a 32-item claim (partial or full).
    fn gathering_workers(
        count: usize,
        wake: &Arc<Notify>,
        shutdown: &CancellationToken,
        gather: &Arc<Gather>,
        claimed: usize,
    ) -> Arc<AtomicUsize> {
        let rounds = Arc::new(AtomicUsize::new(0));
        for _ in 0..count {
            let (wake, shutdown, gather, rounds) = (
                wake.clone(),
                shutdown.clone(),
                gather.clone(),
                rounds.clone(),
            );
            tokio::spawn(async move {
                run_gathering_loop(
                    &wake,
                    Duration::from_secs(3600),
                    &shutdown,
                    Some(&gather),
                    || {
                        rounds.fetch_add(1, Ordering::SeqCst);
                        let gather = gather.clone();
                        async move {
                            if claimed > 0 {
                                tokio::time::sleep(Duration::from_millis(1)).await;
                                gather.claimed(claimed, 32);
                            }
                            Ok(claimed)
                        }
                    },
                )
                .await
            });
        }
        rounds
    }

    // Paused time: the clock moves only when every task waits, so the counts below do
    // not depend on how busy the machine is.
    #[tokio::test(start_paused = true)]
    async fn wake_ups_within_the_linger_become_one_round_after_it() {
        let wake = Arc::new(Notify::new());
        let shutdown = CancellationToken::new();
        let gather = Arc::new(Gather::new(Duration::from_millis(200)));
        let rounds = gathering_workers(3, &wake, &shutdown, &gather, 0);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(rounds.load(Ordering::SeqCst), 3, "one first round each");
        for _ in 0..3 {
            wake.notify_one();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            rounds.load(Ordering::SeqCst),
            3,
            "nobody claims while the first woken worker lingers"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            rounds.load(Ordering::SeqCst),
            4,
            "three wake-ups within the linger: one round, by the worker that lingered"
        );
        shutdown.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_backlog_is_claimed_at_once_and_zero_linger_never_waits() {
        for (linger_ms, full) in [(10_000, true), (0, false)] {
            let wake = Arc::new(Notify::new());
            let shutdown = CancellationToken::new();
            let gather = Arc::new(Gather::new(Duration::from_millis(linger_ms)));
            gather.claimed(if full { 32 } else { 3 }, 32);
            let rounds = gathering_workers(1, &wake, &shutdown, &gather, 0);
            tokio::time::sleep(Duration::from_millis(30)).await;
            wake.notify_one();
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(rounds.load(Ordering::SeqCst), 2, "linger {linger_ms} ms");
            shutdown.cancel();
        }
    }

    /// Rounds of one gathering worker over a second of paused time, each taking 1 ms and
    /// claiming `claimed` of a 32-item claim.
    async fn rounds_in_a_second(claimed: usize) -> usize {
        let wake = Arc::new(Notify::new());
        let shutdown = CancellationToken::new();
        let gather = Arc::new(Gather::new(Duration::from_millis(200)));
        let rounds = gathering_workers(1, &wake, &shutdown, &gather, claimed);
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        shutdown.cancel();
        rounds.load(Ordering::SeqCst)
    }

    // A live stream: each claim comes back partial, and claiming again at once would take
    // the few events that arrived during the last batch (PostgreSQL at 2,500 events/s:
    // 364 claims a second, 7 events each). The worker lingers first, so the next claim
    // takes what arrived meanwhile. A full claim (a backlog) is followed at once.
    #[tokio::test(start_paused = true)]
    async fn after_a_partial_claim_the_worker_lingers_and_after_a_full_one_it_does_not() {
        let partial = rounds_in_a_second(3).await;
        assert!(
            (4..=6).contains(&partial),
            "one round, then one per 201 ms linger and round: {partial}"
        );
        let full = rounds_in_a_second(32).await;
        assert!(full >= 900, "a backlog is claimed back to back: {full}");
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_the_linger() {
        let wake = Arc::new(Notify::new());
        let shutdown = CancellationToken::new();
        let gather = Arc::new(Gather::new(Duration::from_secs(3600)));
        let rounds = gathering_workers(1, &wake, &shutdown, &gather, 0);
        tokio::time::sleep(Duration::from_millis(30)).await;
        wake.notify_one();
        tokio::time::sleep(Duration::from_millis(30)).await;
        shutdown.cancel();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!gather.gathering.load(Ordering::SeqCst));
        assert_eq!(rounds.load(Ordering::SeqCst), 1, "no round after shutdown");
    }
}
