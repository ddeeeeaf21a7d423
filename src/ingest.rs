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
use crate::store::ingest::{store_receipts, Receipt, Stored};
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
    /// is drained, so in-flight requests are answered during shutdown.
    pub fn start(
        db: Db,
        wake: Arc<Notify>,
        settings: &ReceiverSettings,
    ) -> (Ingestor, Vec<JoinHandle<()>>) {
        let (queue, rx) = mpsc::channel(settings.max_batch.max(1) * 8);
        let rx = Arc::new(Mutex::new(rx));
        let writers = match db.backend {
            Backend::Sqlite => 1,
            Backend::Postgres => settings.writers.max(1),
        };
        let handles = (0..writers)
            .map(|_| {
                let (db, wake, rx) = (db.clone(), wake.clone(), rx.clone());
                let max_batch = settings.max_batch.max(1);
                tokio::spawn(async move { write_loop(db, wake, rx, max_batch).await })
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
        match store_receipts(&db, &receipts).await {
            Ok(stored) => {
                // One worker; it recruits more when it finds a full batch.
                wake.notify_one();
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
