//! Mercado Pago in the box: the plans' orders as Mercado Pago payments (Pix QR codes paid
//! minutes later or expiring unpaid, boletos paid days later, card payments with every
//! attempt a payment of its own, refunds full and partial, chargebacks), announced by its
//! thin notifications (`type: payment`, `action: payment.created | payment.updated`,
//! `data.id`) and served as `GET /v1/payments/{id}` answers them, so the receiver's fetch
//! completes each notification; the truth from those payments.
//!
//! Where Mercado Pago's model is narrower than the plan's: a refund is approved at once (no
//! refund settles or fails days later), a chargeback stays `charged_back` (its outcome is
//! not a status of the payment), and a card payment abandoned after its declines leaves
//! only its rejected attempts.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

use super::engine::{Engine, NewEvent};
use super::plan::{Action, Step};
use super::shapes::Method;
use super::store::SimDb;
use super::truth::{self, ChildTruth, Fact, OrderTruth, PaymentTruth};

/// The simulator database's kind for Mercado Pago payments.
pub const KIND: &str = "mp_payment";

/// What the engine keeps beside the payments: which payment each planned intent became,
/// and the next ids (Mercado Pago's are numbers).
#[derive(Debug)]
pub struct MpState {
    payment_of: HashMap<String, String>,
    intent_of_session: HashMap<String, String>,
    method_of: HashMap<String, Method>,
    amount_of: HashMap<String, i64>,
    next_payment: u64,
    next_notification: u64,
    next_refund: u64,
}

impl MpState {
    pub fn new(seed: u64) -> MpState {
        // Ids repeat with the seed, and differ between seeds.
        let offset = seed % 1_000_000 * 1_000;
        MpState {
            payment_of: HashMap::new(),
            intent_of_session: HashMap::new(),
            method_of: HashMap::new(),
            amount_of: HashMap::new(),
            next_payment: 1_310_000_000_000 + offset,
            next_notification: 120_000_000_000 + offset,
            next_refund: 1_900_000_000 + offset,
        }
    }
}

/// A date as Mercado Pago writes it: `2026-12-06T10:00:00.000-03:00` (Brasília).
pub fn date(at: i64) -> String {
    chrono::DateTime::from_timestamp(at, 0)
        .unwrap_or_default()
        .with_timezone(&chrono::FixedOffset::west_opt(3 * 3_600).expect("UTC-3"))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
}

/// A payment's creation time, Unix seconds.
pub fn created(payment: &Value) -> Option<i64> {
    payment["date_created"]
        .as_str()
        .and_then(|d| chrono::DateTime::parse_from_rfc3339(d).ok())
        .map(|d| d.timestamp())
}

/// Centavos as Mercado Pago's decimal reais (`50.5`): amounts are whole centavos, and
/// serde_json writes the shortest decimal that reads back as the same number.
pub fn major(minor: i64) -> Value {
    json!(minor as f64 / 100.0)
}

/// Decimal reais back to centavos.
pub fn minor(major: &Value) -> i64 {
    (major.as_f64().unwrap_or(0.0) * 100.0).round() as i64
}

/// The query string of a notification (`data.id=…&type=payment`), which the signature
/// covers.
pub fn query_of(notification: &[u8]) -> Option<String> {
    let body: Value = serde_json::from_slice(notification).ok()?;
    let id = body["data"]["id"].as_str()?;
    Some(format!(
        "data.id={id}&type={}",
        body["type"].as_str().unwrap_or("payment")
    ))
}

