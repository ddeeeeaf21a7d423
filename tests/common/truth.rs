//! oncehook's state of each order in the shape of the simulator's truth, so a run can be
//! compared with what the provider did, order by order.

use std::collections::BTreeMap;

use oncehook::simulator::truth::{Fact, OrderTruth};
use oncehook::store::Db;
use sqlx::Row;

/// One order as oncehook holds it: status, totals and facts (sorted).
#[derive(Debug, PartialEq, Eq)]
pub struct HeldOrder {
    pub status: String,
    pub paid: i64,
    pub refunded: i64,
    pub disputed: i64,
    pub facts: Vec<Fact>,
}

impl HeldOrder {
    /// What oncehook must hold for an order of the truth.
    pub fn expected(o: &OrderTruth) -> HeldOrder {
        HeldOrder {
            status: o.status.clone(),
            paid: o.paid,
            refunded: o.refunded,
            disputed: o.disputed,
            facts: o.facts.clone(),
        }
    }
}

/// Every order oncehook holds, by order id.
pub async fn held_orders(db: &Db) -> BTreeMap<String, HeldOrder> {
    let pool = db.reader();
    let mut held: BTreeMap<String, HeldOrder> = BTreeMap::new();
    for r in sqlx::query(
        "SELECT order_id, status, amount_paid, amount_refunded, amount_disputed FROM orders",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    {
        held.insert(
            r.get(0),
            HeldOrder {
                status: r.get(1),
                paid: r.get(2),
                refunded: r.get(3),
                disputed: r.get(4),
                facts: vec![],
            },
        );
    }
    for r in sqlx::query(
        "SELECT order_id, kind, resource_id, state FROM order_facts
         WHERE kind IN ('payment', 'refund', 'dispute') ORDER BY order_id, kind, resource_id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    {
        if let Some(o) = held.get_mut(&r.get::<String, _>(0)) {
            o.facts.push(Fact {
                kind: r.get(1),
                resource_id: r.get(2),
                state: r.get(3),
            });
        }
    }
    for o in held.values_mut() {
        o.facts.sort();
    }
    held
}
