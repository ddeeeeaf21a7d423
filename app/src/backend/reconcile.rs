//! Reconciliation (`/reconciliation` and `/api/v1/reconciliation/*`): runs and diffs.

use serde::{Deserialize, Serialize};

/// Which diffs a list shows; empty fields match everything. Keyset: `before` an id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema, utoipa::IntoParams))]
#[cfg_attr(feature = "ssr", into_params(parameter_in = Query))]
pub struct DiffQuery {
    /// open | fixed | resolved
    pub state: Option<String>,
    /// missing_event | unprocessed | missing_fact | status_mismatch | amount_mismatch |
    /// unknown_order | window_exceeded
    pub kind: Option<String>,
    pub provider: Option<String>,
    pub order_id: Option<String>,
    /// Diffs first found by this run.
    pub run_id: Option<i64>,
    /// Keyset cursor: diffs with a smaller id.
    pub before: Option<i64>,
    /// At most this many (default 50, at most 500).
    #[cfg_attr(feature = "ssr", param(minimum = 1, maximum = 500, default = 50))]
    pub limit: Option<u32>,
}

/// One mismatch between the provider and oncehook.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DiffView {
    pub id: i64,
    pub provider: String,
    pub kind: String,
    pub order_id: Option<String>,
    pub provider_event_id: Option<String>,
    pub object_id: Option<String>,
    /// open | fixed | resolved
    pub state: String,
    pub detail: String,
    /// What a fix did, or why a person resolved it.
    pub resolution: Option<String>,
    /// `reconciler` for automatic fixes, else the person.
    pub closed_by: Option<String>,
    /// The event a fix ingested.
    pub fix_event_id: Option<String>,
    pub first_run_id: i64,
    /// Unix ms.
    pub found_at: i64,
    pub closed_at: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DiffPage {
    pub diffs: Vec<DiffView>,
    /// The `before` of the next page, when there may be one.
    pub next_before: Option<i64>,
}

/// One reconciliation run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct RunView {
    pub id: i64,
    pub provider: String,
    /// serve | cli | dashboard
    pub source: String,
    /// running | succeeded | failed | interrupted
    pub status: String,
    pub events_compared: i64,
    pub objects_compared: i64,
    pub api_calls: i64,
    pub diffs_found: i64,
    pub fixed: i64,
    /// Why it failed, with what it had compared by then.
    pub error: Option<String>,
    /// Unix ms.
    pub started_at: i64,
    pub finished_at: Option<i64>,
}

/// Open diffs of one kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct OpenKind {
    pub kind: String,
    pub count: i64,
    /// Unix ms the oldest of them was found.
    pub oldest_found_at: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct RunsPage {
    /// Newest first.
    pub runs: Vec<RunView>,
    pub open: Vec<OpenKind>,
    /// Unix ms the last successful run finished.
    pub last_success_at: Option<i64>,
    /// The `before` of the next page, when there may be one.
    pub next_before: Option<i64>,
}

/// The kinds a one-click fix (or `reconcile.auto_fix`) closes: their fix goes through the
/// inbox with the webhook's own keys, so it can never double an effect. The others wait
/// for a person's resolve with a reason.
pub const FIXABLE_KINDS: [&str; 3] = ["missing_event", "unprocessed", "missing_fact"];

pub fn fixable(kind: &str) -> bool {
    FIXABLE_KINDS.contains(&kind)
}

/// What each kind means, in one line, for the page.
pub fn kind_meaning(kind: &str) -> &'static str {
    match kind {
        "missing_event" => "at the provider, not in our inbox",
        "unprocessed" => "in our inbox, never applied (dead-lettered)",
        "missing_fact" => "the provider's objects show a payment, refund or dispute our facts lack",
        "status_mismatch" => "the provider's state contradicts ours",
        "amount_mismatch" => "amount or currency differs for the same resource",
        "unknown_order" => "a provider payment that names no order of ours",
        "window_exceeded" => "the checkpoint is older than the provider keeps events",
        _ => "",
    }
}

/// Open diffs of one kind with the newest few of them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffGroup {
    pub kind: String,
    pub count: i64,
    /// Unix ms the oldest of them was found.
    pub oldest_found_at: i64,
    /// Newest first, at most [`GROUP_ROWS`].
    pub diffs: Vec<DiffView>,
}

/// Diffs a group shows; "all N" opens the kind's own keyset list.
pub const GROUP_ROWS: usize = 10;

/// The `/reconciliation` page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconciliationPage {
    /// The newest runs, the open diffs by kind and the last successful run.
    pub runs: RunsPage,
    /// Open diffs grouped by kind: when the filter names neither a kind nor another state.
    pub groups: Vec<DiffGroup>,
    /// The keyset list the filter selects otherwise (one kind, or the fixed and resolved
    /// history with who and why).
    pub list: Option<DiffPage>,
    /// Providers a run can start for (those with an API key).
    pub providers: Vec<String>,
    pub can_operate: bool,
    /// Unix ms, for the ages on the page.
    pub now: i64,
}

impl DiffQuery {
    /// Whether the page shows open diffs grouped by kind (no kind, no other state).
    pub fn grouped(&self) -> bool {
        let blank = |v: &Option<String>| v.as_deref().is_none_or(|s| s.trim().is_empty());
        blank(&self.kind)
            && self
                .state
                .as_deref()
                .is_none_or(|s| s.trim().is_empty() || s == "open")
            && blank(&self.order_id)
            && self.run_id.is_none()
            && self.before.is_none()
    }

    /// The query string of this filter (without the cursor), for links.
    pub fn to_query_string(&self) -> String {
        let mut parts = Vec::new();
        let mut add = |k: &str, v: &Option<String>| {
            if let Some(v) = v.as_deref().filter(|v| !v.trim().is_empty()) {
                parts.push(format!("{k}={}", super::percent_encode(v)));
            }
        };
        add("state", &self.state);
        add("kind", &self.kind);
        add("provider", &self.provider);
        add("order_id", &self.order_id);
        if let Some(r) = self.run_id {
            parts.push(format!("run_id={r}"));
        }
        parts.join("&")
    }
}
