//! `Idempotency-Key` on every POST of `/api/v1`, as Stripe's API has it: the same key with
//! the same request returns the first answer (status and body, `Idempotent-Replayed: true`)
//! without doing the work again; the same key with another request is a 422 that says so;
//! while the first request with the key runs, another is a 409. Keys are kept 24 hours and
//! belong to the token that sent them (its id: a new token under an old name starts afresh). An answer of 5xx is not kept: the key may run again.
//! A request without the header runs as before.

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::ApiError;
use crate::store::idempotency::{self, Begun, KEY_HOURS};
use crate::store::{now_ms, Db};

/// Stripe's limit.
const MAX_KEY_CHARS: usize = 255;
/// The largest body a POST of this API takes (the router refuses bigger ones anyway).
const MAX_BODY: usize = 1 << 20;

pub async fn layer(State(db): State<Db>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let Some(key) = request.headers().get("idempotency-key").cloned() else {
        return next.run(request).await;
    };
    let key = match key.to_str() {
        Ok(k) if !k.is_empty() && k.chars().count() <= MAX_KEY_CHARS => k.to_string(),
        _ => {
            return ApiError::new(
                400,
                format!("an Idempotency-Key is 1 to {MAX_KEY_CHARS} visible ASCII characters"),
            )
            .into_response()
        }
    };
    // The bearer layer ran first: the token's id is the scope.
    let Some(scope) = request
        .extensions()
        .get::<super::TokenScope>()
        .map(|t| format!("token-id:{}", t.0))
    else {
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let bytes = match to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(_) => return ApiError::new(413, "the body is too large").into_response(),
    };
    // The request is its method, path and query, content type and body.
    let mut digest = Sha256::new();
    for part in [
        parts.method.as_str().as_bytes(),
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("")
            .as_bytes(),
        parts
            .headers
            .get(axum::http::header::CONTENT_TYPE)
            .map(|v| v.as_bytes())
            .unwrap_or(b""),
        &bytes,
    ] {
        digest.update((part.len() as u64).to_be_bytes());
        digest.update(part);
    }
    let digest = hex::encode(digest.finalize());
    let now = now_ms();
    let begun =
        idempotency::begin(&db, &scope, &key, &digest, now, now - KEY_HOURS * 3_600_000).await;
    match begun {
        Err(e) => {
            let message = crate::http::admin::internal_error("checking an Idempotency-Key", &e);
            ApiError::new(503, message).into_response()
        }
        Ok(Begun::Mismatch) => ApiError::new(
            422,
            format!(
                "Idempotency-Key {key:?} was used with another request (method, path or body); \
                 use a new key for a new request"
            ),
        )
        .into_response(),
        Ok(Begun::Running) => ApiError::new(
            409,
            format!("a request with Idempotency-Key {key:?} is still running; retry later"),
        )
        .into_response(),
        Ok(Begun::Replay { status, body }) => {
            let mut response = Response::builder()
                .status(status)
                .header(axum::http::header::CONTENT_TYPE, "application/json")
                .body(Body::from(body))
                .expect("a stored answer is a response");
            response
                .headers_mut()
                .insert("idempotent-replayed", HeaderValue::from_static("true"));
            response
        }
        Ok(Begun::New) => {
            let request = Request::from_parts(parts, Body::from(bytes));
            // In its own task: a client that hangs up does not leave the key running for
            // ever, and the answer is kept for its retry.
            let task = tokio::spawn(async move {
                let response = next.run(request).await;
                let (parts, body) = response.into_parts();
                let body = to_bytes(body, usize::MAX).await.unwrap_or_default();
                let kept = if parts.status.is_server_error() {
                    idempotency::release(&db, &scope, &key).await
                } else {
                    idempotency::finish(&db, &scope, &key, parts.status.as_u16(), &body).await
                };
                if let Err(e) = kept {
                    tracing::warn!(error = format!("{e:#}"), "keeping an idempotent answer");
                }
                Response::from_parts(parts, Body::from(body))
            });
            task.await.unwrap_or_else(|_| {
                ApiError::new(500, "the request failed; the key may be used again").into_response()
            })
        }
    }
}
