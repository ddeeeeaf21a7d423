//! Dead-letter triage (`/dlq`): the query, groups, redrives and bulk jobs.

use serde::{Deserialize, Serialize};

use super::query::{clean_filter, percent_encode};

/// Which dead letters a page or an action is about. Empty fields match everything; the
/// status defaults to `open`. It lives in the page's URL, so a view can be shared.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema, utoipa::IntoParams))]
#[cfg_attr(feature = "ssr", into_params(parameter_in = Query))]
pub struct DlqQuery {
    /// One dead letter.
    pub id: Option<i64>,
    /// transient | permanent | business | unknown
    pub class: Option<String>,
    pub provider: Option<String>,
    /// processor | outbox
    pub stage: Option<String>,
    /// Text the latest error contains.
    pub error: Option<String>,
    /// open (default) | redriven | resolved | discarded
    pub status: Option<String>,
}

impl DlqQuery {
    /// What the audit log names as the target of an action on this query: one dead letter,
    /// or the filter of a bulk action.
    pub fn audit_target(&self) -> String {
        match self.id {
            Some(id) => format!("dead_letter:{id}"),
            None => format!("dead_letters:{}", self.to_query_string()),
        }
    }

    /// Empty form fields mean "any".
    pub fn normalized(self) -> DlqQuery {
        DlqQuery {
            id: self.id,
            class: clean_filter(self.class),
            provider: clean_filter(self.provider),
            stage: clean_filter(self.stage),
            error: clean_filter(self.error),
            status: clean_filter(self.status),
        }
    }

    /// The query string that shows this selection on /dlq.
    pub fn to_query_string(&self) -> String {
        let mut parts = vec![];
        if let Some(id) = self.id {
            parts.push(format!("id={id}"));
        }
        for (key, value) in [
            ("class", &self.class),
            ("provider", &self.provider),
            ("stage", &self.stage),
            ("error", &self.error),
            ("status", &self.status),
        ] {
            if let Some(v) = value {
                parts.push(format!("{key}={}", percent_encode(v)));
            }
        }
        parts.join("&")
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DeadLetterView {
    pub id: i64,
    pub stage: String,
    pub sink: Option<String>,
    pub provider: Option<String>,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub order_id: Option<String>,
    pub class: String,
    pub error: String,
    pub attempts: i64,
    pub status: String,
    /// Seconds since it entered the queue.
    pub age_secs: i64,
    /// RFC 3339: when it entered the queue, and when it should be dealt with by.
    pub first_attempt_at: String,
    pub resolve_by: String,
}

/// Dead letters sharing an error class and message, oldest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DeadLetterGroup {
    pub class: String,
    pub error: String,
    pub items: Vec<DeadLetterView>,
    pub oldest_age_secs: i64,
}

/// A redrive already done, with what became of its item since.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct RedriveView {
    pub dead_letter_id: i64,
    pub event_id: Option<String>,
    pub actor: String,
    pub reason: Option<String>,
    /// What the redrive did (`requeued`, `skipped: …`).
    pub outcome: String,
    pub at: String,
    /// The item's status now (inbox or outbox row): applied, duplicate, pending, failed…
    pub current_status: Option<String>,
}

/// What a redrive did or, for a dry run, would do, per dead letter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct RedriveOutcome {
    pub dead_letter_id: i64,
    pub event_id: Option<String>,
    pub outcome: String,
}

/// A dry run over everything a query matches (not only what one page shows).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct RedrivePreview {
    pub matching: usize,
    /// The first predictions (at most a few hundred).
    pub outcomes: Vec<RedriveOutcome>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DlqPage {
    pub open: i64,
    pub oldest_open_age_secs: Option<i64>,
    pub groups: Vec<DeadLetterGroup>,
    /// More matched than the page groups (the newest are shown); bulk actions cover all.
    pub truncated: bool,
    pub recent_redrives: Vec<RedriveView>,
    /// The signed-in person may redrive, resolve and discard (the server checks again).
    pub can_operate: bool,
    /// Open dead letters whose deadline (`resolve_by`) falls within the next 24 hours
    /// (or has passed).
    pub due_within_24h: i64,
    /// One item's whole history, when the page shows one (`/dlq?id=…`).
    pub history: Option<DeadLetterHistory>,
    /// Bulk redrives running or recently finished (on any instance), newest first.
    pub jobs: Vec<RedriveJobView>,
}

/// A bulk redrive as it runs: how many of how many, then what became of them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct RedriveJobView {
    pub id: u64,
    pub actor: String,
    /// The filter it covers, as a query string (`class=unknown`), or empty for everything open.
    pub selection: String,
    pub total: usize,
    pub done: usize,
    pub started_at: String,
    pub finished_at: Option<String>,
    /// `998 requeued, 2 skipped`, or why it stopped.
    pub summary: Option<String>,
    /// Unfinished, and the instance running it stopped reporting: it will not finish.
    pub interrupted: bool,
}

/// Every failed attempt of one dead letter and every redrive of it, oldest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DeadLetterHistory {
    pub id: i64,
    /// "time · class · error", oldest first.
    pub attempts: Vec<String>,
    pub redrives: Vec<RedriveRecordView>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct RedriveRecordView {
    pub actor: String,
    pub reason: Option<String>,
    pub outcome: String,
    pub at: String,
}
