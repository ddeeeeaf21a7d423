//! The mappings oncehook ships: Stripe's (and the bare envelope), Standard Webhooks',
//! Asaas', Mercado Pago's (with the views a fetched payment splits into) and PagBank's.
//! A provider's `mapping` in the config replaces or extends them; these are data too.

use super::*;

fn ptrs(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn rule(
    transition: impl Into<TransitionRule>,
    external_ref: &[&str],
    lookup: &[&str],
    amount: &[&str],
) -> EventRule {
    EventRule {
        transition: transition.into(),
        order_id: ptrs(&["/data/object/metadata/order_id"]),
        external_ref: ptrs(external_ref),
        parent_ref: vec![],
        lookup_ref: ptrs(lookup),
        amount: ptrs(amount),
        currency: ptrs(&["/data/object/currency"]),
        occurred_at: ptrs(&["/created"]),
        sequence: vec![],
        ignore_without_ref: false,
        amount_unit: AmountUnit::Minor,
        currency_default: None,
        local_offset: None,
    }
}

fn by_field(at: &str, map: &[(&str, Transition)], default: Option<Transition>) -> TransitionRule {
    TransitionRule::ByField(TransitionByField {
        at: ptrs(&[at]),
        map: map.iter().map(|(k, t)| (k.to_string(), *t)).collect(),
        default,
    })
}

/// The built-in Stripe mapping, API versions 2020-08-27 and later. Field locations follow
/// the objects in Stripe's published fixtures (stripe/openapi, `fixtures3.json`).
pub fn stripe_default() -> Mapping {
    use Transition::*;
    // An invoice names its payment intent directly in older API versions and under the
    // invoice's payments list in newer ones (2025-03-31 "basil" and later).
    let invoice_pi = [
        "/data/object/payment_intent",
        "/data/object/payments/data/0/payment/payment_intent",
    ];
    let mut invoice = rule(Pay, &invoice_pi, &[], &["/data/object/amount_paid"]);
    invoice.order_id = ptrs(&[
        "/data/object/metadata/order_id",
        "/data/object/subscription_details/metadata/order_id",
        "/data/object/parent/subscription_details/metadata/order_id",
    ]);
    let pi = ["/data/object/id"];
    let payment_of = ["/data/object/payment_intent", "/data/object/charge"];

    // A refund's status says what happened to it: only a succeeded refund is money, a
    // failed or canceled one reverses it.
    let refund_status = |default| {
        by_field(
            "/data/object/status",
            &[
                ("pending", RefundPending),
                ("requires_action", RefundPending),
                ("succeeded", Refund),
                ("failed", RefundFailed),
                ("canceled", RefundCanceled),
            ],
            default,
        )
    };
    let refund_rule = |default| {
        let mut r = rule(
            refund_status(default),
            &["/data/object/id"],
            &payment_of,
            &["/data/object/amount"],
        );
        r.parent_ref = ptrs(&payment_of);
        r
    };
    // `charge.refunded` reports the charge's running total (`amount_refunded`), whatever the
    // API version: the ledger records only the part no known refund accounts for. Its
    // resource is the payment the refunds belong to, as refunds name it.
    let mut charge_refunded = rule(
        RefundTotal,
        &["/data/object/payment_intent", "/data/object/id"],
        &["/data/object/payment_intent", "/data/object/id"],
        &["/data/object/amount_refunded"],
    );
    charge_refunded.parent_ref = vec![];
    let mut dispute_created = rule(
        Dispute,
        &["/data/object/id"],
        &payment_of,
        &["/data/object/amount"],
    );
    dispute_created.parent_ref = ptrs(&payment_of);
    let mut dispute_closed = dispute_created.clone();
    dispute_closed.transition = by_field(
        "/data/object/status",
        &[
            ("won", DisputeWon),
            ("warning_closed", DisputeWon),
            ("lost", DisputeLost),
        ],
        None,
    );
    // Checkout: the session names the order (client_reference_id) and its payment intent;
    // Pix and boleto pay asynchronously, so `completed` is money only when already paid.
    let checkout = |transition: TransitionRule| {
        let mut r = rule(
            transition,
            &["/data/object/payment_intent"],
            &[],
            &["/data/object/amount_total"],
        );
        r.order_id = ptrs(&[
            "/data/object/client_reference_id",
            "/data/object/metadata/order_id",
        ]);
        r
    };
    let events = BTreeMap::from([
        (
            "payment_intent.amount_capturable_updated".into(),
            rule(Authorize, &pi, &[], &["/data/object/amount_capturable"]),
        ),
        (
            "payment_intent.succeeded".into(),
            rule(
                Pay,
                &pi,
                &[],
                &["/data/object/amount_received", "/data/object/amount"],
            ),
        ),
        ("invoice.payment_succeeded".into(), invoice.clone()),
        ("invoice.paid".into(), invoice),
        (
            "payment_intent.payment_failed".into(),
            rule(Fail, &pi, &[], &["/data/object/amount"]),
        ),
        (
            "payment_intent.canceled".into(),
            rule(Cancel, &pi, &[], &["/data/object/amount"]),
        ),
        ("charge.refunded".into(), charge_refunded),
        ("refund.created".into(), refund_rule(Some(Refund))),
        ("refund.updated".into(), refund_rule(None)),
        ("refund.failed".into(), refund_rule(Some(RefundFailed))),
        ("charge.refund.updated".into(), refund_rule(None)),
        ("charge.dispute.created".into(), dispute_created),
        ("charge.dispute.closed".into(), dispute_closed),
        (
            "checkout.session.completed".into(),
            checkout(by_field(
                "/data/object/payment_status",
                &[("paid", Pay)],
                None,
            )),
        ),
        (
            "checkout.session.async_payment_succeeded".into(),
            checkout(Pay.into()),
        ),
        (
            "checkout.session.async_payment_failed".into(),
            checkout(Fail.into()),
        ),
    ]);
    Mapping {
        event_id: ptrs(&["/id"]),
        event_type: ptrs(&["/type"]),
        api_version: ptrs(&["/api_version"]),
        min_api_version: Some("2020-08-27".into()),
        events,
    }
}

/// A mapping for Standard Webhooks senders with a payment payload of this shape:
/// `{"type": "payment.succeeded", "timestamp": "<RFC 3339>", "data": {"order_id",
/// "payment_id", "refund_id", "dispute_id", "amount", "currency", "sequence"}}`.
/// The Brazilian presets and `generic`, until a provider's own mapping exists: the event's
/// id and type are read (Mercado Pago `id` + `action`, Asaas `id` + `event`, or `type`);
/// every event is kept and filed as ignored unless `[providers.events]` maps it.
pub fn envelope_only() -> Mapping {
    Mapping {
        event_id: ptrs(&["/id"]),
        event_type: ptrs(&["/action", "/event", "/type"]),
        api_version: ptrs(&["/api_version"]),
        min_api_version: None,
        events: BTreeMap::new(),
    }
}

/// Asaas: `{"id", "event": "PAYMENT_RECEIVED", "dateCreated": "2026-12-06 10:00:00",
/// "payment": {"id": "pay_…", "value": 100.5, "externalReference": "<order>", …}}`; values
/// in reais, times in Brasília (-03:00). A payment's events share its id: confirmed and
/// received are one payment (one effect), a refund or chargeback its own fact of it.
pub fn asaas_default() -> Mapping {
    use Transition::*;
    let r = |transition: Transition| EventRule {
        transition: transition.into(),
        order_id: ptrs(&["/payment/externalReference"]),
        external_ref: ptrs(&["/payment/id"]),
        parent_ref: if matches!(transition, Pay | Fail | Cancel) {
            vec![]
        } else {
            ptrs(&["/payment/id"])
        },
        lookup_ref: ptrs(&["/payment/id"]),
        amount: ptrs(&["/payment/value"]),
        currency: vec![],
        occurred_at: ptrs(&["/dateCreated"]),
        sequence: vec![],
        ignore_without_ref: false,
        amount_unit: AmountUnit::Major,
        currency_default: Some("BRL".into()),
        local_offset: Some("-03:00".into()),
    };
    Mapping {
        event_id: ptrs(&["/id"]),
        event_type: ptrs(&["/event"]),
        api_version: vec![],
        min_api_version: None,
        events: BTreeMap::from([
            ("PAYMENT_CONFIRMED".into(), r(Pay)),
            ("PAYMENT_RECEIVED".into(), r(Pay)),
            ("PAYMENT_RECEIVED_IN_CASH".into(), r(Pay)),
            // A Pix QR or a boleto not paid by its due date; a later payment still counts.
            ("PAYMENT_OVERDUE".into(), r(Fail)),
            ("PAYMENT_DELETED".into(), r(Cancel)),
            ("PAYMENT_REFUNDED".into(), r(Refund)),
            ("PAYMENT_CHARGEBACK_REQUESTED".into(), r(Dispute)),
            ("PAYMENT_CHARGEBACK_DISPUTE".into(), r(Dispute)),
        ]),
    }
}

/// Mercado Pago: a payment as `GET /v1/payments/{id}` answers it (the receiver fetches it
/// for each thin notification; the notification's own `action` is the inbox's type).
/// `status` is the type: `approved` is the payment, `refunded` its running refund total,
/// `charged_back` a dispute, `rejected` a failure, `cancelled` (a Pix QR that expired
/// unpaid) a cancel; `pending`, `in_process` and `in_mediation` are kept, not acted on.
/// Amounts in major units (`transaction_amount: 5.5`).
pub fn mercadopago_default() -> Mapping {
    use Transition::*;
    let r = |transition: Transition, amount: &str| EventRule {
        transition: transition.into(),
        order_id: ptrs(&["/external_reference"]),
        external_ref: ptrs(&["/id"]),
        parent_ref: if transition == Dispute {
            ptrs(&["/id"])
        } else {
            vec![]
        },
        lookup_ref: ptrs(&["/id"]),
        amount: ptrs(&[amount]),
        currency: ptrs(&["/currency_id"]),
        occurred_at: ptrs(&["/date_last_updated", "/date_approved", "/date_created"]),
        sequence: vec![],
        ignore_without_ref: false,
        amount_unit: AmountUnit::Major,
        currency_default: Some("BRL".into()),
        local_offset: None,
    };
    // A refund listed in a fetched payment (`mercadopago_views`): its own fact, in its
    // payment's refund group.
    let refund = EventRule {
        transition: Refund.into(),
        order_id: ptrs(&["/external_reference"]),
        external_ref: ptrs(&["/id"]),
        parent_ref: ptrs(&["/payment_id"]),
        lookup_ref: ptrs(&["/payment_id"]),
        amount: ptrs(&["/amount"]),
        currency: ptrs(&["/currency_id"]),
        occurred_at: ptrs(&["/date_created"]),
        sequence: vec![],
        ignore_without_ref: false,
        amount_unit: AmountUnit::Major,
        currency_default: Some("BRL".into()),
        local_offset: None,
    };
    Mapping {
        event_id: ptrs(&["/id"]),
        event_type: ptrs(&["/oncehook_view", "/status", "/action", "/type"]),
        api_version: ptrs(&["/api_version"]),
        min_api_version: None,
        events: BTreeMap::from([
            ("refund".into(), refund),
            ("authorized".into(), r(Authorize, "/transaction_amount")),
            ("approved".into(), r(Pay, "/transaction_amount")),
            ("rejected".into(), r(Fail, "/transaction_amount")),
            ("cancelled".into(), r(Cancel, "/transaction_amount")),
            (
                "refunded".into(),
                r(RefundTotal, "/transaction_amount_refunded"),
            ),
            ("charged_back".into(), r(Dispute, "/transaction_amount")),
        ]),
    }
}

/// The facts a fetched Mercado Pago payment holds besides the one its status names, each
/// as a view the built-in mapping reads: a payment refunded or charged back was approved
/// first (`date_approved`), so it also holds its approval (`paid`: the payment as it was
/// when approved); a payment `approved` with refunds (`status_detail` `partially_refunded`)
/// also holds its refund total (`refunds`: read as the running total a `refunded` status
/// carries). A notification that reaches oncehook only after a later change still brings
/// every fact, and one fact announced by several notifications is one effect (its key
/// names the fact, not the notification). Empty for a payment whose status says it all.
pub fn mercadopago_views(payment: &[u8]) -> Vec<(String, Vec<u8>)> {
    let Ok(Value::Object(p)) = serde_json::from_slice::<Value>(payment) else {
        return vec![];
    };
    let status = p.get("status").and_then(Value::as_str).unwrap_or_default();
    let approved_at = p.get("date_approved").filter(|d| d.is_string()).cloned();
    let refunded = p
        .get("transaction_amount_refunded")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let mut views = Vec::new();
    if let Some(approved_at) = approved_at {
        if status != "approved" {
            let mut paid = p.clone();
            paid.insert("status".into(), "approved".into());
            paid.insert("status_detail".into(), "accredited".into());
            paid.insert("transaction_amount_refunded".into(), 0.into());
            paid.insert("refunds".into(), Value::Array(vec![]));
            paid.insert("date_last_updated".into(), approved_at);
            views.push(("paid".into(), Value::Object(paid).to_string().into_bytes()));
        }
    }
    if refunded > 0.0 && status != "refunded" {
        let mut refunds = p.clone();
        refunds.insert("status".into(), "refunded".into());
        views.push((
            "refunds".into(),
            Value::Object(refunds).to_string().into_bytes(),
        ));
    }
    // Each approved refund, a fact of its own (its id is what a refund command made through
    // the API is confirmed by); the running total then adds only what no listed refund
    // accounts for.
    for r in p
        .get("refunds")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if r.get("status").and_then(Value::as_str) != Some("approved") {
            continue;
        }
        let mut refund = r.clone();
        refund["oncehook_view"] = "refund".into();
        refund["payment_id"] = p.get("id").cloned().unwrap_or_default();
        refund["external_reference"] = p.get("external_reference").cloned().unwrap_or_default();
        refund["currency_id"] = p.get("currency_id").cloned().unwrap_or_default();
        let id = match &r["id"] {
            Value::String(id) => id.clone(),
            other => other.to_string(),
        };
        views.push((format!("refund:{id}"), refund.to_string().into_bytes()));
    }
    views
}

