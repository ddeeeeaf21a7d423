//! `oncehook simulate`: its options, the run, the report and the truth file.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::provider::signature::SchemeKind;
use crate::simulator::run::{Options, Simulation};
use crate::simulator::scenario::Scenario;
use crate::simulator::sender::Target;
use crate::simulator::truth::Truth;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ScenarioName {
    /// Everyday traffic: a few duplicates and late events.
    Steady,
    /// A provider catching up after an outage: many duplicates, reordering, resends.
    Storm,
    /// Every fault: lost and never-generated events, a flaky API (429, 5xx).
    Chaos,
}

impl ScenarioName {
    fn as_str(self) -> &'static str {
        match self {
            ScenarioName::Steady => "steady",
            ScenarioName::Storm => "storm",
            ScenarioName::Chaos => "chaos",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Scheme {
    /// `Stripe-Signature: t=…,v1=…`, Stripe's event JSON.
    Stripe,
    /// `webhook-id` / `webhook-timestamp` / `webhook-signature`, the payment payload
    /// oncehook's `standard-webhooks` mapping reads.
    StandardWebhooks,
}

/// A Stripe-compatible provider in the box: payments with real lives, signed webhooks with
/// real faults, a Stripe-shaped API, and the truth at the end (see the book,
/// docs/src/simulator.md).
#[derive(Args, Debug, Clone)]
pub struct SimulateArgs {
    /// Webhook URL to send events to, e.g. http://127.0.0.1:8080/webhooks/stripe. Without
    /// it events are only stored and served by the API.
    #[arg(long)]
    pub target: Option<String>,
    /// Signing secret the target verifies with (the provider's `secrets` entry; `whsec_…`
    /// base64 for standard-webhooks).
    #[arg(
        long,
        env = "ONCEHOOK_SIMULATE_SECRET",
        hide_env_values = true,
        requires = "target"
    )]
    pub secret: Option<String>,
    /// How webhooks are signed and shaped.
    #[arg(long, value_enum, default_value = "stripe")]
    pub scheme: Scheme,
    /// The provider played: Stripe, or Mercado Pago (its payments, thin notifications
    /// signed with `x-signature`, `GET /v1/payments/{id}` and `GET /v1/payments/search`;
    /// --scheme is then ignored).
    #[arg(long, value_enum, default_value = "stripe")]
    pub provider: crate::simulator::Provider,
    /// Where the Stripe-compatible API listens (set the provider's `api_base` to it).
    #[arg(long, default_value = "127.0.0.1:12111")]
    pub api_listen: SocketAddr,
    /// Do not serve the API.
    #[arg(long)]
    pub no_api: bool,
    /// The API's key (bearer or basic auth); generated and printed when not given.
    #[arg(long, env = "ONCEHOOK_SIMULATE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// The simulator's own database: sqlite::memory: or a file path.
    #[arg(long, default_value = "sqlite::memory:")]
    pub database: String,
    /// Built-in scenario: the mix of payment lives and the rate of each fault.
    #[arg(long, value_enum, default_value = "steady")]
    pub scenario: ScenarioName,
    /// TOML file overriding any key of the scenario ([mix], [faults], [api], [delivery]).
    #[arg(long)]
    pub scenario_file: Option<PathBuf>,
    /// Orders begun per second of the run.
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    /// Seconds the run lasts (its simulated weeks fit into them); 0: as fast as the target
    /// answers (then --orders is needed).
    #[arg(long, default_value_t = 60.0)]
    pub duration: f64,
    /// Number of orders (default: --rate × --duration).
    #[arg(long)]
    pub orders: Option<usize>,
    /// Seed of the run: the same seed gives the same orders, events and faults.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Simulated start, Unix seconds (default: about 24 days ago, so every event is within
    /// the 30 days the API keeps). With --seed it replays a run exactly.
    #[arg(long)]
    pub start: Option<i64>,
    /// Write what was sent and the truth of every order as JSON to this file.
    #[arg(long)]
    pub truth: Option<PathBuf>,
    /// Keep serving the API after the run, until Ctrl-C or SIGTERM.
    #[arg(long)]
    pub keep_serving: bool,
}

impl SimulateArgs {
    /// The run's options, every bad value an error naming its option.
    pub fn options(&self) -> anyhow::Result<Options> {
        anyhow::ensure!(
            self.rate.is_finite() && self.rate > 0.0,
            "--rate must be a positive number of orders per second, not {}",
            self.rate
        );
        anyhow::ensure!(
            self.duration.is_finite() && self.duration >= 0.0,
            "--duration must be zero or a positive number of seconds, not {}",
            self.duration
        );
        let orders = match self.orders {
            Some(0) => anyhow::bail!("--orders must be at least 1"),
            Some(n) => n,
            None if self.duration == 0.0 => {
                anyhow::bail!("--duration 0 (as fast as possible) needs --orders")
            }
            None => (self.rate * self.duration).ceil().max(1.0) as usize,
        };
        let scenario = Scenario::load(self.scenario.as_str(), self.scenario_file.as_deref())?;
        let target = match &self.target {
            None => None,
            Some(url) => {
                anyhow::ensure!(
                    url.starts_with("http://") || url.starts_with("https://"),
                    "--target must be an http:// or https:// URL"
                );
                let secret = self
                    .secret
                    .clone()
                    .ok_or_else(|| anyhow::anyhow!("--target needs --secret"))?;
                let scheme = match (self.provider, self.scheme) {
                    (crate::simulator::Provider::MercadoPago, _) => SchemeKind::MercadoPago,
                    (_, Scheme::Stripe) => SchemeKind::Stripe,
                    (_, Scheme::StandardWebhooks) => SchemeKind::StandardWebhooks,
                };
                // The same rules as a provider's secrets in oncehook's config.
                crate::provider::signature::Verifier::new(
                    scheme,
                    std::slice::from_ref(&secret),
                    300,
                )
                .map_err(|e| anyhow::anyhow!("--secret: {e}"))?;
                Some(Target {
                    url: url.clone(),
                    scheme,
                    secret,
                })
            }
        };
        Ok(Options {
            seed: self.seed.unwrap_or_else(rand::random),
            orders,
            duration: Duration::from_secs_f64(self.duration),
            scenario_name: self.scenario.as_str().into(),
            scenario,
            start: self.start,
            database: self.database.clone(),
            api_key: self
                .api_key
                .clone()
                .unwrap_or_else(crate::simulator::generated_key),
            target,
            provider: self.provider,
        })
    }
}

