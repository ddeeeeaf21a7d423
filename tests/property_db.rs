//! The money model in the database, property-tested against the pure model
//! (`oncehook::domain::money`): random histories of one order (several payment attempts,
//! partial and full refunds some of which fail later, disputes won or lost, running refund
//! totals, each fact announced by one or two event types, many same-second ties, sequences
//! on some resources), delivered in order, shuffled with duplicates one by one, all at once
//! to four concurrent workers one event per transaction, all at once to a worker applying
//! eight events per transaction set-based (the default) and one applying them with a
//! savepoint each, and all at once to four concurrent workers applying set-based batches of
//! four (group commit, the default on both databases). Each time the database must hold exactly the model's facts: totals per kind,
//! status, one ledger entry per fact and reversal, one outbox message per entry, status
//! messages that form a chain ending in the model's status, nothing dead-lettered; and
//! `oncehook verify` finds no drift.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{Kind, TestDb};
use oncehook::config::{ProviderSettings, Settings};
use oncehook::domain::money::{ledger_totals, plan_entries};
use oncehook::domain::{project, Change, Entry, EntryKind, Facts, Stamp, Totals, Transition};
use oncehook::pipeline::processor::Processor;
use oncehook::provider::mapping::EventRule;
use oncehook::provider::signature::SchemeKind;
use oncehook::store::ingest::{store_receipts, Receipt};
use oncehook::store::Db;
use proptest::prelude::*;
use sqlx::Row;

/// Event types of the test provider: the Standard Webhooks defaults plus a second
/// announcement of a payment (`invoice.paid`), a refund whose status says what happened
/// (`refund.updated`) and a running total (`charge.refunded`), configured as a user would.
const EXTRA_EVENTS: &str = r#"
[events."invoice.paid"]
transition = "pay"
order_id = ["/data/order_id"]
external_ref = ["/data/payment_id"]
amount = ["/data/amount"]
currency = ["/data/currency"]
occurred_at = ["/timestamp"]
sequence = ["/data/sequence"]

[events."refund.updated"]
transition = { at = ["/data/status"], map = { pending = "refund_pending", succeeded = "refund", failed = "refund_failed" } }
order_id = ["/data/order_id"]
external_ref = ["/data/refund_id"]
parent_ref = ["/data/payment_id"]
amount = ["/data/amount"]
currency = ["/data/currency"]
occurred_at = ["/timestamp"]
sequence = ["/data/sequence"]

[events."charge.refunded"]
transition = "refund_total"
order_id = ["/data/order_id"]
external_ref = ["/data/payment_id"]
amount = ["/data/amount_refunded"]
currency = ["/data/currency"]
occurred_at = ["/timestamp"]
"#;

fn provider() -> ProviderSettings {
    #[derive(serde::Deserialize)]
    struct Extra {
        events: BTreeMap<String, EventRule>,
    }
    let extra: Extra = figment::Figment::from(
        <figment::providers::Toml as figment::providers::Format>::string(EXTRA_EVENTS),
    )
    .extract()
    .expect("the test's event rules load");
    ProviderSettings {
        name: "acme".into(),
        scheme: SchemeKind::StandardWebhooks,
        secrets: vec![common::SW_SECRET.into()],
        tolerance_secs: 300,
        mapping: None,
        events: extra.events,
        api: Default::default(),
        signature: None,
    }
}

/// One event of a history.
#[derive(Clone, Debug)]
struct Ev {
    event_type: &'static str,
    transition: Transition,
    resource: String,
    parent: Option<String>,
    at_s: i64,
    seq: Option<i64>,
    amount: i64,
}

impl Ev {
    fn change(&self) -> Change {
        Change {
            transition: self.transition,
            resource_id: self.resource.clone(),
            parent_ref: self.parent.clone(),
            stamp: Stamp {
                at_ms: (1_704_103_200 + self.at_s) * 1000,
                sequence: self.seq,
                rank: self.transition.rank(),
            },
            amount: Some(self.amount),
        }
    }

