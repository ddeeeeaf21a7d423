//! `oncehook serve --demo`: the simulator in the same process, posting to oncehook's own
//! webhook URL, its API configured as the `stripe` provider's `api_base`, at a gentle rate
//! with some of every fault, so a fresh dashboard fills with realistic traffic within a
//! minute (received events, duplicates, refunds, disputes, dead letters).

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use super::run::{Options, Simulation};
use super::scenario::{Faults, Scenario};
use super::sender::Target;
use super::ApiFaults;
use crate::config::Settings;
use crate::provider::signature::SchemeKind;

/// The demo's orders and the real time their lives take: three simulated days of orders,
/// refunds (1 h to 2 days after the payment) and disputes in five real minutes. Fifteen
/// minutes left some first minutes without a fully refunded order (refunds came too late
/// in real time); at five, a first minute sees a dozen or more.
const ORDERS: usize = 1_200;
const DURATION: Duration = Duration::from_secs(5 * 60);

/// How fast the provider API client calls the demo's own simulator.
const DEMO_API_RATE_PER_SEC: f64 = 1_000.0;

/// What `prepare` set up before the server starts.
pub struct Prepared {
    listener: tokio::net::TcpListener,
    api_key: String,
    secret: String,
    pub api_url: String,
    provider: super::Provider,
}

/// The demo's API key, generated once into the data directory (mode 0600), like the
/// development signing secret.
fn api_key(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join("demo-api-key");
    match std::fs::read_to_string(&path) {
        Ok(key) if key.trim().len() >= 24 => Ok(key.trim().to_string()),
        Ok(_) => anyhow::bail!(
            "{} holds a short key; delete it to generate a new one",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            use std::io::Write;
            let key = super::generated_key();
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut file = options
                .open(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            file.write_all(key.as_bytes())?;
            file.sync_all()?;
            Ok(key)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// What `serve --demo` refuses before anything starts: it makes up payments, so it signs
/// them with its own development secret, never a configured provider's, and delivers its
/// outbox to the log alone, never through a configured sink to real systems. Call before
/// `ensure_dev_provider` adds the development provider.
pub fn refuse_real_settings(settings: &Settings) -> anyhow::Result<()> {
    if !settings.providers.is_empty() {
        let names: Vec<&str> = settings.providers.iter().map(|p| p.name.as_str()).collect();
        anyhow::bail!(
            "--demo signs its made-up traffic with a development secret of its own, never a \
             configured provider's; this configuration names the provider(s) {}: run the \
             demo without [[providers]] (a config file of its own, or none)",
            names.join(", ")
        );
    }
    if !settings.sinks.is_empty() {
        let names: Vec<&str> = settings.sinks.keys().map(String::as_str).collect();
        anyhow::bail!(
            "--demo would deliver made-up orders through the configured sink(s) {} to real \
             systems; run the demo without [sinks] (a config file of its own, or none)",
            names.join(", ")
        );
    }
    Ok(())
}

/// The file in the data directory that says which database an earlier `--demo` filled (a
/// digest of its URL, not the URL, which may hold a password).
const DEMO_DATABASE_FILE: &str = "demo-database";

fn database_digest(url: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(url.as_bytes()))
}

/// `--demo` fills only a new, empty database, or the one an earlier `--demo` with this data
/// directory filled (a restart of the demo): never one holding real payments. Marks the
/// database as the demo's when it lets it through.
async fn claim_database(settings: &Settings) -> anyhow::Result<()> {
    let marker = settings.data_dir.join(DEMO_DATABASE_FILE);
    let digest = database_digest(&settings.database_url);
    let ours = std::fs::read_to_string(&marker).is_ok_and(|d| d.trim() == digest);
    if !ours {
        let db = crate::store::Db::connect(&settings.database_url).await?;
        // No table yet: a new database, which the server's migrations create.
        let events: Option<i64> = sqlx::query_scalar("SELECT COUNT(*) FROM inbox_events")
            .fetch_one(db.reader())
            .await
            .ok();
        db.close().await;
        if let Some(n) = events.filter(|n| *n > 0) {
            anyhow::bail!(
                "the database at {} already holds {n} event(s) that no --demo made; --demo \
                 fills only a new, empty database: give it one of its own (--database-url) \
                 and a data directory of its own",
                crate::support::redact::redact_url(&settings.database_url)
            );
        }
    }
    crate::support::files::write_private_file(&marker, digest.as_bytes())
}

/// Points the `stripe` provider's API at the demo's simulator (on a free loopback port)
/// with the demo's key; for a Mercado Pago demo, adds a `mercadopago` provider signed with
/// the same development secret, whose notifications are completed from that API. Call
/// after `ensure_dev_provider`, before the server starts.
pub async fn prepare(settings: &mut Settings, played: super::Provider) -> anyhow::Result<Prepared> {
    crate::support::files::create_private_dir(&settings.data_dir)?;
    claim_database(settings).await?;
    let key = api_key(&settings.data_dir)?;
    let provider = settings
        .providers
        .iter_mut()
        .find(|p| p.name == "stripe" && p.scheme == SchemeKind::Stripe)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--demo needs a provider named \"stripe\" with the stripe scheme (or no providers configured)"
            )
        })?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let api_url = format!("http://{}", listener.local_addr()?);
    provider.api.base = api_url.clone();
    provider.api.key = Some(key.clone());
    // Its own simulator, not Stripe: no need for a real account's pace, so a reconciliation
    // of the demo's hundreds of objects takes seconds.
    provider.api.rate_per_sec = DEMO_API_RATE_PER_SEC;
    let secret = provider.secrets[0].clone();
    if played == super::Provider::MercadoPago {
        let mut mp = crate::config::ProviderSettings {
            name: "mercadopago".into(),
            scheme: SchemeKind::MercadoPago,
            secrets: vec![secret.clone()],
            tolerance_secs: provider.tolerance_secs,
            mapping: None,
            events: Default::default(),
            api: provider.api.clone(),
            signature: None,
        };
        mp.api.key = Some(key.clone());
        settings.providers.push(mp);
        // Reconciliation speaks Stripe's API only so far: a periodic run would read the
        // simulator's Mercado Pago payments as Stripe objects.
        settings.reconcile.interval =
            crate::reconcile::Interval::parse("0").expect("0 turns the job off");
    }
    Ok(Prepared {
        listener,
        api_key: key,
        secret,
        api_url,
        provider: played,
    })
}

