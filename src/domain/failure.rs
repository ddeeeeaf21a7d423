//! Every failure is classified, and the class decides what happens next: transient and
//! unknown failures retry within their limits, permanent and business failures go to the
//! dead-letter queue at once.

use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// Timeouts, resets, 408/429/5xx, database busy: it may work next time.
    Transient,
    /// Unparseable or invalid payload, unsupported version, 401/403/404/410/422: it will not.
    Permanent,
    /// Refused transition, amount or currency mismatch, cancelled order: a human decides.
    Business,
    /// Anything else: retried a bounded number of times.
    Unknown,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; 4] = [
        ErrorClass::Transient,
        ErrorClass::Permanent,
        ErrorClass::Business,
        ErrorClass::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Permanent => "permanent",
            ErrorClass::Business => "business",
            ErrorClass::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }

    pub fn retries(self) -> bool {
        matches!(self, ErrorClass::Transient | ErrorClass::Unknown)
    }
}

/// A classified failure with a message fit for an engineer (never a secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub class: ErrorClass,
    pub message: String,
    /// What the other side asked us to wait, from a Retry-After header.
    pub retry_after: Option<Duration>,
}

impl Failure {
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Failure {
            class,
            message: message.into(),
            retry_after: None,
        }
    }
}

/// The class of an HTTP status from a sink.
pub fn classify_http_status(status: u16) -> ErrorClass {
    match status {
        408 | 425 | 429 => ErrorClass::Transient,
        500..=599 => ErrorClass::Transient,
        400 | 401 | 403 | 404 | 405 | 410 | 413 | 415 | 422 => ErrorClass::Permanent,
        _ => ErrorClass::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_statuses_are_classified_as_the_design_says() {
        for s in [408, 429, 500, 502, 503, 504] {
            assert_eq!(classify_http_status(s), ErrorClass::Transient, "{s}");
        }
        for s in [401, 403, 404, 410, 422, 400] {
            assert_eq!(classify_http_status(s), ErrorClass::Permanent, "{s}");
        }
        assert_eq!(classify_http_status(418), ErrorClass::Unknown);
    }

    #[test]
    fn only_transient_and_unknown_retry() {
        assert!(ErrorClass::Transient.retries());
        assert!(ErrorClass::Unknown.retries());
        assert!(!ErrorClass::Permanent.retries());
        assert!(!ErrorClass::Business.retries());
        for c in ErrorClass::ALL {
            assert_eq!(ErrorClass::parse(c.as_str()), Some(c));
        }
    }
}
