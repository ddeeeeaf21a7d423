//! The port between the dashboard and the server: plain serializable view types, one module
//! per page, plus the `AdminBackend` trait that `src/` implements over the store. `app/`
//! never depends on the server package; the server provides an `Arc<dyn AdminBackend>`
//! through Leptos context.
//!
//! Every method takes the capability its role needs ([`Viewer`], [`Operator`], [`Admin`]),
//! and only [`authorize`] makes one: a call that skipped the check does not compile. The
//! trait has no default bodies, so a missing implementation is a compile error too.

mod access;
mod admin;
mod commands;
mod dlq;
#[cfg(feature = "ssr")]
pub mod fixed;
mod inbox;
mod order;
mod overview;
mod query;
mod reconcile;

pub use access::*;
pub use admin::*;
pub use commands::*;
pub use dlq::*;
pub use inbox::*;
pub use order::*;
pub use overview::*;
pub use query::percent_encode;
pub use reconcile::*;

#[cfg(feature = "ssr")]
use crate::error::AppError;

#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait AdminBackend: Send + Sync + 'static {
    /// Writes a refused request to the audit log (called by [`authorize`]).
    async fn record_refusal(&self, refusal: &Refusal) -> Result<(), AppError>;

    /// The inbox, newest first, with filters; `query.before` is the keyset cursor.
    async fn inbox(
        &self,
        who: &Viewer,
        query: InboxQuery,
        limit: u32,
    ) -> Result<InboxPage, AppError>;

    /// One event; `NotFound` when there is no such inbox id.
    async fn event_detail(&self, who: &Viewer, id: i64) -> Result<EventDetail, AppError>;

    /// The body exactly as received: (provider, event id, bytes).
    async fn raw_body(&self, who: &Viewer, id: i64) -> Result<(String, String, Vec<u8>), AppError>;

    /// The overview's KPIs and charts for a time range.
    async fn overview(&self, who: &Viewer, range: Range) -> Result<Overview, AppError>;

    /// One order with its story; `NotFound` when there is no such order.
    async fn order_detail(&self, who: &Viewer, order_id: &str) -> Result<OrderDetail, AppError>;

    /// Finds the order (or the event) an id names: an order id, an event id, or any
    /// provider reference an event named (payment intent, charge, refund, dispute).
    async fn search(&self, who: &Viewer, text: &str) -> Result<SearchHit, AppError>;

    /// The dead-letter triage page: matching dead letters grouped by class and message.
    async fn dead_letters(&self, who: &Viewer, query: DlqQuery) -> Result<DlqPage, AppError>;

    /// What redriving everything `query` matches would do now. Changes nothing.
    async fn preview_redrive(
        &self,
        who: &Viewer,
        query: DlqQuery,
    ) -> Result<RedrivePreview, AppError>;

    /// Bulk redrives running or recently finished (on any instance), newest first.
    async fn redrive_jobs(&self, who: &Viewer) -> Result<Vec<RedriveJobView>, AppError>;

    /// Redrives everything `query` matches.
    async fn redrive(
        &self,
        who: &Operator,
        query: DlqQuery,
        reason: Option<String>,
    ) -> Result<Vec<RedriveOutcome>, AppError>;

    /// Resolves (fixed elsewhere) or discards (will not be fixed) one dead letter with a
    /// reason.
    async fn close_dead_letter(
        &self,
        who: &Operator,
        id: i64,
        resolve: bool,
        reason: String,
    ) -> Result<(), AppError>;

    /// Asks the provider for a refund of an order: stored with its outbox message (the
    /// relay sends it) and audited, or refused with nothing stored (`NotFound` for an
    /// unknown order, `Conflict` beyond what is left to refund — a dispute the provider
    /// will not refund included — and `Invalid` without a payment).
    async fn request_refund(
        &self,
        who: &Operator,
        order_id: &str,
        request: RefundRequest,
    ) -> Result<CommandView, AppError>;

    /// The same from the order page's confirmation form, once per `page_key` (the form's
    /// key, per person, kept 24 h): a second post of one form (a double click, a reload of
    /// the answer) answers with the command the first made, never a second refund.
    async fn request_refund_once(
        &self,
        who: &Operator,
        order_id: &str,
        request: RefundRequest,
        page_key: String,
    ) -> Result<CommandView, AppError>;

    /// Withdraws refund command `id` of `order_id` before the relay starts sending it
    /// (audited); `NotFound` for no such command of the order, `Invalid` once it is being
    /// sent or over.
    async fn cancel_command(
        &self,
        who: &Operator,
        order_id: &str,
        id: i64,
    ) -> Result<CommandView, AppError>;

    /// The effective configuration, secrets hidden.
    async fn settings(&self, who: &Viewer) -> Result<SettingsView, AppError>;

    /// The audit log, newest first.
    async fn audit_log(&self, who: &Admin, query: AuditQuery) -> Result<AuditPage, AppError>;

    /// Every dashboard user.
    async fn users(&self, who: &Admin) -> Result<Vec<UserView>, AppError>;

    /// Every API token, and the one this admin just made if it was not shown yet.
    async fn api_tokens(&self, who: &Admin) -> Result<ApiTokensPage, AppError>;

    /// Makes an API token; the next `api_tokens` of this admin reveals it once.
    async fn create_api_token(
        &self,
        who: &Admin,
        name: String,
        role: String,
        expires_in_days: u32,
    ) -> Result<(), AppError>;

    /// Revokes the live token with this name.
    async fn revoke_api_token(&self, who: &Admin, name: String) -> Result<(), AppError>;

    /// Reconciliation runs, newest first (keyset `before` a run id), with the open diffs
    /// by kind and the last successful run.
    async fn reconciliation_runs(
        &self,
        who: &Viewer,
        before: Option<i64>,
        limit: u32,
    ) -> Result<RunsPage, AppError>;

    /// Reconciliation diffs matching `query`, newest first.
    async fn reconciliation_diffs(
        &self,
        who: &Viewer,
        query: DiffQuery,
    ) -> Result<DiffPage, AppError>;

    /// Accepts an open diff with a reason (audited).
    async fn resolve_diff(&self, who: &Operator, id: i64, reason: String) -> Result<(), AppError>;

    /// The `/reconciliation` page: runs (keyset `runs_before`), open diffs grouped by kind,
    /// or the list `query` selects.
    async fn reconciliation_page(
        &self,
        who: &Viewer,
        query: DiffQuery,
        runs_before: Option<i64>,
    ) -> Result<ReconciliationPage, AppError>;

    /// Starts a reconciliation run of `provider` (empty: every provider with an API key) in
    /// the background; answers with the run ids, or why none could start (audited).
    async fn start_reconciliation(
        &self,
        who: &Operator,
        provider: String,
    ) -> Result<Vec<i64>, AppError>;

    /// One-click fix of an open diff whose kind has an automatic fix: compares its event or
    /// order again and fixes it through the inbox; answers with the diff afterwards.
    async fn fix_diff(&self, who: &Operator, id: i64) -> Result<DiffView, AppError>;
}
