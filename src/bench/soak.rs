//! Memory over time: the real binary in a child process under steady traffic (new events,
//! every fifth delivery a redelivery, `/metrics` scraped every 5 s) for a while, its VmRSS
//! sampled every second. A server that keeps memory it no longer needs shows as growth in
//! the second half of the run, long after its pools and caches are warm. The bench process
//! itself is not measured: it runs the load generator and, in other steps, servers of its
//! own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::fixture::{send_signed, FreshDb};
use super::load::EventFactory;
use super::recovery::{free_port, spawn, wait_healthy, write_config};
use super::{count, wait_drained};
use crate::store::Db;

const SENDERS: u64 = 8;
/// Every this many deliveries, one is a redelivery of the event before it.
const REDELIVER_EVERY: u64 = 5;

pub struct Soak {
    pub secs: u64,
    pub rate: u64,
    /// Deliveries acknowledged with 200, and the distinct events among them.
    pub acked: u64,
    pub distinct: u64,
    /// Effects recorded once the backlog drained; must equal `distinct`.
    pub effects: i64,
    /// (seconds since the server was healthy, VmRSS KiB), one a second.
    pub samples: Vec<(f64, u64)>,
}

impl Soak {
    fn mean_kb(&self, from: f64, to: f64) -> f64 {
        let secs = self.secs as f64;
        let window: Vec<u64> = self
            .samples
            .iter()
            .filter(|(t, _)| *t >= from * secs && *t < to * secs)
            .map(|(_, kb)| *kb)
            .collect();
        window.iter().sum::<u64>() as f64 / window.len().max(1) as f64
    }

    pub fn first_kb(&self) -> u64 {
        self.samples.first().map_or(0, |s| s.1)
    }

    pub fn max_kb(&self) -> u64 {
        self.samples.iter().map(|s| s.1).max().unwrap_or(0)
    }

    /// Mean VmRSS of the second quarter and of the last quarter of the run.
    pub fn warm_and_late_kb(&self) -> (f64, f64) {
        (self.mean_kb(0.25, 0.5), self.mean_kb(0.75, 1.01))
    }

    /// Least-squares slope of VmRSS over the second half, KiB per minute.
    pub fn late_slope_kb_per_min(&self) -> f64 {
        let half = self.secs as f64 / 2.0;
        let points: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter(|(t, _)| *t >= half)
            .map(|(t, kb)| (*t, *kb as f64))
            .collect();
        let n = points.len() as f64;
        if n < 2.0 {
            return 0.0;
        }
        let (mt, mk) = (
            points.iter().map(|p| p.0).sum::<f64>() / n,
            points.iter().map(|p| p.1).sum::<f64>() / n,
        );
        let cov: f64 = points.iter().map(|(t, k)| (t - mt) * (k - mk)).sum();
        let var: f64 = points.iter().map(|(t, _)| (t - mt).powi(2)).sum();
        if var == 0.0 {
            0.0
        } else {
            cov / var * 60.0
        }
    }

    pub fn ok(&self) -> bool {
        self.effects == self.distinct as i64
    }
}

pub async fn run(
    db: &FreshDb,
    dir: &std::path::Path,
    secret: &str,
    secs: u64,
    rate: u64,
) -> anyhow::Result<Soak> {
    let config = write_config(dir, "soak", secret)?;
    let port = free_port()?;
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let mut child = spawn(&config, db, port)?;
    let measured = async {
        wait_healthy(&http, &base).await?;
        let pid = child.id().to_string();
        let started = Instant::now();
        let until = started + Duration::from_secs(secs);
        let next = Arc::new(AtomicU64::new(0));
        let acked = Arc::new(AtomicU64::new(0));
        let factory = EventFactory::new();
        let senders: Vec<_> = (0..SENDERS)
            .map(|_| {
                let (http, base, next, acked, factory, secret) = (
                    http.clone(),
                    base.clone(),
                    next.clone(),
                    acked.clone(),
                    factory.clone(),
                    secret.to_string(),
                );
                tokio::spawn(async move {
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        // Paced: delivery n is due n / rate seconds after the start.
                        let due = started + Duration::from_secs_f64(n as f64 / rate as f64);
                        if due >= until {
                            return;
                        }
                        tokio::time::sleep_until(due.into()).await;
                        let event = if n % REDELIVER_EVERY == REDELIVER_EVERY - 1 {
                            n - 1
                        } else {
                            n
                        };
                        let sent = send_signed(&http, &base, &secret, factory.body(event)).await;
                        if matches!(&sent, Ok(r) if r.status().is_success()) {
                            acked.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        let mut samples = vec![];
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        while Instant::now() < until {
            tick.tick().await;
            let at = started.elapsed().as_secs_f64();
            samples.push((at, super::sys::memory_of(&pid).rss_kb));
            if samples.len() % 5 == 0 {
                let _ = http.get(format!("{base}/metrics")).send().await;
            }
        }
        for sender in senders {
            let _ = sender.await;
        }
        let store = Db::connect(&db.url).await?;
        let drained = wait_drained(&store, Duration::from_secs(120)).await?;
        let effects = count(&store, "SELECT COUNT(*) FROM processed_effects").await;
        let distinct = count(&store, "SELECT COUNT(*) FROM inbox_events").await;
        store.close().await;
        anyhow::ensure!(
            drained,
            "the backlog did not drain within 120 s of the soak"
        );
        anyhow::Ok((samples, acked.load(Ordering::Relaxed), effects?, distinct?))
    }
    .await;
    // Stop the server whatever happened, so a failed step leaves no process behind.
    let _ = child.kill();
    let _ = child.wait();
    let (samples, acked, effects, distinct) = measured?;
    Ok(Soak {
        secs,
        rate,
        acked,
        distinct: distinct as u64,
        effects,
        samples,
    })
}
