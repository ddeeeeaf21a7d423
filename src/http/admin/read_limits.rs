//! A cap on the expensive reads one principal runs at once (payload scans, redrive
//! previews): any signed-in viewer may trigger them, and eight of them at once on two cores
//! would slow the webhooks that share the machine. A read over the cap waits for one of
//! the principal's own reads to finish; past `WAIT` it is refused, so a script firing
//! hundreds cannot queue them without bound. Server-wide, at most `SERVER_WIDE` run at
//! once, whoever asks: many viewers together cannot take the cores the webhooks need.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Expensive reads one principal (user or token) runs at once.
pub const PER_PRINCIPAL: usize = 2;
/// Expensive reads running at once on this instance, all principals together.
pub const SERVER_WIDE: usize = 1;
/// How long a read over the cap waits for a slot before it is refused.
pub const WAIT: Duration = Duration::from_secs(10);

pub struct ReadLimits {
    per_principal: usize,
    wait: Duration,
    running: Mutex<HashMap<String, Arc<Semaphore>>>,
    everyone: Arc<Semaphore>,
}

/// A slot; the read holds it until it is dropped.
pub struct ReadPermit {
    _own: OwnedSemaphorePermit,
    _server: OwnedSemaphorePermit,
}

impl Default for ReadLimits {
    fn default() -> ReadLimits {
        ReadLimits::new(PER_PRINCIPAL, SERVER_WIDE, WAIT)
    }
}

impl ReadLimits {
    pub fn new(per_principal: usize, server_wide: usize, wait: Duration) -> ReadLimits {
        ReadLimits {
            per_principal: per_principal.max(1),
            wait,
            running: Mutex::default(),
            everyone: Arc::new(Semaphore::new(server_wide.max(1))),
        }
    }

    /// A slot for `who`, waiting while `who` already runs its share; an error saying so
    /// after `WAIT`.
    pub async fn acquire(&self, who: &str) -> Result<ReadPermit, String> {
        let semaphore = {
            let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            // Principals with nothing running are forgotten, so the map holds only the
            // ones reading now.
            running.retain(|_, s| {
                Arc::strong_count(s) > 1 || s.available_permits() < self.per_principal
            });
            running
                .entry(who.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_principal)))
                .clone()
        };
        let everyone = self.everyone.clone();
        let slots = async move {
            let own = semaphore.acquire_owned().await.ok()?;
            let server = everyone.acquire_owned().await.ok()?;
            Some(ReadPermit {
                _own: own,
                _server: server,
            })
        };
        match tokio::time::timeout(self.wait, slots).await {
            Ok(Some(permit)) => Ok(permit),
            _ => Err(format!(
                "{who} already runs {} expensive reads (payload filters, redrive previews), \
                 or others do; try again when one has finished",
                self.per_principal
            )),
        }
    }

    /// Principals with a read running or waiting (for tests).
    pub fn principals(&self) -> usize {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running
            .values()
            .filter(|s| Arc::strong_count(s) > 1 || s.available_permits() < self.per_principal)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_principal_runs_its_share_and_waits_then_is_refused() {
        let limits = ReadLimits::new(2, 8, Duration::from_millis(100));
        let a1 = limits.acquire("vera").await.unwrap();
        let _a2 = limits.acquire("vera").await.unwrap();
        // Over the cap: refused after the wait, with a sentence that says why.
        let err = limits.acquire("vera").await.err().unwrap();
        assert!(err.contains("vera already runs 2 expensive reads"), "{err}");
        // Another principal is not held up by vera.
        let _b = limits.acquire("token:grafana").await.unwrap();
        // A slot freed while waiting is taken.
        let waiting = tokio::spawn({
            let limits = Arc::new(limits);
            let l = limits.clone();
            async move { (l.acquire("vera").await.is_ok(), limits) }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(a1);
        let (got, limits) = waiting.await.unwrap();
        assert!(got, "the freed slot went to the waiting read");
        assert_eq!(limits.principals(), 2);
    }

    #[tokio::test]
    async fn principals_with_nothing_running_are_forgotten() {
        let limits = ReadLimits::new(1, 8, Duration::from_millis(10));
        for n in 0..100 {
            drop(limits.acquire(&format!("user{n}")).await.unwrap());
        }
        let _one = limits.acquire("last").await.unwrap();
        assert_eq!(limits.principals(), 1);
        assert_eq!(
            limits.running.lock().unwrap().len(),
            1,
            "the map was pruned"
        );
    }

    #[tokio::test]
    async fn server_wide_one_runs_at_a_time_whoever_asks() {
        let limits = Arc::new(ReadLimits::new(2, 1, Duration::from_millis(100)));
        let vera = limits.acquire("vera").await.unwrap();
        // Another principal waits for the server's one slot, and gets it once it is free.
        let waiting = tokio::spawn({
            let limits = limits.clone();
            async move { limits.acquire("otto").await.is_ok() }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "otto waits while vera reads");
        drop(vera);
        assert!(waiting.await.unwrap());
        // Held past the wait: refused.
        let _held = limits.acquire("vera").await.unwrap();
        assert!(limits.acquire("otto").await.is_err());
    }
}
