//! The port between the dashboard and the server: plain serializable view types plus the
//! `AdminBackend` trait that `src/` implements over the store. `app/` never depends on the
//! server package; the server provides an `Arc<dyn AdminBackend>` through Leptos context.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What a person may do. Ordered: each role can do everything the ones before it can.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Role {
    /// Support staff and managers: read everything.
    Viewer,
    /// On-call engineers: also redrive, resolve and discard dead letters.
    Operator,
    /// Also manage users and API tokens.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(text: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The signed-in person making a request. The server's session middleware puts it in the
/// request's extensions; server functions read it from there and pass it to the backend,
/// which checks the role before it changes anything.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    pub user_id: i64,
    pub name: String,
    pub role: Role,
    /// Signed in with a one-time or reset password: every page leads to the password form.
    pub must_change_password: bool,
    /// The client address the request came from, for the audit log.
    pub source: Option<String>,
}

impl Principal {
    pub fn can(&self, needed: Role) -> bool {
        self.role >= needed
    }
}

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
