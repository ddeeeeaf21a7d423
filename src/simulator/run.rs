//! One simulation: plans from the seed, their changes applied on a schedule that fits the
//! simulated weeks into the run's real duration, each change's events stored and handed
//! to the sender, then the truth.

use std::sync::Arc;
use std::time::Duration;

use super::plan::{self, GenerationFaults, OrderPlan};
use super::scenario::Scenario;
use super::sender::{Sender, Target};
use super::truth::{self, ApiCounts, EventCounts, Truth};
use super::{ApiStats, Clock, Shared, SimDb};

/// Orders begin within this much simulated time; each lives at most
/// `plan::MAX_ORDER_SECS` after.
pub const ORDER_SPREAD_SECS: i64 = 3 * 86_400;

#[derive(Clone, Debug)]
pub struct Options {
    pub seed: u64,
    pub orders: usize,
    /// Real time the whole run takes; zero: as fast as the target answers.
    pub duration: Duration,
    pub scenario_name: String,
    pub scenario: Scenario,
    /// Simulated start (Unix seconds); default: far enough back that every event is dated
    /// before now and within the 30 days the API keeps.
    pub start: Option<i64>,
    /// `sqlite::memory:` or a file.
    pub database: String,
    pub api_key: String,
    /// Where webhooks go; none: events are only stored (and served by the API).
    pub target: Option<Target>,
    /// The provider played.
    pub provider: super::Provider,
}

pub struct Simulation {
    pub shared: Arc<Shared>,
    pub sender: Option<Sender>,
    plans: Vec<OrderPlan>,
    options: Options,
    start: i64,
    span: i64,
    ungenerated: std::sync::atomic::AtomicU64,
}

impl Simulation {
    pub async fn new(options: Options) -> anyhow::Result<Simulation> {
        options.scenario.validate()?;
        let start = options.start.unwrap_or_else(|| {
            chrono::Utc::now().timestamp() - ORDER_SPREAD_SECS - plan::MAX_ORDER_SECS - 3_600
        });
        let plans = plan::plans(
            options.seed,
            options.orders,
            ORDER_SPREAD_SECS,
            &options.scenario.mix,
            GenerationFaults {
                ungenerated: options.scenario.faults.ungenerated,
                two_types: options.scenario.faults.two_types,
            },
        );
        let span = plans
            .iter()
            .flat_map(|p| p.steps.last().map(|s| p.starts_at + s.after_secs))
            .max()
            .unwrap_or(0)
            .max(1);
        let real_secs = options.duration.as_secs_f64();
        let sim_per_real = if real_secs > 0.0 {
            span as f64 / real_secs
        } else {
            f64::INFINITY
        };
        let db = SimDb::open(&options.database).await?;
        // Ids repeat with the seed: a second run into the same file would collide.
        anyhow::ensure!(
            db.count_events().await? == 0,
            "--database {} already holds a run; remove the file or name another",
            options.database
        );
        let shared = Arc::new(Shared::for_provider(
            db.clone(),
            options.seed,
            options.api_key.clone(),
            options.scenario.api.clone(),
            Clock::new(start, sim_per_real),
            options.provider,
        ));
        let sender = match &options.target {
            Some(target) => Some(Sender::start(
                target.clone(),
                options.scenario.delivery.clone(),
                options.scenario.faults.clone(),
                options.seed,
                db,
            )?),
            None => None,
        };
        if let Some(sender) = &sender {
            // Refunds made through the API are announced like any other change.
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            shared.set_outlet(Some(tx));
            let sender = sender.clone();
            tokio::spawn(async move {
                while let Some(event) = rx.recv().await {
                    sender.submit(&event);
                }
            });
        }
        Ok(Simulation {
            shared,
            sender,
            plans,
            options,
            start,
            span,
            ungenerated: Default::default(),
        })
    }

    pub fn plans(&self) -> &[OrderPlan] {
        &self.plans
    }

    /// Steps in the order they happen: (simulated time, order, step).
    fn schedule(&self) -> Vec<(i64, usize, usize)> {
        let mut all: Vec<(i64, usize, usize)> = self
            .plans
            .iter()
            .enumerate()
            .flat_map(|(o, p)| {
                p.steps
                    .iter()
                    .enumerate()
                    .map(move |(s, step)| (p.starts_at + step.after_secs, o, s))
            })
            .collect();
        all.sort();
        all
    }

    /// Applies every planned change on its schedule and sends its events; returns once
    /// every delivery (retries included) is done. `progress(done, total)` is called as
    /// steps are applied.
    pub async fn run(&self, progress: &(dyn Fn(u64, u64) + Sync)) -> anyhow::Result<()> {
        let schedule = self.schedule();
        let total = schedule.len() as u64;
        let began = tokio::time::Instant::now();
        let real = self.options.duration.as_secs_f64();
        let mut i = 0;
        while i < schedule.len() {
            // Everything due by now goes in one batch (one transaction).
            let elapsed = began.elapsed().as_secs_f64();
            let mut batch_end = i;
            while batch_end < schedule.len()
                && batch_end - i < 512
                && (real == 0.0
                    || schedule[batch_end].0 as f64 / self.span as f64 * real <= elapsed)
            {
                batch_end += 1;
            }
            if batch_end == i {
                let due = schedule[i].0 as f64 / self.span as f64 * real;
                tokio::time::sleep_until(began + Duration::from_secs_f64(due)).await;
                continue;
            }
            let mut events = Vec::new();
            {
                let mut engine = self.shared.engine.lock().await;
                for &(at, o, s) in &schedule[i..batch_end] {
                    let step = &self.plans[o].steps[s];
                    let made = engine.apply(&self.plans[o].order_id, step, self.start + at);
                    if step.ungenerated {
                        self.ungenerated
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    events.extend(made);
                }
                engine.flush(&self.shared.db, &events).await?;
            }
            if let Some(sender) = &self.sender {
                for e in &events {
                    sender.submit(e);
                }
            }
            i = batch_end;
            progress(i as u64, total);
        }
        if let Some(sender) = &self.sender {
            sender.drain().await;
        }
        Ok(())
    }

    /// What was sent and the truth of every order.
    pub async fn truth(&self) -> anyhow::Result<Truth> {
        let orders = match self.options.provider {
            super::Provider::Stripe => truth::orders(&self.shared.db).await?,
            super::Provider::MercadoPago => super::mercadopago::orders(&self.shared.db).await?,
        };
        let mut by_type = std::collections::BTreeMap::new();
        for t in self.shared.db.event_types().await? {
            by_type.insert(t.0, t.1 as u64);
        }
        let stats = &self.shared.stats;
        let complete = orders.iter().filter(|o| o.complete).count();
        Ok(Truth {
            seed: self.options.seed,
            scenario: self.options.scenario_name.clone(),
            start: self.start,
            sent: self
                .sender
                .as_ref()
                .map(|s| s.stats.counts())
                .unwrap_or_default(),
            events: EventCounts {
                generated: self.shared.db.count_events().await? as u64,
                never_generated: self.ungenerated.load(std::sync::atomic::Ordering::Relaxed),
                by_type,
            },
            api: ApiCounts {
                requests: ApiStats::get(&stats.api_requests),
                answered_429: ApiStats::get(&stats.api_429),
                answered_5xx: ApiStats::get(&stats.api_5xx),
            },
            totals: truth::totals(&orders),
            complete_orders: complete,
            incomplete_orders: orders.len() - complete,
            orders,
        })
    }
}