fn payment(id: u64, order_id: &str, amount: i64, method: Method, at: i64) -> Value {
    let (method_id, type_id, status_detail) = match method {
        Method::Pix => ("pix", "bank_transfer", "pending_waiting_transfer"),
        Method::Boleto => ("bolbradesco", "ticket", "pending_waiting_payment"),
        Method::Card => ("master", "credit_card", "accredited"),
    };
    let mut p = json!({
        "id": id,
        "date_created": date(at),
        "date_approved": null,
        "date_last_updated": date(at),
        "date_of_expiration": null,
        "money_release_date": null,
        "operation_type": "regular_payment",
        "issuer_id": null,
        "payment_method_id": method_id,
        "payment_type_id": type_id,
        "status": "pending",
        "status_detail": status_detail,
        "currency_id": "BRL",
        "description": format!("Pedido {order_id}"),
        "live_mode": false,
        "collector_id": 1_234_567_890u64,
        "payer": {
            "type": null,
            "email": "comprador@example.com",
            "identification": {"type": "CPF", "number": "19119119100"},
        },
        "metadata": {"order_id": order_id},
        "external_reference": order_id,
        "transaction_amount": major(amount),
        "transaction_amount_refunded": 0,
        "coupon_amount": 0,
        "installments": 1,
        "transaction_details": {
            "net_received_amount": 0,
            "total_paid_amount": major(amount),
            "overpaid_amount": 0,
            "installment_amount": major(amount),
            "financial_institution": null,
        },
        "captured": true,
        "binary_mode": false,
        "refunds": [],
    });
    match method {
        Method::Pix => {
            // A Pix QR code lives 30 minutes.
            p["date_of_expiration"] = json!(date(at + 1_800));
            p["point_of_interaction"] = json!({
                "type": "PIX",
                "transaction_data": {
                    "qr_code": format!("00020126580014br.gov.bcb.pix0136{id}5204000053039865802BR"),
                    "ticket_url": format!("https://www.mercadopago.com.br/payments/{id}/ticket"),
                },
            });
        }
        Method::Boleto => {
            p["date_of_expiration"] = json!(date(at + 3 * 86_400));
            p["barcode"] = json!({"content": format!("23791{id:0>39}")});
        }
        Method::Card => {
            p["card"] = json!({"first_six_digits": "503143", "last_four_digits": "6351"});
        }
    }
    p
}

fn notification(engine: &mut Engine, order_id: &str, action: &str, p: &Value, at: i64) -> NewEvent {
    engine.mp.next_notification += 1;
    let id = engine.mp.next_notification;
    let payment_id = p["id"].to_string();
    let body = json!({
        "id": id,
        "live_mode": false,
        "type": "payment",
        "date_created": date(at),
        "user_id": 1_234_567_890u64,
        "api_version": "v1",
        "action": action,
        "data": {"id": payment_id},
    });
    NewEvent {
        id: id.to_string(),
        event_type: action.into(),
        created: at,
        order_id: Some(order_id.into()),
        resource: Some(payment_id),
        state: p["status"].as_str().map(str::to_owned),
        json: body.to_string().into(),
    }
}

fn new_payment(engine: &mut Engine, order_id: &str, amount: i64, method: Method, at: i64) -> Value {
    engine.mp.next_payment += 1;
    payment(engine.mp.next_payment, order_id, amount, method, at)
}

fn current(engine: &Engine, payment_id: &str) -> Option<Value> {
    engine.objects.get(payment_id).cloned()
}

/// What is left to refund of a payment, in centavos.
fn unrefunded(p: &Value) -> i64 {
    minor(&p["transaction_amount"]) - minor(&p["transaction_amount_refunded"])
}

/// A refund of `amount` centavos of an approved payment, applied to it: its refunds list
/// and running total, `refunded` once nothing is left. The refund object.
pub fn refund(engine: &mut Engine, p: &mut Value, amount: i64, at: i64) -> Value {
    engine.mp.next_refund += 1;
    let refund = json!({
        "id": engine.mp.next_refund,
        "payment_id": p["id"],
        "amount": major(amount),
        "metadata": {},
        "source": {"id": "1234567890", "name": "Loja", "type": "collector"},
        "date_created": date(at),
        "unique_sequence_number": null,
        "refund_mode": "standard",
        "adjustment_amount": 0,
        "status": "approved",
        "reason": null,
        "labels": [],
        "amount_refunded_to_payer": major(amount),
        "partition_details": [],
    });
    let total = minor(&p["transaction_amount_refunded"]) + amount;
    p["transaction_amount_refunded"] = major(total);
    p["refunds"]
        .as_array_mut()
        .expect("payments have a refunds list")
        .push(refund.clone());
    if total >= minor(&p["transaction_amount"]) {
        p["status"] = json!("refunded");
        p["status_detail"] = json!("refunded");
    } else {
        p["status_detail"] = json!("partially_refunded");
    }
    p["date_last_updated"] = json!(date(at));
    refund
}

