//! The inbox (`/events`) and one event (`/events/{id}`).

use serde::{Deserialize, Serialize};

use super::query::{clean_filter, percent_encode};

/// One row of the inbox page: an event as the receiver stored it and the processor filed it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct InboxEventView {
    pub id: i64,
    pub provider: String,
    pub event_id: String,
    pub event_type: Option<String>,
    /// pending, processing, applied, duplicate, stale, ignored, dead (in the dead-letter queue)
    pub status: String,
    pub reason: Option<String>,
    pub order_id: Option<String>,
    /// How many times the provider delivered this event (duplicates included).
    pub deliveries: i64,
    /// RFC 3339, UTC.
    pub received_at: String,
}

/// A page of the inbox, newest first, with the keyset cursor for the next page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct InboxPage {
    pub events: Vec<InboxEventView>,
    /// Pass as `before` to get the next (older) page; `None` on the last page.
    pub next_before: Option<i64>,
}

/// Inbox filters; they live in the URL (`/events?status=failed&provider=stripe`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxQuery {
    pub provider: Option<String>,
    pub status: Option<String>,
    pub event_type: Option<String>,
    pub order_id: Option<String>,
    pub event_id: Option<String>,
    /// The correlation id of any delivery (from the provider's or a proxy's request id).
    pub correlation_id: Option<String>,
    /// Received at or after / before, UTC: `2026-12-01`, `2026-12-01T10:30` or RFC 3339.
    pub since: Option<String>,
    pub until: Option<String>,
    /// A payload field and its value: `data.object.customer = cus_123`.
    pub payload: Option<String>,
    /// Keyset cursor: only events older than this inbox id.
    pub before: Option<i64>,
}

impl InboxQuery {
    pub fn normalized(self) -> InboxQuery {
        InboxQuery {
            provider: clean_filter(self.provider),
            status: clean_filter(self.status),
            event_type: clean_filter(self.event_type),
            order_id: clean_filter(self.order_id),
            event_id: clean_filter(self.event_id),
            correlation_id: clean_filter(self.correlation_id),
            since: clean_filter(self.since),
            until: clean_filter(self.until),
            payload: clean_filter(self.payload),
            before: self.before,
        }
    }

    /// The URL of this view (filters kept, cursor as given).
    pub fn href(&self) -> String {
        let mut parts = vec![];
        for (key, value) in [
            ("provider", &self.provider),
            ("status", &self.status),
            ("type", &self.event_type),
            ("order", &self.order_id),
            ("event", &self.event_id),
            ("correlation", &self.correlation_id),
            ("since", &self.since),
            ("until", &self.until),
            ("payload", &self.payload),
        ] {
            if let Some(v) = value {
                parts.push(format!("{key}={}", percent_encode(v)));
            }
        }
        if let Some(before) = self.before {
            parts.push(format!("before={before}"));
        }
        if parts.is_empty() {
            "/events".into()
        } else {
            format!("/events?{}", parts.join("&"))
        }
    }
}

/// One delivery of an event by the provider.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DeliveryView {
    pub received_at: String,
    pub duplicate: bool,
    pub correlation_id: String,
}

/// Everything about one received event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct EventDetail {
    pub id: i64,
    pub provider: String,
    pub event_id: String,
    pub event_type: Option<String>,
    pub api_version: Option<String>,
    pub status: String,
    pub reason: Option<String>,
    pub order_id: Option<String>,
    pub effect_key: Option<String>,
    /// What became of it, in one line: applied, collapsed onto evt_…, stale, ignored,
    /// dead-lettered, waiting.
    pub outcome: String,
    /// The event whose delivery applied the effect, when it was another one.
    pub collapsed_onto: Option<String>,
    pub attempts: i64,
    pub correlation_id: String,
    pub received_at: String,
    pub processed_at: Option<String>,
    /// Pretty-printed JSON, or the body as text when it is not JSON.
    pub payload_pretty: String,
    pub raw_size: usize,
    pub deliveries: Vec<DeliveryView>,
    /// Earlier failures, oldest first: "time · class · error".
    pub errors: Vec<String>,
    /// Dead letters it became: (id, status).
    pub dead_letters: Vec<(i64, String)>,
}
