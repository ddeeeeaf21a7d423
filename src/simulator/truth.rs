//! The truth of a run, from the simulator's own objects once it has finished: every
//! order's payments, refunds and disputes, its totals per kind and the status oncehook
//! should show; and which orders oncehook cannot know fully, because the event announcing
//! some object's final state was never delivered (dropped, retried in vain, or never
//! generated). Written as JSON with `--truth FILE`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::sender::SentCounts;
use super::store::SimDb;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Truth {
    pub seed: u64,
    pub scenario: String,
    /// Unix seconds of the simulated start (pass `--start` to replay a run exactly).
    pub start: i64,
    pub sent: SentCounts,
    pub events: EventCounts,
    pub api: ApiCounts,
    pub totals: Totals,
    /// Orders whose every final state was delivered, and the others.
    pub complete_orders: usize,
    pub incomplete_orders: usize,
    pub orders: Vec<OrderTruth>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventCounts {
    /// Events in the provider's log (`GET /v1/events`).
    pub generated: u64,
    /// Changes no event announces.
    pub never_generated: u64,
    pub by_type: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiCounts {
    pub requests: u64,
    pub answered_429: u64,
    pub answered_5xx: u64,
}

/// Money in minor units, summed over orders (currencies mixed: a check, not a balance).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub orders: usize,
    pub paid: i64,
    pub refunded: i64,
    pub disputed: i64,
    pub by_status: BTreeMap<String, usize>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderTruth {
    pub order_id: String,
    /// The status oncehook derives from these facts (`paid`, `partially_refunded`…).
    pub status: String,
    pub currency: String,
    pub paid: i64,
    pub refunded: i64,
    pub disputed: i64,
    /// Every final state reached oncehook in a delivered event.
    pub complete: bool,
    /// Objects whose final state no delivered event announced.
    pub lost: Vec<String>,
    pub payments: Vec<PaymentTruth>,
    pub refunds: Vec<ChildTruth>,
    pub disputes: Vec<ChildTruth>,
    /// One per object, in oncehook's words: (`payment`|`refund`|`dispute`, id, state).
    pub facts: Vec<Fact>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentTruth {
    pub id: String,
    pub method: String,
    pub amount: i64,
    pub amount_received: i64,
    /// Stripe's status: `succeeded`, `requires_payment_method` (declined or expired),
    /// `canceled`…
    pub status: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildTruth {
    pub id: String,
    pub payment_intent: String,
    pub amount: i64,
    pub status: String,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Fact {
    pub kind: String,
    pub resource_id: String,
    pub state: String,
}

/// oncehook's name for an object's Stripe status (its transition); `None`: not a fact yet.
pub fn fact_state(kind: &str, status: &str) -> Option<&'static str> {
    Some(match (kind, status) {
        ("payment", "succeeded") => "pay",
        ("payment", "requires_payment_method") => "fail",
        ("payment", "canceled") => "cancel",
        ("refund", "pending" | "requires_action") => "refund_pending",
        ("refund", "succeeded") => "refund",
        ("refund", "failed") => "refund_failed",
        ("refund", "canceled") => "refund_canceled",
        ("dispute", "won" | "warning_closed") => "dispute_won",
        ("dispute", "lost") => "dispute_lost",
        ("dispute", _) => "dispute",
        _ => return None,
    })
}

/// The status from the totals (money decides once money moved), else the newest payment's
/// outcome: the rule oncehook's projection follows.
pub fn status_of(paid: i64, refunded: i64, disputed: i64, newest_payment: Option<&str>) -> String {
    if disputed > 0 {
        "disputed"
    } else if refunded > 0 && refunded >= paid {
        "refunded"
    } else if refunded > 0 {
        "partially_refunded"
    } else if paid > 0 {
        "paid"
    } else {
        match newest_payment {
            Some("requires_payment_method") => "failed",
            Some("canceled") => "canceled",
            _ => "pending",
        }
    }
    .to_string()
}

fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_string()
}

/// Per-order truth from the simulator's objects and which states were delivered.
pub async fn orders(db: &SimDb) -> anyhow::Result<Vec<OrderTruth>> {
    let delivered: BTreeSet<(String, String)> = db.delivered_states().await?.into_iter().collect();
    let mut by_order: BTreeMap<String, OrderTruth> = BTreeMap::new();
    let mut order_of_pi: HashMap<String, String> = HashMap::new();
    let mut newest: HashMap<String, (i64, String)> = HashMap::new();
    for pi in db.objects_of_kind("payment_intent").await? {
        let order_id = pi["metadata"]["order_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        order_of_pi.insert(text(&pi, "id"), order_id.clone());
        let o = by_order
            .entry(order_id.clone())
            .or_insert_with(|| OrderTruth {
                order_id: order_id.clone(),
                status: String::new(),
                currency: text(&pi, "currency"),
                paid: 0,
                refunded: 0,
                disputed: 0,
                complete: true,
                lost: vec![],
                payments: vec![],
                refunds: vec![],
                disputes: vec![],
                facts: vec![],
            });
        let status = text(&pi, "status");
        if status == "succeeded" {
            o.paid += pi["amount_received"].as_i64().unwrap_or(0);
        }
        let created = pi["created"].as_i64().unwrap_or(0);
        if newest.get(&order_id).is_none_or(|(t, _)| created >= *t) {
            newest.insert(order_id.clone(), (created, status.clone()));
        }
        o.payments.push(PaymentTruth {
            id: text(&pi, "id"),
            method: pi["payment_method_types"][0]
                .as_str()
                .unwrap_or("card")
                .to_string(),
            amount: pi["amount"].as_i64().unwrap_or(0),
            amount_received: pi["amount_received"].as_i64().unwrap_or(0),
            status,
        });
    }
    for (kind, fact_kind) in [("refund", "refund"), ("dispute", "dispute")] {
        for child in db.objects_of_kind(kind).await? {
            let pi = text(&child, "payment_intent");
            let Some(o) = order_of_pi.get(&pi).and_then(|id| by_order.get_mut(id)) else {
                continue;
            };
            let status = text(&child, "status");
            let amount = child["amount"].as_i64().unwrap_or(0);
            let entry = ChildTruth {
                id: text(&child, "id"),
                payment_intent: pi,
                amount,
                status: status.clone(),
            };
            if fact_kind == "refund" {
                if status == "succeeded" {
                    o.refunded += amount;
                }
                o.refunds.push(entry);
            } else {
                if status != "won" && status != "warning_closed" {
                    o.disputed += amount;
                }
                o.disputes.push(entry);
            }
        }
    }
    for o in by_order.values_mut() {
        let mut facts = Vec::new();
        for p in &o.payments {
            facts.push(("payment", p.id.clone(), p.status.clone()));
        }
        for r in &o.refunds {
            facts.push(("refund", r.id.clone(), r.status.clone()));
        }
        for d in &o.disputes {
            facts.push(("dispute", d.id.clone(), d.status.clone()));
        }
        for (kind, id, status) in facts {
            let Some(state) = fact_state(kind, &status) else {
                continue;
            };
            if !delivered.contains(&(id.clone(), status.clone())) {
                o.lost.push(id.clone());
            }
            o.facts.push(Fact {
                kind: kind.into(),
                resource_id: id,
                state: state.into(),
            });
        }
        o.facts.sort();
        o.complete = o.lost.is_empty();
        o.status = status_of(
            o.paid,
            o.refunded,
            o.disputed,
            newest.get(&o.order_id).map(|(_, s)| s.as_str()),
        );
    }
    Ok(by_order.into_values().collect())
}

pub fn totals(orders: &[OrderTruth]) -> Totals {
    let mut t = Totals {
        orders: orders.len(),
        ..Totals::default()
    };
    for o in orders {
        t.paid += o.paid;
        t.refunded += o.refunded;
        t.disputed += o.disputed;
        *t.by_status.entry(o.status.clone()).or_default() += 1;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_follows_money_then_the_newest_outcome() {
        assert_eq!(status_of(100, 0, 100, None), "disputed");
        assert_eq!(status_of(100, 100, 0, None), "refunded");
        assert_eq!(status_of(200, 100, 0, None), "partially_refunded");
        assert_eq!(status_of(100, 0, 0, Some("succeeded")), "paid");
        assert_eq!(
            status_of(0, 0, 0, Some("requires_payment_method")),
            "failed"
        );
        assert_eq!(status_of(0, 0, 0, Some("canceled")), "canceled");
        assert_eq!(status_of(0, 0, 0, Some("processing")), "pending");
    }
}
