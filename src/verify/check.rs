//! One order, compared without I/O: the stored projection (the `orders` row and its ledger)
//! against what its facts give through the processor's own functions (`domain::money`:
//! `project`, `plan_entries`, `ledger_totals`). A difference is drift: the cache no longer
//! says what the facts say.

use serde::Serialize;

use crate::domain::money::{ledger_totals, plan_entries};
use crate::domain::{project, Entry, Fact, Totals};
pub use crate::store::verify::Stored;

/// What the facts give.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Derived {
    pub status: String,
    pub paid: i64,
    pub refunded: i64,
    pub disputed: i64,
    pub attention: Vec<String>,
}

/// The ledger as stored: what its entries count, and the entries the facts call for that it
/// does not hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LedgerState {
    pub paid: i64,
    pub refunded: i64,
    pub disputed: i64,
    pub missing_entries: Vec<MissingEntry>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MissingEntry {
    pub entry: &'static str,
    pub resource_id: String,
    pub counted: i64,
}

/// One drifting order: what is stored, what the facts give, and which parts differ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OrderDrift {
    pub order_id: String,
    /// Any of `status`, `totals`, `attention`, `ledger`, in that order.
    pub differs: Vec<&'static str>,
    pub stored: Stored,
    pub facts: Derived,
    pub ledger: LedgerState,
}

/// Compares one order; `None` when its stored projection and ledger agree with its facts.
pub fn check_order(
    order_id: &str,
    stored: &Stored,
    facts: &[Fact],
    ledger: &[Entry],
) -> Option<OrderDrift> {
    let projection = project(facts);
    let t = projection.totals;
    let counted = ledger_totals(ledger);
    let missing: Vec<MissingEntry> = plan_entries(facts, ledger)
        .into_iter()
        .map(|e| MissingEntry {
            entry: e.kind.as_str(),
            resource_id: e.resource_id,
            counted: e.counted,
        })
        .collect();
    let stored_totals = Totals {
        paid: stored.paid,
        refunded: stored.refunded,
        disputed: stored.disputed,
    };
    let mut differs = Vec::new();
    if stored.status != projection.status.as_str() {
        differs.push("status");
    }
    if stored_totals != t {
        differs.push("totals");
    }
    if stored.attention != projection.attention {
        differs.push("attention");
    }
    if counted != t || !missing.is_empty() {
        differs.push("ledger");
    }
    if differs.is_empty() {
        return None;
    }
    Some(OrderDrift {
        order_id: order_id.to_string(),
        differs,
        stored: stored.clone(),
        facts: Derived {
            status: projection.status.as_str().to_string(),
            paid: t.paid,
            refunded: t.refunded,
            disputed: t.disputed,
            attention: projection.attention,
        },
        ledger: LedgerState {
            paid: counted.paid,
            refunded: counted.refunded,
            disputed: counted.disputed,
            missing_entries: missing,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::money::plan_entries;
    use crate::domain::{Change, Facts, Stamp, Transition};

    fn change(t: Transition, id: &str, parent: Option<&str>, at_s: i64, amount: i64) -> Change {
        Change {
            transition: t,
            resource_id: id.into(),
            parent_ref: parent.map(str::to_owned),
            stamp: Stamp {
                at_ms: at_s * 1000,
                sequence: None,
                rank: t.rank(),
            },
            amount: Some(amount),
        }
    }

    /// Facts and ledger as the processor leaves them, and the `orders` row it writes.
    fn processed(changes: &[Change]) -> (Vec<Fact>, Vec<Entry>, Stored) {
        let mut facts = Facts::default();
        let mut ledger = Vec::new();
        for c in changes {
            facts.apply(c);
            let new = plan_entries(&facts.facts, &ledger);
            ledger.extend(new);
        }
        let p = project(&facts.facts);
        let stored = Stored {
            status: p.status.as_str().into(),
            paid: p.totals.paid,
            refunded: p.totals.refunded,
            disputed: p.totals.disputed,
            attention: p.attention,
        };
        (facts.facts, ledger, stored)
    }

    fn paid_then_refunded() -> (Vec<Fact>, Vec<Entry>, Stored) {
        processed(&[
            change(Transition::Pay, "pi_1", None, 600, 1_000),
            change(Transition::Refund, "re_1", Some("pi_1"), 610, 300),
        ])
    }

    #[test]
    fn an_order_as_the_processor_left_it_does_not_drift() {
        let (facts, ledger, stored) = paid_then_refunded();
        assert_eq!(check_order("o", &stored, &facts, &ledger), None);
    }

    #[test]
    fn a_tampered_status_and_total_are_reported_with_what_the_facts_give() {
        let (facts, ledger, mut stored) = paid_then_refunded();
        stored.status = "refunded".into();
        stored.refunded = 1_000;
        let drift = check_order("o", &stored, &facts, &ledger).expect("drift");
        assert_eq!(drift.differs, vec!["status", "totals"]);
        assert_eq!(
            (
                drift.facts.status.as_str(),
                drift.facts.paid,
                drift.facts.refunded
            ),
            ("partially_refunded", 1_000, 300)
        );
        assert_eq!(
            (drift.stored.status.as_str(), drift.stored.refunded),
            ("refunded", 1_000)
        );
    }

    #[test]
    fn a_lost_ledger_entry_is_named_and_an_unknown_status_is_drift() {
        let (facts, mut ledger, stored) = paid_then_refunded();
        ledger.retain(|e| e.resource_id != "re_1");
        let drift = check_order("o", &stored, &facts, &ledger).expect("drift");
        assert_eq!(drift.differs, vec!["ledger"]);
        assert_eq!(drift.ledger.refunded, 0);
        assert_eq!(
            drift.ledger.missing_entries,
            vec![MissingEntry {
                entry: "refund",
                resource_id: "re_1".into(),
                counted: 300
            }]
        );
        let (facts, ledger, mut stored) = paid_then_refunded();
        stored.status = "teleported".into();
        assert_eq!(
            check_order("o", &stored, &facts, &ledger).unwrap().differs,
            vec!["status"]
        );
    }

    #[test]
    fn a_dropped_attention_flag_is_drift() {
        let (facts, ledger, mut stored) =
            processed(&[change(Transition::Refund, "re_1", Some("pi_1"), 610, 300)]);
        assert!(!stored.attention.is_empty(), "a refund beyond what is paid");
        stored.attention.clear();
        assert_eq!(
            check_order("o", &stored, &facts, &ledger).unwrap().differs,
            vec!["attention"]
        );
    }
}
