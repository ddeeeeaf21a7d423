//! Provider commands (refunds oncehook asks the provider for) as the order page, the order's
//! JSON and the API show them.

use serde::{Deserialize, Serialize};

/// One command: who asked for what, the key it is sent under, every attempt and its
/// answer, and the event that confirmed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct CommandView {
    pub id: i64,
    /// `refund`.
    pub kind: String,
    /// requested, sent, confirmed, failed or cancelled.
    pub state: String,
    /// Minor units of `currency`.
    pub amount: i64,
    pub currency: String,
    pub reason: String,
    /// The `Idempotency-Key` every send carries: `order:{id}:refund:{n}`.
    pub idempotency_key: String,
    pub provider: String,
    /// The payment refunded.
    pub payment_ref: String,
    pub requested_by: String,
    /// RFC 3339, UTC.
    pub requested_at: String,
    /// The provider's refund id, once it answered.
    pub provider_object_id: Option<String>,
    pub sent_at: Option<String>,
    /// The event whose money confirmed it, and its page.
    pub confirmed_event_id: Option<String>,
    pub confirmed_href: Option<String>,
    pub confirmed_at: Option<String>,
    /// The provider's refusal (type, code, message) when it failed.
    pub error: Option<String>,
    pub attempts: Vec<CommandAttemptView>,
}

impl CommandView {
    /// Asked for and neither counted nor over: shown in the page's pending strip.
    pub fn in_flight(&self) -> bool {
        matches!(self.state.as_str(), "requested" | "sent")
    }
}

/// One send of a command and what the provider answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct CommandAttemptView {
    pub attempt: i64,
    /// RFC 3339, UTC.
    pub at: String,
    pub duration_ms: i64,
    pub status_code: Option<i64>,
    pub error: Option<String>,
    pub answer: Option<String>,
}

/// A refund an operator asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct RefundRequest {
    /// Minor units of the order's currency; none: everything left to refund.
    #[serde(default)]
    pub amount: Option<i64>,
    /// Why (kept in the audit log and the refund's metadata).
    pub reason: String,
}
