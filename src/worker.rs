//! The life of a queue worker (processor, relay): do a round of work; when a round finds
//! nothing, sleep until woken, until the poll interval passes, or until shutdown.

use std::future::Future;
use std::time::Duration;

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

/// `round` returns how many items it handled; errors are logged and count as idle.
pub async fn run_loop<F, Fut>(
    wake: &Notify,
    poll: Duration,
    shutdown: &CancellationToken,
    mut round: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<usize>>,
{
    while !shutdown.is_cancelled() {
        match round().await {
            Ok(0) => {}
            Ok(_) => continue,
            Err(error) => warn!(error = format!("{error:#}"), "worker round failed"),
        }
        // Only an idle worker waits for a wake-up, so `notify_one` reaches a worker that
        // is free rather than one busy with a batch. Nothing is lost in between: a
        // `notify_one` with nobody waiting leaves a permit that this wait then takes.
        let notified = wake.notified();
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep(poll) => {}
            _ = shutdown.cancelled() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

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
}
