//! The load generator: realistic Stripe `payment_intent.succeeded` events, signed like
//! Stripe signs them, sent over loopback by N concurrent senders, each on its own
//! keep-alive HTTP/1.1 connection. It runs on its own runtime and threads (named
//! `oh-client`), so its CPU is measured apart from the server's, like a separate process.
//!
//! The HTTP client is a few lines over a TCP stream on purpose: on a 2-core machine every
//! microsecond the client spends is taken from the server and the database.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::sys::CLIENT_THREAD;
use oncehook::provider::signature::stripe::sign;

/// Makes event number `n` of a run, byte-identical every time it is asked for (a
/// redelivery carries the same body; only the signature's timestamp is new).
#[derive(Clone, Debug)]
pub struct EventFactory {
    /// Distinguishes this run's ids from any other run's.
    pub tag: String,
    /// `created` of every event (whole seconds, like Stripe).
    pub created: i64,
}

impl EventFactory {
    pub fn new() -> Self {
        let tag: String = uuid::Uuid::new_v4().simple().to_string()[..10].to_string();
        EventFactory {
            tag,
            created: chrono::Utc::now().timestamp(),
        }
    }

    pub fn event_id(&self, n: u64) -> String {
        format!("evt_3P{}{n:08}", self.tag)
    }

    /// A `payment_intent.succeeded` event as Stripe sends it (pretty-printed, about 2.6 KB,
    /// fields as in stripe/openapi's fixtures), for order `ord_<tag>_<n>`.
    pub fn body(&self, n: u64) -> String {
        let tag = &self.tag;
        let created = self.created;
        let amount = 1_000 + (n * 7_919) % 90_000;
        let pi = format!("pi_3P{tag}{n:08}");
        let order = format!("ord_{tag}_{n}");
        let id = self.event_id(n);
        format!(
            r#"{{
  "id": "{id}",
  "object": "event",
  "api_version": "2024-06-20",
  "created": {created},
  "data": {{
    "object": {{
      "id": "{pi}",
      "object": "payment_intent",
      "amount": {amount},
      "amount_capturable": 0,
      "amount_details": {{
        "tip": {{}}
      }},
      "amount_received": {amount},
      "application": null,
      "application_fee_amount": null,
      "automatic_payment_methods": {{
        "allow_redirects": "always",
        "enabled": true
      }},
      "canceled_at": null,
      "cancellation_reason": null,
      "capture_method": "automatic_async",
      "client_secret": "{pi}_secret_9kQ2xVb7LmR4tYp0WcNz3HdEf",
      "confirmation_method": "automatic",
      "created": {created},
      "currency": "eur",
      "customer": "cus_Q{tag}",
      "description": "Order {order}",
      "invoice": null,
      "last_payment_error": null,
      "latest_charge": "ch_3P{tag}{n:08}",
      "livemode": false,
      "metadata": {{
        "order_id": "{order}",
        "cart_id": "cart_{n}",
        "channel": "web"
      }},
      "next_action": null,
      "on_behalf_of": null,
      "payment_method": "pm_1P{tag}{n:08}",
      "payment_method_configuration_details": {{
        "id": "pmc_1OaXvRBeXb4iKf5lWzUa6hYx",
        "parent": null
      }},
      "payment_method_options": {{
        "card": {{
          "installments": null,
          "mandate_options": null,
          "network": null,
          "request_three_d_secure": "automatic"
        }},
        "link": {{
          "persistent_token": null
        }}
      }},
      "payment_method_types": [
        "card",
        "link"
      ],
      "processing": null,
      "receipt_email": "customer.{n}@example.com",
      "review": null,
      "setup_future_usage": null,
      "shipping": {{
        "address": {{
          "city": "Lisboa",
          "country": "PT",
          "line1": "Rua Augusta 100",
          "line2": null,
          "postal_code": "1100-053",
          "state": null
        }},
        "carrier": null,
        "name": "Customer {n}",
        "phone": null,
        "tracking_number": null
      }},
      "source": null,
      "statement_descriptor": null,
      "statement_descriptor_suffix": null,
      "status": "succeeded",
      "transfer_data": null,
      "transfer_group": null
    }}
  }},
  "livemode": false,
  "pending_webhooks": 1,
  "request": {{
    "id": "req_{tag}{n:08}",
    "idempotency_key": "{tag}-{n:08}-7f3c-4b1e-9a2d"
  }},
  "type": "payment_intent.succeeded"
}}"#
        )
    }
}

/// One keep-alive HTTP/1.1 connection to the receiver.
struct Connection {
    addr: SocketAddr,
    stream: Option<BufReader<TcpStream>>,
    request: Vec<u8>,
    line: String,
    body: Vec<u8>,
}

/// What the receiver said.
struct Answer {
    status: u16,
    duplicate: bool,
}

impl Connection {
    fn new(addr: SocketAddr) -> Self {
        Connection {
            addr,
            stream: None,
            request: Vec::with_capacity(4096),
            line: String::new(),
            body: Vec::new(),
        }
    }

