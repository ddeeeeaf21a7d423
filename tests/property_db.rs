//! The guard in SQL, property-tested: any permutation and duplication of a consistent set
//! of events leaves the order in the same state as delivering them in order, whether the
//! events arrive one by one, all at once to several concurrent workers, or all at once to
//! a worker that commits eight events per transaction.

mod common;

use std::sync::Arc;

use common::{Kind, TestDb};
use oncehook::config::Settings;
use oncehook::domain::Transition;
use oncehook::processor::Processor;
use oncehook::store::ingest::{store_receipts, Receipt};
use oncehook::store::Db;
use proptest::prelude::*;
use sqlx::Row;

#[derive(Clone, Debug)]
struct Ev {
    transition: Transition,
    at_s: i64,
    seq: Option<i64>,
    /// Unique per event: each is its own business change.
    reference: String,
}

fn event_type(t: Transition) -> &'static str {
    match t {
        Transition::Authorize => "payment.authorized",
        Transition::Pay => "payment.succeeded",
        Transition::Settle => "payment.settled",
        Transition::Fail => "payment.failed",
        Transition::Cancel => "payment.canceled",
        Transition::Refund => "refund.succeeded",
        Transition::Dispute => "dispute.created",
    }
}

fn body(order: &str, e: &Ev) -> Vec<u8> {
    // Refunds small enough that no history refunds more than it paid (that is a business
    // failure, not an ordering question).
    let amount = if e.transition == Transition::Refund {
        1
    } else {
        100
    };
    let at = chrono::DateTime::from_timestamp(1_704_103_200 + e.at_s, 0)
        .unwrap()
        .to_rfc3339();
    let mut data = serde_json::json!({"order_id": order, "payment_id": e.reference, "amount": amount, "currency": "eur"});
    data["refund_id"] = e.reference.clone().into();
    data["dispute_id"] = e.reference.clone().into();
    if let Some(seq) = e.seq {
        data["sequence"] = seq.into();
    }
    serde_json::json!({"type": event_type(e.transition), "timestamp": at, "data": data})
        .to_string()
        .into_bytes()
}

/// Pre-payment events stamped before money events, distinct stamps: a history the state
/// machine accepts in full when delivered in order.
fn arb_history() -> impl Strategy<Value = Vec<Ev>> {
    // No Cancel: money after a cancellation is refused (a business failure), so such a
    // history is not a consistent one.
    let pre = proptest::sample::select(vec![Transition::Authorize, Transition::Fail]);
    let money = proptest::sample::select(vec![
        Transition::Pay,
        Transition::Settle,
        Transition::Refund,
        Transition::Dispute,
    ]);
    (
        proptest::collection::vec((pre, 0i64..3, 0i64..3), 0..3),
        proptest::collection::vec((money, 3i64..6, 0i64..3), 1..5),
        any::<bool>(),
    )
        .prop_map(|(pre, money, with_seq)| {
            let mut out: Vec<Ev> = Vec::new();
            for (i, (t, at_s, seq)) in pre.into_iter().chain(money).enumerate() {
                let seq = with_seq.then_some(seq);
                let clash = out
                    .iter()
                    .any(|o| o.at_s == at_s && o.seq == seq && o.transition.rank() == t.rank());
                if !clash {
                    out.push(Ev {
                        transition: t,
                        at_s,
                        seq,
                        reference: format!("ref_{i}"),
                    });
                }
            }
            out
        })
}

fn stamp_key(e: &Ev) -> (i64, i64, i64) {
    (e.at_s, e.seq.unwrap_or(0), e.transition.rank())
}

struct Harness {
    db: Db,
    processor: Arc<Processor>,
    /// Eight events per transaction, one savepoint each (group commit).
    grouped: Processor,
}

impl Harness {
    async fn new(test_db: &TestDb) -> Harness {
        let db = test_db.connect().await;
        let mut settings = Settings {
            providers: common::providers(),
            ..Settings::default()
        };
        settings.processor.claim_batch = 1;
        let processor = Arc::new(common::processor(&db, &settings));
        settings.processor.claim_batch = 8;
        settings.processor.events_per_transaction = Some(8);
        let grouped = common::processor(&db, &settings);
        Harness {
            db,
            processor,
            grouped,
        }
    }

    fn receipt(event_id: String, order: &str, e: &Ev) -> Receipt {
        Receipt {
            provider: "acme".into(),
            event_id,
            event_type: Some(event_type(e.transition).into()),
            api_version: None,
            raw_body: body(order, e),
            correlation_id: "prop".into(),
            received_at: 0,
        }
    }

    async fn deliver_one_by_one(&self, order: &str, events: &[(String, Ev)]) {
        for (id, e) in events {
            store_receipts(&self.db, &[Self::receipt(id.clone(), order, e)])
                .await
                .unwrap();
            self.processor.run_until_idle().await.unwrap();
        }
    }

    async fn store_all(&self, order: &str, events: &[(String, Ev)]) {
        let receipts: Vec<Receipt> = events
            .iter()
            .map(|(id, e)| Self::receipt(id.clone(), order, e))
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

    async fn state(&self, order: &str) -> (String, Option<i64>, Option<i64>, Option<i64>, i64) {
        let row = sqlx::query("SELECT status, last_event_at, last_sequence, last_rank FROM orders WHERE order_id = $1")
            .bind(order)
            .fetch_one(self.db.reader())
            .await
            .unwrap();
        let effects: i64 =
            sqlx::query("SELECT COUNT(*) FROM processed_effects WHERE order_id = $1")
                .bind(order)
                .fetch_one(self.db.reader())
                .await
                .unwrap()
                .get(0);
        (row.get(0), row.get(1), row.get(2), row.get(3), effects)
    }
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
        let mut in_order: Vec<Ev> = history.clone();
        in_order.sort_by_key(stamp_key);
        let reference: Vec<(String, Ev)> = in_order.iter().enumerate().map(|(i, e)| (format!("c{n}-ref-{i}"), e.clone())).collect();

        // Redeliveries (same event id) and second announcements (new id, same change).
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

        let (expected, sequential, concurrent, grouped) = rt.block_on(async {
            let (a, b, c, d) = (format!("ordered-{n}"), format!("shuffled-{n}"), format!("concurrent-{n}"), format!("grouped-{n}"));
            harness.deliver_one_by_one(&a, &reference).await;
            harness.deliver_one_by_one(&b, &with_prefix("s")).await;
            harness.deliver_all_at_once(&c, &with_prefix("c")).await;
            harness.deliver_all_at_once_grouped(&d, &with_prefix("g")).await;
            (harness.state(&a).await, harness.state(&b).await, harness.state(&c).await, harness.state(&d).await)
        });
        let newest = in_order.last().unwrap();
        prop_assert_eq!(&expected.0, newest.transition.target().as_str());
        prop_assert_eq!(expected.4, history.len() as i64, "one effect per business change");
        prop_assert_eq!(&sequential, &expected);
        prop_assert_eq!(&concurrent, &expected);
        prop_assert_eq!(&grouped, &expected);
    });
    drop(harness);
    drop(test_db);
}

#[test]
fn sqlite_any_permutation_and_duplication_gives_the_same_state() {
    permutations(Kind::Sqlite);
}

#[test]
fn postgres_any_permutation_and_duplication_gives_the_same_state() {
    permutations(Kind::Postgres);
}
