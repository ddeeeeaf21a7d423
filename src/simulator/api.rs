//! The Stripe-compatible API subset, on the simulator's own port: events (with Stripe's
//! filters and paging), payment intents, charges, refunds and disputes, and
//! `POST /v1/refunds` with Stripe's `Idempotency-Key` rules. Authenticated with the
//! simulator's key (bearer, or basic with the key as user name, as Stripe takes it);
//! answers 429 (with `Retry-After`) and 5xx at the configured rates.
// Parameter checks return the finished error answer itself, which handlers pass on as is.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Form, Json, Router};
use base64::Engine as _;
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::store::{EventFilter, KeyState};
use super::Shared;

/// The API's own faults and latency.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiFaults {
    /// Share of requests answered 429 with `Retry-After`.
    pub rate_429: f64,
    /// Share of requests answered 500/502/503.
    pub rate_5xx: f64,
    /// The `Retry-After` of a 429, in seconds.
    pub retry_after_secs: u64,
    /// Time a `POST /v1/refunds` takes (a slow provider; lets a test see a key in use).
    pub refund_latency_ms: u64,
}

impl Default for ApiFaults {
    fn default() -> Self {
        ApiFaults {
            rate_429: 0.0,
            rate_5xx: 0.0,
            retry_after_secs: 1,
            refund_latency_ms: 0,
        }
    }
}

/// Stripe keeps events 30 days (idempotency keys: `store::KEY_TTL_MS`).
pub const EVENT_DAYS: i64 = 30;
const MAX_KEY_CHARS: usize = 255;

/// The API of the provider the simulator plays: Stripe's, or Mercado Pago's payments (its
/// log of notifications is not Stripe's events list, so it is not served as one).
pub fn router(shared: Arc<Shared>) -> Router {
    let routes = match shared.provider {
        super::Provider::Stripe => Router::new()
            .route("/v1/events", get(list_events))
            .route("/v1/events/{id}", get(get_event))
            .route("/v1/payment_intents/{id}", get(get_payment_intent))
            .route("/v1/charges/{id}", get(get_charge))
            .route("/v1/refunds", get(list_refunds).post(create_refund))
            .route("/v1/refunds/{id}", get(get_refund))
            .route("/v1/disputes", get(list_disputes))
            .route("/v1/disputes/{id}", get(get_dispute)),
        super::Provider::MercadoPago => Router::new()
            .route("/v1/payments/search", get(super::mp_search::search))
            .route("/v1/payments/{id}", get(get_mp_payment))
            .route(
                "/v1/payments/{id}/refunds",
                axum::routing::post(create_mp_refund),
            ),
    };
    routes
        .fallback(|| async {
            error(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                None,
                None,
                "Unrecognized request URL. Please see https://stripe.com/docs.",
            )
        })
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            faults_and_auth,
        ))
        .with_state(shared)
}

/// Stripe's error object.
fn error(
    status: StatusCode,
    kind: &str,
    code: Option<&str>,
    param: Option<&str>,
    message: &str,
) -> Response {
    let mut body = json!({"type": kind, "message": message});
    if let Some(code) = code {
        body["code"] = json!(code);
        body["doc_url"] = json!(format!(
            "https://stripe.com/docs/error-codes/{}",
            code.replace('_', "-")
        ));
    }
    if let Some(param) = param {
        body["param"] = json!(param);
    }
    (status, Json(json!({"error": body}))).into_response()
}

fn internal(e: anyhow::Error) -> Response {
    tracing::error!(error = %e, "simulator API");
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "api_error",
        None,
        None,
        "An unknown error occurred",
    )
}

