//! The provider's side of each change: the objects it updates and the events that announce
//! it, as Stripe produces them. Objects live in memory while a run changes them and are
//! written through to the simulator's database, which the API serves.

use std::collections::{BTreeSet, HashMap};

use serde_json::{json, Value};

use super::ids::Ids;
use super::plan::{Action, Step};
use super::shapes;
use super::store::SimDb;

/// An event the engine generated, to store and to deliver.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    pub id: String,
    pub event_type: String,
    pub created: i64,
    pub order_id: Option<String>,
    /// The resource whose state this event announces (`None`: an event oncehook does not
    /// act on, e.g. `charge.succeeded`).
    pub resource: Option<String>,
    pub state: Option<String>,
    /// The event as JSON, serialised once: what is stored, served and sent.
    pub json: bytes::Bytes,
}

/// Why the API refuses a refund (Stripe's error `code`, `param` and message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub code: &'static str,
    pub param: Option<&'static str>,
    pub message: String,
}

pub struct Engine {
    pub(super) objects: HashMap<String, Value>,
    pub(super) order_of: HashMap<String, String>,
    dirty: BTreeSet<String>,
    ids: Ids,
    /// Whose objects and events the engine makes: Stripe's, or Mercado Pago's payments.
    pub(super) provider: super::Provider,
    /// Mercado Pago: the payment each planned intent became, and the next numeric ids.
    pub(super) mp: super::mercadopago::MpState,
}

fn kind_of(object: &Value) -> &str {
    match object["object"].as_str() {
        Some(kind) => kind,
        // Mercado Pago's payments name no kind.
        None if object.get("transaction_amount").is_some() => super::mercadopago::KIND,
        None => "object",
    }
}

/// The parent an object is listed under: a refund or dispute under its payment intent.
fn parent_of(object: &Value) -> Option<String> {
    match kind_of(object) {
        "refund" | "dispute" | "charge" | "checkout.session" => {
            object["payment_intent"].as_str().map(str::to_owned)
        }
        _ => None,
    }
}

impl Engine {
    pub fn new(seed: u64) -> Engine {
        Engine::for_provider(seed, super::Provider::Stripe)
    }

    pub fn for_provider(seed: u64, provider: super::Provider) -> Engine {
        Engine {
            objects: HashMap::new(),
            order_of: HashMap::new(),
            dirty: BTreeSet::new(),
            ids: Ids::new(seed ^ 0x00e7_e475),
            provider,
            mp: super::mercadopago::MpState::new(seed),
        }
    }

    pub(super) fn put(&mut self, order_id: &str, object: Value) {
        let id = match &object["id"] {
            Value::String(id) => id.clone(),
            // Mercado Pago's ids are numbers.
            Value::Number(id) => id.to_string(),
            _ => panic!("objects have ids"),
        };
        self.order_of.insert(id.clone(), order_id.to_string());
        self.dirty.insert(id.clone());
        self.objects.insert(id, object);
    }

    fn get(&self, id: &str) -> Value {
        self.objects
            .get(id)
            .cloned()
            .unwrap_or_else(|| panic!("plan names unknown object {id}"))
    }

    #[allow(clippy::too_many_arguments)]
    fn event(
        &mut self,
        out: &mut Vec<NewEvent>,
        order_id: &str,
        event_type: &str,
        created: i64,
        object: &Value,
        announces: Option<(&str, &str)>,
        previous: Option<Value>,
    ) {
        let id = self.ids.next("evt");
        let json = shapes::event(&id, event_type, created, object, previous.as_ref());
        out.push(NewEvent {
            json: json.into(),
            id,
            event_type: event_type.into(),
            created,
            order_id: Some(order_id.into()),
            resource: announces.map(|(r, _)| r.into()),
            state: announces.map(|(_, s)| s.into()),
        });
    }

