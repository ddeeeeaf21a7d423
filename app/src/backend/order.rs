//! One order's story (`/orders/{id}`) and the search that leads to it.

use serde::{Deserialize, Serialize};

use super::query::percent_encode;

/// One order as support staff read it: why it is in its status, its money, the provider
/// resources behind it and its whole story in time order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct OrderDetail {
    pub order_id: String,
    pub status: String,
    /// One sentence: which fact set the status, when, and what came after and changed nothing.
    pub why: String,
    pub currency: Option<String>,
    /// Minor units of `currency`.
    pub amount_paid: i64,
    pub amount_refunded: i64,
    pub amount_disputed: i64,
    pub net: i64,
    /// Minor units an operator may still ask to refund: paid, minus refunded, minus refunds
    /// asked for that still hold their amount, minus what disputes make unrefundable (the
    /// server checks the same under the order's lock).
    #[serde(default)]
    pub refundable: i64,
    /// Why less than the rest is refundable, when a dispute is the reason.
    #[serde(default)]
    pub refund_note: Option<String>,
    /// What a person should look at (e.g. a refund larger than what is known to be paid).
    pub attention: Vec<String>,
    pub resources: Vec<OrderResourceView>,
    /// Oldest first.
    pub timeline: Vec<TimelineEntry>,
    /// Refunds oncehook asked the provider for, oldest first (beside the ledger).
    pub commands: Vec<super::CommandView>,
    pub created_at: String,
    pub updated_at: String,
}

/// A provider resource of the order (payment intent, refund, dispute) and its latest state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct OrderResourceView {
    pub kind: String,
    pub resource_id: String,
    /// The payment a refund or dispute belongs to.
    pub parent_ref: Option<String>,
    pub state: String,
    pub amount: Option<i64>,
    pub at: String,
    pub event_id: String,
}

/// One moment of an order's story.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct TimelineEntry {
    /// RFC 3339, UTC.
    pub at: String,
    /// delivery, redelivery, processed, money, stale, outbox, dead-letter, redrive
    pub kind: String,
    pub title: String,
    pub detail: Option<String>,
    pub href: Option<String>,
    /// A status shown as a badge (the event's, the message's, the dead letter's).
    pub status: Option<String>,
}

/// The order page of `order_id`. An id that cannot be one path segment (a `/` or `\\` in
/// it, or a dot segment: the sign-in gate refuses such paths) goes in the query instead.
pub fn order_href(order_id: &str) -> String {
    let segment_safe = !order_id.contains(['/', '\\']) && !matches!(order_id, "" | "." | "..");
    if segment_safe {
        format!("/orders/{}", percent_encode(order_id))
    } else {
        format!("/orders?id={}", percent_encode(order_id))
    }
}

/// Where a search leads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SearchHit {
    Order(String),
    /// An event that belongs to no order (yet): its inbox id.
    Event(i64),
    Nothing,
}

impl SearchHit {
    /// The page this hit opens.
    pub fn href(&self) -> Option<String> {
        match self {
            SearchHit::Order(id) => Some(order_href(id)),
            SearchHit::Event(id) => Some(format!("/events/{id}")),
            SearchHit::Nothing => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::order_href;

    #[test]
    fn every_order_id_has_a_link_the_gate_lets_through() {
        assert_eq!(order_href("ord_1"), "/orders/ord_1");
        assert_eq!(order_href("ord 1?x#y"), "/orders/ord%201%3Fx%23y");
        assert_eq!(order_href("a/b"), "/orders?id=a%2Fb");
        assert_eq!(order_href(".."), "/orders?id=..");
        assert_eq!(order_href("x\\y"), "/orders?id=x%5Cy");
    }
}