/// Applies one planned change to Mercado Pago's payments; the notifications announcing it.
pub fn apply(engine: &mut Engine, order_id: &str, step: &Step, at: i64) -> Vec<NewEvent> {
    let mut out = Vec::new();
    let mut announce = |engine: &mut Engine, action: &str, p: Value| {
        engine.put(order_id, p.clone());
        out.push(notification(engine, order_id, action, &p, at));
    };
    apply_step(engine, step, order_id, at, &mut announce);
    if step.ungenerated {
        out.clear();
    }
    out
}

fn apply_step(
    engine: &mut Engine,
    step: &Step,
    order_id: &str,
    at: i64,
    announce: &mut dyn FnMut(&mut Engine, &str, Value),
) {
    match &step.action {
        Action::Open {
            pi,
            amount,
            method,
            session,
            ..
        } => {
            engine.mp.method_of.insert(pi.clone(), *method);
            if let Some(session) = session {
                engine
                    .mp
                    .intent_of_session
                    .insert(session.clone(), pi.clone());
            }
            if method.is_async() {
                // The Pix QR code or boleto is a pending payment from the start.
                let p = new_payment(engine, order_id, *amount, *method, at);
                engine.mp.payment_of.insert(pi.clone(), p["id"].to_string());
                announce(engine, "payment.created", p);
            } else {
                // A card payment exists once the buyer tries the card.
                engine.mp.amount_of.insert(pi.clone(), *amount);
            }
        }
        Action::Decline { pi, .. } => {
            let amount = planned_amount(engine, pi);
            let mut p = new_payment(engine, order_id, amount, Method::Card, at);
            p["status"] = json!("rejected");
            p["status_detail"] = json!("cc_rejected_insufficient_amount");
            announce(engine, "payment.created", p);
        }
        Action::Succeed { pi, .. } => {
            let amount = planned_amount(engine, pi);
            let mut p = new_payment(engine, order_id, amount, Method::Card, at);
            p["status"] = json!("approved");
            p["date_approved"] = json!(date(at));
            p["money_release_date"] = json!(date(at + 30 * 86_400));
            engine.mp.payment_of.insert(pi.clone(), p["id"].to_string());
            announce(engine, "payment.created", p.clone());
            if step.two_types {
                announce(engine, "payment.updated", p);
            }
        }
        // A card payment the buyer gave up on: only its rejected attempts exist.
        Action::Cancel { .. } | Action::CheckoutCompleted { .. } => {}
        Action::AsyncPaid { session, .. } | Action::AsyncExpired { session } => {
            let paid = matches!(step.action, Action::AsyncPaid { .. });
            let Some(mut p) = engine
                .mp
                .intent_of_session
                .get(session)
                .and_then(|pi| engine.mp.payment_of.get(pi))
                .and_then(|id| current(engine, id))
            else {
                return;
            };
            if paid {
                p["status"] = json!("approved");
                p["status_detail"] = json!("accredited");
                p["date_approved"] = json!(date(at));
                p["money_release_date"] = json!(date(at));
            } else {
                p["status"] = json!("cancelled");
                p["status_detail"] = json!("expired");
            }
            p["date_last_updated"] = json!(date(at));
            announce(engine, "payment.updated", p);
        }
        Action::Refund { pi, amount, .. } => {
            let Some(mut p) = engine
                .mp
                .payment_of
                .get(pi)
                .and_then(|id| current(engine, id))
            else {
                return;
            };
            // Like a person in Mercado Pago's panel, a planned refund takes what is left
            // (refunds through the API may have taken some), and none when nothing is.
            let amount = (*amount).min(unrefunded(&p));
            if amount > 0 && p["status"] != "charged_back" {
                refund(engine, &mut p, amount, at);
                announce(engine, "payment.updated", p);
            }
        }
        // Mercado Pago's refunds are approved at once.
        Action::RefundSettled { .. } | Action::RefundFailed { .. } => {}
        Action::Dispute { pi, .. } => {
            let Some(mut p) = engine
                .mp
                .payment_of
                .get(pi)
                .and_then(|id| current(engine, id))
            else {
                return;
            };
            p["status"] = json!("charged_back");
            p["status_detail"] = json!("in_process");
            p["date_last_updated"] = json!(date(at));
            announce(engine, "payment.updated", p);
        }
        Action::DisputeClosed { .. } => {}
    }
}

