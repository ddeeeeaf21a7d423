//! Server functions: each takes the backend and the capability its call needs from the
//! request ([`signed_in_as`]), calls the backend, and maps the error. They stay this thin so
//! that every rule lives behind `AdminBackend`, where it is tested; a function that skipped
//! the role check would not compile (the backend's methods take the capability).

#[cfg(feature = "ssr")]
use crate::backend::{Admin, AdminBackend, Capability, Operator, Viewer};
use crate::backend::{InboxPage, Principal};
use crate::error::AppError;
use leptos::prelude::*;
use leptos::server_fn::codec::Json;
#[cfg(feature = "ssr")]
use std::sync::Arc;

/// Rows per inbox page: enough to scan by eye, small enough to render instantly.
pub const INBOX_PAGE_SIZE: u32 = 50;

// JSON: a query with every filter empty is an empty URL-encoded body, which the
// URL decoder reads as a missing argument (a client-side navigation then failed).
#[server(input = Json)]
pub async fn load_inbox(query: crate::backend::InboxQuery) -> Result<InboxPage, AppError> {
    let (backend, who) = signed_in_as::<Viewer>("inbox.read", "inbox").await?;
    with_status(backend.inbox(&who, query, INBOX_PAGE_SIZE).await)
}

#[server]
pub async fn load_event(id: i64) -> Result<crate::backend::EventDetail, AppError> {
    let (backend, who) = signed_in_as::<Viewer>("event.read", &format!("event:{id}")).await?;
    with_status(backend.event_detail(&who, id).await)
}

/// Rows per audit-log page.
pub const AUDIT_PAGE_SIZE: u32 = 100;

#[server(input = Json)]
pub async fn load_audit_log(
    query: crate::backend::AuditQuery,
) -> Result<crate::backend::AuditPage, AppError> {
    let (backend, who) = signed_in_as::<Admin>("audit_log.read", "audit_log").await?;
    with_status(backend.audit_log(&who, query).await)
}

#[server]
pub async fn load_users() -> Result<Vec<crate::backend::UserView>, AppError> {
    let (backend, who) = signed_in_as::<Admin>("users.read", "users").await?;
    with_status(backend.users(&who).await)
}

#[server]
pub async fn load_overview(
    range: crate::backend::Range,
) -> Result<crate::backend::Overview, AppError> {
    let (backend, who) = signed_in_as::<Viewer>("overview.read", "overview").await?;
    with_status(backend.overview(&who, range).await)
}

#[server]
pub async fn load_order(order_id: String) -> Result<crate::backend::OrderDetail, AppError> {
    let target = format!("order:{order_id}");
    let (backend, who) = signed_in_as::<Viewer>("order.read", &target).await?;
    with_status(backend.order_detail(&who, &order_id).await)
}

/// Resolves a search. A hit found while the server renders the page answers with a redirect
/// to it, so the search box works the same with and without JavaScript.
#[server]
pub async fn search(text: String) -> Result<crate::backend::SearchHit, AppError> {
    let (backend, who) = signed_in_as::<Viewer>("search", "search").await?;
    let text = text.trim().to_string();
    if text.is_empty() {
        return Ok(crate::backend::SearchHit::Nothing);
    }
    let hit = with_status(backend.search(&who, &text).await)?;
    if let Some(href) = hit.href() {
        leptos_axum::redirect(&href);
    }
    Ok(hit)
}

/// The signed-in person, as the server's session middleware put it in the request.
#[cfg(feature = "ssr")]
pub fn principal() -> Option<Principal> {
    use_context::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>().cloned())
}

/// Gives the HTTP response the error's status (403 for a refused role, 422 for a bad
/// request…) instead of leptos' default 500, so scripts and tests see what happened.
#[cfg(feature = "ssr")]
pub fn with_status<T>(result: Result<T, AppError>) -> Result<T, AppError> {
    if let Err(error) = &result {
        if let (Some(response), Ok(status)) = (
            use_context::<leptos_axum::ResponseOptions>(),
            http::StatusCode::from_u16(error.status_code()),
        ) {
            response.set_status(status);
        }
    }
    result
}

/// The signed-in person, or `Unauthorized`.
#[cfg(feature = "ssr")]
pub fn signed_in() -> Result<Principal, AppError> {
    principal().ok_or(AppError::Unauthorized)
}

