//! Stripe-shaped events (after the objects in stripe/openapi's fixtures3.json), written
//! for these tests.

use serde_json::{json, Value};

/// 2024-01-01T10:00:00Z
pub const T10_00: i64 = 1_704_103_200;

fn event(id: &str, kind: &str, api_version: &str, created: i64, object: Value) -> Value {
    json!({
        "id": id,
        "object": "event",
        "api_version": api_version,
        "created": created,
        "livemode": false,
        "pending_webhooks": 1,
        "request": {"id": null, "idempotency_key": null},
        "type": kind,
        "data": {"object": object},
    })
}

pub fn payment_intent_succeeded(
    id: &str,
    pi: &str,
    order: &str,
    amount: i64,
    created: i64,
) -> Value {
    event(
        id,
        "payment_intent.succeeded",
        "2024-06-20",
        created,
        json!({
            "id": pi, "object": "payment_intent", "amount": amount, "amount_received": amount,
            "capture_method": "automatic", "currency": "eur", "status": "succeeded",
            "latest_charge": format!("ch_{pi}"), "livemode": false, "created": created - 5,
            "metadata": {"order_id": order}, "payment_method_types": ["card"],
        }),
    )
}

pub fn payment_intent_failed(id: &str, pi: &str, order: &str, created: i64) -> Value {
    let mut e = payment_intent_succeeded(id, pi, order, 4200, created);
    e["type"] = json!("payment_intent.payment_failed");
    e["data"]["object"]["status"] = json!("requires_payment_method");
    e
}

/// Older API versions name the payment intent at the invoice's top level.
pub fn invoice_payment_succeeded_old(id: &str, pi: &str, amount: i64, created: i64) -> Value {
    event(
        id,
        "invoice.payment_succeeded",
        "2020-08-27",
        created,
        json!({
            "id": format!("in_{pi}"), "object": "invoice", "amount_due": amount, "amount_paid": amount,
            "currency": "eur", "paid": true, "status": "paid", "payment_intent": pi,
            "customer": "cus_test", "metadata": {},
        }),
    )
}

/// Newer API versions (2025-03-31.basil on) list payments under the invoice.
pub fn invoice_paid_new(id: &str, pi: &str, amount: i64, created: i64) -> Value {
    event(
        id,
        "invoice.paid",
        "2025-03-31.basil",
        created,
        json!({
            "id": format!("in_{pi}"), "object": "invoice", "amount_due": amount, "amount_paid": amount,
            "currency": "eur", "status": "paid", "customer": "cus_test", "metadata": {},
            "payments": {"object": "list", "has_more": false, "data": [
                {"id": format!("inpay_{pi}"), "object": "invoice_payment", "amount_paid": amount,
                 "payment": {"type": "payment_intent", "payment_intent": pi}, "status": "paid"}
            ]},
        }),
    )
}

pub fn charge_refunded(
    id: &str,
    pi: &str,
    re: &str,
    order: &str,
    amount: i64,
    created: i64,
) -> Value {
    event(
        id,
        "charge.refunded",
        "2022-08-01",
        created,
        json!({
            "id": format!("ch_{pi}"), "object": "charge", "amount": amount, "amount_refunded": amount,
            "currency": "eur", "payment_intent": pi, "refunded": true, "status": "succeeded",
            "metadata": {"order_id": order},
            "refunds": {"object": "list", "has_more": false, "data": [
                {"id": re, "object": "refund", "amount": amount, "currency": "eur",
                 "payment_intent": pi, "status": "succeeded"}
            ]},
        }),
    )
}

pub fn refund_created(id: &str, pi: &str, re: &str, amount: i64, created: i64) -> Value {
    event(
        id,
        "refund.created",
        "2024-06-20",
        created,
        json!({
            "id": re, "object": "refund", "amount": amount, "currency": "eur",
            "charge": format!("ch_{pi}"), "payment_intent": pi, "status": "succeeded", "metadata": {},
        }),
    )
}

