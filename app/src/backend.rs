//! The port between the dashboard and the server: plain serializable view types plus the
//! `AdminBackend` trait that `src/` implements over the store. `app/` never depends on the
//! server package; the server provides an `Arc<dyn AdminBackend>` through Leptos context.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What a person may do. Ordered: each role can do everything the ones before it can.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
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

/// A filter as typed: trimmed, empty means "any". Control characters cannot be meant
/// (and PostgreSQL text cannot even hold U+0000), so they are dropped.
fn clean_filter(value: Option<String>) -> Option<String> {
    value
        .map(|s| s.chars().filter(|c| !c.is_control()).collect::<String>())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
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
    /// What a person should look at (e.g. a refund larger than what is known to be paid).
    pub attention: Vec<String>,
    pub resources: Vec<OrderResourceView>,
    /// Oldest first.
    pub timeline: Vec<TimelineEntry>,
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
            SearchHit::Order(id) => Some(format!("/orders/{}", percent_encode(id))),
            SearchHit::Event(id) => Some(format!("/events/{id}")),
            SearchHit::Nothing => None,
        }
    }
}

/// The overview's time range: `1h` (per minute), `24h` (per 15 minutes), `7d` (per 2 hours).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub enum Range {
    Hour,
    Day,
    Week,
}

impl Range {
    pub const ALL: [Range; 3] = [Range::Hour, Range::Day, Range::Week];

    /// Anything unknown reads as the last hour.
    pub fn parse(text: Option<&str>) -> Range {
        match text {
            Some("24h") => Range::Day,
            Some("7d") => Range::Week,
            _ => Range::Hour,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Range::Hour => "1h",
            Range::Day => "24h",
            Range::Week => "7d",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Range::Hour => "Last hour",
            Range::Day => "Last 24 hours",
            Range::Week => "Last 7 days",
        }
    }

    pub fn minutes(self) -> i64 {
        match self {
            Range::Hour => 60,
            Range::Day => 24 * 60,
            Range::Week => 7 * 24 * 60,
        }
    }

    /// Width of one chart bar.
    pub fn bucket_minutes(self) -> i64 {
        match self {
            Range::Hour => 1,
            Range::Day => 15,
            Range::Week => 120,
        }
    }
}

/// One bar of the overview's charts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct OverviewPoint {
    /// RFC 3339, UTC: the bucket's start.
    pub start: String,
    pub received: i64,
    pub duplicates: i64,
    /// Dead-lettered events and signature failures.
    pub failures: i64,
    /// Receipt-to-filed p95 within the bucket, as the upper bound of its latency bucket, ms.
    pub p95_ms: Option<i64>,
}

/// Money moved in one currency, minor units.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct MoneyMoved {
    pub currency: String,
    pub paid: i64,
    pub refunded: i64,
    pub disputed: i64,
}

/// "Is the payment integration healthy?" on one page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct Overview {
    pub range: Range,
    /// Events received (first deliveries) and redeliveries.
    pub received: i64,
    pub duplicates: i64,
    pub signature_failures: i64,
    /// Events the processor filed, and those of them that ended in the dead-letter queue.
    pub filed: i64,
    pub dead: i64,
    pub retries: i64,
    /// Receipt to filed, as upper bounds of latency buckets, ms (`i64::MAX`: over a minute).
    pub latency_p50_ms: Option<i64>,
    pub latency_p95_ms: Option<i64>,
    pub latency_p99_ms: Option<i64>,
    /// Now, whatever the range.
    pub backlog: i64,
    pub backlog_oldest_age_secs: Option<i64>,
    pub dlq_open: i64,
    pub dlq_oldest_age_secs: Option<i64>,
    pub money: Vec<MoneyMoved>,
    /// Most frequent first.
    pub by_type: Vec<(String, i64)>,
    pub by_provider: Vec<(String, i64)>,
    pub by_api_version: Vec<(String, i64)>,
    /// Oldest first, one per bucket of the range, empty buckets included.
    pub series: Vec<OverviewPoint>,
}