/// PagBank orders API: the notification is the order itself, `{"id": "ORDE_…",
/// "reference_id": "<order>", "charges": [{"id": "CHAR_…", "status": "PAID", "amount":
/// {"value": 1500, "currency": "BRL"}, "paid_at": …}]}`, without a notification id (so
/// its hash is the id) or type: the first charge's status is the type.
pub fn pagbank_default() -> Mapping {
    use Transition::*;
    let r = |transition: Transition| EventRule {
        transition: transition.into(),
        order_id: ptrs(&["/reference_id", "/charges/0/reference_id"]),
        external_ref: ptrs(&["/charges/0/id"]),
        parent_ref: if transition == Refund {
            ptrs(&["/charges/0/id"])
        } else {
            vec![]
        },
        lookup_ref: ptrs(&["/charges/0/id"]),
        amount: ptrs(&["/charges/0/amount/value"]),
        currency: ptrs(&["/charges/0/amount/currency"]),
        occurred_at: ptrs(&["/charges/0/paid_at", "/charges/0/created_at", "/created_at"]),
        sequence: vec![],
        ignore_without_ref: false,
        amount_unit: AmountUnit::Minor,
        currency_default: Some("BRL".into()),
        local_offset: None,
    };
    Mapping {
        event_id: vec![],
        event_type: ptrs(&["/charges/0/status"]),
        api_version: vec![],
        min_api_version: None,
        events: BTreeMap::from([
            ("AUTHORIZED".into(), r(Authorize)),
            ("PAID".into(), r(Pay)),
            ("DECLINED".into(), r(Fail)),
            ("CANCELED".into(), r(Cancel)),
        ]),
    }
}

