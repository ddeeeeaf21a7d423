//! `POST /webhooks/{provider}`: verify the signature over the raw body, read the envelope
//! leniently, commit the receipt, then answer. 200 only after the commit; 400/401 for
//! requests we cannot authenticate (nothing is stored); 413 above the size limit; 503 when
//! the database cannot commit, so the provider retries.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use sha2::{Digest, Sha256};
use tracing::{info, warn, Instrument};

use crate::pipeline::ingest::Ingestor;
use crate::provider::settings::Providers;
use crate::store::ingest::{Receipt, Stored};
use crate::store::now_ms;

#[derive(Clone)]
pub struct WebhookState {
    pub providers: Arc<Providers>,
    pub ingestor: Ingestor,
    /// For the overview's counts (receipts, duplicates, signature failures).
    pub db: crate::store::Db,
    pub warnings: Arc<BadWebhookWarnings>,
}

/// One kind of warning about a bad request, logged at most [`LimitedWarning::BURST`] at
/// once and then once per [`LimitedWarning::EVERY`]: a flood of forged signatures or
/// scanner traffic costs no disk. Each line logged says how many were not logged since the
/// previous one (`suppressed`); the metrics count every request exactly.
pub struct LimitedWarning {
    limiter: governor::DefaultDirectRateLimiter,
    suppressed: std::sync::atomic::AtomicU64,
}

impl LimitedWarning {
    pub const BURST: u32 = 5;
    pub const EVERY: std::time::Duration = std::time::Duration::from_secs(5);

