//! The Stripe objects oncehook reads, typed where code looks and kept whole otherwise:
//! every object keeps the fields it was not declared with (`rest`), so an event read from
//! the API can go back into the inbox exactly as the provider wrote it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One page of a Stripe list (`object: "list"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct List<T> {
    pub data: Vec<T>,
    pub has_more: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// A field Stripe returns as an id, or as the object when asked with `expand[]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Expandable<T> {
    Id(String),
    Object(Box<T>),
}

impl<T: HasId> Expandable<T> {
    pub fn id(&self) -> &str {
        match self {
            Expandable::Id(id) => id,
            Expandable::Object(o) => o.id(),
        }
    }

    pub fn object(&self) -> Option<&T> {
        match self {
            Expandable::Id(_) => None,
            Expandable::Object(o) => Some(o),
        }
    }
}

/// Objects with an id: what list paging resumes after (`starting_after`).
pub trait HasId {
    fn id(&self) -> &str;
}

macro_rules! has_id {
    ($($t:ty),*) => {$(
        impl HasId for $t {
            fn id(&self) -> &str {
                &self.id
            }
        }
    )*};
}

has_id!(Event, PaymentIntent, Charge, Refund, Dispute);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub id: String,
    #[serde(rename = "type")]
    pub event_type: String,
    /// Unix seconds.
    pub created: i64,
    #[serde(default)]
    pub api_version: Option<String>,
    pub data: EventData,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventData {
    /// The object as it was when the event happened (any kind: kept as JSON).
    pub object: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_attributes: Option<Value>,
}

impl Event {
    /// The event as JSON, as the provider would post it to a webhook endpoint.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("an event serialises")
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaymentIntent {
    pub id: String,
    pub amount: i64,
    #[serde(default)]
    pub amount_received: i64,
    pub currency: String,
    pub status: String,
    pub created: i64,
    #[serde(default)]
    pub latest_charge: Option<Expandable<Charge>>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Charge {
    pub id: String,
    pub amount: i64,
    #[serde(default)]
    pub amount_refunded: i64,
    pub currency: String,
    pub status: String,
    pub created: i64,
    #[serde(default)]
    pub refunded: bool,
    #[serde(default)]
    pub disputed: bool,
    #[serde(default)]
    pub payment_intent: Option<String>,
    /// Present only with `expand[]=refunds` in current API versions.
    #[serde(default)]
    pub refunds: Option<List<Refund>>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Refund {
    pub id: String,
    pub amount: i64,
    pub currency: String,
    /// `pending`, `requires_action`, `succeeded`, `failed` or `canceled` (nullable in the
    /// API's schema).
    #[serde(default)]
    pub status: Option<String>,
    pub created: i64,
    #[serde(default)]
    pub charge: Option<String>,
    #[serde(default)]
    pub payment_intent: Option<String>,
    #[serde(default)]
    pub failure_reason: Option<String>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dispute {
    pub id: String,
    pub amount: i64,
    pub currency: String,
    /// `warning_needs_response` … `needs_response`, `under_review`, `won`, `lost`.
    pub status: String,
    pub created: i64,
    pub charge: String,
    #[serde(default)]
    pub payment_intent: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// The parameters of `POST /v1/refunds` oncehook sends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateRefund {
    pub payment_intent: String,
    /// Minor units; none: what is left of the payment.
    pub amount: Option<i64>,
    /// `duplicate`, `fraudulent` or `requested_by_customer`.
    pub reason: Option<String>,
    pub metadata: BTreeMap<String, String>,
}

impl CreateRefund {
    /// Form fields as Stripe takes them (`metadata[order_id]=…`), in a stable order.
    pub fn form(&self) -> Vec<(String, String)> {
        let mut form = vec![("payment_intent".to_string(), self.payment_intent.clone())];
        if let Some(amount) = self.amount {
            form.push(("amount".into(), amount.to_string()));
        }
        if let Some(reason) = &self.reason {
            form.push(("reason".into(), reason.clone()));
        }
        for (k, v) in &self.metadata {
            form.push((format!("metadata[{k}]"), v.clone()));
        }
        form
    }
}
