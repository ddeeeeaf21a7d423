//! What a call to the provider's API can end in, classified as the retry policy needs it.

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The API answered with an error object (`{"error": {type, code, message}}`).
    #[error("{status} {kind}{}: {message}", code.as_deref().map(|c| format!(" ({c})")).unwrap_or_default())]
    Api {
        status: u16,
        /// Stripe's `error.type`: `invalid_request_error`, `idempotency_error`, `api_error`…
        kind: String,
        code: Option<String>,
        message: String,
        /// Stripe's `Stripe-Should-Retry` header, when it sent one.
        should_retry: Option<bool>,
    },
    #[error("no answer within {0} ms")]
    Timeout(u64),
    /// Connection refused, reset, TLS failure…
    #[error("transport: {0}")]
    Transport(String),
    /// A 2xx whose body is not the object expected.
    #[error("unexpected answer: {0}")]
    Decode(String),
    #[error("invalid request: {0}")]
    Invalid(String),
}

impl ApiError {
    /// Whether another attempt may succeed (invariant 7: transient failures retry).
    pub fn is_transient(&self) -> bool {
        match self {
            ApiError::Api {
                status,
                should_retry,
                ..
            } => should_retry.unwrap_or(matches!(status, 408 | 409 | 429 | 500..=599)),
            ApiError::Timeout(_) | ApiError::Transport(_) => true,
            ApiError::Decode(_) | ApiError::Invalid(_) => false,
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Stripe's `error.type`, e.g. `idempotency_error`.
    pub fn kind(&self) -> Option<&str> {
        match self {
            ApiError::Api { kind, .. } => Some(kind),
            _ => None,
        }
    }

    /// An error answer's body, or what stands in for it when the body is not Stripe's.
    pub(crate) fn from_answer(status: u16, should_retry: Option<bool>, body: &[u8]) -> ApiError {
        #[derive(Deserialize)]
        struct Envelope {
            error: Body,
        }
        #[derive(Deserialize)]
        struct Body {
            #[serde(rename = "type")]
            kind: String,
            code: Option<String>,
            #[serde(default)]
            message: String,
        }
        /// Mercado Pago's: `{"message", "error": "bad_request", "status", "cause": [{code}]}`.
        #[derive(Deserialize)]
        struct MercadoPago {
            message: String,
            error: String,
            #[serde(default)]
            cause: Vec<serde_json::Value>,
        }
        if let Ok(mp) = serde_json::from_slice::<MercadoPago>(body) {
            return ApiError::Api {
                status,
                kind: mp.error,
                code: mp.cause.first().and_then(|c| match &c["code"] {
                    serde_json::Value::String(s) => Some(s.clone()),
                    serde_json::Value::Number(n) => Some(n.to_string()),
                    _ => None,
                }),
                message: mp.message,
                should_retry,
            };
        }
        match serde_json::from_slice::<Envelope>(body) {
            Ok(Envelope { error }) => ApiError::Api {
                status,
                kind: error.kind,
                code: error.code,
                message: error.message,
                should_retry,
            },
            Err(_) => ApiError::Api {
                status,
                kind: "http_error".into(),
                code: None,
                // A proxy's HTML page says little; its first bytes are enough to recognise.
                message: String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
                should_retry,
            },
        }
    }
}