    /// Applies one planned change at simulated time `at`; its events, none when the step
    /// is one Stripe never announces.
    pub fn apply(&mut self, order_id: &str, step: &Step, at: i64) -> Vec<NewEvent> {
        if self.provider == super::Provider::MercadoPago {
            return super::mercadopago::apply(self, order_id, step, at);
        }
        let mut out = Vec::new();
        let two = step.two_types;
        match &step.action {
            Action::Open {
                pi,
                amount,
                currency,
                method,
                session,
            } => {
                let intent = shapes::payment_intent(pi, order_id, *amount, currency, *method, at);
                if let Some(session) = session {
                    self.put(
                        order_id,
                        shapes::checkout_session(session, &intent, order_id, at),
                    );
                }
                self.put(order_id, intent.clone());
                self.event(
                    &mut out,
                    order_id,
                    "payment_intent.created",
                    at,
                    &intent,
                    None,
                    None,
                );
            }
            Action::Decline { pi, charge } => {
                let mut intent = self.get(pi);
                let failed = shapes::charge(charge, &intent, "failed", at);
                intent["status"] = json!("requires_payment_method");
                intent["latest_charge"] = json!(charge);
                intent["last_payment_error"] = json!({"charge": charge, "code": "card_declined",
                    "decline_code": "insufficient_funds", "message": "Your card has insufficient funds.",
                    "type": "card_error"});
                self.put(order_id, failed.clone());
                self.put(order_id, intent.clone());
                self.event(&mut out, order_id, "charge.failed", at, &failed, None, None);
                self.event(
                    &mut out,
                    order_id,
                    "payment_intent.payment_failed",
                    at,
                    &intent,
                    Some((pi, "requires_payment_method")),
                    None,
                );
            }
            Action::Succeed { pi, charge } => {
                let intent = self.succeed(order_id, pi, charge, at, &mut out);
                self.event(
                    &mut out,
                    order_id,
                    "payment_intent.succeeded",
                    at,
                    &intent,
                    Some((pi, "succeeded")),
                    None,
                );
                if two {
                    // The same payment through a Checkout session: the session names it.
                    let session_id = self.ids.next("cs");
                    let mut session = shapes::checkout_session(&session_id, &intent, order_id, at);
                    session["status"] = json!("complete");
                    session["payment_status"] = json!("paid");
                    self.put(order_id, session.clone());
                    self.event(
                        &mut out,
                        order_id,
                        "checkout.session.completed",
                        at,
                        &session,
                        Some((pi, "succeeded")),
                        None,
                    );
                }
            }
            Action::Cancel { pi } => {
                let mut intent = self.get(pi);
                intent["status"] = json!("canceled");
                intent["canceled_at"] = json!(at);
                intent["cancellation_reason"] = json!("abandoned");
                self.put(order_id, intent.clone());
                self.event(
                    &mut out,
                    order_id,
                    "payment_intent.canceled",
                    at,
                    &intent,
                    Some((pi, "canceled")),
                    None,
                );
            }
            Action::CheckoutCompleted { session } => {
                let mut s = self.get(session);
                s["status"] = json!("complete");
                self.put(order_id, s.clone());
                let mut intent = self.get(s["payment_intent"].as_str().unwrap_or_default());
                intent["status"] = json!("processing");
                self.put(order_id, intent);
                // Unpaid yet: oncehook keeps it without acting on it.
                self.event(
                    &mut out,
                    order_id,
                    "checkout.session.completed",
                    at,
                    &s,
                    None,
                    None,
                );
            }
            Action::AsyncPaid { session, charge } => {
                let mut s = self.get(session);
                let pi = s["payment_intent"].as_str().unwrap_or_default().to_string();
                let intent = self.succeed(order_id, &pi, charge, at, &mut out);
                s["payment_status"] = json!("paid");
                self.put(order_id, s.clone());
                self.event(
                    &mut out,
                    order_id,
                    "checkout.session.async_payment_succeeded",
                    at,
                    &s,
                    Some((&pi, "succeeded")),
                    None,
                );
                if two {
                    self.event(
                        &mut out,
                        order_id,
                        "payment_intent.succeeded",
                        at,
                        &intent,
                        Some((&pi, "succeeded")),
                        None,
                    );
                }
            }
            Action::AsyncExpired { session } => {
                let s = self.get(session);
                let pi = s["payment_intent"].as_str().unwrap_or_default().to_string();
                let mut intent = self.get(&pi);
                intent["status"] = json!("requires_payment_method");
                intent["last_payment_error"] = json!({"code": "payment_method_provider_timeout",
                    "message": "The voucher expired unpaid.", "type": "invalid_request_error"});
                self.put(order_id, intent.clone());
                self.event(
                    &mut out,
                    order_id,
                    "checkout.session.async_payment_failed",
                    at,
                    &s,
                    Some((&pi, "requires_payment_method")),
                    None,
                );
                if two {
                    self.event(
                        &mut out,
                        order_id,
                        "payment_intent.payment_failed",
                        at,
                        &intent,
                        Some((&pi, "requires_payment_method")),
                        None,
                    );
                }
            }
            Action::Refund {
                refund,
                pi,
                amount,
                pending,
                with_order_id,
            } => {
                let metadata = if *with_order_id {
                    json!({"order_id": order_id})
                } else {
                    json!({})
                };
                let status = if *pending { "pending" } else { "succeeded" };
                // The plan was drawn before anyone refunded through the API: like a person
                // in Stripe's dashboard, the planned refund takes what is left, and none
                // when nothing is (Stripe refuses to refund more than was charged).
                let amount = (*amount).min(self.unrefunded(pi));
                if amount > 0 {
                    self.refund(
                        order_id, refund, pi, amount, status, metadata, two, at, &mut out,
                    );
                }
            }
            // A planned refund the API's refunds left nothing for never existed to settle.
            Action::RefundSettled { refund, succeeded } if self.objects.contains_key(refund) => {
                let status = if *succeeded { "succeeded" } else { "failed" };
                self.settle_refund(order_id, refund, status, two, at, &mut out);
            }
            Action::RefundFailed { refund } if self.objects.contains_key(refund) => {
                self.settle_refund(order_id, refund, "failed", two, at, &mut out);
            }
            Action::RefundSettled { .. } | Action::RefundFailed { .. } => {}
            Action::Dispute { dispute, pi } => {
                let intent = self.get(pi);
                let d = shapes::dispute(dispute, &intent, at);
                if let Some(charge) = intent["latest_charge"].as_str() {
                    let mut c = self.get(charge);
                    c["disputed"] = json!(true);
                    self.put(order_id, c);
                }
                self.put(order_id, d.clone());
                self.event(
                    &mut out,
                    order_id,
                    "charge.dispute.created",
                    at,
                    &d,
                    Some((dispute, "needs_response")),
                    None,
                );
                self.event(
                    &mut out,
                    order_id,
                    "charge.dispute.funds_withdrawn",
                    at,
                    &d,
                    None,
                    None,
                );
            }
            Action::DisputeClosed { dispute, won } => {
                let mut d = self.get(dispute);
                let status = if *won { "won" } else { "lost" };
                d["status"] = json!(status);
                self.put(order_id, d.clone());
                self.event(
                    &mut out,
                    order_id,
                    "charge.dispute.closed",
                    at,
                    &d,
                    Some((dispute, status)),
                    Some(json!({"status": "needs_response"})),
                );
                if *won {
                    self.event(
                        &mut out,
                        order_id,
                        "charge.dispute.funds_reinstated",
                        at,
                        &d,
                        None,
                        None,
                    );
                }
            }
        }
        if step.ungenerated {
            // The objects changed; no event exists for it, in the log or on the wire.
            out.clear();
        }
        out
    }

