//! Signed webhook deliveries with the faults real providers produce: duplicates, delays
//! (so later events overtake earlier ones), manual resends of old events, events never
//! delivered, and retries with exponential backoff after a timeout or a non-2xx answer.
//! Every fault is decided per event from the run's seed and the event's id, so the same
//! seed makes the same decisions whatever the timing.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify, Semaphore};
use tokio::time::Instant;

use super::engine::NewEvent;
use super::scenario::{Delivery, Faults};
use super::store::SimDb;
use crate::provider::signature::SchemeKind;

/// The version a `legacy_version` fault stamps on an event (before oncehook's oldest).
pub const LEGACY_API_VERSION: &str = "2019-12-03";

/// Where webhooks go and how they are signed.
#[derive(Clone)]
pub struct Target {
    pub url: String,
    pub scheme: SchemeKind,
    pub secret: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &crate::support::redact::redact_url(&self.url))
            .field("scheme", &self.scheme)
            .field("secret", &crate::support::redact::REDACTED)
            .finish()
    }
}

/// What happens to one event on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub drop: bool,
    pub delay_ms: u64,
    pub duplicate: bool,
    /// A manual resend this long after the first delivery.
    pub resend_after_ms: Option<u64>,
    pub legacy_version: bool,
}

/// The decision for `event_id` in the run with `seed`.
pub fn decide(seed: u64, event_id: &str, faults: &Faults) -> Decision {
    // SHA-256, not std's hasher: its algorithm may change between Rust releases, and a
    // seed must replay the same run on any build.
    use sha2::Digest;
    let digest = sha2::Sha256::new()
        .chain_update(seed.to_le_bytes())
        .chain_update(event_id.as_bytes())
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let mut rng = StdRng::seed_from_u64(u64::from_le_bytes(first));
    let drop = rng.gen_bool(faults.drop);
    let delayed = rng.gen_bool(faults.delay);
    let delay_ms = if delayed {
        rng.gen_range(0..=faults.max_delay_ms)
    } else {
        0
    };
    let duplicate = rng.gen_bool(faults.duplicate);
    let resend = rng.gen_bool(faults.resend);
    let resend_after_ms =
        resend.then(|| rng.gen_range(faults.max_delay_ms..=faults.max_delay_ms * 3 + 1));
    let legacy_version = rng.gen_bool(faults.legacy_version);
    Decision {
        drop,
        delay_ms,
        duplicate,
        resend_after_ms,
        legacy_version,
    }
}

/// Counts of what went over the wire.
#[derive(Debug, Default)]
pub struct SendStats {
    pub attempts: AtomicU64,
    pub delivered: AtomicU64,
    pub failed_attempts: AtomicU64,
    pub retries: AtomicU64,
    pub gave_up: AtomicU64,
    pub duplicates: AtomicU64,
    pub resends: AtomicU64,
    pub delayed: AtomicU64,
    pub dropped: AtomicU64,
    pub legacy_version: AtomicU64,
}

/// The counts as the truth file reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SentCounts {
    /// POSTs made, retries and duplicates included.
    pub attempts: u64,
    /// POSTs answered 2xx.
    pub delivered: u64,
    /// POSTs answered non-2xx or not in time.
    pub failed_attempts: u64,
    pub retries: u64,
    /// Events whose every attempt failed: never delivered.
    pub gave_up: u64,
    pub duplicates: u64,
    pub resends: u64,
    pub delayed: u64,
    /// Events never sent at all.
    pub dropped: u64,
    /// Events sent with an API version too old to apply (dead letters in oncehook).
    #[serde(default)]
    pub legacy_version: u64,
}

impl SendStats {
    pub fn counts(&self) -> SentCounts {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SentCounts {
            attempts: g(&self.attempts),
            delivered: g(&self.delivered),
            failed_attempts: g(&self.failed_attempts),
            retries: g(&self.retries),
            gave_up: g(&self.gave_up),
            duplicates: g(&self.duplicates),
            resends: g(&self.resends),
            delayed: g(&self.delayed),
            dropped: g(&self.dropped),
            legacy_version: g(&self.legacy_version),
        }
    }
}

/// One delivery to make: an event's body (shared by its duplicates and retries).
#[derive(Clone)]
struct Job {
    id: Arc<str>,
    body: bytes::Bytes,
    attempt: u32,
    /// Retries count against the event's attempts; a duplicate or a resend is a delivery of
    /// its own.
    first_of_event: bool,
    /// Whether a 2xx makes the event's state known to the target.
    counts: bool,
    /// The query string the request carries (Mercado Pago's `data.id=…&type=payment`).
    query: Option<Arc<str>>,
}