impl Overview {
    /// Share of deliveries that were redeliveries, percent.
    pub fn duplicate_rate(&self) -> Option<f64> {
        let all = self.received + self.duplicates;
        (all > 0).then(|| 100.0 * self.duplicates as f64 / all as f64)
    }

    /// Share of filed events that did not end in the dead-letter queue, percent.
    pub fn success_rate(&self) -> Option<f64> {
        (self.filed > 0).then(|| 100.0 * (self.filed - self.dead) as f64 / self.filed as f64)
    }
}

/// One audit-log row: who did what, to what, why, from where, when.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditEntryView {
    pub id: i64,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub reason: Option<String>,
    pub details: Option<String>,
    pub source: Option<String>,
    /// RFC 3339, UTC.
    pub at: String,
}

/// The audit log's filter and keyset cursor; they live in the URL.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditQuery {
    pub actor: Option<String>,
    /// Only rows older than this audit id.
    pub before: Option<i64>,
}

impl AuditQuery {
    pub fn normalized(self) -> AuditQuery {
        AuditQuery {
            actor: clean_filter(self.actor),
            before: self.before,
        }
    }

    pub fn href(&self) -> String {
        let mut parts = vec![];
        if let Some(actor) = &self.actor {
            parts.push(format!("actor={}", percent_encode(actor)));
        }
        if let Some(before) = self.before {
            parts.push(format!("before={before}"));
        }
        if parts.is_empty() {
            "/admin/audit".into()
        } else {
            format!("/admin/audit?{}", parts.join("&"))
        }
    }
}

/// A page of the audit log, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditPage {
    pub entries: Vec<AuditEntryView>,
    pub next_before: Option<i64>,
}

/// A dashboard user as admins see them (never the password hash).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserView {
    pub name: String,
    pub role: String,
    pub disabled: bool,
    pub must_change_password: bool,
    pub last_sign_in_at: Option<String>,
    pub created_at: String,
}

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

/// Percent-encodes a query value (everything but RFC 3986 unreserved characters).
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
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

/// The effective configuration as people read it: every key, secrets shown as
/// `<redacted>`, and each provider's event mapping.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SettingsView {
    pub sections: Vec<SettingsSection>,
    pub mappings: Vec<MappingView>,
}

/// One table of the configuration (`processor`, `providers: stripe`…): (key, value) pairs,
/// nested keys dotted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SettingsSection {
    pub title: String,
    pub entries: Vec<(String, String)>,
}

/// How one provider's event types become business changes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MappingView {
    pub provider: String,
    pub min_api_version: Option<String>,
    pub rules: Vec<MappingRuleView>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MappingRuleView {
    pub event_type: String,
    /// `pay`, or `by /data/object/status: succeeded → refund, failed → refund_failed`.
    pub transition: String,
    /// JSON pointers, first present wins, joined with ` | `.
    pub order_id: String,
    pub external_ref: String,
    pub amount: String,
}

/// An API token as admins see it (never the token, only its first characters).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiTokenView {
    pub name: String,
    pub prefix: String,
    pub role: String,
    /// live | expired | revoked
    pub state: String,
    pub created_by: String,
    pub created_at: String,
    pub expires_at: String,
    pub last_used_at: Option<String>,
}

/// A token just made, shown to the admin who made it on their next view of the token
/// page, and never again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RevealedToken {
    pub name: String,
    pub role: String,
    pub expires_at: String,
    pub token: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiTokensPage {
    pub tokens: Vec<ApiTokenView>,
    pub revealed: Option<RevealedToken>,
}

#[cfg(feature = "ssr")]
use crate::error::AppError;

