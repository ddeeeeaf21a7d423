//! A provider's event once its mapping has read it: the transition it carries for which
//! order and resource, with its money and time. The store applies it; nothing here reads
//! a payload.

use super::Transition;

/// An event turned into a domain transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedEvent {
    pub event_type: String,
    pub transition: Transition,
    pub order_id: Option<String>,
    pub external_ref: String,
    /// The payment a refund or dispute belongs to.
    pub parent_ref: Option<String>,
    pub lookup_refs: Vec<String>,
    pub amount: Option<i64>,
    pub currency: Option<String>,
    pub occurred_at_ms: i64,
    pub sequence: Option<i64>,
}
