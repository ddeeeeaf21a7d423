//! Group commit for the receiver: requests hand their receipt to a writer task and wait
//! for its commit. A writer takes everything queued (up to `max_batch`) into one
//! transaction, so N concurrent requests cost one fsync, not N, and nobody is answered
//! before their row is durable. When only a few are queued it waits up to
//! `receiver.linger_ms` for more, so a live stream's receipts share commits too.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Mutex, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::warn;

use crate::pipeline::processor::{AppliedWithReceipts, Processor};
use crate::pipeline::settings::ReceiverSettings;
use crate::store::health::Writer;
use crate::store::ingest::{store_receipts, store_receipts_in, Receipt, Stored};
use crate::store::{Backend, Db};

type Reply = oneshot::Sender<Result<Stored, ()>>;

#[derive(Clone)]
pub struct Ingestor {
    queue: mpsc::Sender<(Receipt, Reply)>,
    commit_timeout: Duration,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IngestError {
    #[error("the database could not commit the event; retry later")]
    Unavailable,
}

impl Ingestor {
    /// Starts the writers. They stop once every `Ingestor` clone is dropped and the queue
    /// is drained, so in-flight requests are answered during shutdown. `processor`: the
    /// local processor, whose due events each commit also applies where it says it may
    /// (`Processor::applies_with_receipts`: SQLite's one writer). `connections`: the
    /// server's open connections, which bound how long a writer waits for more receipts.
    pub fn start(
        db: Db,
        wake: Arc<Notify>,
        settings: &ReceiverSettings,
        processor: Option<Arc<Processor>>,
        connections: OpenConnections,
    ) -> (Ingestor, Vec<JoinHandle<()>>) {
        let processor = processor.filter(|p| p.applies_with_receipts());
        let (queue, rx) = mpsc::channel(settings.max_batch.max(1) * 8);
        let rx = Arc::new(Mutex::new(rx));
        let writers = match db.backend {
            Backend::Sqlite => 1,
            Backend::Postgres => settings.writers.max(1),
        };
        let handles = (0..writers)
            .map(|_| {
                let (db, wake, rx) = (db.clone(), wake.clone(), rx.clone());
                let processor = processor.clone();
                let batching = Batching {
                    max_batch: settings.max_batch.max(1),
                    linger: Duration::from_millis(settings.linger_ms),
                    connections: connections.clone(),
                };
                tokio::spawn(async move { write_loop(db, wake, rx, batching, processor).await })
            })
            .collect();
        let ingestor = Ingestor {
            queue,
            commit_timeout: Duration::from_millis(settings.commit_timeout_ms),
        };
        (ingestor, handles)
    }