pub fn dispute_created(id: &str, pi: &str, dp: &str, amount: i64, created: i64) -> Value {
    event(
        id,
        "charge.dispute.created",
        "2024-06-20",
        created,
        json!({
            "id": dp, "object": "dispute", "amount": amount, "currency": "eur",
            "charge": format!("ch_{pi}"), "payment_intent": pi, "reason": "fraudulent",
            "status": "needs_response", "metadata": {},
        }),
    )
}

/// The current API version of the fixtures below.
pub const CURRENT_API: &str = "2025-03-31.basil";

/// A refund event (`refund.created`, `refund.updated`, `refund.failed`,
/// `charge.refund.updated`) at the current API version; `order` puts the order id in the
/// refund's metadata, as integrations that create refunds through the API do.
#[allow(clippy::too_many_arguments)]
pub fn refund_event(
    id: &str,
    kind: &str,
    pi: &str,
    re: &str,
    amount: i64,
    status: &str,
    order: Option<&str>,
    created: i64,
) -> Value {
    let metadata = match order {
        Some(o) => json!({"order_id": o}),
        None => json!({}),
    };
    event(
        id,
        kind,
        CURRENT_API,
        created,
        json!({
            "id": re, "object": "refund", "amount": amount, "currency": "eur",
            "charge": format!("ch_{pi}"), "payment_intent": pi, "status": status,
            "reason": "requested_by_customer", "created": created, "metadata": metadata,
        }),
    )
}

/// `charge.refunded` at the current API version: the charge no longer embeds its refunds,
/// only the running total `amount_refunded`.
pub fn charge_refunded_total(
    id: &str,
    pi: &str,
    order: &str,
    amount: i64,
    amount_refunded: i64,
    created: i64,
) -> Value {
    event(
        id,
        "charge.refunded",
        CURRENT_API,
        created,
        json!({
            "id": format!("ch_{pi}"), "object": "charge", "amount": amount,
            "amount_captured": amount, "amount_refunded": amount_refunded, "currency": "eur",
            "payment_intent": pi, "refunded": amount_refunded == amount, "status": "succeeded",
            "captured": true, "paid": true, "metadata": {"order_id": order},
        }),
    )
}

pub fn dispute_closed(
    id: &str,
    pi: &str,
    dp: &str,
    amount: i64,
    status: &str,
    created: i64,
) -> Value {
    event(
        id,
        "charge.dispute.closed",
        CURRENT_API,
        created,
        json!({
            "id": dp, "object": "dispute", "amount": amount, "currency": "eur",
            "charge": format!("ch_{pi}"), "payment_intent": pi, "reason": "fraudulent",
            "status": status, "metadata": {},
        }),
    )
}

/// A payment intent event of any type (`payment_intent.canceled`,
/// `payment_intent.amount_capturable_updated`, …) at the current API version.
pub fn payment_intent_event(
    id: &str,
    kind: &str,
    pi: &str,
    order: &str,
    amount: i64,
    created: i64,
) -> Value {
    let status = match kind {
        "payment_intent.canceled" => "canceled",
        "payment_intent.amount_capturable_updated" => "requires_capture",
        "payment_intent.payment_failed" => "requires_payment_method",
        _ => "succeeded",
    };
    event(
        id,
        kind,
        CURRENT_API,
        created,
        json!({
            "id": pi, "object": "payment_intent", "amount": amount, "amount_capturable": amount,
            "amount_received": if status == "succeeded" { amount } else { 0 },
            "currency": "eur", "status": status, "metadata": {"order_id": order},
        }),
    )
}

/// A Checkout Session event: Pix and boleto sessions complete unpaid and pay later.
pub fn checkout_session(
    id: &str,
    kind: &str,
    pi: &str,
    order: &str,
    amount: i64,
    payment_status: &str,
    created: i64,
) -> Value {
    event(
        id,
        kind,
        CURRENT_API,
        created,
        json!({
            "id": format!("cs_{pi}"), "object": "checkout.session", "amount_total": amount,
            "currency": "brl", "client_reference_id": order, "mode": "payment",
            "payment_intent": pi, "payment_method_types": ["pix"], "payment_status": payment_status,
            "status": "complete", "metadata": {},
        }),
    )
}