/// The backend and the capability `C` for the signed-in person: 401 without one, 403 (and
/// an audit row naming `action` and `target`) when the role does not allow `C`.
#[cfg(feature = "ssr")]
pub async fn signed_in_as<C: Capability>(
    action: &str,
    target: &str,
) -> Result<(Arc<dyn AdminBackend>, C), AppError> {
    let backend = expect_context::<Arc<dyn AdminBackend>>();
    let principal = with_status(signed_in())?;
    let who = with_status(
        crate::backend::authorize::<C>(backend.as_ref(), principal, action, target).await,
    )?;
    Ok((backend, who))
}

/// Who is signed in (the top bar shows it); `None` on the sign-in page.
#[server]
pub async fn current_user() -> Result<Option<Principal>, AppError> {
    Ok(principal())
}

/// The signed-in person's own language setting (`en`, `pt-BR`), `None` when they follow
/// the browser's language.
#[server]
pub async fn my_language() -> Result<Option<String>, AppError> {
    with_status(signed_in())?;
    Ok(use_context::<http::request::Parts>().and_then(|parts| {
        parts
            .extensions
            .get::<crate::locale::UserLocaleSetting>()
            .and_then(|s| s.0.clone())
    }))
}

/// Whether this server runs `serve --demo`, as the dashboard router provides it.
#[cfg(feature = "ssr")]
#[derive(Clone, Copy, Debug)]
pub struct DemoFlag(pub bool);

/// Whether the data is the demo's (the top bar's "demo data" badge). Says nothing about
/// the data, so it needs no sign-in: the sign-in page shows the badge too.
#[server]
pub async fn demo_mode() -> Result<bool, AppError> {
    Ok(use_context::<DemoFlag>().is_some_and(|demo| demo.0))
}

#[cfg(feature = "ssr")]
fn dlq_query(
    id: Option<i64>,
    class: Option<String>,
    provider: Option<String>,
    stage: Option<String>,
    error: Option<String>,
    status: Option<String>,
) -> crate::backend::DlqQuery {
    crate::backend::DlqQuery {
        id,
        class,
        provider,
        stage,
        error,
        status,
    }
    .normalized()
}

#[server(input = Json)]
pub async fn load_dead_letters(
    query: crate::backend::DlqQuery,
) -> Result<crate::backend::DlqPage, AppError> {
    let (backend, who) = signed_in_as::<Viewer>("dead_letters.read", "dead_letters").await?;
    with_status(backend.dead_letters(&who, query).await)
}

#[server(input = Json)]
pub async fn preview_redrive(
    query: crate::backend::DlqQuery,
) -> Result<crate::backend::RedrivePreview, AppError> {
    // Reads only: anyone signed in may ask what a redrive would do.
    let (backend, who) = signed_in_as::<Viewer>("dead_letter.preview", "dead_letters").await?;
    with_status(backend.preview_redrive(&who, query).await)
}

/// Redrives one dead letter (`id`) or everything matching the filter fields. Plain
/// arguments, so an HTML form posts it without JavaScript.
#[server]
pub async fn redrive_dead_letters(
    id: Option<i64>,
    class: Option<String>,
    provider: Option<String>,
    stage: Option<String>,
    error: Option<String>,
    status: Option<String>,
    reason: Option<String>,
) -> Result<Vec<crate::backend::RedriveOutcome>, AppError> {
    let query = dlq_query(id, class, provider, stage, error, status);
    let (backend, who) =
        signed_in_as::<Operator>("dead_letter.redrive", &query.audit_target()).await?;
    with_status(backend.redrive(&who, query, reason).await)
}

/// `action` is `resolve` or `discard`; a reason is required.
#[server]
pub async fn close_dead_letter(id: i64, action: String, reason: String) -> Result<(), AppError> {
    let resolve = match action.as_str() {
        "resolve" => true,
        "discard" => false,
        other => return with_status(Err(AppError::Invalid(format!("unknown action {other}")))),
    };
    let (backend, who) = signed_in_as::<Operator>(
        &format!("dead_letter.{action}"),
        &format!("dead_letter:{id}"),
    )
    .await?;
    with_status(backend.close_dead_letter(&who, id, resolve, reason).await)
}

#[server]
pub async fn load_settings() -> Result<crate::backend::SettingsView, AppError> {
    let (backend, who) = signed_in_as::<Viewer>("settings.read", "settings").await?;
    with_status(backend.settings(&who).await)
}