    fn succeed(
        &mut self,
        order_id: &str,
        pi: &str,
        charge: &str,
        at: i64,
        out: &mut Vec<NewEvent>,
    ) -> Value {
        let mut intent = self.get(pi);
        let paid = shapes::charge(charge, &intent, "succeeded", at);
        intent["status"] = json!("succeeded");
        intent["amount_received"] = intent["amount"].clone();
        intent["latest_charge"] = json!(charge);
        intent["last_payment_error"] = Value::Null;
        self.put(order_id, paid.clone());
        self.put(order_id, intent.clone());
        self.event(out, order_id, "charge.succeeded", at, &paid, None, None);
        intent
    }

    /// What is left to refund of a payment intent's charge (pending refunds count as
    /// refunded, as in Stripe's running total).
    fn unrefunded(&self, pi: &str) -> i64 {
        let Some(charge) = self.objects[pi]["latest_charge"].as_str() else {
            return 0;
        };
        let charge = self.get(charge);
        charge["amount"].as_i64().unwrap_or(0) - charge["amount_refunded"].as_i64().unwrap_or(0)
    }

    #[allow(clippy::too_many_arguments)]
    fn refund(
        &mut self,
        order_id: &str,
        refund: &str,
        pi: &str,
        amount: i64,
        status: &str,
        metadata: Value,
        with_total: bool,
        at: i64,
        out: &mut Vec<NewEvent>,
    ) -> Value {
        let intent = self.get(pi);
        let r = shapes::refund(refund, &intent, amount, status, metadata, at);
        self.put(order_id, r.clone());
        self.event(
            out,
            order_id,
            "refund.created",
            at,
            &r,
            Some((refund, status)),
            None,
        );
        if let Some(charge_id) = intent["latest_charge"].as_str() {
            let mut charge = self.get(charge_id);
            // Stripe counts pending refunds in the running total.
            let total = charge["amount_refunded"].as_i64().unwrap_or(0) + amount;
            let previous = json!({"amount_refunded": charge["amount_refunded"], "refunded": charge["refunded"]});
            charge["amount_refunded"] = json!(total);
            charge["refunded"] = json!(total >= charge["amount"].as_i64().unwrap_or(0));
            self.put(order_id, charge.clone());
            if with_total {
                self.event(
                    out,
                    order_id,
                    "charge.refunded",
                    at,
                    &charge,
                    None,
                    Some(previous),
                );
            }
        }
        r
    }