    /// `Some(not logged since the last line)` when this one may be logged.
    pub fn allow(&self) -> Option<u64> {
        use std::sync::atomic::Ordering;
        if self.limiter.check().is_ok() {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

impl Default for LimitedWarning {
    fn default() -> Self {
        let quota = governor::Quota::with_period(Self::EVERY)
            .expect("a non-zero period")
            .allow_burst(std::num::NonZeroU32::new(Self::BURST).expect("non-zero"));
        LimitedWarning {
            limiter: governor::RateLimiter::direct(quota),
            suppressed: Default::default(),
        }
    }
}

/// The warnings a request nobody can authenticate may cause, each kind limited on its own
/// (a flood of one kind does not hide another).
#[derive(Default)]
pub struct BadWebhookWarnings {
    pub unknown_provider: LimitedWarning,
    pub body_rejected: LimitedWarning,
    pub oversize: LimitedWarning,
    pub signature_failed: LimitedWarning,
}

pub const CORRELATION_HEADER: &str = "x-correlation-id";

/// The caller's correlation id when it sent a sane one, else a fresh one. A fresh one is
/// a time-ordered UUID (v7): the delivery log's `deliveries_correlation` index then grows
/// at its end, where a random v4 dirtied one page at a random place per delivery.
pub fn correlation_id(headers: &HeaderMap) -> String {
    [CORRELATION_HEADER, "x-request-id"]
        .iter()
        .filter_map(|h| headers.get(*h)?.to_str().ok())
        .find(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string())
}

/// The provider name as it may appear in a log line: a configured name as is; anything
/// else from the URL escaped (no newlines or terminal escapes reach the log) and truncated.
pub fn loggable_provider(providers: &Providers, name: &str) -> String {
    if providers.get(name).is_some() {
        return name.to_string();
    }
    const MAX_CHARS: usize = 32;
    let mut escaped: String = name
        .chars()
        .take(MAX_CHARS)
        .flat_map(char::escape_default)
        .collect();
    if name.chars().count() > MAX_CHARS {
        escaped.push('…');
    }
    format!("unknown:{escaped}")
}

fn answer(status: StatusCode, correlation_id: &str, body: serde_json::Value) -> Response {
    let mut response = (status, Json(body)).into_response();
    if let Ok(value) = HeaderValue::from_str(correlation_id) {
        response.headers_mut().insert(CORRELATION_HEADER, value);
    }
    response
}

fn error(status: StatusCode, correlation_id: &str, message: String) -> Response {
    answer(
        status,
        correlation_id,
        json!({ "error": message, "correlation_id": correlation_id }),
    )
}

/// 408 when the body missed its deadline (`server.body_timeout_ms`, tower-http's
/// `TimeoutError` inside axum's rejection), else the rejection's own status.
fn body_rejection_status(rejection: &BytesRejection) -> StatusCode {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(rejection);
    while let Some(error) = source {
        if error.is::<tower_http::timeout::TimeoutError>() {
            return StatusCode::REQUEST_TIMEOUT;
        }
        source = error.source();
    }
    rejection.status()
}

pub async fn receive(
    State(state): State<WebhookState>,
    Path(provider_name): Path<String>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let correlation_id = correlation_id(&headers);
    let logged = loggable_provider(&state.providers, &provider_name);
    let span = tracing::info_span!("webhook", %correlation_id, provider = %logged);
    let query = uri.query().map(str::to_owned);
    receive_inner(state, provider_name, query, headers, body, correlation_id)
        .instrument(span)
        .await
}

async fn receive_inner(
    state: WebhookState,
    provider_name: String,
    query: Option<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    correlation_id: String,
) -> Response {
    let Some(provider) = state.providers.get(&provider_name) else {
        if let Some(suppressed) = state.warnings.unknown_provider.allow() {
            warn!(suppressed, "unknown provider");
        }
        crate::ops::metrics::receipt("unknown", "unknown_provider");
        return error(
            StatusCode::BAD_REQUEST,
            &correlation_id,
            format!(
                "unknown provider {:?}",
                provider_name.chars().take(64).collect::<String>()
            ),
        );
    };
    let body = match body {
        Ok(body) => body,
        Err(rejection) => {
            let status = body_rejection_status(&rejection);
            if let Some(suppressed) = state.warnings.body_rejected.allow() {
                warn!(status = status.as_u16(), suppressed, "body rejected");
            }
            crate::ops::metrics::receipt(&provider_name, "rejected");
            return error(status, &correlation_id, rejection.body_text());
        }
    };
    let now = now_ms();
    let verified = match provider
        .verifier
        .verify(&headers, query.as_deref(), &body, now / 1000)
    {
        Ok(v) => v,
        Err(e) => {
            if let Some(suppressed) = state.warnings.signature_failed.allow() {
                warn!(reason = %e, suppressed, "signature check failed");
            }
            crate::ops::metrics::receipt(&provider_name, "signature_failed");
            state
                .db
                .rollup()
                .add(now, &provider_name, "signature_failed", 1);
            return error(
                e.status(),
                &correlation_id,
                format!("signature check failed: {e}"),
            );
        }
    };

    // From here on the request is authentic: whatever the body is, it is kept.
    // Only the envelope's fields, borrowed from the body; the body itself is stored as it
    // came.
    let envelope = provider
        .mapping
        .read_envelope(&body, verified.header_event_id.as_deref());
    // A body without a readable id still needs a stable one, so its redeliveries collapse.
    let event_id = envelope
        .event_id
        .unwrap_or_else(|| format!("sha256:{}", hex::encode(Sha256::digest(&body))));
    let receipt = Receipt {
        provider: provider_name.clone(),
        event_id: event_id.clone(),
        event_type: envelope.event_type.clone(),
        api_version: envelope.api_version.clone(),
        raw_body: body.to_vec(),
        correlation_id: correlation_id.clone(),
        received_at: now,
        fetched_body: None,
        derived: false,
    };
    // A thin notification (Mercado Pago's) is completed with the payment it names before
    // anything is stored: a failure answers 503 and stores nothing, so the provider's retry
    // fetches again rather than leaving a notification nobody can apply.
    let receipt = match &provider.fetch {
        None => receipt,
        Some(api) => match fetch_named_payment(api, query.as_deref(), &body).await {
            Ok(fetched_body) => Receipt {
                fetched_body,
                ..receipt
            },
            Err(reason) => {
                warn!(%event_id, %reason, "payment not fetched: answering 503");
                crate::ops::metrics::receipt(&provider_name, "unavailable");
                let mut response = error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &correlation_id,
                    format!("the payment this notification names could not be fetched: {reason}"),
                );
                response
                    .headers_mut()
                    .insert("retry-after", HeaderValue::from_static("30"));
                return response;
            }
        },
    };
    let receipt_api_version = envelope.api_version;
    // A fetched payment holding more facts than its status (approved, then refunded) has
    // each stored as its own event, committed before the notification's own: a failure
    // answers 503 and the provider's retry stores what is missing (the rest are duplicates).
    let views = receipt
        .fetched_body
        .as_deref()
        .map(crate::provider::mapping::mercadopago_views)
        .unwrap_or_default();
    for (suffix, view) in views {
        let derived = Receipt {
            event_id: format!("{event_id}:{suffix}"),
            fetched_body: Some(view),
            derived: true,
            ..receipt.clone()
        };
        if let Err(e) = state.ingestor.submit(derived).await {
            warn!(%event_id, "not committed: answering 503");
            crate::ops::metrics::receipt(&provider_name, "unavailable");
            let mut response = error(
                StatusCode::SERVICE_UNAVAILABLE,
                &correlation_id,
                e.to_string(),
            );
            response
                .headers_mut()
                .insert("retry-after", HeaderValue::from_static("5"));
            return response;
        }
    }
    match state.ingestor.submit(receipt).await {
        Ok(stored) => {
            let duplicate = stored == Stored::Duplicate;
            crate::ops::metrics::receipt(
                &provider_name,
                if duplicate { "duplicate" } else { "accepted" },
            );
            state.db.rollup().received(
                now,
                &provider_name,
                duplicate,
                envelope.event_type.as_deref(),
                receipt_api_version.as_deref(),
            );
            info!(%event_id, event_type = envelope.event_type.as_deref().unwrap_or("-"), duplicate, "accepted");
            answer(
                StatusCode::OK,
                &correlation_id,
                json!({
                    "status": if duplicate { "duplicate" } else { "accepted" },
                    "duplicate": duplicate,
                    "provider": provider_name,
                    "event_id": event_id,
                    "correlation_id": correlation_id,
                }),
            )
        }
        Err(e) => {
            warn!(%event_id, "not committed: answering 503");
            crate::ops::metrics::receipt(&provider_name, "unavailable");
            let mut response = error(
                StatusCode::SERVICE_UNAVAILABLE,
                &correlation_id,
                e.to_string(),
            );
            response
                .headers_mut()
                .insert("retry-after", HeaderValue::from_static("5"));
            response
        }
    }
}

/// How long the receiver waits for a thin notification's payment: within the 22 s Mercado
/// Pago waits for an answer, retries included.
const FETCH_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// The payment a Mercado Pago notification names (`data.id` of the query string, else of
/// the body), as its API answers it; `Ok(None)` for notifications of other topics
/// (`merchant_order`, `point_integration_wh`…), which are kept as they came.
async fn fetch_named_payment(
    api: &crate::provider::api::ApiClient,
    query: Option<&str>,
    body: &[u8],
) -> Result<Option<Vec<u8>>, String> {
    let params: Vec<(String, String)> = query
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect()
        })
        .unwrap_or_default();
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let doc: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let text = |pointer: &str| match doc.pointer(pointer) {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(serde_json::Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let topic = param("type")
        .or_else(|| param("topic"))
        .or_else(|| text("/type"))
        .or_else(|| text("/topic"));
    if topic.as_deref() != Some("payment") {
        return Ok(None);
    }
    let Some(id) = param("data.id")
        .or_else(|| text("/data/id"))
        .or_else(|| param("id"))
    else {
        return Err("a payment notification without data.id".into());
    };
    match tokio::time::timeout(FETCH_WITHIN, api.mercadopago_payment(&id)).await {
        Ok(Ok(payment)) => Ok(Some(payment)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} s", FETCH_WITHIN.as_secs())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_provider_names_are_escaped_and_truncated_for_the_log() {
        let providers = Providers::build(&[crate::provider::settings::ProviderSettings {
            name: "stripe".into(),
            scheme: crate::provider::signature::SchemeKind::Stripe,
            secrets: vec!["whsec_0123456789abcdef".into()],
            tolerance_secs: 300,
            mapping: None,
            events: Default::default(),
            api: Default::default(),
            signature: None,
        }])
        .unwrap();
        assert_eq!(loggable_provider(&providers, "stripe"), "stripe");
        let forged = "x\n2025-01-01T00:00:00Z  INFO accepted\x1b[2J";
        let logged = loggable_provider(&providers, forged);
        assert!(
            !logged.contains('\n') && !logged.contains('\x1b'),
            "{logged}"
        );
        assert!(logged.starts_with("unknown:"), "{logged}");
        let long = loggable_provider(&providers, &"a".repeat(10_000));
        assert!(long.chars().count() < 50, "{long}");
    }

    #[test]
    fn correlation_id_comes_from_the_request_when_sane() {
        let mut h = HeaderMap::new();
        h.insert("x-request-id", "req-42".parse().unwrap());
        assert_eq!(correlation_id(&h), "req-42");
        h.insert(CORRELATION_HEADER, "corr-1".parse().unwrap());
        assert_eq!(correlation_id(&h), "corr-1");
        let mut bad = HeaderMap::new();
        bad.insert(CORRELATION_HEADER, "has space".parse().unwrap());
        assert_eq!(correlation_id(&bad).len(), 36, "falls back to a UUID");
    }

    #[test]
    fn fresh_correlation_ids_sort_in_the_order_they_were_made() {
        let none = HeaderMap::new();
        let ids: Vec<String> = (0..1_000).map(|_| correlation_id(&none)).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted, "each fresh id sorts after the one before it");
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len(), "and none repeats");
    }
}