pub fn standard_webhooks_default() -> Mapping {
    use Transition::*;
    let r = |transition: Transition, external_ref: &str| EventRule {
        transition: transition.into(),
        order_id: ptrs(&["/data/order_id"]),
        external_ref: ptrs(&[external_ref]),
        parent_ref: if external_ref == "/data/payment_id" {
            vec![]
        } else {
            ptrs(&["/data/payment_id"])
        },
        lookup_ref: ptrs(&["/data/payment_id"]),
        amount: ptrs(&["/data/amount"]),
        currency: ptrs(&["/data/currency"]),
        occurred_at: ptrs(&["/timestamp"]),
        sequence: ptrs(&["/data/sequence"]),
        ignore_without_ref: false,
        amount_unit: AmountUnit::Minor,
        currency_default: None,
        local_offset: None,
    };
    Mapping {
        event_id: vec![],
        event_type: ptrs(&["/type"]),
        api_version: vec![],
        min_api_version: None,
        events: BTreeMap::from([
            (
                "payment.authorized".into(),
                r(Authorize, "/data/payment_id"),
            ),
            ("payment.succeeded".into(), r(Pay, "/data/payment_id")),
            ("payment.settled".into(), r(Settle, "/data/payment_id")),
            ("payment.failed".into(), r(Fail, "/data/payment_id")),
            ("payment.canceled".into(), r(Cancel, "/data/payment_id")),
            ("refund.pending".into(), r(RefundPending, "/data/refund_id")),
            ("refund.succeeded".into(), r(Refund, "/data/refund_id")),
            ("refund.failed".into(), r(RefundFailed, "/data/refund_id")),
            (
                "refund.canceled".into(),
                r(RefundCanceled, "/data/refund_id"),
            ),
            ("dispute.created".into(), r(Dispute, "/data/dispute_id")),
            ("dispute.won".into(), r(DisputeWon, "/data/dispute_id")),
            ("dispute.lost".into(), r(DisputeLost, "/data/dispute_id")),
        ]),
    }
}
