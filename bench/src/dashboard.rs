//! The dashboard at scale: real traffic through the real pipeline (payments, redeliveries,
//! refunds, dead letters), then the inbox multiplied in SQL to `events` rows (each copy a
//! distinct event with its delivery, belonging to no real order), then every page timed
//! over HTTP with a signed-in admin: server time as the client sees it on loopback.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;

use super::fixture::FreshDb;
use super::load::EventFactory;
use oncehook::config::Settings;
use oncehook::store::Db;

pub struct PageTiming {
    pub label: &'static str,
    pub path: String,
    pub status: u16,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

pub struct DashboardRun {
    pub events: i64,
    pub seed_secs: f64,
    pub requests: usize,
    pub pages: Vec<PageTiming>,
}

/// Events sent through the pipeline before the inbox is multiplied.
const REAL_EVENTS: u64 = 2_000;
const PASSWORD: &str = "a long bench passphrase";

async fn post(
    http: &reqwest::Client,
    base: &str,
    secret: &str,
    body: String,
) -> anyhow::Result<()> {
    let r = super::fixture::send_signed(http, base, secret, body).await?;
    anyhow::ensure!(r.status().is_success(), "webhook answered {}", r.status());
    Ok(())
}

/// A refund of a factory payment, as `refund.created` sends it.
fn refund(factory: &EventFactory, n: u64) -> String {
    let tag = &factory.tag;
    serde_json::json!({
        "id": format!("evt_re_{tag}_{n}"), "object": "event", "api_version": "2024-06-20",
        "created": factory.created + 60, "type": "refund.created",
        "data": {"object": {"id": format!("re_{tag}_{n}"), "object": "refund", "amount": 500,
            "currency": "eur", "payment_intent": format!("pi_3P{tag}{n:08}"),
            "charge": format!("ch_{tag}_{n}"), "status": "succeeded"}}
    })
    .to_string()
}

async fn seed_real_traffic(base: &str, secret: &str, factory: &EventFactory) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let mut bodies: Vec<String> = (0..REAL_EVENTS).map(|n| factory.body(n)).collect();
    // Redeliveries, refunds of every tenth payment, and events that end as dead letters
    // (a signed body that is not JSON).
    bodies.extend((0..REAL_EVENTS / 10).map(|n| factory.body(n)));
    bodies.extend((0..REAL_EVENTS / 10).map(|n| refund(factory, n * 10)));
    bodies.extend((0..20).map(|n| format!("not json {n} {}", factory.tag)));
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(bodies)
        .map(|body| post(&http, base, secret, body))
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Copies the real inbox (and its deliveries) until it holds `target` rows: each copy gets
/// its own event ids, correlation ids and order ids, and older receipt times.
async fn multiply(db: &Db, target: i64) -> anyhow::Result<i64> {
    let (base_max, base_rows): (i64, i64) =
        sqlx::query_as("SELECT MAX(id), COUNT(*) FROM inbox_events")
            .fetch_one(db.reader())
            .await?;
    let deliveries_max: i64 = sqlx::query_scalar("SELECT MAX(id) FROM deliveries")
        .fetch_one(db.reader())
        .await?;
    let copies = ((target - base_rows).max(0) + base_rows - 1) / base_rows.max(1);
    let concat = |a: &str, b: &str| format!("{a} || {b}");
    let mut tx = db.writer().begin().await?;
    for k in 1..=copies {
        let suffix = format!("'-c{k}'");
        sqlx::query(&format!(
            "INSERT INTO inbox_events (provider, event_id, event_type, api_version, raw_body, \
             correlation_id, received_at, status, reason, order_id, effect_key, attempts, \
             next_attempt_at, processed_at) \
             SELECT provider, {}, event_type, api_version, raw_body, {}, received_at - $1, \
             status, reason, {}, effect_key, attempts, next_attempt_at, processed_at \
             FROM inbox_events WHERE id <= $2 ORDER BY id",
            concat("event_id", &suffix),
            concat("correlation_id", &suffix),
            concat("order_id", &suffix),
        ))
        .bind(k * 60_000)
        .bind(base_max)
        .execute(&mut *tx)
        .await?;
        sqlx::query(&format!(
            "INSERT INTO deliveries (provider, event_id, duplicate, correlation_id, body_sha256, \
             received_at) SELECT provider, {}, duplicate, {}, body_sha256, received_at - $1 \
             FROM deliveries WHERE id <= $2 ORDER BY id",
            concat("event_id", &suffix),
            concat("correlation_id", &suffix),
        ))
        .bind(k * 60_000)
        .bind(deliveries_max)
        .execute(&mut *tx)
        .await?;
        if k % 50 == 0 {
            tx.commit().await?;
            tx = db.writer().begin().await?;
        }
    }
    tx.commit().await?;
    // Fresh statistics, as autovacuum (or an operator) would have gathered over time.
    sqlx::query("ANALYZE").execute(db.writer()).await?;
    Ok(sqlx::query_scalar("SELECT COUNT(*) FROM inbox_events")
        .fetch_one(db.reader())
        .await?)
}

async fn sign_in(db: &Db, base: &str) -> anyhow::Result<String> {
    let passwords = oncehook::http::auth::password::Passwords::new(1).await?;
    oncehook::http::auth::admin::add_user(
        db,
        &passwords,
        "bench",
        PASSWORD,
        app::backend::Role::Admin,
        "bench",
    )
    .await?;
    let response = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?
        .post(format!("{base}/auth/sign-in"))
        .header("Origin", base)
        .header("Sec-Fetch-Site", "same-origin")
        .form(&[("username", "bench"), ("password", PASSWORD), ("next", "/")])
        .send()
        .await?;
    let prefix = format!("{}=", oncehook::http::auth::SESSION_COOKIE);
    response
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with(&prefix))
        .and_then(|c| c.split(';').next())
        .map(str::to_owned)
        .context("signing in: no session cookie")
}