    fn settle_refund(
        &mut self,
        order_id: &str,
        refund: &str,
        status: &str,
        two: bool,
        at: i64,
        out: &mut Vec<NewEvent>,
    ) {
        let mut r = self.get(refund);
        let previous = json!({"status": r["status"]});
        r["status"] = json!(status);
        if status == "failed" {
            r["failure_reason"] = json!("expired_or_canceled_card");
            if let Some(charge_id) = r["charge"].as_str().map(str::to_owned) {
                let mut charge = self.get(&charge_id);
                let total = charge["amount_refunded"].as_i64().unwrap_or(0)
                    - r["amount"].as_i64().unwrap_or(0);
                charge["amount_refunded"] = json!(total.max(0));
                charge["refunded"] = json!(false);
                self.put(order_id, charge);
            }
        }
        self.put(order_id, r.clone());
        self.event(
            out,
            order_id,
            "refund.updated",
            at,
            &r,
            Some((refund, status)),
            Some(previous),
        );
        if two && status == "failed" {
            self.event(
                out,
                order_id,
                "refund.failed",
                at,
                &r,
                Some((refund, status)),
                None,
            );
        }
    }

    /// `POST /v1/refunds`: a refund of what is left of a succeeded payment intent,
    /// announced like any other (`refund.created` and `charge.refunded`).
    pub fn create_refund(
        &mut self,
        pi: &str,
        amount: Option<i64>,
        metadata: Value,
        at: i64,
    ) -> Result<(Value, Vec<NewEvent>), Refusal> {
        let Some(intent) = self
            .objects
            .get(pi)
            .cloned()
            .filter(|o| kind_of(o) == "payment_intent")
        else {
            return Err(Refusal {
                status: 404,
                code: "resource_missing",
                param: Some("payment_intent"),
                message: format!("No such payment_intent: '{pi}'"),
            });
        };
        if intent["status"] != "succeeded" {
            return Err(Refusal {
                status: 400,
                code: "charge_not_refundable",
                param: Some("payment_intent"),
                message: format!(
                    "This PaymentIntent ({pi}) does not have a successful charge to refund."
                ),
            });
        }
        let left = self.unrefunded(pi);
        if left <= 0 {
            return Err(Refusal {
                status: 400,
                code: "charge_already_refunded",
                param: None,
                message: format!(
                    "Charge {} has already been refunded.",
                    intent["latest_charge"].as_str().unwrap_or_default()
                ),
            });
        }
        let amount = amount.unwrap_or(left);
        if amount <= 0 || amount > left {
            return Err(Refusal {
                status: 400,
                code: "amount_too_large",
                param: Some("amount"),
                message: format!(
                    "Refund amount ({amount}) is greater than unrefunded amount on charge ({left})"
                ),
            });
        }
        let order_id = self.order_of.get(pi).cloned().unwrap_or_default();
        let id = self.ids.next("re");
        let mut out = Vec::new();
        let refund = self.refund(
            &order_id,
            &id,
            pi,
            amount,
            "succeeded",
            metadata,
            true,
            at,
            &mut out,
        );
        Ok((refund, out))
    }

