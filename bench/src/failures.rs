//! Issue 3's measurements: relay throughput to a local HTTP sink, and the time to redrive
//! 10,000 dead letters.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use oncehook::config::{Providers, Settings, SinkKind, SinkSettings};
use oncehook::pipeline::alerts::Alerter;
use oncehook::pipeline::relay::{sinks::Sinks, Delivered, Relay};
use oncehook::store::dead_letters::{Actor, DeadLetterFilter};
use oncehook::store::{now_ms, values_list, Db};

#[derive(Clone, Debug)]
pub struct RelayRun {
    pub deliveries: u64,
    pub secs: f64,
    pub received: u64,
}

impl RelayRun {
    pub fn per_sec(&self) -> f64 {
        self.deliveries as f64 / self.secs.max(1e-9)
    }
}

#[derive(Clone, Debug)]
pub struct RedriveRun {
    pub items: u64,
    pub secs: f64,
}

/// A loopback HTTP endpoint that answers 200 and counts what it received.
async fn start_sink() -> anyhow::Result<(String, Arc<AtomicU64>)> {
    let count = Arc::new(AtomicU64::new(0));
    let counter = count.clone();
    let app = axum::Router::new().route(
        "/sink",
        axum::routing::post(move || {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::Relaxed);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/sink", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((url, count))
}

async fn insert_outbox_rows(db: &Db, rows: u64) -> anyhow::Result<()> {
    let now = now_ms();
    let payload = super::ceiling::outbox_payload();
    let mut n = 0;
    while n < rows {
        let chunk = (rows - n).min(500);
        let sql = format!(
            "INSERT INTO outbox (idempotency_key, effect_key, order_id, topic, sink, payload, \
             correlation_id, status, next_attempt_at, created_at) VALUES {}",
            values_list(db.backend, chunk as usize, 10)
        );
        let mut q = sqlx::query(&sql);
        for i in n..n + chunk {
            q = q
                .bind(format!("bench-key-{i}"))
                .bind(format!("bench-effect-{i}"))
                .bind(format!("order-{i}"))
                .bind("order.paid")
                .bind("bench")
                .bind(payload.clone())
                .bind("bench")
                .bind("pending")
                .bind(now)
                .bind(now);
        }
        q.execute(db.writer()).await?;
        n += chunk;
    }
    Ok(())
}

/// Delivers `rows` outbox rows through an HTTP sink on loopback with `workers` relays.
pub async fn relay_throughput(url: &str, rows: u64, workers: usize) -> anyhow::Result<RelayRun> {
    let db = Db::connect(url).await?;
    db.migrate().await?;
    insert_outbox_rows(&db, rows).await?;
    let (sink_url, received) = start_sink().await?;
    let settings = Settings::default();
    let mut sinks = BTreeMap::new();
    sinks.insert(
        "bench".to_string(),
        SinkSettings {
            kind: SinkKind::Http {
                url: sink_url,
                secret: Some("whsec_YmVuY2gtc2luay1zZWNyZXQ=".into()),
                timeout_ms: 10_000,
            },
            concurrency: 32,
            rate_per_sec: None,
        },
    );
    let mut relay_settings = settings.outbox.relay.clone();
    relay_settings.claim_batch = 64;
    let relay = Arc::new(Relay::new(
        db.clone(),
        Sinks::build(&sinks)?,
        relay_settings,
        72,
        Alerter::log_only(),
        Arc::new(tokio::sync::Notify::new()),
    ));
    let started = Instant::now();
    let tasks: Vec<_> = (0..workers.max(1))
        .map(|_| {
            let relay = relay.clone();
            tokio::spawn(async move { relay.run_until_idle().await })
        })
        .collect();
    let mut delivered = 0;
    for t in tasks {
        delivered += t
            .await??
            .iter()
            .filter(|d| **d == Delivered::Delivered)
            .count() as u64;
    }
    let secs = started.elapsed().as_secs_f64();
    db.close().await;
    Ok(RelayRun {
        deliveries: delivered,
        secs,
        received: received.load(Ordering::Relaxed),
    })
}

/// Fills the queue with `items` dead letters (processor stage) and redrives them all.
pub async fn redrive_many(url: &str, items: u64) -> anyhow::Result<RedriveRun> {
    let db = Db::connect(url).await?;
    db.migrate().await?;
    let now = now_ms();
    let body = super::load::EventFactory::new().body(0).into_bytes();
    let mut n = 0;
    while n < items {
        let chunk = (items - n).min(500);
        let sql = format!(
            "INSERT INTO inbox_events (provider, event_id, event_type, raw_body, correlation_id, \
             received_at, status, next_attempt_at, attempts) VALUES {}",
            values_list(db.backend, chunk as usize, 9)
        );
        let mut q = sqlx::query(&sql);
        for i in n..n + chunk {
            q = q
                .bind("stripe")
                .bind(format!("evt_dead_{i}"))
                .bind("payment_intent.succeeded")
                .bind(body.clone())
                .bind("bench")
                .bind(now)
                .bind("dead")
                .bind(now)
                .bind(1i64);
        }
        q.execute(db.writer()).await?;
        n += chunk;
    }
    sqlx::query(
        "INSERT INTO dead_letters (stage, source_id, provider, event_id, event_type, payload, error_class, \
         last_error, error_history, attempts, first_attempt_at, last_attempt_at, correlation_id, status, \
         resolve_by, created_at, updated_at) \
         SELECT 'processor', id, provider, event_id, event_type, raw_body, 'unknown', 'bench', '[]', 1, \
         received_at, received_at, correlation_id, 'open', received_at, received_at, received_at \
         FROM inbox_events",
    )
    .execute(db.writer())
    .await?;
    let providers = Providers::default();
    let actor = Actor {
        name: "bench",
        reason: Some("benchmark"),
        source: None,
    };
    let started = Instant::now();
    let results = oncehook::pipeline::redrive::redrive(
        &db,
        &providers,
        &DeadLetterFilter::default(),
        false,
        &actor,
        |_, _| {},
    )
    .await?;
    let secs = started.elapsed().as_secs_f64();
    let requeued = results.iter().filter(|r| r.outcome == "requeued").count() as u64;
    anyhow::ensure!(requeued == items, "redrove {requeued} of {items}");
    db.close().await;
    Ok(RedriveRun { items, secs })
}
