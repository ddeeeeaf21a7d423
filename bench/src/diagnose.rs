//! Diagnostics (`--steps diagnose`, not part of the default run): the receiver's storage
//! code called directly, without HTTP, to split ingest cost between the web layer and the
//! database layer, and to see how the batch size and its variability matter.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::fixture::FreshDb;
use super::load::EventFactory;
use super::sys;
use oncehook::store::ingest::{store_receipts, Receipt};
use oncehook::store::Db;

pub struct StoreRun {
    pub label: String,
    pub per_sec: f64,
    pub cpu: sys::CpuUse,
}

/// How big each batch is.
#[derive(Clone, Copy, Debug)]
pub enum Sizes {
    Fixed(usize),
    /// Uniform in 1..=max, like the group commit under uneven load.
    Varying(usize),
}

/// `tasks` concurrent writers calling `store_receipts` back to back for `duration`.
pub async fn store_direct(
    db: &FreshDb,
    sizes: Sizes,
    tasks: usize,
    duration: Duration,
) -> anyhow::Result<StoreRun> {
    let handle = Db::connect(&db.url).await?;
    handle.migrate().await?;
    let factory = EventFactory::new();
    let cpu = sys::cpu_snapshot();
    let start = Instant::now();
    let mut joins = vec![];
    for t in 0..tasks {
        let (handle, factory) = (handle.clone(), factory.clone());
        joins.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(t as u64);
            let mut n: u64 = (t as u64) << 40;
            let mut stored = 0u64;
            while start.elapsed() < duration {
                let size = match sizes {
                    Sizes::Fixed(k) => k,
                    Sizes::Varying(max) => rng.gen_range(1..=max),
                };
                let now = oncehook::store::now_ms();
                let receipts: Vec<Receipt> = (0..size as u64)
                    .map(|i| Receipt {
                        provider: "stripe".into(),
                        event_id: factory.event_id(n + i),
                        event_type: Some("payment_intent.succeeded".into()),
                        api_version: Some("2024-06-20".into()),
                        raw_body: factory.body(n + i).into_bytes(),
                        correlation_id: uuid::Uuid::new_v4().to_string(),
                        received_at: now,
                        fetched_body: None,
                        derived: false,
                    })
                    .collect();
                store_receipts(&handle, &receipts).await?;
                n += size as u64;
                stored += size as u64;
            }
            anyhow::Ok(stored)
        }));
    }
    let mut stored = 0;
    for j in joins {
        stored += j.await??;
    }
    let per_sec = stored as f64 / start.elapsed().as_secs_f64();
    let cpu = cpu.since();
    handle.close().await;
    let label = match sizes {
        Sizes::Fixed(k) => format!("store_receipts, {tasks} writer(s), batches of {k}"),
        Sizes::Varying(max) => {
            format!("store_receipts, {tasks} writer(s), batches of 1..={max} (uniform)")
        }
    };
    Ok(StoreRun {
        label,
        per_sec,
        cpu,
    })
}
