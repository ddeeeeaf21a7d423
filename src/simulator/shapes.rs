//! Objects and events in the shapes of Stripe's API version `API_VERSION` (after the
//! objects in stripe/openapi's published fixtures): what the simulator stores, serves and
//! posts. Only the fields a merchant integration reads are filled; the rest are Stripe's
//! defaults.

use serde_json::{json, Value};

/// The API version every simulated event carries (Stripe's 2025 "basil" shapes: no
/// `charges` list on a payment intent, invoices name payments under `payments`).
pub const API_VERSION: &str = "2025-03-31.basil";

/// A payment method as a Checkout session or payment intent names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    Card,
    Pix,
    Boleto,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Card => "card",
            Method::Pix => "pix",
            Method::Boleto => "boleto",
        }
    }

    /// Pix and boleto are paid later, outside the checkout page.
    pub fn is_async(self) -> bool {
        self != Method::Card
    }
}

pub fn payment_intent(
    id: &str,
    order_id: &str,
    amount: i64,
    currency: &str,
    method: Method,
    created: i64,
) -> Value {
    json!({
        "id": id,
        "object": "payment_intent",
        "amount": amount,
        "amount_capturable": 0,
        "amount_details": {"tip": {}},
        "amount_received": 0,
        "application": null,
        "automatic_payment_methods": null,
        "canceled_at": null,
        "cancellation_reason": null,
        "capture_method": "automatic_async",
        "client_secret": format!("{id}_secret_sim"),
        "confirmation_method": "automatic",
        "created": created,
        "currency": currency,
        "customer": null,
        "description": null,
        "last_payment_error": null,
        "latest_charge": null,
        "livemode": false,
        "metadata": {"order_id": order_id},
        "next_action": null,
        "payment_method": null,
        "payment_method_types": [method.as_str()],
        "status": if method.is_async() { "requires_action" } else { "requires_payment_method" },
    })
}

pub fn charge(id: &str, pi: &Value, status: &str, created: i64) -> Value {
    let paid = status == "succeeded";
    let amount = pi["amount"].clone();
    let method = pi["payment_method_types"][0].as_str().unwrap_or("card");
    json!({
        "id": id,
        "object": "charge",
        "amount": amount,
        "amount_captured": if paid { amount.clone() } else { json!(0) },
        "amount_refunded": 0,
        "balance_transaction": null,
        "captured": paid,
        "created": created,
        "currency": pi["currency"],
        "disputed": false,
        "failure_code": if paid { Value::Null } else { json!("card_declined") },
        "failure_message": if paid { Value::Null } else { json!("Your card was declined.") },
        "livemode": false,
        "metadata": pi["metadata"],
        "outcome": if paid {
            json!({"network_status": "approved_by_network", "reason": null, "risk_level": "normal",
                   "seller_message": "Payment complete.", "type": "authorized"})
        } else {
            json!({"network_status": "declined_by_network", "reason": "generic_decline",
                   "risk_level": "normal", "seller_message": "The bank did not return any further details with this decline.",
                   "type": "issuer_declined"})
        },
        "paid": paid,
        "payment_intent": pi["id"],
        "payment_method_details": {"type": method},
        "refunded": false,
        "status": status,
    })
}

pub fn refund(
    id: &str,
    pi: &Value,
    amount: i64,
    status: &str,
    metadata: Value,
    created: i64,
) -> Value {
    json!({
        "id": id,
        "object": "refund",
        "amount": amount,
        "balance_transaction": null,
        "charge": pi["latest_charge"],
        "created": created,
        "currency": pi["currency"],
        "destination_details": {"type": pi["payment_method_types"][0]},
        "failure_reason": null,
        "metadata": metadata,
        "payment_intent": pi["id"],
        "reason": "requested_by_customer",
        "receipt_number": null,
        "source_transfer_reversal": null,
        "status": status,
        "transfer_reversal": null,
    })
}

pub fn dispute(id: &str, pi: &Value, created: i64) -> Value {
    json!({
        "id": id,
        "object": "dispute",
        "amount": pi["amount_received"],
        "balance_transactions": [],
        "charge": pi["latest_charge"],
        "created": created,
        "currency": pi["currency"],
        "evidence": {"customer_name": null, "product_description": null, "uncategorized_text": null},
        "evidence_details": {"due_by": created + 7 * 86_400, "has_evidence": false, "past_due": false, "submission_count": 0},
        "is_charge_refundable": false,
        "livemode": false,
        "metadata": {},
        "payment_intent": pi["id"],
        "reason": "fraudulent",
        "status": "needs_response",
    })
}

pub fn checkout_session(id: &str, pi: &Value, order_id: &str, created: i64) -> Value {
    json!({
        "id": id,
        "object": "checkout.session",
        "amount_subtotal": pi["amount"],
        "amount_total": pi["amount"],
        "client_reference_id": order_id,
        "created": created,
        "currency": pi["currency"],
        "expires_at": created + 86_400,
        "livemode": false,
        "metadata": {"order_id": order_id},
        "mode": "payment",
        "payment_intent": pi["id"],
        "payment_method_types": pi["payment_method_types"],
        "payment_status": "unpaid",
        "status": "open",
        "success_url": "https://merchant.example/thanks",
        "url": null,
    })
}

/// An event announcing `object`, serialised: straight from borrowed parts, because building
/// it as a `Value` first copied every object once more per event.
pub fn event(
    id: &str,
    event_type: &str,
    created: i64,
    object: &Value,
    previous: Option<&Value>,
) -> String {
    #[derive(serde::Serialize)]
    struct Data<'a> {
        object: &'a Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        previous_attributes: Option<&'a Value>,
    }
    #[derive(serde::Serialize)]
    struct Request {
        id: Option<String>,
        idempotency_key: Option<String>,
    }
    #[derive(serde::Serialize)]
    struct Event<'a> {
        id: &'a str,
        object: &'static str,
        api_version: &'static str,
        created: i64,
        data: Data<'a>,
        livemode: bool,
        pending_webhooks: u32,
        request: Request,
        #[serde(rename = "type")]
        event_type: &'a str,
    }
    serde_json::to_string(&Event {
        id,
        object: "event",
        api_version: API_VERSION,
        created,
        data: Data {
            object,
            previous_attributes: previous,
        },
        livemode: false,
        pending_webhooks: 1,
        request: Request {
            id: None,
            idempotency_key: None,
        },
        event_type,
    })
    .expect("JSON values serialise")
}
