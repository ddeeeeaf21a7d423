//! The objects pass's judgement, with no I/O: the provider's objects of one payment (its
//! intent, latest charge, refunds and disputes) against the order's facts. Each mismatch is
//! a finding; a finding that can be fixed safely carries the events that fix it, built from
//! the objects with the event types the webhook for that change uses, so they map to the
//! same transition, effect key and ledger entry keys the webhook would have produced, and a
//! late webhook collapses onto them.

use serde_json::{json, Value};

use super::DiffKind;
use crate::domain::money::guard;
use crate::domain::{Change, Fact, ResourceKind, Stamp, Transition};
use crate::provider::api::{Dispute, Expandable, PaymentIntent, Refund};

/// One payment at the provider, as fetched.
#[derive(Clone, Debug)]
pub struct ProviderPayment {
    pub intent: PaymentIntent,
    pub refunds: Vec<Refund>,
    pub disputes: Vec<Dispute>,
}

/// An event to build from a fetched object.
#[derive(Clone, Debug, PartialEq)]
pub struct Synth {
    pub event_type: &'static str,
    pub transition: Transition,
    /// Unix seconds: the event's `created`, its stamp.
    pub created: i64,
    pub object: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub kind: DiffKind,
    /// Unique within (provider, kind): the object and what the provider showed.
    pub subject: String,
    pub object_id: String,
    pub detail: String,
    /// The events that fix it; empty when only a person can decide.
    pub fix: Vec<Synth>,
}

/// What the provider's state of a payment intent means in oncehook's words, and the
/// webhook type that announces it. A `requires_payment_method` intent failed only when it
/// carries the error of an attempt; without one nobody has tried to pay yet.
pub fn payment_transition(pi: &PaymentIntent) -> Option<(Transition, &'static str)> {
    Some(match pi.status.as_str() {
        "succeeded" => (Transition::Pay, "payment_intent.succeeded"),
        "requires_capture" => (
            Transition::Authorize,
            "payment_intent.amount_capturable_updated",
        ),
        "canceled" => (Transition::Cancel, "payment_intent.canceled"),
        "requires_payment_method"
            if pi
                .rest
                .get("last_payment_error")
                .is_some_and(|e| !e.is_null()) =>
        {
            (Transition::Fail, "payment_intent.payment_failed")
        }
        _ => return None,
    })
}

pub fn refund_transition(r: &Refund) -> Option<Transition> {
    Some(match r.status.as_deref()? {
        "pending" | "requires_action" => Transition::RefundPending,
        "succeeded" => Transition::Refund,
        "failed" => Transition::RefundFailed,
        "canceled" => Transition::RefundCanceled,
        _ => return None,
    })
}

pub fn dispute_transition(d: &Dispute) -> (Transition, &'static str) {
    match d.status.as_str() {
        "won" | "warning_closed" => (Transition::DisputeWon, "charge.dispute.closed"),
        "lost" => (Transition::DisputeLost, "charge.dispute.closed"),
        _ => (Transition::Dispute, "charge.dispute.created"),
    }
}

/// The same state in oncehook's words (a settled payment is a succeeded one).
fn same_state(ours: Transition, theirs: Transition) -> bool {
    ours == theirs || (ours == Transition::Settle && theirs == Transition::Pay)
}

/// One provider resource to compare: what the provider shows of one payment, refund,
/// dispute or running refund total, and the event that would bring it.
pub(super) struct Resource<'a> {
    pub kind: ResourceKind,
    pub id: &'a str,
    pub parent: Option<&'a str>,
    /// The provider's state, in its own words (for the detail).
    pub status: &'a str,
    pub transition: Transition,
    pub event_type: &'static str,
    /// When the provider created the change, Unix seconds: the stamp of a fact we lack.
    pub at: i64,
    /// The stamp the provider's object carries for its current state (Unix ms), where it
    /// has one (Mercado Pago's `date_last_updated`); none: the object is as of now.
    pub stamp_ms: Option<i64>,
    pub amount: i64,
    pub currency: &'a str,
    pub object: Value,
}

