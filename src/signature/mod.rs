//! Webhook signature schemes. Verification runs over the raw body before anything else
//! touches it; comparisons are constant-time (`Mac::verify_slice`); error messages never
//! contain a secret or the expected signature.

pub mod standard_webhooks;
pub mod stripe;

use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};

pub use standard_webhooks::StandardWebhooks;
pub use stripe::Stripe;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchemeKind {
    Stripe,
    StandardWebhooks,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignatureError {
    #[error("missing {0} header")]
    MissingHeader(&'static str),
    #[error("malformed {0} header: {1}")]
    Malformed(&'static str, &'static str),
    #[error("timestamp outside the tolerance of {tolerance_secs} s (off by {skew_secs} s)")]
    StaleTimestamp { skew_secs: i64, tolerance_secs: u64 },
    #[error("no signature matches any configured secret")]
    NoMatch,
}

impl SignatureError {
    /// 400 for requests we cannot even read, 401 for readable ones that fail the check.
    pub fn status(&self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        match self {
            SignatureError::MissingHeader(_) | SignatureError::Malformed(..) => {
                StatusCode::BAD_REQUEST
            }
            SignatureError::StaleTimestamp { .. } | SignatureError::NoMatch => {
                StatusCode::UNAUTHORIZED
            }
        }
    }
}

/// What a verified request tells us besides "it is authentic".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verified {
    /// The event id carried by the signature headers (Standard Webhooks' `webhook-id`).
    pub header_event_id: Option<String>,
}

/// A configured scheme with its secrets (several at once while rotating).
#[derive(Clone, Debug)]
pub enum Verifier {
    Stripe(Stripe),
    StandardWebhooks(StandardWebhooks),
}

impl Verifier {
    pub fn new(kind: SchemeKind, secrets: &[String], tolerance_secs: u64) -> anyhow::Result<Self> {
        anyhow::ensure!(!secrets.is_empty(), "a provider needs at least one secret");
        Ok(match kind {
            SchemeKind::Stripe => Verifier::Stripe(Stripe::new(secrets, tolerance_secs)),
            SchemeKind::StandardWebhooks => {
                Verifier::StandardWebhooks(StandardWebhooks::new(secrets, tolerance_secs)?)
            }
        })
    }

    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now_secs: i64,
    ) -> Result<Verified, SignatureError> {
        match self {
            Verifier::Stripe(s) => s.verify(headers, body, now_secs),
            Verifier::StandardWebhooks(s) => s.verify(headers, body, now_secs),
        }
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, SignatureError> {
    headers
        .get(name)
        .ok_or(SignatureError::MissingHeader(name))?
        .to_str()
        .map_err(|_| SignatureError::Malformed(name, "not visible ASCII"))
}

fn check_tolerance(
    timestamp: i64,
    now_secs: i64,
    tolerance_secs: u64,
) -> Result<(), SignatureError> {
    let skew = now_secs.saturating_sub(timestamp);
    if skew.unsigned_abs() > tolerance_secs {
        return Err(SignatureError::StaleTimestamp {
            skew_secs: skew,
            tolerance_secs,
        });
    }
    Ok(())
}