    fn body(&self, order: &str) -> Vec<u8> {
        let at = chrono::DateTime::from_timestamp(1_704_103_200 + self.at_s, 0)
            .unwrap()
            .to_rfc3339();
        let mut data =
            serde_json::json!({"order_id": order, "amount": self.amount, "currency": "eur"});
        match self.transition {
            Transition::Dispute | Transition::DisputeWon | Transition::DisputeLost => {
                data["dispute_id"] = self.resource.clone().into();
                data["payment_id"] = self.parent.clone().into();
            }
            Transition::RefundPending | Transition::Refund | Transition::RefundFailed => {
                data["refund_id"] = self.resource.clone().into();
                data["payment_id"] = self.parent.clone().into();
                data["status"] = match self.transition {
                    Transition::RefundPending => "pending",
                    Transition::Refund => "succeeded",
                    _ => "failed",
                }
                .into();
            }
            Transition::RefundTotal => {
                data["payment_id"] = self.resource.clone().into();
                data["amount_refunded"] = self.amount.into();
            }
            _ => data["payment_id"] = self.resource.clone().into(),
        }
        if let Some(seq) = self.seq {
            data["sequence"] = seq.into();
        }
        serde_json::json!({"type": self.event_type, "timestamp": at, "data": data})
            .to_string()
            .into_bytes()
    }
}