    async fn post(&mut self, path: &str, signature: &str, body: &[u8]) -> anyhow::Result<Answer> {
        use std::io::Write;
        self.request.clear();
        write!(
            self.request,
            "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json; charset=utf-8\r\n\
             user-agent: Stripe/1.0 (+https://stripe.com/docs/webhooks)\r\n\
             stripe-signature: {signature}\r\ncontent-length: {}\r\n\r\n",
            self.addr,
            body.len()
        )?;
        self.request.extend_from_slice(body);
        let result = self.exchange().await;
        if result.is_err() {
            // The next request starts on a fresh connection.
            self.stream = None;
        }
        result
    }

    async fn exchange(&mut self) -> anyhow::Result<Answer> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(self.addr).await?;
            stream.set_nodelay(true)?;
            self.stream = Some(BufReader::with_capacity(8192, stream));
        }
        let stream = self.stream.as_mut().expect("connected above");
        stream.get_mut().write_all(&self.request).await?;
        self.line.clear();
        stream.read_line(&mut self.line).await?;
        let status: u16 = self
            .line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("bad status line {:?}", self.line))?;
        let mut length = 0usize;
        let mut close = false;
        loop {
            self.line.clear();
            if stream.read_line(&mut self.line).await? == 0 {
                anyhow::bail!("connection closed in the headers");
            }
            let line = self.line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.parse()?;
                } else if name.eq_ignore_ascii_case("transfer-encoding") {
                    anyhow::bail!("chunked answers are not expected from the receiver");
                } else if name.eq_ignore_ascii_case("connection") {
                    close = value.eq_ignore_ascii_case("close");
                }
            }
        }
        self.body.resize(length, 0);
        stream.read_exact(&mut self.body).await?;
        if close {
            self.stream = None;
        }
        let duplicate = self.body.windows(16).any(|w| w == b"\"duplicate\":true");
        Ok(Answer { status, duplicate })
    }
}

/// How the senders pick what to send and when.
#[derive(Clone, Copy, Debug)]
pub enum Pace {
    /// Each sender sends its next event as soon as the previous one is answered, until the
    /// deadline: the closed-loop throughput test.
    AsFastAsPossible { duration: Duration },
    /// Exactly `count` new events, as fast as possible (filling the inbox).
    Count { count: u64 },
    /// `per_sec` events a second in total, on a fixed schedule (open loop), for `duration`.
    Rate { per_sec: f64, duration: Duration },
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub addr: SocketAddr,
    pub provider: String,
    pub secret: String,
    pub factory: EventFactory,
    pub senders: usize,
    pub pace: Pace,
    /// Share of deliveries that repeat an already acknowledged event (0.0 = none).
    pub redelivery_share: f64,
    /// Event numbers already used (by an earlier plan on the same database): new events
    /// start here and redeliveries may pick any number below.
    pub first_new: u64,
}

/// What the senders saw.
#[derive(Debug)]
pub struct LoadReport {
    /// Deliveries answered 200.
    pub acked: u64,
    /// Of those, answered as duplicates.
    pub acked_duplicates: u64,
    /// Non-200 answers and transport errors.
    pub failed: u64,
    pub first_failure: Option<String>,
    /// Latency of acknowledged deliveries, microseconds.
    pub latency_us: Histogram<u64>,
    pub elapsed: Duration,
    /// The next unused event number.
    pub next_new: u64,
    /// CPU time the load generator's threads used, seconds.
    pub client_cpu_secs: f64,
}

