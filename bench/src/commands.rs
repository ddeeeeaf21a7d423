//! Issue 17's measurement: the relay sending refund commands to a provider's API. The
//! simulator (its Stripe-compatible API on loopback, `Idempotency-Key` honoured) sends its
//! orders' webhooks into the real server; once they are applied, a refund of one minor
//! unit is asked for every order with something left to refund, all at once, and the
//! server's relay sends them (`POST /v1/refunds`). Timed: until every command is `sent`
//! (the provider answered with its refund id), and until every one is `confirmed` (the
//! refund's webhook came back and was counted).

use std::time::{Duration, Instant};

use anyhow::Context;

use super::fixture::{server_settings, FreshDb};
use oncehook::config::Settings;
use oncehook::provider::signature::SchemeKind;
use oncehook::simulator::run::{Options, Simulation};
use oncehook::simulator::scenario::Scenario;
use oncehook::simulator::sender::Target;
use oncehook::store::commands::{self, NewRefund};
use oncehook::store::dead_letters::Actor;
use oncehook::store::now_ms;

const KEY: &str = "sk_test_bench_commands_0123456789";

pub struct CommandsRun {
    pub orders: usize,
    pub commands: u64,
    /// Until every command was answered by the provider (`sent`).
    pub sent_secs: f64,
    /// Until every command's webhook was counted (`confirmed`).
    pub confirmed_secs: f64,
    pub failed: u64,
}

impl CommandsRun {
    pub fn sent_per_sec(&self) -> f64 {
        self.commands as f64 / self.sent_secs.max(1e-9)
    }
}

async fn count(db: &oncehook::store::Db, sql: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(sql).fetch_one(db.reader()).await?)
}

pub async fn refunds_throughput(
    base: &Settings,
    db: &FreshDb,
    dir: &std::path::Path,
    secret: &str,
    orders: usize,
) -> anyhow::Result<CommandsRun> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let api_url = format!("http://{}", listener.local_addr()?);
    let mut settings = server_settings(base, db, dir, secret, true, true);
    let api = &mut settings.providers[0].api;
    api.base = api_url;
    api.key = Some(KEY.into());
    api.rate_per_sec = 100_000.0;
    // The relay's own path, sinks included: what is measured.
    settings.outbox.relay.enabled = true;
    settings.reconcile.interval =
        oncehook::reconcile::Interval::parse("0").map_err(anyhow::Error::msg)?;
    let server = crate::child::ChildServer::start(&settings, dir, "commands")
        .await
        .context("starting the server under test")?;
    let mut scenario = Scenario::builtin("steady").expect("steady is built in");
    scenario.faults = Default::default();
    scenario.api = Default::default();
    let sim = Simulation::new(Options {
        seed: 17,
        orders,
        duration: Duration::ZERO,
        scenario_name: "steady".into(),
        scenario,
        start: None,
        database: "sqlite::memory:".into(),
        api_key: KEY.into(),
        target: Some(Target {
            url: format!(
                "http://{}/webhooks/{}",
                server.addr,
                super::fixture::PROVIDER
            ),
            scheme: SchemeKind::Stripe,
            secret: secret.into(),
        }),
        provider: Default::default(),
    })
    .await?;
    tokio::spawn(oncehook::simulator::serve_api(
        sim.shared.clone(),
        listener,
        std::future::pending(),
    ));
    sim.run(&|_, _| {}).await?;
    let db = server.db.clone();
    let busy = "SELECT CAST(COUNT(*) AS BIGINT) FROM inbox_events WHERE status IN ('pending', 'processing')";
    let deadline = Instant::now() + Duration::from_secs(600);
    while count(&db, busy).await? > 0 {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the webhooks were not applied within 10 min"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let payable: Vec<String> = sqlx::query_scalar(
        "SELECT order_id FROM orders WHERE amount_paid > amount_refunded + amount_disputed \
         ORDER BY order_id",
    )
    .fetch_all(db.reader())
    .await?;

    let actor = Actor {
        name: "bench",
        reason: None,
        source: None,
    };
    let started = Instant::now();
    let mut asked = 0u64;
    for order_id in &payable {
        let stored = commands::request_refund(
            &db,
            &NewRefund {
                order_id,
                amount: Some(1),
                reason: "bench",
                actor: &actor,
                now: now_ms(),
            },
        )
        .await?;
        asked += u64::from(stored.is_ok());
    }
    let in_state = |states: &'static str| {
        let db = db.clone();
        async move {
            count(
                &db,
                &format!(
                    "SELECT CAST(COUNT(*) AS BIGINT) FROM provider_commands WHERE state IN ({states})"
                ),
            )
            .await
        }
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut sent_secs = None;
    let confirmed_secs = loop {
        let over = in_state("'sent', 'confirmed', 'failed'").await? as u64;
        if sent_secs.is_none() && over >= asked {
            sent_secs = Some(started.elapsed().as_secs_f64());
        }
        if in_state("'confirmed', 'failed'").await? as u64 >= asked {
            break started.elapsed().as_secs_f64();
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the refunds were not confirmed within 10 min"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let failed = in_state("'failed'").await? as u64;
    server.shutdown().await?;
    Ok(CommandsRun {
        orders,
        commands: asked,
        sent_secs: sent_secs.unwrap_or(confirmed_secs),
        confirmed_secs,
        failed,
    })
}