fn authorized(headers: &HeaderMap, key: &str) -> bool {
    let Some(value) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    let given = if scheme.eq_ignore_ascii_case("bearer") {
        rest.trim().to_string()
    } else if scheme.eq_ignore_ascii_case("basic") {
        // Stripe takes the key as the user name, the password empty.
        base64::engine::general_purpose::STANDARD
            .decode(rest.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .map(|s| s.split(':').next().unwrap_or_default().to_string())
            .unwrap_or_default()
    } else {
        return false;
    };
    // Digests compared, not the key: the time taken says nothing about the key's bytes.
    use sha2::Digest;
    sha2::Sha256::digest(given.as_bytes()) == sha2::Sha256::digest(key.as_bytes())
}

async fn faults_and_auth(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    if !authorized(request.headers(), &shared.api_key) {
        return error(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            None,
            None,
            "Invalid API Key provided.",
        );
    }
    let faults = shared.api_faults.clone();
    let roll: f64 = rand::thread_rng().gen();
    shared
        .stats
        .api_requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if roll < faults.rate_429 {
        shared
            .stats
            .api_429
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut r = error(
            StatusCode::TOO_MANY_REQUESTS,
            "invalid_request_error",
            Some("rate_limit"),
            None,
            "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.",
        );
        r.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            faults.retry_after_secs.into(),
        );
        return r;
    }
    if roll < faults.rate_429 + faults.rate_5xx {
        shared
            .stats
            .api_5xx
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let status = [
            StatusCode::INTERNAL_SERVER_ERROR,
            StatusCode::BAD_GATEWAY,
            StatusCode::SERVICE_UNAVAILABLE,
        ][rand::thread_rng().gen_range(0..3)];
        return error(status, "api_error", None, None, "An unknown error occurred");
    }
    next.run(request).await
}

fn list(data: Vec<Value>, has_more: bool, url: &str) -> Response {
    Json(json!({"object": "list", "data": data, "has_more": has_more, "url": url})).into_response()
}

fn bad_param(param: &str, message: String) -> Response {
    error(
        StatusCode::BAD_REQUEST,
        "invalid_request_error",
        Some("parameter_invalid_integer"),
        Some(param),
        &message,
    )
}

fn integer(param: &str, value: &str) -> Result<i64, Response> {
    value
        .parse::<i64>()
        .map_err(|_| bad_param(param, format!("Invalid integer: {value}")))
}

fn limit_of(query: &[(String, String)]) -> Result<i64, Response> {
    match query.iter().find(|(k, _)| k == "limit") {
        None => Ok(10),
        Some((_, v)) => {
            let n = integer("limit", v)?;
            if (1..=100).contains(&n) {
                Ok(n)
            } else {
                Err(error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    Some("parameter_invalid_integer"),
                    Some("limit"),
                    "This value must be greater than or equal to 1 and less than or equal to 100.",
                ))
            }
        }
    }
}

async fn list_events(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let mut filter = EventFilter {
        limit: match limit_of(&query) {
            Ok(n) => n,
            Err(r) => return r,
        },
        // Older events are gone, as on Stripe.
        created_min: Some(chrono::Utc::now().timestamp() - EVENT_DAYS * 86_400),
        ..Default::default()
    };
    let raise = |min: &mut Option<i64>, v: i64| *min = Some(min.map_or(v, |m| m.max(v)));
    for (k, v) in &query {
        let parsed = |k: &str| integer(k, v);
        match k.as_str() {
            "created[gte]" | "created[gt]" | "created" => match parsed(k) {
                Ok(t) => {
                    let bound = if k == "created[gt]" { t + 1 } else { t };
                    raise(&mut filter.created_min, bound);
                    if k == "created" {
                        filter.created_max = Some(t);
                    }
                }
                Err(r) => return r,
            },
            "created[lte]" | "created[lt]" => match parsed(k) {
                Ok(t) => {
                    let bound = if k == "created[lt]" { t - 1 } else { t };
                    filter.created_max = Some(filter.created_max.map_or(bound, |m| m.min(bound)));
                }
                Err(r) => return r,
            },
            "types[]" | "type" => filter.types.push(v.clone()),
            "starting_after" | "ending_before" => {
                let cursor = match shared.db.event_cursor(v).await {
                    Ok(Some(c)) => c,
                    Ok(None) => {
                        return error(
                            StatusCode::BAD_REQUEST,
                            "invalid_request_error",
                            Some("resource_missing"),
                            Some(k),
                            &format!("No such event: '{v}'"),
                        )
                    }
                    Err(e) => return internal(e),
                };
                if k == "starting_after" {
                    filter.starting_after = Some(cursor);
                } else {
                    filter.ending_before = Some(cursor);
                }
            }
            "limit" => {}
            other => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    Some("parameter_unknown"),
                    Some(other),
                    &format!("Received unknown parameter: {other}"),
                )
            }
        }
    }
    if filter.types.len() > 20 {
        return bad_param("types", "You may pass at most 20 types.".into());
    }
    match shared.db.events(&filter).await {
        Ok((events, more)) => list(
            events
                .iter()
                .filter_map(|e| serde_json::from_str(&e.body).ok())
                .collect(),
            more,
            "/v1/events",
        ),
        Err(e) => internal(e),
    }
}