impl Resource<'_> {
    /// The provider shows another amount than our fact of the same state: only a person
    /// can say which is right, so there is no fix.
    fn amount_mismatch(&self, ours: i64) -> Finding {
        Finding {
            kind: DiffKind::AmountMismatch,
            subject: format!("{}:amount:{}:{}", self.id, self.amount, ours),
            object_id: self.id.to_string(),
            detail: format!(
                "{} {} is {} {} at the provider, {ours} in our facts",
                self.kind.as_str(),
                self.id,
                self.amount,
                self.currency.to_ascii_uppercase()
            ),
            fix: vec![],
        }
    }
}

/// Compares one payment's objects with the order's facts.
pub fn compare_payment(
    order_id: &str,
    order_currency: Option<&str>,
    facts: &[Fact],
    p: &ProviderPayment,
    now_s: i64,
) -> Vec<Finding> {
    let mut resources = Vec::new();
    let pi = &p.intent;
    if let Some((transition, event_type)) = payment_transition(pi) {
        let charge = pi.latest_charge.as_ref().and_then(Expandable::object);
        let at = match transition {
            Transition::Cancel => pi
                .rest
                .get("canceled_at")
                .and_then(Value::as_i64)
                .unwrap_or(pi.created),
            _ => charge.map_or(pi.created, |c| c.created),
        };
        let mut object = serde_json::to_value(pi).unwrap_or(Value::Null);
        // As a webhook carries it: the charge by id.
        if let Some(c) = &pi.latest_charge {
            object["latest_charge"] = json!(c.id());
        }
        resources.push(Resource {
            kind: ResourceKind::Payment,
            id: &pi.id,
            parent: None,
            status: &pi.status,
            transition,
            event_type,
            at,
            stamp_ms: None,
            amount: if transition == Transition::Pay {
                pi.amount_received
            } else {
                pi.amount
            },
            currency: &pi.currency,
            object,
        });
    }
    for r in &p.refunds {
        let Some(transition) = refund_transition(r) else {
            continue;
        };
        resources.push(Resource {
            kind: ResourceKind::Refund,
            id: &r.id,
            parent: Some(&pi.id),
            status: r.status.as_deref().unwrap_or(""),
            transition,
            // Its status says what happened, as for the webhook's `refund.updated`.
            event_type: "refund.updated",
            at: r.created,
            stamp_ms: None,
            amount: r.amount,
            currency: &r.currency,
            object: serde_json::to_value(r).unwrap_or(Value::Null),
        });
    }
    for d in &p.disputes {
        let (transition, event_type) = dispute_transition(d);
        resources.push(Resource {
            kind: ResourceKind::Dispute,
            id: &d.id,
            parent: Some(&pi.id),
            status: &d.status,
            transition,
            event_type,
            at: d.created,
            stamp_ms: None,
            amount: d.amount,
            currency: &d.currency,
            object: serde_json::to_value(d).unwrap_or(Value::Null),
        });
    }

    for r in &mut resources {
        // Every built event names its order, as the payment's own metadata does.
        if r.object["metadata"]["order_id"].is_null() {
            if !r.object["metadata"].is_object() {
                r.object["metadata"] = json!({});
            }
            r.object["metadata"]["order_id"] = json!(order_id);
        }
    }
    judge(order_id, order_currency, facts, resources, now_s)
}

