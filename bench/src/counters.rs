//! What the counters cost the hot path. Per event the receiver and the processor call the
//! Prometheus counters and latency histogram (`oncehook::ops::metrics`) and add to the overview's
//! per-minute rollups (`store::rollup`); this step makes exactly those calls in a loop, on
//! one thread and on several at once (they share the rollup's lock), and times the
//! write-behind flush of a minute's worth of counts. The report sets the per-event cost
//! beside one effect's share of the processing step.

use std::time::Instant;

use oncehook::store::rollup::Rollup;
use oncehook::store::{now_ms, Db};

pub struct Counters {
    /// (threads, CPU nanoseconds per event: wall time × threads / events).
    pub per_event_ns: Vec<(usize, f64)>,
    /// Rows one flush wrote, and its median time over the repetitions.
    pub flush_rows: usize,
    pub flush_ms: f64,
}

const PROVIDER: &str = "bench";

/// One event's counting, as received (a new event) and then applied with money.
fn count_one_event(rollup: &Rollup) {
    let received_at = now_ms();
    oncehook::ops::metrics::receipt(PROVIDER, "accepted");
    rollup.received(
        received_at,
        PROVIDER,
        false,
        Some("payment_intent.succeeded"),
        Some("2024-06-20"),
    );
    let now = now_ms();
    oncehook::ops::metrics::processed("applied", received_at, now);
    rollup.filed(now, PROVIDER, "applied", received_at);
    rollup.moved(
        now,
        PROVIDER,
        "EUR",
        [("paid", 4200), ("refunded", 0), ("disputed", 0)],
    );
}

fn per_event_ns(rollup: &Rollup, threads: usize, events_per_thread: usize) -> f64 {
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                for _ in 0..events_per_thread {
                    count_one_event(rollup);
                }
            });
        }
    });
    started.elapsed().as_nanos() as f64 * threads as f64 / (threads * events_per_thread) as f64
}

pub async fn measure(db: &Db, events_per_thread: usize) -> anyhow::Result<Counters> {
    // The same recorder the server installs, so the counters are real, not the no-op facade.
    anyhow::ensure!(
        oncehook::ops::metrics::handle().is_some(),
        "the Prometheus recorder is not installed: the counters would cost nothing"
    );
    let rollup = Rollup::default();
    // Warm up: the first call of each counter registers it.
    per_event_ns(&rollup, 1, 1_000);
    let mut per_event = vec![];
    for threads in [1, 2, 4] {
        per_event.push((threads, per_event_ns(&rollup, threads, events_per_thread)));
    }
    rollup.flush(db).await?;

    // A flush writes what one interval counted; on a busy minute that is one row per
    // metric (outcomes, latency buckets, types, versions, money kinds).
    let mut flush_ms = vec![];
    let mut flush_rows = 0;
    for _ in 0..20 {
        for _ in 0..1_000 {
            count_one_event(&rollup);
        }
        rollup.add(now_ms(), PROVIDER, "redelivered", 1);
        rollup.add(now_ms(), PROVIDER, "retry", 1);
        let started = Instant::now();
        flush_rows = rollup.flush(db).await?;
        flush_ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    flush_ms.sort_by(f64::total_cmp);
    Ok(Counters {
        per_event_ns: per_event,
        flush_rows,
        flush_ms: flush_ms[flush_ms.len() / 2],
    })
}