fn missing(kind: &str, id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        Some("resource_missing"),
        Some("id"),
        &format!("No such {kind}: '{id}'"),
    )
}

async fn get_event(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    match shared.db.event(&id).await {
        Ok(Some(e)) if e.created >= chrono::Utc::now().timestamp() - EVENT_DAYS * 86_400 => {
            match serde_json::from_str::<Value>(&e.body) {
                Ok(body) => Json(body).into_response(),
                Err(e) => internal(e.into()),
            }
        }
        Ok(_) => missing("event", &id),
        Err(e) => internal(e),
    }
}

async fn object_of(shared: &Shared, kind: &str, id: &str) -> Result<Value, Response> {
    match shared.db.object(id).await {
        Ok(Some((k, body))) if k == kind => Ok(body),
        Ok(_) => Err(missing(kind, id)),
        Err(e) => Err(internal(e)),
    }
}

fn expands(query: &[(String, String)], field: &str) -> bool {
    query
        .iter()
        .any(|(k, v)| (k == "expand[]" || k == "expand") && v == field)
}

async fn get_payment_intent(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let mut pi = match object_of(&shared, "payment_intent", &id).await {
        Ok(pi) => pi,
        Err(r) => return r,
    };
    if expands(&query, "latest_charge") {
        if let Some(charge) = pi["latest_charge"].as_str().map(str::to_owned) {
            match object_of(&shared, "charge", &charge).await {
                Ok(c) => pi["latest_charge"] = c,
                Err(r) => return r,
            }
        }
    }
    Json(pi).into_response()
}

async fn get_charge(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let mut charge = match object_of(&shared, "charge", &id).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    if expands(&query, "refunds") {
        let pi = charge["payment_intent"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match shared.db.children("refund", &pi, None, 100).await {
            Ok(refunds) => {
                let refunds: Vec<Value> = refunds
                    .into_iter()
                    .filter(|r| r["charge"] == charge["id"])
                    .collect();
                charge["refunds"] = json!({"object": "list", "data": refunds, "has_more": false,
                    "total_count": refunds.len(), "url": format!("/v1/charges/{id}/refunds")});
            }
            Err(e) => return internal(e),
        }
    }
    Json(charge).into_response()
}

/// Mercado Pago's `GET /v1/payments/{id}`: the payment as it is now, or its 404.
async fn get_mp_payment(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    match shared.db.object(&id).await {
        Ok(Some((kind, body))) if kind == super::mercadopago::KIND => Json(body).into_response(),
        Ok(_) => (
            StatusCode::NOT_FOUND,
            Json(
                json!({"message": "Payment not found", "error": "not_found", "status": 404,
                "cause": [{"code": 2000, "description": "Payment not found", "data": null}]}),
            ),
        )
            .into_response(),
        Err(e) => internal(e),
    }
}

fn mp_error(status: StatusCode, error: &str, message: &str) -> Response {
    (
        status,
        Json(json!({"message": message, "error": error, "status": status.as_u16(), "cause": []})),
    )
        .into_response()
}

/// Mercado Pago's `POST /v1/payments/{id}/refunds` (`{"amount": 12.5}` in reais, or no
/// body for all that is left) under its required `X-Idempotency-Key`: a retry with the key
/// and the same parameters replays the first answer and makes no second refund.
async fn create_mp_refund(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let Some(key) = headers
        .get("x-idempotency-key")
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty() && k.chars().count() <= MAX_KEY_CHARS)
        .map(str::to_owned)
    else {
        return mp_error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "header X-Idempotency-Key is required (1 to 255 characters)",
        );
    };
    let amount = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        match serde_json::from_slice::<Value>(&body) {
            Ok(v) if v.get("amount").is_none_or(Value::is_null) => None,
            Ok(v) if v["amount"].as_f64().is_some_and(|a| a > 0.0) => {
                Some(super::mercadopago::minor(&v["amount"]))
            }
            _ => {
                return mp_error(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    "amount must be a positive number of reais",
                )
            }
        }
    };
    let params = format!("{id}:{amount:?}");
    let state = match shared
        .db
        .claim_key(&format!("mp:{key}"), &params, crate::store::now_ms())
        .await
    {
        Ok(s) => s,
        Err(e) => return internal(e),
    };
    let json_answer = |status: StatusCode, body: String| {
        (
            status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    };
    match state {
        KeyState::Done { status, body } => json_answer(
            StatusCode::from_u16(status).unwrap_or(StatusCode::CREATED),
            body,
        ),
        KeyState::Mismatch => mp_error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "X-Idempotency-Key already used with other parameters",
        ),
        KeyState::Running => mp_error(
            StatusCode::CONFLICT,
            "conflict",
            "a request with this X-Idempotency-Key is in progress",
        ),
        KeyState::New => {
            let latency = shared.api_faults.refund_latency_ms;
            if latency > 0 {
                tokio::time::sleep(Duration::from_millis(latency)).await;
            }
            let at = shared.clock.now();
            let mut engine = shared.engine.lock().await;
            let (status, body, events) =
                match super::mercadopago::create_refund(&mut engine, &id, amount, at) {
                    Ok((refund, events)) => {
                        if let Err(e) = engine.flush(&shared.db, &events).await {
                            drop(engine);
                            let _ = shared.db.release_key(&format!("mp:{key}")).await;
                            return internal(e);
                        }
                        (StatusCode::CREATED, refund.to_string(), events)
                    }
                    Err((status, body)) => (
                        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
                        body.to_string(),
                        vec![],
                    ),
                };
            drop(engine);
            if let Err(e) = shared
                .db
                .finish_key(&format!("mp:{key}"), status.as_u16(), &body)
                .await
            {
                tracing::error!(error = %e, "simulator: saving an idempotent answer");
            }
            shared.announce(events);
            json_answer(status, body)
        }
    }
}