    /// Returns once the receipt is committed, or fails: never an answer on hope.
    pub async fn submit(&self, receipt: Receipt) -> Result<Stored, IngestError> {
        let (reply, answer) = oneshot::channel();
        let wait = async {
            self.queue
                .send((receipt, reply))
                .await
                .map_err(|_| IngestError::Unavailable)?;
            answer
                .await
                .map_err(|_| IngestError::Unavailable)?
                .map_err(|_| IngestError::Unavailable)
        };
        // A timed-out receipt may still commit later; the provider's retry then finds a
        // duplicate, which is harmless. A 2xx for an uncommitted one would not be.
        tokio::time::timeout(self.commit_timeout, wait)
            .await
            .unwrap_or(Err(IngestError::Unavailable))
    }
}

/// A batch under this many receipts is small: its commit's fixed cost (a transaction, a
/// WAL flush, a statement or two planned) is paid by a handful of events. At a live rate of
/// thousands a second the one writer's queue holds far fewer per commit, and on PostgreSQL
/// those commits' fixed cost was most of what the receipts cost (BENCHMARKS.md, issue 18):
/// commits of 16 instead of 8 took another 12 % of PostgreSQL's CPU at 3,000 events/s.
pub const SMALL_BATCH: usize = 16;

/// The slots of a listener's open client connections: its accept loop takes one before it
/// accepts (at most `server.max_connections` open; more wait in the kernel's accept queue)
/// and each connection holds its slot until it closes. The receipt writers read the count.
///
/// Over HTTP/1.1 a connection carries one request at a time, so a closed loop of senders
/// (each waits for its answer before it sends again) has at most one receipt per
/// connection queued, and a writer that waits for more receipts than there are senders
/// left to send them waits its whole linger on every commit while they wait for it: with
/// 16 senders, a writer that waited for 16 made ingest 5 % slower, one that waited for 24
/// 73 % (BENCHMARKS.md). A writer therefore never waits for more than half the open
/// connections: the other half are sending while its commit runs.
#[derive(Clone, Debug)]
pub struct OpenConnections {
    slots: Arc<Semaphore>,
    max: usize,
}

impl OpenConnections {
    /// Room for `max` open connections (at least one).
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        OpenConnections {
            slots: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// A slot for one connection, waited for while `max` are open; freed when dropped.
    pub async fn slot(&self) -> OwnedSemaphorePermit {
        self.slots
            .clone()
            .acquire_owned()
            .await
            .expect("the slots are never closed")
    }

    /// Slots taken: the open connections, and the one the accept loop holds for the next.
    pub fn count(&self) -> usize {
        self.max - self.slots.available_permits()
    }
}

/// How a writer fills one commit.
#[derive(Clone, Debug)]
struct Batching {
    max_batch: usize,
    /// How long a small batch waits for more receipts (`receiver.linger_ms`).
    linger: Duration,
    connections: OpenConnections,
}

impl Batching {
    /// How many receipts a batch waits for: `SMALL_BATCH`, but never more than half the
    /// open connections can send (see [`OpenConnections`]).
    fn enough(&self) -> usize {
        SMALL_BATCH
            .min(self.max_batch)
            .min(self.connections.count() / 2)
    }
}

type Queue = mpsc::Receiver<(Receipt, Reply)>;

/// The next batch: whatever is queued (up to `max_batch`), and when that is a small batch
/// of more than one, what arrives within the linger until there are [`Batching::enough`].
/// A lone receipt commits at once: nobody else sent during the last commit, so waiting
/// would only delay it (one sender posting in turn went from 1,700 to 350 events/s when it
/// waited too). Empty once the queue is closed and drained. Taking the batch holds the
/// queue, so a second writer takes the next one.
async fn next_batch(rx: &Mutex<Queue>, batching: &Batching) -> Vec<(Receipt, Reply)> {
    let mut batch = Vec::new();
    let mut rx = rx.lock().await;
    if rx.recv_many(&mut batch, batching.max_batch).await < 2 || batching.linger.is_zero() {
        return batch;
    }
    let enough = batching.enough();
    let deadline = Instant::now() + batching.linger;
    while batch.len() < enough {
        let room = batching.max_batch - batch.len();
        match tokio::time::timeout_at(deadline, rx.recv_many(&mut batch, room)).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    batch
}

async fn write_loop(
    db: Db,
    wake: Arc<Notify>,
    rx: Arc<Mutex<Queue>>,
    batching: Batching,
    processor: Option<Arc<Processor>>,
) {
    loop {
        let batch = next_batch(&rx, &batching).await;
        if batch.is_empty() {
            return;
        }
        let (receipts, replies): (Vec<Receipt>, Vec<Reply>) = batch.into_iter().unzip();
        let committed = match &processor {
            Some(processor) => store_and_apply(&db, processor, &receipts).await,
            None => store_receipts(&db, &receipts).await.map(|s| (s, None)),
        };
        let committed = db.health().record(Writer::Receipts, committed);
        match committed {
            Ok((stored, applied)) => {
                crate::ops::metrics::receipt_commit(receipts.len());
                let more_due = match (&processor, applied) {
                    (Some(processor), Some(applied)) => processor.after_receipt_commit(applied),
                    _ => stored.contains(&Stored::New),
                };
                if more_due {
                    // One worker; it recruits more when it finds a full batch.
                    wake.notify_one();
                }
                for (reply, stored) in replies.into_iter().zip(stored) {
                    let _ = reply.send(Ok(stored));
                }
            }
            Err(error) => {
                warn!(
                    error = format!("{error:#}"),
                    events = receipts.len(),
                    "ingest commit failed"
                );
                for reply in replies {
                    let _ = reply.send(Err(()));
                }
            }
        }
    }
}

/// Stores the receipts and, in the same transaction, applies the oldest due events
/// (`Processor::apply_with_receipts`): one commit for both. A failure to apply rolls back
/// only the applying; a failure to store or to commit fails every receipt (503).
async fn store_and_apply(
    db: &Db,
    processor: &Processor,
    receipts: &[Receipt],
) -> anyhow::Result<(Vec<Stored>, Option<AppliedWithReceipts>)> {
    let mut tx = db.writer().begin().await?;
    let written = async {
        let stored = store_receipts_in(&mut tx, db.backend, receipts).await?;
        let new = stored.iter().filter(|s| **s == Stored::New).count();
        let applied = if new > 0 {
            Some(processor.apply_with_receipts(&mut tx, new).await?)
        } else {
            None
        };
        anyhow::Ok((stored, applied))
    }
    .await;
    match written {
        Ok(written) => {
            tx.commit().await?;
            Ok(written)
        }
        Err(error) => {
            // At once: the one writer is needed by the next commit.
            let _ = tx.rollback().await;
            Err(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt(n: usize) -> (Receipt, Reply) {
        let receipt = Receipt {
            provider: "stripe".into(),
            event_id: format!("evt_{n}"),
            event_type: None,
            api_version: None,
            raw_body: vec![],
            correlation_id: format!("c{n}"),
            received_at: 0,
            fetched_body: None,
            derived: false,
        };
        (receipt, oneshot::channel().0)
    }

    fn queue_with(n: usize) -> (mpsc::Sender<(Receipt, Reply)>, Mutex<Queue>) {
        let (tx, rx) = mpsc::channel(1024);
        for i in 0..n {
            tx.try_send(receipt(i)).unwrap();
        }
        (tx, Mutex::new(rx))
    }

    /// Sends receipts in waves, each after its delay (ms) from the previous one.
    fn send_later(
        tx: mpsc::Sender<(Receipt, Reply)>,
        waves: Vec<(u64, std::ops::Range<usize>)>,
    ) -> JoinHandle<()> {
        tokio::spawn(async move {
            for (after_ms, ids) in waves {
                tokio::time::sleep(Duration::from_millis(after_ms)).await;
                for i in ids {
                    tx.send(receipt(i)).await.unwrap();
                }
            }
        })
    }

    /// A writer whose server has `open` connections.
    fn batching(open: usize) -> Batching {
        let connections = OpenConnections::new(open);
        if let Ok(taken) = connections
            .slots
            .clone()
            .try_acquire_many_owned(open as u32)
        {
            taken.forget();
        }
        assert_eq!(connections.count(), open);
        Batching {
            max_batch: 256,
            linger: Duration::from_millis(2),
            connections,
        }
    }

    /// Enough connections that they never bound the batch.
    const MANY: usize = 1_000;

    #[tokio::test(start_paused = true)]
    async fn a_small_batch_takes_what_arrives_within_the_linger() {
        let (tx, rx) = queue_with(2);
        let started = Instant::now();
        let late = send_later(tx, vec![(1, 2..5), (5, 9..10)]);
        let batching = batching(MANY);
        let batch = next_batch(&rx, &batching).await;
        assert_eq!(
            batch.len(),
            5,
            "the two queued and the three within the linger"
        );
        assert_eq!(
            started.elapsed(),
            batching.linger,
            "it waited the linger out, no longer"
        );
        late.await.unwrap();
        assert_eq!(
            next_batch(&rx, &batching).await.len(),
            1,
            "the late one is the next batch"
        );
    }

    /// What a writer with `open` connections takes when `queued` receipts wait and the
    /// `arriving` ones come 1 ms later: the batch's size and how long it waited.
    async fn batch_with(
        open: usize,
        queued: usize,
        arriving: std::ops::Range<usize>,
    ) -> (usize, Duration) {
        let (tx, rx) = queue_with(queued);
        let started = Instant::now();
        // A clone keeps the queue open, so only the linger or the count ends the wait.
        let late = send_later(tx.clone(), vec![(1, arriving)]);
        let taken = next_batch(&rx, &batching(open)).await.len();
        let waited = started.elapsed();
        late.await.unwrap();
        (taken, waited)
    }

    #[tokio::test(start_paused = true)]
    async fn a_writer_waits_for_no_more_than_half_the_open_connections() {
        // 16 senders in a closed loop: the 8 queued are half of them, the other 8 wait for
        // this commit's answers before they send again, so waiting for them would stall
        // both halves for the whole linger.
        assert_eq!(
            batch_with(16, 8, 8..16).await,
            (8, Duration::ZERO),
            "it did not wait"
        );
        // With 128 open (an open stream from many connections) the same 8 wait for more.
        assert_eq!(
            batch_with(128, 8, 8..12).await,
            (12, Duration::from_millis(2)),
            "it waited"
        );
        // Three senders: two queued is already more than half, nothing to wait for.
        assert_eq!(
            batch_with(3, 2, 2..3).await,
            (2, Duration::ZERO),
            "it did not wait"
        );
    }

    #[tokio::test]
    async fn the_count_follows_the_connections_and_the_slots_cap_them() {
        let connections = OpenConnections::new(2);
        let (a, b) = (connections.slot().await, connections.slot().await);
        assert_eq!(connections.count(), 2);
        let third = tokio::time::timeout(Duration::from_millis(20), connections.slot()).await;
        assert!(
            third.is_err(),
            "a third connection waits while two are open"
        );
        drop(a);
        assert_eq!(connections.count(), 1);
        drop(b);
        assert_eq!(connections.count(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_receipt_commits_at_once() {
        let (tx, rx) = queue_with(1);
        let started = Instant::now();
        let late = send_later(tx, vec![(1, 1..2)]);
        assert_eq!(next_batch(&rx, &batching(MANY)).await.len(), 1);
        assert_eq!(started.elapsed(), Duration::ZERO);
        late.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_that_is_not_small_commits_at_once() {
        let (_tx, rx) = queue_with(SMALL_BATCH);
        let started = Instant::now();
        assert_eq!(next_batch(&rx, &batching(MANY)).await.len(), SMALL_BATCH);
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn gathering_stops_once_the_batch_is_no_longer_small() {
        let (tx, rx) = queue_with(2);
        let started = Instant::now();
        let late = send_later(tx, vec![(1, 2..SMALL_BATCH + 2)]);
        let batch = next_batch(&rx, &batching(MANY)).await;
        assert!(batch.len() >= SMALL_BATCH, "{}", batch.len());
        assert_eq!(started.elapsed(), Duration::from_millis(1));
        late.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn zero_linger_commits_what_is_queued_at_once() {
        let (_tx, rx) = queue_with(2);
        let started = Instant::now();
        let batching = Batching {
            linger: Duration::ZERO,
            ..batching(MANY)
        };
        assert_eq!(next_batch(&rx, &batching).await.len(), 2);
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_never_exceeds_max_batch_and_a_closed_queue_ends_the_writer() {
        let (tx, rx) = queue_with(5);
        let batching = Batching {
            max_batch: 3,
            ..batching(MANY)
        };
        assert_eq!(next_batch(&rx, &batching).await.len(), 3);
        drop(tx);
        assert_eq!(
            next_batch(&rx, &batching).await.len(),
            2,
            "drained after the close"
        );
        assert!(next_batch(&rx, &batching).await.is_empty());
    }
}