/// A resource's lifecycle: its events in lifecycle order with increasing sequences when the
/// provider sends them, and timestamps that mostly follow, often tie, and sometimes go back
/// a second (clocks of different provider systems): the final state must still be the one
/// furthest along.
fn lifecycle(
    states: &[(Transition, &'static str)],
    resource: &str,
    parent: Option<&str>,
    start: i64,
    gaps: &[i64],
    with_seq: bool,
    amount: i64,
) -> Vec<Ev> {
    let mut at = start;
    states
        .iter()
        .enumerate()
        .map(|(i, (t, event_type))| {
            if i > 0 {
                at += gaps[i % gaps.len()];
            }
            Ev {
                event_type,
                transition: *t,
                resource: resource.into(),
                parent: parent.map(str::to_owned),
                at_s: at,
                seq: with_seq.then_some(i as i64 + 1),
                amount,
            }
        })
        .collect()
}

fn arb_history() -> impl Strategy<Value = Vec<Ev>> {
    use Transition::*;
    let payment = (
        0usize..6,
        any::<bool>(),
        0i64..3,
        proptest::collection::vec(-1i64..2, 3),
        any::<bool>(),
    );
    let refund = (
        0usize..4,
        0usize..3,
        1i64..5,
        0i64..4,
        proptest::collection::vec(-1i64..2, 3),
        any::<bool>(),
    );
    let dispute = (0usize..3, 0usize..3, 0i64..4);
    let total = (0usize..3, prop_oneof![Just(0i64), Just(50i64)], 0i64..5);
    (
        proptest::collection::vec(payment, 1..4),
        proptest::collection::vec(refund, 0..4),
        proptest::option::of(dispute),
        proptest::option::of(total),
    )
        .prop_map(|(payments, refunds, dispute, total)| {
            let mut out = Vec::new();
            let mut paid: Vec<String> = Vec::new();
            for (i, (fate, twice, start, gaps, seq)) in payments.into_iter().enumerate() {
                let pi = format!("pi_{i}");
                let pay = if twice {
                    (Pay, "invoice.paid")
                } else {
                    (Pay, "payment.succeeded")
                };
                let states: Vec<(Transition, &'static str)> = match fate {
                    0 => vec![
                        (Authorize, "payment.authorized"),
                        (Pay, "payment.succeeded"),
                    ],
                    1 => vec![(Pay, "payment.succeeded"), (Settle, "payment.settled")],
                    2 => vec![(Fail, "payment.failed"), pay],
                    3 => vec![
                        (Authorize, "payment.authorized"),
                        (Cancel, "payment.canceled"),
                    ],
                    4 => vec![(Fail, "payment.failed")],
                    _ => vec![pay],
                };
                if states.iter().any(|(t, _)| *t == Pay) {
                    paid.push(pi.clone());
                }
                let mut evs = lifecycle(&states, &pi, None, start, &gaps, seq, 1000);
                if twice {
                    // The same payment announced by the other event type as well.
                    if let Some(p) = evs.iter().find(|e| e.transition == Pay).cloned() {
                        evs.push(Ev {
                            event_type: "payment.succeeded",
                            ..p
                        });
                    }
                }
                out.extend(evs);
            }
            if paid.is_empty() {
                return out;
            }
            let mut refunds_by_group: BTreeMap<String, i64> = BTreeMap::new();
            for (j, (fate, of, amount, start, gaps, seq)) in refunds.into_iter().enumerate() {
                let parent = paid[of % paid.len()].clone();
                let states: Vec<(Transition, &'static str)> = match fate {
                    0 => vec![(Refund, "refund.succeeded")],
                    1 => vec![
                        (RefundPending, "refund.pending"),
                        (Refund, "refund.updated"),
                    ],
                    2 => vec![
                        (Refund, "refund.succeeded"),
                        (RefundFailed, "refund.failed"),
                    ],
                    _ => vec![
                        (RefundPending, "refund.updated"),
                        (RefundFailed, "refund.updated"),
                    ],
                };
                if states.iter().any(|(t, _)| *t == Refund) {
                    *refunds_by_group.entry(parent.clone()).or_default() += amount * 100;
                }
                out.extend(lifecycle(
                    &states,
                    &format!("re_{j}"),
                    Some(&parent),
                    2 + start,
                    &gaps,
                    seq,
                    amount * 100,
                ));
            }
            if let Some((fate, of, start)) = dispute {
                let parent = paid[of % paid.len()].clone();
                let states: Vec<(Transition, &'static str)> = match fate {
                    0 => vec![(Dispute, "dispute.created")],
                    1 => vec![(Dispute, "dispute.created"), (DisputeWon, "dispute.won")],
                    _ => vec![(Dispute, "dispute.created"), (DisputeLost, "dispute.lost")],
                };
                out.extend(lifecycle(
                    &states,
                    "dp_0",
                    Some(&parent),
                    3 + start,
                    &[1],
                    false,
                    400,
                ));
            }
            if let Some((of, extra, at)) = total {
                // The charge's running total: every refund that succeeded on it, plus, in
                // some histories, one we never hear about otherwise.
                let group = paid[of % paid.len()].clone();
                let sum = refunds_by_group.get(&group).copied().unwrap_or(0) + extra;
                if sum > 0 {
                    out.push(Ev {
                        event_type: "charge.refunded",
                        transition: RefundTotal,
                        resource: group,
                        parent: None,
                        at_s: 4 + at,
                        seq: None,
                        amount: sum,
                    });
                }
            }
            out
        })
}

/// What the database must hold for a history.
#[derive(Debug)]
struct Expected {
    status: String,
    totals: Totals,
    /// Ledger entries other than running-total remainders (those depend on arrival order).
    entries: Vec<(String, String)>,
}

fn model(history: &[Ev]) -> Expected {
    let mut facts = Facts::default();
    let mut ledger: Vec<Entry> = Vec::new();
    for e in history {
        facts.apply(&e.change());
        let new = plan_entries(&facts.facts, &ledger);
        ledger.extend(new);
    }
    let p = project(&facts.facts);
    assert_eq!(
        ledger_totals(&ledger),
        p.totals,
        "the model's ledger agrees with its projection"
    );
    let mut entries: Vec<(String, String)> = ledger
        .iter()
        .filter(|e| e.kind != EntryKind::RefundObserved)
        .map(|e| (e.kind.as_str().to_string(), e.resource_id.clone()))
        .collect();
    entries.sort();
    Expected {
        status: p.status.as_str().to_string(),
        totals: p.totals,
        entries,
    }
}

struct Harness {
    db: Db,
    processor: Arc<Processor>,
    /// Eight events per transaction, set-based (the default).
    grouped: Processor,
    /// Eight events per transaction, one savepoint each.
    savepoints: Processor,
    /// Batches of four, set-based, run by four concurrent workers.
    batches: Arc<Processor>,
}

impl Harness {
    async fn new(test_db: &TestDb) -> Harness {
        let db = test_db.connect().await;
        let mut settings = Settings {
            providers: vec![provider()],
            ..Settings::default()
        };
        settings.processor.claim_batch = 1;
        let processor = Arc::new(common::processor(&db, &settings));
        settings.processor.claim_batch = 8;
        settings.processor.events_per_transaction = Some(8);
        assert!(settings.processor.set_based, "set-based is the default");
        let grouped = common::processor(&db, &settings);
        settings.processor.set_based = false;
        let savepoints = common::processor(&db, &settings);
        settings.processor.set_based = true;
        settings.processor.claim_batch = 4;
        settings.processor.events_per_transaction = None;
        let batches = Arc::new(common::processor(&db, &settings));
        Harness {
            db,
            processor,
            grouped,
            savepoints,
            batches,
        }
    }

    fn receipt(event_id: &str, order: &str, e: &Ev) -> Receipt {
        Receipt {
            provider: "acme".into(),
            event_id: event_id.into(),
            event_type: Some(e.event_type.into()),
            api_version: None,
            raw_body: e.body(order),
            correlation_id: "prop".into(),
            received_at: 0,
            fetched_body: None,
            derived: false,
        }
    }

    async fn deliver_one_by_one(&self, order: &str, events: &[(String, Ev)]) {
        for (id, e) in events {
            store_receipts(&self.db, &[Self::receipt(id, order, e)])
                .await
                .unwrap();
            self.processor.run_until_idle().await.unwrap();
        }
    }

    async fn store_all(&self, order: &str, events: &[(String, Ev)]) {
        let receipts: Vec<Receipt> = events
            .iter()
            .map(|(id, e)| Self::receipt(id, order, e))
            .collect();
        store_receipts(&self.db, &receipts).await.unwrap();
    }

    async fn deliver_all_at_once(&self, order: &str, events: &[(String, Ev)]) {
        self.store_all(order, events).await;
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let p = self.processor.clone();
                tokio::spawn(async move { p.run_until_idle().await.unwrap() })
            })
            .collect();
        for w in workers {
            w.await.unwrap();
        }
    }

    async fn deliver_all_at_once_grouped(&self, order: &str, events: &[(String, Ev)]) {
        self.store_all(order, events).await;
        self.grouped.run_until_idle().await.unwrap();
    }

    async fn deliver_all_at_once_with_savepoints(&self, order: &str, events: &[(String, Ev)]) {
        self.store_all(order, events).await;
        self.savepoints.run_until_idle().await.unwrap();
    }

    async fn deliver_all_at_once_to_concurrent_batches(
        &self,
        order: &str,
        events: &[(String, Ev)],
    ) {
        self.store_all(order, events).await;
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let p = self.batches.clone();
                tokio::spawn(async move { p.run_until_idle().await.unwrap() })
            })
            .collect();
        for w in workers {
            w.await.unwrap();
        }
    }

    /// The set-based processors applied every batch as one, none deadlocked.
    fn every_batch_was_set_based(&self) -> Result<(), String> {
        let counts = [
            self.grouped.batch_fallbacks(),
            self.grouped.batch_conflicts(),
            self.batches.batch_fallbacks(),
            self.batches.batch_conflicts(),
        ];
        if counts != [0; 4] {
            return Err(format!(
                "fallbacks / conflicts (grouped, concurrent batches): {counts:?}"
            ));
        }
        Ok(())
    }

    /// Checks the order's state against the model; `Err` names the first difference.
    async fn check(&self, order: &str, expected: &Expected) -> Result<(), String> {
        let pool = self.db.reader();
        let row = sqlx::query(
            "SELECT status, amount_paid, amount_refunded, amount_disputed FROM orders WHERE order_id = $1",
        )
        .bind(order)
        .fetch_one(pool)
        .await
        .unwrap();
        let status: String = row.get(0);
        let totals = Totals {
            paid: row.get(1),
            refunded: row.get(2),
            disputed: row.get(3),
        };
        if status != expected.status || totals != expected.totals {
            return Err(format!(
                "{order}: status {status} totals {totals:?}, model {} {:?}",
                expected.status, expected.totals
            ));
        }
        let ledger = sqlx::query(
            "SELECT entry, external_ref, counted, effect_key FROM order_ledger WHERE order_id = $1 ORDER BY id",
        )
        .bind(order)
        .fetch_all(pool)
        .await
        .unwrap();
        let mut counted = Totals::default();
        let mut entries = Vec::new();
        for r in &ledger {
            let entry: String = r.get(0);
            let c: i64 = r.get(2);
            match EntryKind::parse(&entry).unwrap().total() {
                oncehook::domain::ResourceKind::Payment => counted.paid += c,
                oncehook::domain::ResourceKind::Dispute => counted.disputed += c,
                _ => counted.refunded += c,
            }
            if entry != "refund_observed" {
                entries.push((entry, r.get::<String, _>(1)));
            }
            // One message per entry, keyed on it.
            let messages: i64 = sqlx::query("SELECT COUNT(*) FROM outbox WHERE effect_key = $1")
                .bind(r.get::<String, _>(3))
                .fetch_one(pool)
                .await
                .unwrap()
                .get(0);
            if messages != 1 {
                return Err(format!(
                    "{order}: ledger entry {:?} has {messages} outbox messages",
                    r.get::<String, _>(0)
                ));
            }
        }
        entries.sort();
        if counted != expected.totals {
            return Err(format!(
                "{order}: ledger counts {counted:?}, model {:?}",
                expected.totals
            ));
        }
        if entries != expected.entries {
            return Err(format!(
                "{order}: ledger {entries:?}, model {:?}",
                expected.entries
            ));
        }
        // Status messages: each a change from the one before, ending in the final status.
        let messages = sqlx::query(
            "SELECT payload FROM outbox WHERE order_id = $1 AND topic LIKE 'order.%' ORDER BY id",
        )
        .bind(order)
        .fetch_all(pool)
        .await
        .unwrap();
        let mut current = "pending".to_string();
        for m in &messages {
            let p: serde_json::Value = serde_json::from_str(&m.get::<String, _>(0)).unwrap();
            let (from, to) = (
                p["previous_status"].as_str().unwrap(),
                p["status"].as_str().unwrap(),
            );
            if from != current || from == to {
                return Err(format!(
                    "{order}: status message {from} -> {to} after {current}"
                ));
            }
            current = to.to_string();
        }
        if current != expected.status {
            return Err(format!(
                "{order}: status messages end at {current}, model {}",
                expected.status
            ));
        }
        let unfinished: i64 = sqlx::query(
            "SELECT COUNT(*) FROM inbox_events WHERE order_id = $1 AND status NOT IN ('applied', 'duplicate', 'stale', 'refused') \
             OR (order_id IS NULL AND status <> 'ignored')",
        )
        .bind(order)
        .fetch_one(pool)
        .await
        .unwrap()
        .get(0);
        let dead: i64 = sqlx::query("SELECT COUNT(*) FROM dead_letters")
            .fetch_one(pool)
            .await
            .unwrap()
            .get(0);
        if unfinished != 0 || dead != 0 {
            let rows: Vec<String> = sqlx::query(
                "SELECT event_id, order_id, status, attempts, next_attempt_at, reason FROM inbox_events \
                 WHERE order_id = $1 AND status NOT IN ('applied', 'duplicate', 'stale', 'refused') \
                 OR (order_id IS NULL AND status <> 'ignored')",
            )
            .bind(order)
            .fetch_all(pool)
            .await
            .unwrap()
            .iter()
            .map(|r| {
                format!(
                    "{} order {:?} {} attempts {} next {:?} reason {:?}",
                    r.get::<String, _>(0),
                    r.get::<Option<String>, _>(1),
                    r.get::<String, _>(2),
                    r.get::<i64, _>(3),
                    r.get::<i64, _>(4),
                    r.get::<Option<String>, _>(5)
                )
            })
            .collect();
            return Err(format!(
                "{order}: {unfinished} events unfinished, {dead} dead letters: {rows:?}"
            ));
        }
        Ok(())
    }
}

