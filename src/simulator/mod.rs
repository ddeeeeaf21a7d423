//! `oncehook simulate`: a payment provider in the box. One process with its own small
//! database plays Stripe: payments with the lives real ones have (`plan`), the objects and
//! events of each change (`engine`, in current Stripe shapes), a Stripe-compatible API
//! subset on its own port (`api`), and signed webhooks sent with the faults real providers
//! produce (`sender`). At the end it reports what it sent and the truth (`truth`): every
//! order's payments, refunds, disputes, totals and status, to check oncehook against.

pub mod api;
pub mod demo;
pub mod engine;
pub mod ids;
pub mod mercadopago;
pub mod mp_search;
pub mod plan;
pub mod run;
pub mod scenario;
pub mod sender;
pub mod shapes;
pub mod store;
pub mod truth;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, Mutex};

pub use api::ApiFaults;
pub use engine::{Engine, NewEvent};
pub use store::SimDb;

/// The provider the simulator plays: its objects, events, signatures and API.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Provider {
    /// Stripe's objects and events (`--scheme` chooses Stripe's or Standard Webhooks'
    /// signatures).
    #[default]
    Stripe,
    /// Mercado Pago's payments, thin notifications signed with `x-signature`,
    /// `GET /v1/payments/{id}` and `GET /v1/payments/search`.
    #[value(name = "mercadopago")]
    MercadoPago,
}

/// Simulated time: a run's days pass in its real seconds. Never ahead of the wall clock,
/// so no event is dated in the future.
#[derive(Clone, Debug)]
pub struct Clock {
    real_start: Instant,
    sim_start: i64,
    sim_per_real_sec: f64,
}

impl Clock {
    pub fn new(sim_start: i64, sim_per_real_sec: f64) -> Clock {
        Clock {
            real_start: Instant::now(),
            sim_start,
            sim_per_real_sec,
        }
    }

    /// The simulated Unix time now.
    pub fn now(&self) -> i64 {
        let elapsed = self.real_start.elapsed().as_secs_f64() * self.sim_per_real_sec;
        self.sim_start
            .saturating_add(elapsed as i64)
            .min(chrono::Utc::now().timestamp())
    }
}

/// Counters of what the API did.
#[derive(Debug, Default)]
pub struct ApiStats {
    pub api_requests: AtomicU64,
    pub api_429: AtomicU64,
    pub api_5xx: AtomicU64,
}

impl ApiStats {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// What the API and the run share: the database, the engine that changes objects, the
/// API's key and faults, and where new events go to be delivered.
pub struct Shared {
    pub db: SimDb,
    pub engine: Mutex<Engine>,
    pub api_key: String,
    pub api_faults: ApiFaults,
    pub clock: Clock,
    pub stats: ApiStats,
    pub provider: Provider,
    outlet: std::sync::Mutex<Option<mpsc::UnboundedSender<NewEvent>>>,
}

impl Shared {
    pub fn new(
        db: SimDb,
        seed: u64,
        api_key: String,
        api_faults: ApiFaults,
        clock: Clock,
    ) -> Shared {
        Shared::for_provider(db, seed, api_key, api_faults, clock, Provider::Stripe)
    }

    pub fn for_provider(
        db: SimDb,
        seed: u64,
        api_key: String,
        api_faults: ApiFaults,
        clock: Clock,
        provider: Provider,
    ) -> Shared {
        Shared {
            db,
            engine: Mutex::new(Engine::for_provider(seed, provider)),
            api_key,
            api_faults,
            clock,
            stats: ApiStats::default(),
            provider,
            outlet: std::sync::Mutex::new(None),
        }
    }

    /// Events made outside the plan (a refund through the API) go to this channel, to be
    /// delivered like any other.
    pub fn set_outlet(&self, outlet: Option<mpsc::UnboundedSender<NewEvent>>) {
        *self.outlet.lock().expect("outlet lock") = outlet;
    }

    pub fn announce(&self, events: Vec<NewEvent>) {
        if let Some(outlet) = self.outlet.lock().expect("outlet lock").as_ref() {
            for e in events {
                let _ = outlet.send(e);
            }
        }
    }
}

/// Serves the API on `listener` until `shutdown` resolves.
pub async fn serve_api(
    shared: Arc<Shared>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    axum::serve(listener, api::router(shared))
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

/// A key in Stripe's test-key shape.
pub fn generated_key() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 18];
    rand::thread_rng().fill_bytes(&mut bytes);
    format!("sk_test_sim_{}", hex::encode(bytes))
}
