//! Group commit for the receiver: requests hand their receipt to a writer task and wait
//! for its commit. A writer takes everything queued (up to `max_batch`) into one
//! transaction, so N concurrent requests cost one fsync, not N, and nobody is answered
//! before their row is durable.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Mutex, Notify};
use tokio::task::JoinHandle;
use tracing::warn;

use crate::config::ReceiverSettings;
use crate::processor::{AppliedWithReceipts, Processor};
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
    /// (`Processor::applies_with_receipts`: SQLite's one writer).
    pub fn start(
        db: Db,
        wake: Arc<Notify>,
        settings: &ReceiverSettings,
        processor: Option<Arc<Processor>>,
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
                let max_batch = settings.max_batch.max(1);
                tokio::spawn(async move { write_loop(db, wake, rx, max_batch, processor).await })
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

async fn write_loop(
    db: Db,
    wake: Arc<Notify>,
    rx: Arc<Mutex<mpsc::Receiver<(Receipt, Reply)>>>,
    max_batch: usize,
    processor: Option<Arc<Processor>>,
) {
    loop {
        let mut batch = Vec::new();
        {
            let mut rx = rx.lock().await;
            if rx.recv_many(&mut batch, max_batch).await == 0 {
                return;
            }
        }
        let (receipts, replies): (Vec<Receipt>, Vec<Reply>) = batch.into_iter().unzip();
        let committed = match &processor {
            Some(processor) => store_and_apply(&db, processor, &receipts).await,
            None => store_receipts(&db, &receipts).await.map(|s| (s, None)),
        };
        match committed {
            Ok((stored, applied)) => {
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