/// The reads a viewer can trigger that cost the most: a payload filter that matches nothing
/// (it reads its 3,000-body bound) and a dry-run preview of every open dead letter.
const WORST_READS: [(&str, &str); 2] = [
    (
        "GET",
        "/api/v1/events?payload=data.object.customer%20%3D%20cus_nobody",
    ),
    ("POST", "/api/v1/dead-letters/redrive"),
];
/// Viewer reads running at once beside the webhooks.
const CONCURRENT_READS: usize = 8;
/// Webhooks timed per run (four at a time), unloaded and then loaded.
const WEBHOOKS: u64 = 400;

/// Webhook latency (new payments, four in flight) with no viewer reads, then with
/// `CONCURRENT_READS` worst-case viewer reads in a loop beside them, each from its own
/// viewer token: eight people at once, so the server-wide read cap is what holds, not the
/// per-principal one.
async fn webhooks_beside_reads(
    http: &reqwest::Client,
    base: &str,
    secret: &str,
    factory: &EventFactory,
    tokens: &[String],
) -> anyhow::Result<Vec<PageTiming>> {
    let unloaded = webhook_latencies(http, base, secret, factory, 10_000_000).await?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..CONCURRENT_READS)
        .map(|i| {
            let (http, stop) = (http.clone(), stop.clone());
            let (method, path) = WORST_READS[i % WORST_READS.len()];
            let url = format!("{base}{path}");
            let token = tokens[i % tokens.len()].clone();
            tokio::spawn(async move {
                let mut answers = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let request = match method {
                        "POST" => http.post(&url).json(&serde_json::json!({})),
                        _ => http.get(&url),
                    };
                    let r = request.bearer_auth(&token).send().await?;
                    let _ = r.bytes().await?;
                    answers += 1;
                }
                anyhow::Ok(answers)
            })
        })
        .collect();
    let loaded = webhook_latencies(http, base, secret, factory, 20_000_000).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        reader.await??;
    }
    let loaded = loaded?;
    Ok(vec![
        timing("webhook, no viewer reads running", unloaded),
        timing(
            "webhook, 8 worst-case viewer reads running (payload scan, redrive preview)",
            loaded,
        ),
    ])
}

async fn webhook_latencies(
    http: &reqwest::Client,
    base: &str,
    secret: &str,
    factory: &EventFactory,
    from: u64,
) -> anyhow::Result<(u16, Vec<f64>)> {
    let results: Vec<anyhow::Result<(u16, f64)>> = futures::stream::iter(from..from + WEBHOOKS)
        .map(|n| async move {
            let started = Instant::now();
            let r = super::fixture::send_signed(http, base, secret, factory.body(n)).await?;
            let status = r.status().as_u16();
            let _ = r.bytes().await?;
            Ok((status, started.elapsed().as_secs_f64() * 1000.0))
        })
        .buffer_unordered(4)
        .collect()
        .await;
    let mut status = 200;
    let mut ms = Vec::with_capacity(results.len());
    for result in results {
        let (s, t) = result?;
        if s != 200 {
            status = s;
        }
        ms.push(t);
    }
    Ok((status, ms))
}

fn timing(label: &'static str, (status, mut ms): (u16, Vec<f64>)) -> PageTiming {
    ms.sort_by(f64::total_cmp);
    PageTiming {
        label,
        path: "/webhooks/stripe".into(),
        status,
        p50_ms: percentile(&ms, 0.50),
        p99_ms: percentile(&ms, 0.99),
    }
}

fn percentile(sorted_ms: &[f64], q: f64) -> f64 {
    let i = ((sorted_ms.len() as f64 * q).ceil() as usize).clamp(1, sorted_ms.len()) - 1;
    sorted_ms[i]
}