/// `POST /v1/payments/{id}/refunds`: a refund of `amount` centavos (all that is left when
/// `None`) of an approved payment, announced like any other change; a refusal is the
/// status and Mercado Pago-shaped error body.
pub fn create_refund(
    engine: &mut Engine,
    payment_id: &str,
    amount: Option<i64>,
    at: i64,
) -> Result<(Value, Vec<NewEvent>), (u16, Value)> {
    let refuse = |status: u16, error: &str, message: String| {
        (
            status,
            json!({"message": message, "error": error, "status": status, "cause": []}),
        )
    };
    let Some(mut p) = engine
        .objects
        .get(payment_id)
        .filter(|p| p.get("transaction_amount").is_some())
        .cloned()
    else {
        return Err(refuse(404, "not_found", "Payment not found".into()));
    };
    if p["status"] != "approved" {
        return Err(refuse(
            400,
            "bad_request",
            format!(
                "Payment {payment_id} cannot be refunded: its status is {}",
                p["status"]
            ),
        ));
    }
    let left = unrefunded(&p);
    let amount = amount.unwrap_or(left);
    if amount <= 0 || amount > left {
        return Err(refuse(
            400,
            "bad_request",
            format!(
                "Invalid refund amount {}: {} is left to refund",
                major(amount),
                major(left)
            ),
        ));
    }
    let order_id = engine.order_of.get(payment_id).cloned().unwrap_or_default();
    let refund = refund(engine, &mut p, amount, at);
    engine.put(&order_id, p.clone());
    let event = notification(engine, &order_id, "payment.updated", &p, at);
    Ok((refund, vec![event]))
}

fn planned_amount(engine: &Engine, pi: &str) -> i64 {
    engine.mp.amount_of.get(pi).copied().unwrap_or(0)
}

/// A Mercado Pago status in the words the truth's status rule uses.
fn outcome(status: &str) -> &'static str {
    match status {
        "approved" | "refunded" | "charged_back" | "authorized" => "succeeded",
        "rejected" => "requires_payment_method",
        "cancelled" => "canceled",
        _ => "processing",
    }
}

