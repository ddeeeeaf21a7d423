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
