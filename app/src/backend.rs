//! The port between the dashboard and the server: plain serializable view types plus the
//! `AdminBackend` trait that `src/` implements over the store. `app/` never depends on the
//! server package; the server provides an `Arc<dyn AdminBackend>` through Leptos context.

use serde::{Deserialize, Serialize};

/// One row of the inbox page: an event as the receiver stored it and the processor filed it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
pub struct InboxPage {
    pub events: Vec<InboxEventView>,
    /// Pass as `before` to get the next (older) page; `None` on the last page.
    pub next_before: Option<i64>,
}

#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait AdminBackend: Send + Sync + 'static {
    /// Latest inbox events, newest first; `before` is the keyset cursor (an inbox id).
    async fn inbox_page(&self, before: Option<i64>, limit: u32) -> Result<InboxPage, String>;
}
