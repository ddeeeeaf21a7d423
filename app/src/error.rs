//! The one error type of the dashboard. Every server function returns it, so a page has a
//! single place to turn a failure into a message and an HTTP status.

use leptos::server_fn::{
    codec::JsonEncoding,
    error::{FromServerFnError, ServerFnErrorErr},
};
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AppError {
    /// The store could not answer (database down, query failed). The text is the backend's.
    Backend(String),
    /// The page or record asked for does not exist.
    NotFound,
    /// The request never reached the backend: network, encoding or bad arguments.
    Transport(String),
    /// Nobody is signed in (or the session expired).
    Unauthorized,
    /// Signed in, but the role does not allow this. The text says what was needed.
    Forbidden(String),
    /// The request itself is wrong (a missing reason, an unknown id); the text says how.
    Invalid(String),
    /// Too many expensive reads of this person at once; the text says what to wait for.
    Busy(String),
    /// The request is well formed but conflicts with the current state of what it acts on
    /// (RFC 9110 §15.5.10): a dead letter already closed, nothing left to refund, a refund
    /// no longer cancellable. The text says what the state is.
    Conflict(String),
}

impl AppError {
    pub fn status_code(&self) -> u16 {
        match self {
            // The dashboard itself works; what it depends on does not, and retrying may help.
            AppError::Backend(_) => 503,
            AppError::NotFound => 404,
            AppError::Transport(_) => 500,
            AppError::Unauthorized => 401,
            AppError::Forbidden(_) => 403,
            AppError::Invalid(_) => 422,
            AppError::Busy(_) => 429,
            AppError::Conflict(_) => 409,
        }
    }

    pub fn title(&self) -> &'static str {
        match self {
            AppError::Backend(_) => "The event store is not answering",
            AppError::NotFound => "Not found",
            AppError::Transport(_) => "The dashboard could not reach the server",
            AppError::Unauthorized => "Please sign in",
            AppError::Forbidden(_) => "Your role does not allow this",
            AppError::Invalid(_) => "This request cannot be done",
            AppError::Busy(_) => "Too many reads at once",
            AppError::Conflict(_) => "This conflicts with the current state",
        }
    }
}

impl AppError {
    /// [`AppError::title`] in the viewer's language.
    pub fn title_in(&self, loc: crate::locale::Locale) -> &'static str {
        use crate::i18n::td_string;
        match self {
            AppError::Backend(_) => td_string!(loc, error.backend),
            AppError::NotFound => td_string!(loc, error.not_found),
            AppError::Transport(_) => td_string!(loc, error.transport),
            AppError::Unauthorized => td_string!(loc, error.unauthorized),
            AppError::Forbidden(_) => td_string!(loc, error.forbidden),
            AppError::Invalid(_) => td_string!(loc, error.invalid),
            AppError::Busy(_) => td_string!(loc, error.busy),
            AppError::Conflict(_) => td_string!(loc, error.conflict),
        }
    }
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppError::Backend(detail)
            | AppError::Transport(detail)
            | AppError::Forbidden(detail)
            | AppError::Invalid(detail)
            | AppError::Busy(detail)
            | AppError::Conflict(detail) => {
                write!(f, "{}: {detail}", self.title())
            }
            AppError::NotFound | AppError::Unauthorized => f.write_str(self.title()),
        }
    }
}

impl std::error::Error for AppError {}

impl FromServerFnError for AppError {
    type Encoder = JsonEncoding;

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        AppError::Transport(value.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_failures_are_retryable_server_errors() {
        assert_eq!(AppError::Backend("db down".into()).status_code(), 503);
        assert_eq!(AppError::NotFound.status_code(), 404);
        assert_eq!(AppError::Unauthorized.status_code(), 401);
        assert_eq!(AppError::Forbidden("operator".into()).status_code(), 403);
        assert_eq!(AppError::Invalid("no reason".into()).status_code(), 422);
        assert_eq!(
            AppError::Conflict("already closed".into()).status_code(),
            409
        );
    }

    #[test]
    fn survives_the_wire() {
        let err = AppError::Backend("pool timed out".into());
        let bytes = err.ser();
        assert_eq!(AppError::de(bytes), err);
    }
}