/// Some of every fault, gently: enough to see each on the dashboard, not so much that the
/// demo looks broken.
pub fn scenario() -> Scenario {
    let mut s = Scenario::builtin("chaos").expect("chaos is built in");
    s.faults = Faults {
        duplicate: 0.1,
        two_types: 0.4,
        delay: 0.1,
        max_delay_ms: 3_000,
        resend: 0.02,
        drop: 0.01,
        ungenerated: 0.005,
        legacy_version: 0.01,
    };
    s.api = ApiFaults {
        rate_429: 0.02,
        rate_5xx: 0.02,
        ..ApiFaults::default()
    };
    s
}

/// Starts the simulator's API and its run against `webhook_url`; both end with the process.
pub async fn start(prepared: Prepared, webhook_url: String) -> anyhow::Result<()> {
    let sim = Simulation::new(Options {
        seed: rand::random(),
        orders: ORDERS,
        duration: DURATION,
        scenario_name: "demo".into(),
        scenario: scenario(),
        start: None,
        database: "sqlite::memory:".into(),
        api_key: prepared.api_key,
        target: Some(Target {
            url: webhook_url,
            scheme: match prepared.provider {
                super::Provider::Stripe => SchemeKind::Stripe,
                super::Provider::MercadoPago => SchemeKind::MercadoPago,
            },
            secret: prepared.secret,
        }),
        provider: prepared.provider,
    })
    .await?;
    tokio::spawn(super::serve_api(
        sim.shared.clone(),
        prepared.listener,
        std::future::pending(),
    ));
    tokio::spawn(async move {
        match sim.run(&|_, _| {}).await {
            Ok(()) => tracing::info!("demo: the simulated run has finished; its API keeps serving"),
            Err(e) => tracing::error!(error = %e, "demo: the simulated run stopped"),
        }
    });
    Ok(())
}