async fn get_refund(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    match object_of(&shared, "refund", &id).await {
        Ok(r) => Json(r).into_response(),
        Err(r) => r,
    }
}

async fn get_dispute(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    match object_of(&shared, "dispute", &id).await {
        Ok(d) => Json(d).into_response(),
        Err(r) => r,
    }
}

/// `GET /v1/disputes?payment_intent=…` (or `charge=…`), newest first: Stripe's list with
/// the filters a reconciler uses to find disputes no event announced.
async fn list_disputes(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    list_children(&shared, &query, "dispute").await
}

/// `GET /v1/refunds?payment_intent=…` (or `charge=…`), newest first.
async fn list_refunds(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    list_children(&shared, &query, "refund").await
}

/// The `kind` objects (refunds, disputes) of one payment intent, named directly or through
/// its charge, newest first, with Stripe's `starting_after` and `limit`. The simulator lists
/// per payment only: all oncehook asks for.
async fn list_children(shared: &Shared, query: &[(String, String)], kind: &str) -> Response {
    let limit = match limit_of(query) {
        Ok(n) => n,
        Err(r) => return r,
    };
    let get = |k: &str| query.iter().find(|(q, _)| q == k).map(|(_, v)| v.clone());
    let pi = match (get("payment_intent"), get("charge")) {
        (Some(pi), _) => pi,
        (None, Some(charge)) => match object_of(shared, "charge", &charge).await {
            Ok(c) => c["payment_intent"].as_str().unwrap_or_default().to_string(),
            Err(r) => return r,
        },
        (None, None) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                Some("parameter_missing"),
                Some("payment_intent"),
                &format!("The simulator lists {kind}s of one payment_intent or charge."),
            )
        }
    };
    let after = match get("starting_after") {
        Some(id) => match object_of(shared, kind, &id).await {
            Ok(o) => Some((o["created"].as_i64().unwrap_or(0), id)),
            Err(r) => return r,
        },
        None => None,
    };
    match shared.db.children(kind, &pi, after, limit + 1).await {
        Ok(mut objects) => {
            let more = objects.len() as i64 > limit;
            objects.truncate(limit as usize);
            list(objects, more, &format!("/v1/{kind}s"))
        }
        Err(e) => internal(e),
    }
}