#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait AdminBackend: Send + Sync + 'static {
    /// Latest inbox events, newest first; `before` is the keyset cursor (an inbox id).
    async fn inbox_page(&self, before: Option<i64>, limit: u32) -> Result<InboxPage, String>;

    /// The inbox with filters; defaults to the unfiltered page.
    async fn inbox(&self, query: InboxQuery, limit: u32) -> Result<InboxPage, AppError> {
        self.inbox_page(query.before, limit)
            .await
            .map_err(AppError::Backend)
    }

    /// One event; `NotFound` when there is no such inbox id.
    async fn event_detail(&self, _id: i64) -> Result<EventDetail, AppError> {
        Err(AppError::NotFound)
    }

    /// The audit log, newest first (admin). Refusals are audited.
    async fn audit_log(&self, _who: &Principal, _query: AuditQuery) -> Result<AuditPage, AppError> {
        Err(AppError::NotFound)
    }

    /// Every dashboard user (admin). Refusals are audited.
    async fn users(&self, _who: &Principal) -> Result<Vec<UserView>, AppError> {
        Err(AppError::NotFound)
    }

    /// The overview's KPIs and charts for a time range.
    async fn overview(&self, _range: Range) -> Result<Overview, AppError> {
        Err(AppError::NotFound)
    }

    /// One order with its story; `NotFound` when there is no such order.
    async fn order_detail(&self, _order_id: &str) -> Result<OrderDetail, AppError> {
        Err(AppError::NotFound)
    }

    /// Finds the order (or the event) an id names: an order id, an event id, or any
    /// provider reference an event named (payment intent, charge, refund, dispute).
    async fn search(&self, _text: &str) -> Result<SearchHit, AppError> {
        Ok(SearchHit::Nothing)
    }

    /// The body exactly as received: (provider, event id, bytes).
    async fn raw_body(&self, _id: i64) -> Result<(String, String, Vec<u8>), AppError> {
        Err(AppError::NotFound)
    }

    /// The dead-letter triage page: matching dead letters grouped by class and message.
    async fn dead_letters(&self, _who: &Principal, _query: DlqQuery) -> Result<DlqPage, AppError> {
        Err(AppError::NotFound)
    }

    /// What redriving everything `query` matches would do now. Changes nothing.
    async fn preview_redrive(
        &self,
        _who: &Principal,
        _query: DlqQuery,
    ) -> Result<RedrivePreview, AppError> {
        Err(AppError::NotFound)
    }

    /// Redrives everything `query` matches (operator). Refusals are audited.
    async fn redrive(
        &self,
        _who: &Principal,
        _query: DlqQuery,
        _reason: Option<String>,
    ) -> Result<Vec<RedriveOutcome>, AppError> {
        Err(AppError::NotFound)
    }

    /// Resolves (fixed elsewhere) or discards (will not be fixed) one dead letter with a
    /// reason (operator). Refusals are audited.
    async fn close_dead_letter(
        &self,
        _who: &Principal,
        _id: i64,
        _resolve: bool,
        _reason: String,
    ) -> Result<(), AppError> {
        Err(AppError::NotFound)
    }

    /// Bulk redrives running or recently finished (on any instance), newest first.
    async fn redrive_jobs(&self) -> Result<Vec<RedriveJobView>, AppError> {
        Ok(vec![])
    }

    /// The effective configuration, secrets hidden (anyone signed in).
    async fn settings(&self) -> Result<SettingsView, AppError> {
        Err(AppError::NotFound)
    }

    /// Every API token, and the one this admin just made if it was not shown yet (admin).
    async fn api_tokens(&self, _who: &Principal) -> Result<ApiTokensPage, AppError> {
        Err(AppError::NotFound)
    }

    /// Makes an API token (admin); the next `api_tokens` of this admin reveals it once.
    async fn create_api_token(
        &self,
        _who: &Principal,
        _name: String,
        _role: String,
        _expires_in_days: u32,
    ) -> Result<(), AppError> {
        Err(AppError::NotFound)
    }

    /// Revokes the live token with this name (admin).
    async fn revoke_api_token(&self, _who: &Principal, _name: String) -> Result<(), AppError> {
        Err(AppError::NotFound)
    }
}