impl LoadReport {
    pub fn per_sec(&self) -> f64 {
        self.acked as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn p_ms(&self, q: f64) -> f64 {
        self.latency_us.value_at_quantile(q) as f64 / 1000.0
    }
}

struct Shared {
    plan: Plan,
    next_new: AtomicU64,
    tickets: AtomicU64,
    /// Event numbers acknowledged so far (for redeliveries).
    acked: Mutex<Vec<u64>>,
    start: Instant,
    deadline: Option<Instant>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid histogram bounds")
}

struct SenderTally {
    acked: u64,
    acked_duplicates: u64,
    failed: u64,
    first_failure: Option<String>,
    latency_us: Histogram<u64>,
}

async fn sender(shared: Arc<Shared>, seed: u64) -> SenderTally {
    let plan = &shared.plan;
    let path = format!("/webhooks/{}", plan.provider);
    let mut connection = Connection::new(plan.addr);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tally = SenderTally {
        acked: 0,
        acked_duplicates: 0,
        failed: 0,
        first_failure: None,
        latency_us: histogram(),
    };
    loop {
        match plan.pace {
            Pace::AsFastAsPossible { .. } | Pace::Count { .. } => {
                if shared.deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
            }
            Pace::Rate { per_sec, .. } => {
                let ticket = shared.tickets.fetch_add(1, Ordering::Relaxed);
                let at = shared.start + Duration::from_secs_f64(ticket as f64 / per_sec);
                if shared.deadline.is_some_and(|d| at >= d) {
                    break;
                }
                tokio::time::sleep_until(at.into()).await;
            }
        }
        let redelivery = plan.redelivery_share > 0.0 && rng.gen_bool(plan.redelivery_share);
        let picked = if redelivery {
            let acked = shared.acked.lock().expect("not poisoned");
            (!acked.is_empty()).then(|| acked[rng.gen_range(0..acked.len())])
        } else {
            None
        };
        let (n, new) = match picked {
            Some(n) => (n, false),
            None => {
                let n = shared.next_new.fetch_add(1, Ordering::Relaxed);
                if let Pace::Count { count } = plan.pace {
                    if n >= plan.first_new + count {
                        break;
                    }
                }
                (n, true)
            }
        };
        let body = plan.factory.body(n);
        let signature = sign(
            &plan.secret,
            chrono::Utc::now().timestamp(),
            body.as_bytes(),
        );
        let sent = Instant::now();
        match connection.post(&path, &signature, body.as_bytes()).await {
            Ok(Answer {
                status: 200,
                duplicate,
            }) => {
                let us = sent.elapsed().as_micros() as u64;
                tally.latency_us.saturating_record(us.max(1));
                tally.acked += 1;
                tally.acked_duplicates += u64::from(duplicate);
                if new && plan.redelivery_share > 0.0 {
                    shared.acked.lock().expect("not poisoned").push(n);
                }
            }
            Ok(Answer { status, .. }) => {
                tally.failed += 1;
                tally
                    .first_failure
                    .get_or_insert_with(|| format!("HTTP {status}"));
            }
            Err(error) => {
                tally.failed += 1;
                tally
                    .first_failure
                    .get_or_insert_with(|| format!("{error:#}"));
                // Do not spin on a dead server.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    tally
}

async fn run_plan(plan: Plan, seeds: Vec<u64>) -> LoadReport {
    let start = Instant::now();
    let deadline = match plan.pace {
        Pace::AsFastAsPossible { duration } | Pace::Rate { duration, .. } => Some(start + duration),
        // Bounded even if the server stops answering.
        Pace::Count { count } => Some(start + Duration::from_secs(60 + count / 100)),
    };
    let first_new = plan.first_new;
    let acked = (0..first_new).collect();
    let shared = Arc::new(Shared {
        plan,
        next_new: AtomicU64::new(first_new),
        tickets: AtomicU64::new(0),
        acked: Mutex::new(acked),
        start,
        deadline,
    });
    let handles: Vec<_> = seeds
        .into_iter()
        .map(|seed| tokio::spawn(sender(shared.clone(), seed)))
        .collect();
    let mut report = LoadReport {
        acked: 0,
        acked_duplicates: 0,
        failed: 0,
        first_failure: None,
        latency_us: histogram(),
        elapsed: Duration::ZERO,
        next_new: 0,
        client_cpu_secs: 0.0,
    };
    for handle in handles {
        match handle.await {
            Ok(t) => {
                report.acked += t.acked;
                report.acked_duplicates += t.acked_duplicates;
                report.failed += t.failed;
                if report.first_failure.is_none() {
                    report.first_failure = t.first_failure;
                }
                report
                    .latency_us
                    .add(&t.latency_us)
                    .expect("same histogram bounds");
            }
            Err(error) => {
                report.failed += 1;
                report.first_failure = Some(format!("sender panicked: {error}"));
            }
        }
    }
    report.elapsed = start.elapsed();
    let next_new = shared.next_new.load(Ordering::Relaxed);
    report.next_new = match shared.plan.pace {
        Pace::Count { count } => next_new.min(first_new + count),
        _ => next_new,
    };
    report
}

/// Runs the plan on the load generator's own runtime (`threads` worker threads) and
/// returns what the senders saw.
pub async fn drive(plan: Plan, threads: usize) -> anyhow::Result<LoadReport> {
    let (done, report) = tokio::sync::oneshot::channel();
    let seeds: Vec<u64> = (0..plan.senders as u64).map(|i| 0x5eed + i).collect();
    std::thread::Builder::new()
        .name(CLIENT_THREAD.into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads.max(1))
                .thread_name(CLIENT_THREAD)
                .enable_all()
                .build();
            let result = runtime
                .map(|rt| {
                    let mut report = rt.block_on(run_plan(plan, seeds));
                    // Read while the runtime's threads are alive: an exited thread's CPU
                    // time no longer shows under its name.
                    report.client_cpu_secs = super::sys::client_cpu_secs();
                    report
                })
                .map_err(anyhow::Error::from);
            let _ = done.send(result);
        })
        .context("starting the load generator thread")?;
    report.await.context("the load generator stopped")?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_stable_json_that_the_stripe_mapping_understands() {
        let f = EventFactory::new();
        let body = f.body(7);
        assert_eq!(body, f.body(7), "a redelivery is byte-identical");
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(doc["id"], f.event_id(7));
        let mapped = oncehook::provider::mapping::stripe_default()
            .map(body.as_bytes())
            .unwrap();
        assert_eq!(
            mapped.order_id.as_deref(),
            Some(&*format!("ord_{}_7", f.tag))
        );
        assert!(body.len() > 2_000 && body.len() < 3_500, "{}", body.len());
    }
}