/// The sending side: a timer queue of deliveries and a bounded set of workers.
#[derive(Clone)]
pub struct Sender {
    queue: mpsc::UnboundedSender<(Instant, Job)>,
    pub stats: Arc<SendStats>,
    outstanding: Arc<AtomicU64>,
    /// Deliveries answered 2xx not yet recorded in the database (the truth reads them).
    unrecorded: Arc<AtomicU64>,
    idle: Arc<Notify>,
    seed: u64,
    faults: Faults,
    scheme: SchemeKind,
}

impl Sender {
    pub fn start(
        target: Target,
        delivery: Delivery,
        faults: Faults,
        seed: u64,
        db: SimDb,
    ) -> anyhow::Result<Sender> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(delivery.timeout_ms))
            .pool_max_idle_per_host(delivery.concurrency)
            .user_agent("Stripe/1.0 (+https://stripe.com/docs/webhooks)")
            .build()?;
        if target.scheme == SchemeKind::StandardWebhooks {
            crate::provider::signature::standard_webhooks::decode_secret(&target.secret)?;
        }
        let (queue, rx) = mpsc::unbounded_channel();
        let sender = Sender {
            queue,
            stats: Arc::new(SendStats::default()),
            outstanding: Arc::new(AtomicU64::new(0)),
            unrecorded: Arc::new(AtomicU64::new(0)),
            idle: Arc::new(Notify::new()),
            seed,
            faults,
            scheme: target.scheme,
        };
        let (marks, marks_rx) = mpsc::unbounded_channel();
        tokio::spawn(mark_delivered(db, marks_rx, sender.unrecorded.clone()));
        tokio::spawn(dispatch(
            rx,
            sender.clone(),
            Arc::new(target),
            delivery,
            http,
            marks,
        ));
        Ok(sender)
    }

    /// Schedules an event's deliveries as its fault decision says.
    pub fn submit(&self, event: &NewEvent) {
        let decision = decide(self.seed, &event.id, &self.faults);
        if decision.drop {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let body: bytes::Bytes = match self.scheme {
            SchemeKind::Stripe if decision.legacy_version => {
                self.stats.legacy_version.fetch_add(1, Ordering::Relaxed);
                let mut body: Value =
                    serde_json::from_slice(&event.json).expect("the engine's own JSON");
                body["api_version"] = serde_json::json!(LEGACY_API_VERSION);
                body.to_string().into()
            }
            SchemeKind::Stripe => event.json.clone(),
            SchemeKind::StandardWebhooks => match standard_payload(event) {
                Some(v) => v.to_string().into(),
                // No Standard Webhooks counterpart (a noise event): not sent.
                None => return,
            },
            SchemeKind::MercadoPago => event.json.clone(),
            // The simulator speaks Stripe, Standard Webhooks and Mercado Pago only (its
            // CLI offers no other scheme).
            _ => return,
        };
        let query = match self.scheme {
            SchemeKind::MercadoPago => super::mercadopago::query_of(&event.json).map(Into::into),
            _ => None,
        };
        let job = Job {
            id: event.id.as_str().into(),
            body,
            attempt: 1,
            first_of_event: true,
            // A delivered event too old to apply tells oncehook nothing: not announced.
            counts: !(decision.legacy_version && self.scheme == SchemeKind::Stripe),
            query,
        };
        let now = Instant::now();
        if decision.delay_ms > 0 {
            self.stats.delayed.fetch_add(1, Ordering::Relaxed);
        }
        let first = now + Duration::from_millis(decision.delay_ms);
        self.push(first, job.clone());
        if decision.duplicate {
            self.stats.duplicates.fetch_add(1, Ordering::Relaxed);
            self.push(
                first + Duration::from_millis(5),
                Job {
                    first_of_event: false,
                    ..job.clone()
                },
            );
        }
        if let Some(after) = decision.resend_after_ms {
            self.stats.resends.fetch_add(1, Ordering::Relaxed);
            self.push(
                first + Duration::from_millis(after),
                Job {
                    first_of_event: false,
                    ..job
                },
            );
        }
    }

    fn push(&self, at: Instant, job: Job) {
        self.outstanding.fetch_add(1, Ordering::SeqCst);
        if self.queue.send((at, job)).is_err() {
            self.finish_one();
        }
    }

    fn finish_one(&self) {
        if self.outstanding.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// Waits until every scheduled delivery (retries included) is done and recorded.
    pub async fn drain(&self) {
        loop {
            let idle = self.idle.notified();
            if self.outstanding.load(Ordering::SeqCst) == 0
                && self.unrecorded.load(Ordering::SeqCst) == 0
            {
                return;
            }
            // Bounded: a missed wake-up costs 50 ms, never a hang.
            let _ = tokio::time::timeout(Duration::from_millis(50), idle).await;
        }
    }

    pub fn outstanding(&self) -> u64 {
        self.outstanding.load(Ordering::SeqCst)
    }
}

async fn mark_delivered(
    db: SimDb,
    mut rx: mpsc::UnboundedReceiver<Arc<str>>,
    unrecorded: Arc<AtomicU64>,
) {
    let mut batch = Vec::new();
    while let Some(id) = rx.recv().await {
        batch.push(id.to_string());
        while let Ok(id) = rx.try_recv() {
            batch.push(id.to_string());
            if batch.len() >= 1_000 {
                break;
            }
        }
        if let Err(e) = db.mark_delivered(&batch).await {
            tracing::error!(error = %e, "simulator: recording deliveries");
        }
        unrecorded.fetch_sub(batch.len() as u64, Ordering::SeqCst);
        batch.clear();
    }
}

/// The timer queue: holds deliveries until due, then hands each to a worker.
async fn dispatch(
    mut rx: mpsc::UnboundedReceiver<(Instant, Job)>,
    sender: Sender,
    target: Arc<Target>,
    delivery: Delivery,
    http: reqwest::Client,
    marks: mpsc::UnboundedSender<Arc<str>>,
) {
    let permits = Arc::new(Semaphore::new(delivery.concurrency));
    let mut heap: BinaryHeap<Reverse<(Instant, u64, usize)>> = BinaryHeap::new();
    let mut jobs: std::collections::HashMap<usize, Job> = std::collections::HashMap::new();
    let mut next_slot = 0usize;
    let mut order = 0u64;
    loop {
        let next_due = heap.peek().map(|Reverse((at, _, _))| *at);
        tokio::select! {
            received = rx.recv() => match received {
                Some((at, job)) => {
                    jobs.insert(next_slot, job);
                    heap.push(Reverse((at, order, next_slot)));
                    next_slot += 1;
                    order += 1;
                }
                None if heap.is_empty() => return,
                None => {}
            },
            _ = async {
                match next_due {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {
                let now = Instant::now();
                while let Some(Reverse((at, _, slot))) = heap.peek().copied() {
                    if at > now {
                        break;
                    }
                    heap.pop();
                    let job = jobs.remove(&slot).expect("a slot per heap entry");
                    let permit = permits.clone().acquire_owned().await.expect("never closed");
                    let (sender, target, http, marks) =
                        (sender.clone(), target.clone(), http.clone(), marks.clone());
                    let delivery = delivery.clone();
                    tokio::spawn(async move {
                        let ok = post(&http, &target, &job).await;
                        drop(permit);
                        sender.stats.attempts.fetch_add(1, Ordering::Relaxed);
                        if ok {
                            sender.stats.delivered.fetch_add(1, Ordering::Relaxed);
                            if job.counts {
                                // Counted before this delivery is finished, so `drain`
                                // never sees both counters at zero in between.
                                sender.unrecorded.fetch_add(1, Ordering::SeqCst);
                                if marks.send(job.id.clone()).is_err() {
                                    sender.unrecorded.fetch_sub(1, Ordering::SeqCst);
                                }
                            }
                        } else {
                            sender.stats.failed_attempts.fetch_add(1, Ordering::Relaxed);
                            if job.attempt < delivery.max_attempts {
                                sender.stats.retries.fetch_add(1, Ordering::Relaxed);
                                // Stripe's exponential backoff, compressed.
                                let wait = delivery
                                    .retry_base_ms
                                    .saturating_mul(1 << (job.attempt - 1).min(20))
                                    .min(delivery.retry_cap_ms);
                                sender.push(
                                    Instant::now() + Duration::from_millis(wait),
                                    Job { attempt: job.attempt + 1, ..job.clone() },
                                );
                            } else if job.first_of_event {
                                sender.stats.gave_up.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        sender.finish_one();
                    });
                }
            }
        }
    }
}

/// One signed POST; whether it was answered 2xx in time.
async fn post(http: &reqwest::Client, target: &Target, job: &Job) -> bool {
    let t = chrono::Utc::now().timestamp();
    let url = match &job.query {
        Some(q) => format!(
            "{}{}{q}",
            target.url,
            if target.url.contains('?') { '&' } else { '?' }
        ),
        None => target.url.clone(),
    };
    let mut request = http.post(&url).header(
        reqwest::header::CONTENT_TYPE,
        "application/json; charset=utf-8",
    );
    match target.scheme {
        SchemeKind::Stripe => {
            request = request.header(
                "Stripe-Signature",
                crate::provider::signature::stripe::sign(&target.secret, t, &job.body),
            );
        }
        SchemeKind::StandardWebhooks => {
            let Ok(signature) = crate::provider::signature::standard_webhooks::sign(
                &target.secret,
                &job.id,
                t,
                &job.body,
            ) else {
                return false;
            };
            request = request
                .header("webhook-id", &*job.id)
                .header("webhook-timestamp", t.to_string())
                .header("webhook-signature", signature);
        }
        SchemeKind::MercadoPago => {
            let Ok(crate::provider::signature::Verifier::Generic(scheme)) =
                crate::provider::signature::Verifier::new(
                    SchemeKind::MercadoPago,
                    std::slice::from_ref(&target.secret),
                    300,
                )
            else {
                return false;
            };
            let mut headers = axum::http::HeaderMap::new();
            let request_id = uuid::Uuid::new_v4().to_string();
            headers.insert(
                "x-request-id",
                request_id.parse().expect("a UUID is a header value"),
            );
            let Ok(signature) = scheme.sign(&headers, job.query.as_deref(), &job.body, t) else {
                return false;
            };
            request = request
                .header("x-request-id", request_id)
                .header("x-signature", signature);
        }
        _ => return false,
    }
    match request.body(job.body.clone()).send().await {
        Ok(response) => {
            let ok = response.status().is_success();
            // Read the answer so the connection goes back to the pool.
            let _ = response.bytes().await;
            ok
        }
        Err(_) => false,
    }
}

/// The event as a Standard Webhooks sender of payments would post it (the shape oncehook's
/// `standard-webhooks` mapping reads); `None` for events with no such counterpart.
pub fn standard_payload(event: &NewEvent) -> Option<Value> {
    let body: Value = serde_json::from_slice(&event.json).ok()?;
    let object = &body["data"]["object"];
    let state = event.state.as_deref()?;
    let kind = object["object"].as_str()?;
    let (event_type, payment_id) = match (kind, state) {
        ("payment_intent" | "checkout.session", "succeeded") => {
            ("payment.succeeded", event.resource.clone()?)
        }
        ("payment_intent" | "checkout.session", "requires_payment_method") => {
            ("payment.failed", event.resource.clone()?)
        }
        ("payment_intent", "canceled") => ("payment.canceled", event.resource.clone()?),
        ("refund", "pending") => (
            "refund.pending",
            object["payment_intent"].as_str()?.to_string(),
        ),
        ("refund", "succeeded") => (
            "refund.succeeded",
            object["payment_intent"].as_str()?.to_string(),
        ),
        ("refund", "failed") => (
            "refund.failed",
            object["payment_intent"].as_str()?.to_string(),
        ),
        ("dispute", "needs_response") => (
            "dispute.created",
            object["payment_intent"].as_str()?.to_string(),
        ),
        ("dispute", "won") => (
            "dispute.won",
            object["payment_intent"].as_str()?.to_string(),
        ),
        ("dispute", "lost") => (
            "dispute.lost",
            object["payment_intent"].as_str()?.to_string(),
        ),
        _ => return None,
    };
    let amount = match kind {
        "payment_intent" => object["amount"].clone(),
        "checkout.session" => object["amount_total"].clone(),
        _ => object["amount"].clone(),
    };
    let mut data = json!({
        "order_id": event.order_id,
        "payment_id": payment_id,
        "amount": amount,
        "currency": object["currency"],
    });
    match kind {
        "refund" => data["refund_id"] = object["id"].clone(),
        "dispute" => data["dispute_id"] = object["id"].clone(),
        _ => {}
    }
    let timestamp = chrono::DateTime::from_timestamp(event.created, 0)?.to_rfc3339();
    Some(json!({"type": event_type, "timestamp": timestamp, "data": data}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_follow_the_seed_and_the_rates() {
        let faults = Faults {
            drop: 0.1,
            duplicate: 0.2,
            delay: 0.3,
            max_delay_ms: 100,
            resend: 0.05,
            legacy_version: 0.01,
            ..Faults::default()
        };
        let ids: Vec<String> = (0..5_000).map(|i| format!("evt_{i}")).collect();
        let a: Vec<Decision> = ids.iter().map(|id| decide(9, id, &faults)).collect();
        let b: Vec<Decision> = ids.iter().map(|id| decide(9, id, &faults)).collect();
        assert_eq!(a, b);
        let c: Vec<Decision> = ids.iter().map(|id| decide(10, id, &faults)).collect();
        assert_ne!(a, c);
        let share =
            |f: &dyn Fn(&Decision) -> bool| a.iter().filter(|d| f(d)).count() as f64 / 5_000.0;
        assert!((share(&|d| d.drop) - 0.1).abs() < 0.02);
        assert!((share(&|d| d.duplicate) - 0.2).abs() < 0.02);
        assert!((share(&|d| d.delay_ms > 0) - 0.3).abs() < 0.03);
        assert!((share(&|d| d.resend_after_ms.is_some()) - 0.05).abs() < 0.015);
        assert!((share(&|d| d.legacy_version) - 0.01).abs() < 0.006);
        let none = Faults::default();
        assert!(ids.iter().all(|id| decide(1, id, &none)
            == Decision {
                drop: false,
                delay_ms: 0,
                duplicate: false,
                resend_after_ms: None,
                legacy_version: false,
            }));
    }
}