pub async fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let options = args.options()?;
    // Only to keep serving: during the run Ctrl-C must still end the process at once.
    let stop_signal = match args.keep_serving {
        true => Some(crate::server::StopSignal::install()?),
        false => None,
    };
    let key_given = args.api_key.is_some();
    let api_key = options.api_key.clone();
    let sim = Arc::new(Simulation::new(options.clone()).await?);
    let api = if args.no_api {
        None
    } else {
        let listener = tokio::net::TcpListener::bind(args.api_listen)
            .await
            .map_err(|e| anyhow::anyhow!("--api-listen {}: {e}", args.api_listen))?;
        let addr = listener.local_addr()?;
        eprintln!("simulator API on http://{addr} (provider api_base)");
        if !key_given {
            // Printed to the terminal once, as the dev signing secret is.
            eprintln!("  API key: {api_key}");
        }
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(crate::simulator::serve_api(
            sim.shared.clone(),
            listener,
            async {
                let _ = stopped.await;
            },
        ));
        Some((stop, task))
    };
    eprintln!(
        "simulating {} orders, scenario {}, seed {}{}",
        options.orders,
        options.scenario_name,
        options.seed,
        options
            .target
            .as_ref()
            .map(|t| format!(
                ", webhooks to {}",
                crate::support::redact::redact_url(&t.url)
            ))
            .unwrap_or_default()
    );
    let bar = progress_bar(sim.plans().iter().map(|p| p.steps.len() as u64).sum());
    let started = std::time::Instant::now();
    let sender = sim.sender.clone();
    sim.run(&|done, total| {
        if let Some(bar) = &bar {
            bar.set_length(total);
            bar.set_position(done);
            if let Some(s) = &sender {
                let c = s.stats.counts();
                bar.set_message(format!(
                    "{} delivered, {} failed attempts, {} in flight",
                    c.delivered,
                    c.failed_attempts,
                    s.outstanding()
                ));
            }
        }
    })
    .await?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let elapsed = started.elapsed();
    let truth = sim.truth().await?;
    print_report(&truth, elapsed, options.target.is_some());
    if let Some(path) = &args.truth {
        std::fs::write(path, serde_json::to_vec_pretty(&truth)?)
            .map_err(|e| anyhow::anyhow!("--truth {}: {e}", path.display()))?;
        println!("truth written to {}", path.display());
    }
    if let Some((stop, task)) = api {
        if let Some(signal) = stop_signal {
            eprintln!("run finished; the API keeps serving until Ctrl-C or SIGTERM");
            signal.recv().await;
        }
        let _ = stop.send(());
        task.await??;
    }
    Ok(())
}

/// A progress line on a terminal; nothing when stderr is piped or redirected.
fn progress_bar(total: u64) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} changes · {msg}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    Some(bar)
}

fn print_report(t: &Truth, elapsed: Duration, sent_webhooks: bool) {
    let s = &t.sent;
    println!(
        "sent {} webhooks in {:.1} s ({:.0}/s): {} answered 2xx, {} failed attempts, {} retries, {} events never delivered",
        s.attempts,
        elapsed.as_secs_f64(),
        s.attempts as f64 / elapsed.as_secs_f64().max(1e-9),
        s.delivered,
        s.failed_attempts,
        s.retries,
        s.gave_up + s.dropped
    );
    println!(
        "faults: {} duplicates, {} delayed, {} resends, {} dropped, {} changes never announced",
        s.duplicates, s.delayed, s.resends, s.dropped, t.events.never_generated
    );
    println!(
        "events: {} generated; API: {} requests ({} answered 429, {} answered 5xx)",
        t.events.generated, t.api.requests, t.api.answered_429, t.api.answered_5xx
    );
    let statuses: Vec<String> = t
        .totals
        .by_status
        .iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect();
    println!(
        "truth: {} orders ({}), paid {} · refunded {} · disputed {} (minor units)",
        t.totals.orders,
        statuses.join(", "),
        t.totals.paid,
        t.totals.refunded,
        t.totals.disputed,
    );
    if sent_webhooks {
        println!(
            "  {} orders complete, {} with a final state never delivered (see `lost` in the truth file)",
            t.complete_orders, t.incomplete_orders
        );
    }
}