#[server]
pub async fn load_api_tokens() -> Result<crate::backend::ApiTokensPage, AppError> {
    let (backend, who) = signed_in_as::<Admin>("api_tokens.read", "api_tokens").await?;
    with_status(backend.api_tokens(&who).await)
}

/// Makes a token (admin); the token page shows it once, next time it loads. Plain
/// arguments, so the form posts without JavaScript.
#[server]
pub async fn create_api_token(
    name: String,
    role: String,
    expires_in_days: u32,
) -> Result<(), AppError> {
    let target = format!("api_token:{}", name.trim());
    let (backend, who) = signed_in_as::<Admin>("api_token.add", &target).await?;
    with_status(
        backend
            .create_api_token(&who, name, role, expires_in_days)
            .await,
    )
}

#[server]
pub async fn revoke_api_token(name: String) -> Result<(), AppError> {
    let target = format!("api_token:{}", name.trim());
    let (backend, who) = signed_in_as::<Admin>("api_token.revoke", &target).await?;
    with_status(backend.revoke_api_token(&who, name).await)
}

#[server]
pub async fn load_redrive_jobs() -> Result<Vec<crate::backend::RedriveJobView>, AppError> {
    let (backend, who) = signed_in_as::<Viewer>("redrive_jobs.read", "redrive_jobs").await?;
    with_status(backend.redrive_jobs(&who).await)
}

#[server(input = Json)]
pub async fn load_reconciliation(
    query: crate::backend::DiffQuery,
    runs_before: Option<i64>,
) -> Result<crate::backend::ReconciliationPage, AppError> {
    let (backend, who) = signed_in_as::<Viewer>("reconciliation.read", "reconciliation").await?;
    with_status(backend.reconciliation_page(&who, query, runs_before).await)
}

/// The newest runs, for the page's live progress while one runs.
#[server]
pub async fn load_reconciliation_runs() -> Result<crate::backend::RunsPage, AppError> {
    let (backend, who) = signed_in_as::<Viewer>("reconciliation.read", "reconciliation").await?;
    with_status(backend.reconciliation_runs(&who, None, 10).await)
}

/// Starts a run (empty `provider`: every provider with an API key). A plain argument, so
/// the "Run now" form posts without JavaScript.
#[server]
pub async fn start_reconciliation(provider: String) -> Result<Vec<i64>, AppError> {
    let target = format!("reconciliation:{}", provider.trim());
    let (backend, who) = signed_in_as::<Operator>("reconciliation.run", &target).await?;
    with_status(backend.start_reconciliation(&who, provider).await)
}

#[server]
pub async fn fix_reconciliation_diff(id: i64) -> Result<crate::backend::DiffView, AppError> {
    let target = format!("reconciliation_diff:{id}");
    let (backend, who) = signed_in_as::<Operator>("reconciliation.fix", &target).await?;
    with_status(backend.fix_diff(&who, id).await)
}

#[server]
pub async fn resolve_reconciliation_diff(id: i64, reason: String) -> Result<(), AppError> {
    let target = format!("reconciliation_diff:{id}");
    let (backend, who) = signed_in_as::<Operator>("reconciliation.resolve", &target).await?;
    with_status(backend.resolve_diff(&who, id, reason).await)
}

/// Asks the provider for a refund from the order page's confirmation form: `amount` in
/// minor units (the confirmation showed it in the currency), once per `form_key`. On
/// success the answer redirects to the order, with and without JavaScript.
#[server]
pub async fn refund_order(
    order_id: String,
    amount: i64,
    reason: String,
    form_key: String,
) -> Result<crate::backend::CommandView, AppError> {
    let target = format!("order:{order_id}");
    let (backend, who) = signed_in_as::<Operator>("order.refund", &target).await?;
    let request = crate::backend::RefundRequest {
        amount: Some(amount),
        reason,
    };
    let command = with_status(
        backend
            .request_refund_once(&who, &order_id, request, form_key)
            .await,
    )?;
    leptos_axum::redirect(&crate::backend::order_href(&order_id));
    Ok(command)
}

/// Cancels a refund the relay has not started sending (the pending strip's button).
#[server]
pub async fn cancel_refund(
    order_id: String,
    command_id: i64,
) -> Result<crate::backend::CommandView, AppError> {
    let target = format!("command:{command_id}");
    let (backend, who) = signed_in_as::<Operator>("command.cancel", &target).await?;
    with_status(backend.cancel_command(&who, &order_id, command_id).await)
}