/// The provider's resources of one order against its facts: a resource we lack, or a newer
/// state of one, is a missing fact fixed by the event that brings it; a state our facts
/// never go back from, a status mismatch; another amount or currency, an amount mismatch.
pub(super) fn judge(
    order_id: &str,
    order_currency: Option<&str>,
    facts: &[Fact],
    resources: Vec<Resource<'_>>,
    now_s: i64,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    for r in resources {
        if let Some(ours) = order_currency {
            if !ours.eq_ignore_ascii_case(r.currency) {
                findings.push(Finding {
                    kind: DiffKind::AmountMismatch,
                    subject: format!("{}:currency:{}", r.id, r.currency),
                    object_id: r.id.to_string(),
                    detail: format!(
                        "{} {} is in {}, order {order_id} in {ours}",
                        r.kind.as_str(),
                        r.id,
                        r.currency.to_ascii_uppercase()
                    ),
                    fix: vec![],
                });
                continue;
            }
        }
        let fact = facts
            .iter()
            .find(|f| f.kind == r.kind && f.resource_id == r.id);
        match fact {
            None => findings.push(Finding {
                kind: DiffKind::MissingFact,
                subject: format!("{}:{}", r.id, r.transition.as_str()),
                object_id: r.id.to_string(),
                detail: format!(
                    "the provider shows {} {} {} ({} {}), our facts do not",
                    r.kind.as_str(),
                    r.id,
                    r.status,
                    r.amount,
                    r.currency.to_ascii_uppercase()
                ),
                fix: vec![Synth {
                    event_type: r.event_type,
                    transition: r.transition,
                    created: r.at,
                    object: r.object,
                }],
            }),
            // A running total (Mercado Pago's `transaction_amount_refunded`) only grows: a
            // larger one is news, a smaller one a contradiction.
            Some(f) if r.kind == ResourceKind::RefundTotal => {
                let ours = f.amount.unwrap_or(0);
                if r.amount > ours {
                    findings.push(Finding {
                        kind: DiffKind::MissingFact,
                        subject: format!("{}:{}:{}", r.id, r.transition.as_str(), r.amount),
                        object_id: r.id.to_string(),
                        detail: format!(
                            "the provider shows {} {} {} {}, our facts {ours}: a change no event we hold announced",
                            r.kind.as_str(),
                            r.id,
                            r.amount,
                            r.currency.to_ascii_uppercase()
                        ),
                        fix: vec![Synth {
                            event_type: r.event_type,
                            transition: r.transition,
                            created: r.at,
                            object: r.object,
                        }],
                    });
                } else if r.amount < ours {
                    findings.push(r.amount_mismatch(ours));
                }
            }
            Some(f) if same_state(f.state, r.transition) => {
                let ours = f.amount.unwrap_or(r.amount);
                if ours != r.amount {
                    findings.push(r.amount_mismatch(ours));
                }
            }
            Some(f) => {
                // The provider's view is as of now: newer than anything we hold.
                let change = Change {
                    transition: r.transition,
                    resource_id: r.id.to_string(),
                    parent_ref: r.parent.map(str::to_owned),
                    stamp: Stamp {
                        at_ms: r.stamp_ms.unwrap_or(now_s * 1000),
                        sequence: None,
                        rank: r.transition.rank(),
                    },
                    amount: Some(r.amount),
                };
                match guard(f, &change) {
                    crate::domain::Update::Applied => findings.push(Finding {
                        kind: DiffKind::MissingFact,
                        subject: format!("{}:{}", r.id, r.transition.as_str()),
                        object_id: r.id.to_string(),
                        detail: format!(
                            "{} {} is {} at the provider, {} in our facts: a change no event we hold announced",
                            r.kind.as_str(),
                            r.id,
                            r.status,
                            f.state.as_str()
                        ),
                        fix: vec![Synth {
                            event_type: r.event_type,
                            transition: r.transition,
                            created: r.stamp_ms.map_or(now_s, |ms| ms / 1000),
                            object: r.object,
                        }],
                    }),
                    _ => findings.push(Finding {
                        kind: DiffKind::StatusMismatch,
                        subject: format!(
                            "{}:{}:{}",
                            r.id,
                            r.transition.as_str(),
                            f.state.as_str()
                        ),
                        object_id: r.id.to_string(),
                        detail: format!(
                            "{} {} is {} at the provider, {} in our facts, which never goes back to it",
                            r.kind.as_str(),
                            r.id,
                            r.status,
                            f.state.as_str()
                        ),
                        fix: vec![],
                    }),
                }
            }
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Fact;

    fn intent(status: &str, error: bool) -> PaymentIntent {
        serde_json::from_value(json!({
            "id": "pi_1", "amount": 4200, "amount_received": if status == "succeeded" { 4200 } else { 0 },
            "currency": "eur", "status": status, "created": 1_700_000_000,
            "latest_charge": {"id": "ch_1", "amount": 4200, "currency": "eur", "status": "succeeded",
                "created": 1_700_000_100, "payment_intent": "pi_1"},
            "last_payment_error": if error { json!({"code": "card_declined"}) } else { Value::Null },
            "metadata": {"order_id": "o-1"}
        }))
        .unwrap()
    }

    fn refund(id: &str, status: &str, amount: i64) -> Refund {
        serde_json::from_value(
            json!({"id": id, "amount": amount, "currency": "eur", "status": status,
            "created": 1_700_000_500, "payment_intent": "pi_1", "charge": "ch_1", "metadata": {}}),
        )
        .unwrap()
    }

    fn dispute(status: &str) -> Dispute {
        serde_json::from_value(
            json!({"id": "du_1", "amount": 4200, "currency": "eur", "status": status,
            "created": 1_700_000_900, "charge": "ch_1", "payment_intent": "pi_1"}),
        )
        .unwrap()
    }

    fn fact(kind: ResourceKind, id: &str, state: Transition, amount: i64) -> Fact {
        Fact {
            kind,
            resource_id: id.into(),
            parent_ref: None,
            state,
            stamp: Stamp {
                at_ms: 1_700_000_000_000,
                sequence: None,
                rank: state.rank(),
            },
            amount: Some(amount),
            money_seen: state.proves_money(),
            canceled_at: None,
        }
    }

    fn payment(status: &str, refunds: Vec<Refund>, disputes: Vec<Dispute>) -> ProviderPayment {
        ProviderPayment {
            intent: intent(status, status == "requires_payment_method"),
            refunds,
            disputes,
        }
    }

    const NOW: i64 = 1_800_000_000;

    #[test]
    fn equal_objects_and_facts_find_nothing() {
        let facts = [
            fact(ResourceKind::Payment, "pi_1", Transition::Pay, 4200),
            fact(ResourceKind::Refund, "re_1", Transition::Refund, 1000),
            fact(ResourceKind::Dispute, "du_1", Transition::DisputeWon, 4200),
        ];
        let p = payment(
            "succeeded",
            vec![refund("re_1", "succeeded", 1000)],
            vec![dispute("won")],
        );
        assert_eq!(compare_payment("o-1", Some("EUR"), &facts, &p, NOW), vec![]);
    }

    #[test]
    fn a_payment_refund_or_dispute_we_lack_is_a_missing_fact_built_as_its_webhook() {
        let p = payment(
            "succeeded",
            vec![refund("re_1", "succeeded", 1000)],
            vec![dispute("lost")],
        );
        let found = compare_payment("o-1", None, &[], &p, NOW);
        let kinds: Vec<_> = found.iter().map(|f| (f.kind, f.subject.as_str())).collect();
        assert_eq!(
            kinds,
            vec![
                (DiffKind::MissingFact, "pi_1:pay"),
                (DiffKind::MissingFact, "re_1:refund"),
                (DiffKind::MissingFact, "du_1:dispute_lost"),
            ]
        );
        let pay = &found[0].fix[0];
        assert_eq!(pay.event_type, "payment_intent.succeeded");
        // Stamped when the charge happened, the charge named by id as in a webhook.
        assert_eq!(pay.created, 1_700_000_100);
        assert_eq!(pay.object["latest_charge"], json!("ch_1"));
        // A refund without the order in its metadata gets it, so it maps on its own.
        assert_eq!(found[1].fix[0].object["metadata"]["order_id"], json!("o-1"));
        assert_eq!(found[2].fix[0].event_type, "charge.dispute.closed");
    }

    #[test]
    fn a_change_never_announced_is_a_missing_fact_and_a_contradiction_a_status_mismatch() {
        // Pending for us, succeeded at the provider: newer news, fixable.
        let facts = [
            fact(ResourceKind::Payment, "pi_1", Transition::Pay, 4200),
            fact(
                ResourceKind::Refund,
                "re_1",
                Transition::RefundPending,
                1000,
            ),
        ];
        let p = payment("succeeded", vec![refund("re_1", "succeeded", 1000)], vec![]);
        let found = compare_payment("o-1", Some("EUR"), &facts, &p, NOW);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].kind, DiffKind::MissingFact);
        assert_eq!(found[0].fix[0].created, NOW);
        assert_eq!(found[0].fix[0].transition, Transition::Refund);

        // Paid for us, a declined intent at the provider: money never goes back that way.
        let facts = [fact(ResourceKind::Payment, "pi_1", Transition::Pay, 4200)];
        let p = payment("requires_payment_method", vec![], vec![]);
        let found = compare_payment("o-1", Some("EUR"), &facts, &p, NOW);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].kind, DiffKind::StatusMismatch);
        assert!(found[0].fix.is_empty());
    }

    #[test]
    fn amounts_and_currencies_that_differ_wait_for_a_person() {
        let facts = [fact(ResourceKind::Payment, "pi_1", Transition::Pay, 4100)];
        let p = payment("succeeded", vec![], vec![]);
        let found = compare_payment("o-1", Some("EUR"), &facts, &p, NOW);
        assert_eq!(found[0].kind, DiffKind::AmountMismatch);
        assert!(found[0].fix.is_empty());
        let found = compare_payment("o-1", Some("USD"), &facts, &p, NOW);
        assert_eq!(found[0].kind, DiffKind::AmountMismatch);
        assert!(found[0].detail.contains("EUR"), "{}", found[0].detail);
    }

    #[test]
    fn an_intent_nobody_tried_to_pay_yet_is_no_fact() {
        let p = ProviderPayment {
            intent: intent("requires_payment_method", false),
            refunds: vec![],
            disputes: vec![],
        };
        assert_eq!(compare_payment("o-1", None, &[], &p, NOW), vec![]);
        let p = payment("requires_payment_method", vec![], vec![]);
        assert_eq!(
            compare_payment("o-1", None, &[], &p, NOW)[0].fix[0].event_type,
            "payment_intent.payment_failed"
        );
    }

    #[test]
    fn a_running_refund_total_that_grew_is_news_one_that_shrank_a_mismatch() {
        let total = |amount: i64| Resource {
            kind: ResourceKind::RefundTotal,
            id: "131",
            parent: None,
            status: "refunded",
            transition: Transition::RefundTotal,
            event_type: "payment.updated",
            at: 1_700_000_500,
            stamp_ms: Some(1_700_000_500_000),
            amount,
            currency: "BRL",
            object: json!({"id": 131}),
        };
        let facts = [fact(
            ResourceKind::RefundTotal,
            "131",
            Transition::RefundTotal,
            1000,
        )];
        assert_eq!(
            judge("o-1", Some("BRL"), &facts, vec![total(1000)], NOW),
            vec![]
        );
        let grew = judge("o-1", Some("BRL"), &facts, vec![total(1500)], NOW);
        assert_eq!(grew.len(), 1);
        assert_eq!(grew[0].kind, DiffKind::MissingFact);
        assert_eq!(grew[0].subject, "131:refund_total:1500");
        // Stamped as the provider's object is, not as of now.
        assert_eq!(grew[0].fix[0].created, 1_700_000_500);
        let shrank = judge("o-1", Some("BRL"), &facts, vec![total(500)], NOW);
        assert_eq!(shrank[0].kind, DiffKind::AmountMismatch);
        assert!(shrank[0].fix.is_empty());
        // One we lack entirely is missing, as any fact.
        let none = judge("o-1", None, &[], vec![total(500)], NOW);
        assert_eq!(none[0].kind, DiffKind::MissingFact);
    }
}
