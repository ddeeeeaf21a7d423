//! Server functions: each takes the backend from context, calls it, and maps the error.
//! They stay this thin so that every rule lives behind `AdminBackend`, where it is tested.

use crate::backend::{InboxPage, Principal};
use crate::error::AppError;
use leptos::prelude::*;

/// Rows per inbox page: enough to scan by eye, small enough to render instantly.
pub const INBOX_PAGE_SIZE: u32 = 50;

#[server]
pub async fn load_inbox(before: Option<i64>) -> Result<InboxPage, AppError> {
    use crate::backend::AdminBackend;
    use std::sync::Arc;

    expect_context::<Arc<dyn AdminBackend>>()
        .inbox_page(before, INBOX_PAGE_SIZE)
        .await
        .map_err(AppError::Backend)
}

/// The signed-in person, as the server's session middleware put it in the request.
#[cfg(feature = "ssr")]
pub fn principal() -> Option<Principal> {
    use_context::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>().cloned())
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
