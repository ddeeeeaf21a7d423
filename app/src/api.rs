//! Server functions: each takes the backend from context, calls it, and maps the error.
//! They stay this thin so that every rule lives behind `AdminBackend`, where it is tested.

use crate::backend::{InboxPage, Principal};
use crate::error::AppError;
use leptos::prelude::*;
use leptos::server_fn::codec::Json;

/// Rows per inbox page: enough to scan by eye, small enough to render instantly.
pub const INBOX_PAGE_SIZE: u32 = 50;

// JSON: a query with every filter empty is an empty URL-encoded body, which the
// URL decoder reads as a missing argument (a client-side navigation then failed).
#[server(input = Json)]
pub async fn load_inbox(query: crate::backend::InboxQuery) -> Result<InboxPage, AppError> {
    use crate::backend::AdminBackend;
    use std::sync::Arc;

    with_status(
        expect_context::<Arc<dyn AdminBackend>>()
            .inbox(query, INBOX_PAGE_SIZE)
            .await,
    )
}

#[server]
pub async fn load_event(id: i64) -> Result<crate::backend::EventDetail, AppError> {
    use crate::backend::AdminBackend;
    use std::sync::Arc;

    with_status(
        expect_context::<Arc<dyn AdminBackend>>()
            .event_detail(id)
            .await,
    )
}

/// Rows per audit-log page.
pub const AUDIT_PAGE_SIZE: u32 = 100;

#[server(input = Json)]
pub async fn load_audit_log(
    query: crate::backend::AuditQuery,
) -> Result<crate::backend::AuditPage, AppError> {
    use crate::backend::AdminBackend;
    use std::sync::Arc;
    let who = with_status(signed_in())?;
    with_status(
        expect_context::<Arc<dyn AdminBackend>>()
            .audit_log(&who, query)
            .await,
    )
}

#[server]
pub async fn load_users() -> Result<Vec<crate::backend::UserView>, AppError> {
    use crate::backend::AdminBackend;
    use std::sync::Arc;
    let who = with_status(signed_in())?;
    with_status(expect_context::<Arc<dyn AdminBackend>>().users(&who).await)
}

#[server]
pub async fn load_overview(
    range: crate::backend::Range,
) -> Result<crate::backend::Overview, AppError> {
    use crate::backend::AdminBackend;
    use std::sync::Arc;

    with_status(
        expect_context::<Arc<dyn AdminBackend>>()
            .overview(range)
            .await,
    )
}

#[server]
pub async fn load_order(order_id: String) -> Result<crate::backend::OrderDetail, AppError> {
    use crate::backend::AdminBackend;
    use std::sync::Arc;

    with_status(
        expect_context::<Arc<dyn AdminBackend>>()
            .order_detail(&order_id)
            .await,
    )
}

/// Resolves a search. A hit found while the server renders the page answers with a redirect
/// to it, so the search box works the same with and without JavaScript.
#[server]
pub async fn search(text: String) -> Result<crate::backend::SearchHit, AppError> {
    use crate::backend::AdminBackend;
    use std::sync::Arc;

    let text = text.trim().to_string();
    if text.is_empty() {
        return Ok(crate::backend::SearchHit::Nothing);
    }
    let hit = with_status(
        expect_context::<Arc<dyn AdminBackend>>()
            .search(&text)
            .await,
    )?;
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

/// Who is signed in (the top bar shows it); `None` on the sign-in page.
#[server]
pub async fn current_user() -> Result<Option<Principal>, AppError> {
    Ok(principal())
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
    use crate::backend::AdminBackend;
    use std::sync::Arc;
    let who = with_status(signed_in())?;
    with_status(
        expect_context::<Arc<dyn AdminBackend>>()
            .dead_letters(&who, query)
            .await,
    )
}

#[server(input = Json)]
pub async fn preview_redrive(
    query: crate::backend::DlqQuery,
) -> Result<crate::backend::RedrivePreview, AppError> {
    use crate::backend::AdminBackend;
    use std::sync::Arc;
    let who = with_status(signed_in())?;
    with_status(
        expect_context::<Arc<dyn AdminBackend>>()
            .preview_redrive(&who, query)
            .await,
    )
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
    use crate::backend::AdminBackend;
    use std::sync::Arc;
    let who = with_status(signed_in())?;
    let query = dlq_query(id, class, provider, stage, error, status);
    with_status(
        expect_context::<Arc<dyn AdminBackend>>()
            .redrive(&who, query, reason)
            .await,
    )
}

/// `action` is `resolve` or `discard`; a reason is required.
#[server]
pub async fn close_dead_letter(id: i64, action: String, reason: String) -> Result<(), AppError> {
    use crate::backend::AdminBackend;
    use std::sync::Arc;
    let who = with_status(signed_in())?;
    let resolve = match action.as_str() {
        "resolve" => true,
        "discard" => false,
        other => return with_status(Err(AppError::Invalid(format!("unknown action {other}")))),
    };
    with_status(
        expect_context::<Arc<dyn AdminBackend>>()
            .close_dead_letter(&who, id, resolve, reason)
            .await,
    )
}

#[server]
pub async fn load_settings() -> Result<crate::backend::SettingsView, AppError> {
    use crate::backend::AdminBackend;
    use std::sync::Arc;
    with_status(signed_in())?;
    with_status(expect_context::<Arc<dyn AdminBackend>>().settings().await)
}

#[server]
pub async fn load_api_tokens() -> Result<crate::backend::ApiTokensPage, AppError> {
    use crate::backend::AdminBackend;
    use std::sync::Arc;
    let who = with_status(signed_in())?;
    with_status(
        expect_context::<Arc<dyn AdminBackend>>()
            .api_tokens(&who)
            .await,
    )
}

/// Makes a token (admin); the token page shows it once, next time it loads. Plain
/// arguments, so the form posts without JavaScript.
#[server]
pub async fn create_api_token(
    name: String,
    role: String,
    expires_in_days: u32,
) -> Result<(), AppError> {
    use crate::backend::AdminBackend;
    use std::sync::Arc;
    let who = with_status(signed_in())?;
    with_status(
        expect_context::<Arc<dyn AdminBackend>>()
            .create_api_token(&who, name, role, expires_in_days)
            .await,
    )
}

#[server]
pub async fn revoke_api_token(name: String) -> Result<(), AppError> {
    use crate::backend::AdminBackend;
    use std::sync::Arc;
    let who = with_status(signed_in())?;
    with_status(
        expect_context::<Arc<dyn AdminBackend>>()
            .revoke_api_token(&who, name)
            .await,
    )
}

#[server]
pub async fn load_redrive_jobs() -> Result<Vec<crate::backend::RedriveJobView>, AppError> {
    use crate::backend::AdminBackend;
    use std::sync::Arc;
    with_status(signed_in())?;
    with_status(
        expect_context::<Arc<dyn AdminBackend>>()
            .redrive_jobs()
            .await,
    )
}