pub async fn measure(
    base_settings: &Settings,
    db: &FreshDb,
    dir: &std::path::Path,
    secret: &str,
    events: i64,
    requests: usize,
) -> anyhow::Result<DashboardRun> {
    let settings = super::fixture::server_settings(base_settings, db, dir, secret, true, true);
    let server = crate::child::ChildServer::start(&settings, dir, "dashboard").await?;
    let base = server.url();
    let seeded = Instant::now();
    let factory = EventFactory::new();
    seed_real_traffic(&base, secret, &factory).await?;
    anyhow::ensure!(
        super::wait_drained(&server.db, Duration::from_secs(120)).await?,
        "the real traffic was not processed within 120 s"
    );
    let events = multiply(&server.db, events).await?;
    let seed_secs = seeded.elapsed().as_secs_f64();
    let cookie = sign_in(&server.db, &base).await?;
    let now = oncehook::store::now_ms();
    let mut tokens = Vec::new();
    for i in 0..=CONCURRENT_READS {
        let (_, token) = oncehook::store::tokens::create(
            &server.db,
            &oncehook::store::tokens::NewToken {
                name: &format!("bench-viewer-{i}"),
                role: "viewer",
                created_by: "bench",
                maker: oncehook::store::tokens::Maker::Shell,
                now,
                expires_at: now + 3_600_000,
            },
            None,
        )
        .await?;
        tokens.push(token);
    }
    // The page timings read with one token; the webhook step with one per reader.
    let token = tokens.pop().expect("one more token than readers");

    let (mid, any_id): (i64, i64) = sqlx::query_as("SELECT MAX(id) / 2, MAX(id) FROM inbox_events")
        .fetch_one(server.db.reader())
        .await?;
    // Payment 70: delivered twice and refunded.
    let order = format!("ord_{}_70", factory.tag);
    let correlation: String =
        sqlx::query_scalar("SELECT correlation_id FROM deliveries WHERE event_id = $1")
            .bind(factory.event_id(70))
            .fetch_one(server.db.reader())
            .await?;
    let pages: Vec<(&'static str, String)> = vec![
        ("overview, last hour", "/".into()),
        ("overview, 7 days", "/?range=7d".into()),
        ("inbox, newest", "/events".into()),
        (
            "inbox, a page halfway down",
            format!("/events?before={mid}"),
        ),
        ("inbox, status = dead", "/events?status=dead".into()),
        ("inbox, by order", format!("/events?order={order}")),
        (
            "inbox, by event id (no provider)",
            format!("/events?event={}", factory.event_id(70)),
        ),
        (
            "inbox, by correlation id",
            format!("/events?correlation={correlation}"),
        ),
        (
            "inbox, payload field matching most events",
            "/events?payload=data.object.currency+%3D+eur".into(),
        ),
        (
            "inbox, payload field matching nothing (reads 3,000 bodies)",
            "/events?payload=data.object.customer+%3D+cus_nobody".into(),
        ),
        ("event", format!("/events/{any_id}")),
        (
            "order (payment, refund, redelivery)",
            format!("/orders/{order}"),
        ),
        (
            "search by charge id → order",
            format!("/search?q=ch_{}_70", factory.tag),
        ),
        ("dead letters", "/dlq".into()),
        ("audit log", "/admin/audit".into()),
        ("/metrics", "/metrics".into()),
        ("API: overview, last hour", "/api/v1/overview".into()),
        ("API: events, newest", "/api/v1/events".into()),
        (
            "API: events by order",
            format!("/api/v1/events?order={order}"),
        ),
        ("API: event", format!("/api/v1/events/{any_id}")),
        ("API: order", format!("/api/v1/orders/{order}")),
        ("API: dead letters", "/api/v1/dead-letters".into()),
    ];
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let mut timings = Vec::new();
    for (label, path) in pages {
        let url = format!("{base}{path}");
        let mut ms = Vec::with_capacity(requests);
        let mut status = 0;
        for i in 0..=requests {
            let started = Instant::now();
            let r = http
                .get(&url)
                .header(reqwest::header::COOKIE, &cookie)
                .header(reqwest::header::ACCEPT, "text/html")
                // Pages ignore it; the API reads only it.
                .bearer_auth(&token)
                .send()
                .await?;
            status = r.status().as_u16();
            let _ = r.bytes().await?;
            // The first request warms caches and is not counted.
            if i > 0 {
                ms.push(started.elapsed().as_secs_f64() * 1000.0);
            }
        }
        ms.sort_by(f64::total_cmp);
        timings.push(PageTiming {
            label,
            path,
            status,
            p50_ms: percentile(&ms, 0.50),
            p99_ms: percentile(&ms, 0.99),
        });
    }
    timings.extend(webhooks_beside_reads(&http, &base, secret, &factory, &tokens).await?);
    server.shutdown().await?;
    Ok(DashboardRun {
        events,
        seed_secs,
        requests,
        pages: timings,
    })
}