/// Per-order truth from the simulator's Mercado Pago payments: paid is every approved
/// payment's amount, refunded its running refund total, disputed the amount of a payment
/// charged back; complete when each payment's final status was announced by a delivered
/// notification.
pub async fn orders(db: &SimDb) -> anyhow::Result<Vec<OrderTruth>> {
    let delivered: std::collections::BTreeSet<(String, String)> =
        db.delivered_states().await?.into_iter().collect();
    let mut by_order: BTreeMap<String, OrderTruth> = BTreeMap::new();
    let mut newest: HashMap<String, (i64, String)> = HashMap::new();
    for p in db.objects_of_kind(KIND).await? {
        let order_id = p["external_reference"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let id = p["id"].to_string();
        let status = p["status"].as_str().unwrap_or_default().to_string();
        let amount = minor(&p["transaction_amount"]);
        let o = by_order
            .entry(order_id.clone())
            .or_insert_with(|| OrderTruth {
                order_id: order_id.clone(),
                status: String::new(),
                currency: "brl".into(),
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
        let approved = !p["date_approved"].is_null();
        if approved {
            o.paid += amount;
            o.facts.push(fact("payment", &id, "pay"));
        }
        match status.as_str() {
            "rejected" => o.facts.push(fact("payment", &id, "fail")),
            "cancelled" => o.facts.push(fact("payment", &id, "cancel")),
            "charged_back" => {
                o.disputed += amount;
                o.facts.push(fact("dispute", &id, "dispute"));
                o.disputes.push(ChildTruth {
                    id: id.clone(),
                    payment_intent: id.clone(),
                    amount,
                    status: status.clone(),
                });
            }
            _ => {}
        }
        for r in p["refunds"].as_array().into_iter().flatten() {
            let amount = minor(&r["amount"]);
            o.refunded += amount;
            o.facts.push(fact("refund", &r["id"].to_string(), "refund"));
            o.refunds.push(ChildTruth {
                id: r["id"].to_string(),
                payment_intent: id.clone(),
                amount,
                status: r["status"].as_str().unwrap_or_default().into(),
            });
        }
        if status != "pending" && !delivered.contains(&(id.clone(), status.clone())) {
            o.lost.push(id.clone());
        }
        let at = created(&p).unwrap_or(0);
        if newest.get(&order_id).is_none_or(|(t, _)| at >= *t) {
            newest.insert(order_id.clone(), (at, outcome(&status).into()));
        }
        o.payments.push(PaymentTruth {
            id,
            method: p["payment_method_id"].as_str().unwrap_or_default().into(),
            amount,
            amount_received: if approved { amount } else { 0 },
            status,
        });
    }
    for o in by_order.values_mut() {
        o.facts.sort();
        o.complete = o.lost.is_empty();
        o.status = truth::status_of(
            o.paid,
            o.refunded,
            o.disputed,
            newest.get(&o.order_id).map(|(_, s)| s.as_str()),
        );
    }
    Ok(by_order.into_values().collect())
}

fn fact(kind: &str, id: &str, state: &str) -> Fact {
    Fact {
        kind: kind.into(),
        resource_id: id.into(),
        state: state.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulator::plan::{self, GenerationFaults, Mix};

    #[test]
    fn amounts_are_decimal_reais_that_read_back_as_the_same_centavos() {
        for c in [1, 50, 1_250, 12_345, 50_000, 3_333] {
            assert_eq!(minor(&major(c)), c);
        }
        assert_eq!(major(5_050).to_string(), "50.5");
    }

    #[test]
    fn plans_become_payments_with_mercado_pagos_statuses_and_thin_notifications() {
        let plans = plan::plans(
            7,
            400,
            86_400,
            &Mix::default(),
            GenerationFaults {
                ungenerated: 0.0,
                two_types: 0.3,
            },
        );
        let mut engine = Engine::for_provider(7, crate::simulator::Provider::MercadoPago);
        let mut events = Vec::new();
        for p in &plans {
            for s in &p.steps {
                events.extend(engine.apply(&p.order_id, s, 1_760_000_000 + s.after_secs));
            }
        }
        let statuses: std::collections::BTreeSet<&str> = engine
            .objects
            .values()
            .filter_map(|p| p["status"].as_str())
            .collect();
        for s in [
            "approved",
            "rejected",
            "refunded",
            "cancelled",
            "charged_back",
        ] {
            assert!(statuses.contains(s), "{s} in {statuses:?}");
        }
        assert!(engine
            .objects
            .values()
            .any(|p| p["status_detail"] == "partially_refunded"));
        for e in &events {
            let body: Value = serde_json::from_slice(&e.json).unwrap();
            assert_eq!(body["type"], "payment");
            assert!(["payment.created", "payment.updated"].contains(&e.event_type.as_str()));
            let id = body["data"]["id"].as_str().unwrap();
            assert!(engine.objects.contains_key(id), "{id}");
            assert_eq!(
                query_of(&e.json).unwrap(),
                format!("data.id={id}&type=payment")
            );
        }
        let approved = engine
            .objects
            .values()
            .find(|p| p["status"] == "approved" && p["transaction_amount_refunded"] == 0)
            .map(|p| (p["id"].to_string(), minor(&p["transaction_amount"])))
            .unwrap();
        let (id, amount) = approved;
        let too_much = create_refund(&mut engine, &id, Some(amount + 1), 1_770_000_000);
        assert_eq!(too_much.unwrap_err().0, 400, "more than is left is refused");
        let (partial, events) = create_refund(&mut engine, &id, Some(50), 1_770_000_000).unwrap();
        assert_eq!((partial["amount"].clone(), events.len()), (json!(0.5), 1));
        let (_, _) = create_refund(&mut engine, &id, None, 1_770_000_001).unwrap();
        assert_eq!(engine.objects[&id]["status"], "refunded");
        assert_eq!(
            minor(&engine.objects[&id]["transaction_amount_refunded"]),
            amount
        );
        assert_eq!(
            create_refund(&mut engine, &id, None, 1_770_000_002)
                .unwrap_err()
                .0,
            400
        );
        assert_eq!(
            create_refund(&mut engine, "1", None, 1_770_000_002)
                .unwrap_err()
                .0,
            404
        );
        for p in engine.objects.values() {
            assert!(minor(&p["transaction_amount_refunded"]) <= minor(&p["transaction_amount"]));
            assert_eq!(p["currency_id"], "BRL");
        }
    }
}