impl Harness {
    /// `oncehook verify` over every order so far: the processor's projection, rebuilt from
    /// the facts, is what it stored, and every ledger entry has its message.
    async fn verify_finds_nothing(&self) -> Result<(), String> {
        let scope = Settings::default().verify_scope();
        let options = oncehook::verify::Options::new(&scope, oncehook::store::now_ms());
        let report = oncehook::verify::run(&self.db, &options).await.unwrap();
        if report.orders_checked == 0 || !report.is_clean() {
            return Err(format!(
                "verify: {}",
                oncehook::verify::render_text(&report)
            ));
        }
        Ok(())
    }
}

fn stamp_order(e: &Ev) -> (i64, i64) {
    (e.at_s, e.seq.unwrap_or(0))
}

fn permutations(kind: Kind) {
    if kind == Kind::Postgres && common::postgres_base_url().is_none() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let test_db = rt.block_on(TestDb::new(kind));
    let harness = rt.block_on(Harness::new(&test_db));
    let case = std::sync::atomic::AtomicUsize::new(0);
    let config = ProptestConfig {
        cases: 24,
        ..ProptestConfig::default()
    };
    proptest!(config, |(history in arb_history(), copies in proptest::collection::vec(1usize..4, 8), seed in any::<u64>())| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let expected = model(&history);
        let mut in_order = history.clone();
        in_order.sort_by_key(stamp_order);
        let reference: Vec<(String, Ev)> = in_order.iter().enumerate().map(|(i, e)| (format!("c{n}-ref-{i}"), e.clone())).collect();

        // Redeliveries (same event id) and second deliveries under a new id.
        let mut arrival: Vec<(String, Ev)> = Vec::new();
        for (i, e) in history.iter().enumerate() {
            for copy in 0..copies[i % copies.len()] {
                let id = if copy == 2 { format!("c{n}-e{i}-again") } else { format!("c{n}-e{i}") };
                arrival.push((id, e.clone()));
            }
        }
        let mut rng = seed;
        for i in (1..arrival.len()).rev() {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            arrival.swap(i, (rng >> 33) as usize % (i + 1));
        }
        let with_prefix = |p: &str| arrival.iter().map(|(id, e)| (format!("{p}-{id}"), e.clone())).collect::<Vec<_>>();

        let results = rt.block_on(async {
            let orders = [
                format!("ordered-{n}"),
                format!("shuffled-{n}"),
                format!("concurrent-{n}"),
                format!("grouped-{n}"),
                format!("savepoints-{n}"),
                format!("batches-{n}"),
            ];
            harness.deliver_one_by_one(&orders[0], &reference).await;
            harness.deliver_one_by_one(&orders[1], &with_prefix("s")).await;
            harness.deliver_all_at_once(&orders[2], &with_prefix("c")).await;
            harness.deliver_all_at_once_grouped(&orders[3], &with_prefix("g")).await;
            harness.deliver_all_at_once_with_savepoints(&orders[4], &with_prefix("p")).await;
            harness.deliver_all_at_once_to_concurrent_batches(&orders[5], &with_prefix("b")).await;
            let mut out = Vec::new();
            for o in &orders {
                out.push(harness.check(o, &expected).await);
            }
            out.push(harness.verify_finds_nothing().await);
            out.push(harness.every_batch_was_set_based());
            out
        });
        for r in results {
            prop_assert!(r.is_ok(), "{}\nhistory: {:#?}", r.unwrap_err(), history);
        }
    });
    drop(harness);
    drop(test_db);
}

#[test]
fn sqlite_any_arrival_order_counts_every_fact_once_and_derives_the_same_status() {
    permutations(Kind::Sqlite);
}

#[test]
fn postgres_any_arrival_order_counts_every_fact_once_and_derives_the_same_status() {
    permutations(Kind::Postgres);
}