    /// Writes the objects changed since the last flush, and `events`, to the database.
    pub async fn flush(&mut self, db: &SimDb, events: &[NewEvent]) -> anyhow::Result<()> {
        let rows: Vec<_> = std::mem::take(&mut self.dirty)
            .into_iter()
            .map(|id| {
                let o = &self.objects[&id];
                (
                    id.clone(),
                    kind_of(o).to_string(),
                    self.order_of.get(&id).cloned(),
                    parent_of(o),
                    o["created"]
                        .as_i64()
                        .or_else(|| super::mercadopago::created(o))
                        .unwrap_or(0),
                    o.to_string(),
                )
            })
            .collect();
        db.write(&rows, events).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulator::plan::{Action, Step};
    use crate::simulator::shapes::Method;

    fn step(action: Action) -> Step {
        Step {
            after_secs: 0,
            action,
            ungenerated: false,
            two_types: false,
        }
    }

    fn planned_refund(refund: &str) -> Step {
        step(Action::Refund {
            refund: refund.into(),
            pi: "pi_1".into(),
            amount: 5_000,
            pending: true,
            with_order_id: true,
        })
    }

    /// A paid order of 50.00, as the plan opens and captures it.
    fn paid() -> Engine {
        let mut engine = Engine::new(1);
        let open = step(Action::Open {
            pi: "pi_1".into(),
            amount: 5_000,
            currency: "usd".into(),
            method: Method::Card,
            session: None,
        });
        engine.apply("order_1", &open, 10);
        let succeed = step(Action::Succeed {
            pi: "pi_1".into(),
            charge: "ch_1".into(),
        });
        engine.apply("order_1", &succeed, 20);
        engine
    }

    fn refunded_on_charge(engine: &Engine) -> i64 {
        engine.get("ch_1")["amount_refunded"].as_i64().unwrap()
    }

    #[test]
    fn a_planned_refund_after_an_api_refund_takes_only_what_is_left() {
        let mut engine = paid();
        engine
            .create_refund("pi_1", Some(100), json!({}), 30)
            .unwrap();
        let events = engine.apply("order_1", &planned_refund("re_planned"), 40);
        assert_eq!(engine.get("re_planned")["amount"], json!(4_900));
        assert_eq!(refunded_on_charge(&engine), 5_000);
        assert_eq!(events.len(), 1, "refund.created only: {events:?}");
        // Failing later gives back exactly what it took, not the planned 50.00.
        engine.apply(
            "order_1",
            &step(Action::RefundFailed {
                refund: "re_planned".into(),
            }),
            50,
        );
        assert_eq!(refunded_on_charge(&engine), 100);
    }

    #[test]
    fn a_planned_refund_of_a_fully_refunded_charge_never_happens() {
        let mut engine = paid();
        engine.create_refund("pi_1", None, json!({}), 30).unwrap();
        let events = engine.apply("order_1", &planned_refund("re_planned"), 40);
        assert!(events.is_empty(), "{events:?}");
        assert!(!engine.objects.contains_key("re_planned"));
        let settled = step(Action::RefundSettled {
            refund: "re_planned".into(),
            succeeded: true,
        });
        assert!(engine.apply("order_1", &settled, 50).is_empty());
        assert_eq!(refunded_on_charge(&engine), 5_000);
    }
}