/// The parameters of a refund request in a canonical order: what "the same parameters"
/// means for an idempotency key.
fn canonical(form: &[(String, String)]) -> String {
    let sorted: BTreeMap<&str, Vec<&str>> = form.iter().fold(BTreeMap::new(), |mut m, (k, v)| {
        m.entry(k.as_str()).or_default().push(v.as_str());
        m
    });
    serde_json::to_string(&sorted).expect("strings serialise")
}

async fn create_refund(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Form(form): Form<Vec<(String, String)>>,
) -> Response {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let Some(key) = key else {
        return refund_now(&shared, &form).await;
    };
    if key.chars().count() > MAX_KEY_CHARS {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            None,
            None,
            &format!("Invalid idempotency key: it is {} characters long, the maximum is {MAX_KEY_CHARS}.", key.chars().count()),
        );
    }
    let now = crate::store::now_ms();
    let state = match shared.db.claim_key(&key, &canonical(&form), now).await {
        Ok(s) => s,
        Err(e) => return internal(e),
    };
    match state {
        KeyState::Done { status, body } => {
            let mut r = (
                StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response();
            r.headers_mut()
                .insert("idempotent-replayed", axum::http::HeaderValue::from_static("true"));
            r
        }
        KeyState::Mismatch => error(
            StatusCode::BAD_REQUEST,
            "idempotency_error",
            None,
            None,
            &format!("Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '{key}' if you meant to execute a different request."),
        ),
        KeyState::Running => error(
            StatusCode::CONFLICT,
            "invalid_request_error",
            Some("idempotency_key_in_use"),
            None,
            "There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): please try again later.",
        ),
        KeyState::New => {
            // The key is held while the request runs; a dropped connection must not leave it
            // held for ever, so the work runs in its own task.
            let task_shared = shared.clone();
            let task_key = key.clone();
            let task = tokio::spawn(async move {
                let key = task_key;
                let response = refund_now(&task_shared, &form).await;
                let status = response.status();
                let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                    .await
                    .unwrap_or_default();
                let saved = if status.is_server_error() {
                    // Not a result: the next request with the key runs again.
                    task_shared.db.release_key(&key).await
                } else {
                    task_shared
                        .db
                        .finish_key(&key, status.as_u16(), &String::from_utf8_lossy(&body))
                        .await
                };
                if let Err(e) = saved {
                    tracing::error!(error = %e, "simulator: saving an idempotent answer");
                }
                (status, body)
            });
            match task.await {
                Ok((status, body)) => (
                    status,
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    body,
                )
                    .into_response(),
                Err(e) => {
                    // The work failed without an answer: the key is free for a retry.
                    let _ = shared.db.release_key(&key).await;
                    internal(e.into())
                }
            }
        }
    }
}

async fn refund_now(shared: &Shared, form: &[(String, String)]) -> Response {
    let latency = shared.api_faults.refund_latency_ms;
    if latency > 0 {
        tokio::time::sleep(Duration::from_millis(latency)).await;
    }
    let get = |k: &str| form.iter().find(|(q, _)| q == k).map(|(_, v)| v.clone());
    let pi = match (get("payment_intent"), get("charge")) {
        (Some(pi), _) => pi,
        (None, Some(charge)) => match object_of(shared, "charge", &charge).await {
            Ok(c) => c["payment_intent"].as_str().unwrap_or_default().to_string(),
            Err(r) => return r,
        },
        (None, None) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                Some("parameter_missing"),
                Some("payment_intent"),
                "One of the following params should be provided for this request: payment_intent or charge.",
            )
        }
    };
    let amount = match get("amount").map(|a| integer("amount", &a)).transpose() {
        Ok(a) => a,
        Err(r) => return r,
    };
    let metadata: serde_json::Map<String, Value> = form
        .iter()
        .filter_map(|(k, v)| {
            let name = k.strip_prefix("metadata[")?.strip_suffix(']')?;
            Some((name.to_string(), json!(v)))
        })
        .collect();
    let at = shared.clock.now();
    let mut engine = shared.engine.lock().await;
    match engine.create_refund(&pi, amount, Value::Object(metadata), at) {
        Ok((refund, events)) => {
            if let Err(e) = engine.flush(&shared.db, &events).await {
                return internal(e);
            }
            drop(engine);
            shared.announce(events);
            Json(refund).into_response()
        }
        Err(refusal) => error(
            StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST),
            "invalid_request_error",
            Some(refusal.code),
            refusal.param,
            &refusal.message,
        ),
    }
}
