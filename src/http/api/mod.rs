//! `/api/v1`: the dashboard's reads and the operator's actions as JSON, for scripts and
//! other systems, with bearer tokens (`oncehook token add`, or Settings → API tokens).
//!
//! - Every handler goes through the same `AdminBackend` as the pages, so a role check, an
//!   audit row or a dry run means the same here as in the browser.
//! - A token carries a role and an expiry; only its SHA-256 is stored. Session cookies do
//!   not open the API (and the API is not behind the dashboard's CSRF layer: a browser never
//!   sends a bearer token on its own).
//! - `/api/v1/openapi.json` is generated from the handlers' annotations (utoipa).

mod handlers;
mod idempotency;
mod input;
mod reconcile;
pub use crate::store::idempotency::KEY_HOURS as IDEMPOTENCY_KEY_HOURS;
mod refunds;

use std::sync::Arc;

use app::backend::{AdminBackend, Capability, Principal, Role};
use app::error::AppError;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use serde::Serialize;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::store::{now_ms, tokens, Db};

/// What every API handler reads.
#[derive(Clone)]
pub struct ApiState {
    pub backend: Arc<dyn AdminBackend>,
}

impl ApiState {
    /// The capability `C` for the token's principal; a refusal is audited and is a 403.
    async fn authorize<C: Capability>(
        &self,
        who: Principal,
        action: &str,
        target: &str,
    ) -> Result<C, ApiError> {
        Ok(app::backend::authorize::<C>(self.backend.as_ref(), who, action, target).await?)
    }
}

/// The body of every error answer (every 4xx and 5xx of `/api/v1`), JSON.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApiError {
    /// What went wrong, for a person.
    pub error: String,
    #[serde(skip)]
    status: u16,
}

impl ApiError {
    fn new(status: u16, error: impl Into<String>) -> ApiError {
        ApiError {
            error: error.into(),
            status,
        }
    }
}

impl From<AppError> for ApiError {
    fn from(e: AppError) -> ApiError {
        ApiError::new(e.status_code(), e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, Json(&self)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"oncehook\""),
            );
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            // The database could not answer or commit: nothing was done, try again.
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        response
    }
}

/// The generated document; `/api/v1/openapi.json` serves it.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "oncehook API",
        description = "Reads of orders, events, dead letters, the overview and \
                       reconciliation, and the operator's actions (dead letters, diffs, \
                       refunds). Authenticate with `Authorization: Bearer <token>` (tokens \
                       carry a role: viewer, operator or admin). Every error is JSON \
                       (`ApiError`): 400 a parameter, path or body that cannot be read as \
                       its type; 401 no live token; 403 the role; 404 no such thing or path; \
                       409 a request the current state refuses (RFC 9110: a dead letter \
                       already closed, more than or nothing left to refund, a disputed amount \
                       the provider will not refund, a refund no longer cancellable) or an \
                       Idempotency-Key still running; 413 a body over 1 MiB; 415 a POST \
                       without `Content-Type: application/json`; 422 a value outside its \
                       documented bounds, enum or pattern; 429 too many expensive reads at \
                       once; 503 the database."
    ),
    paths(
        handlers::order,
        handlers::events,
        handlers::event,
        handlers::dead_letters,
        handlers::overview,
        handlers::redrive,
        handlers::resolve,
        handlers::discard,
        reconcile::runs,
        reconcile::diffs,
        reconcile::resolve,
        refunds::request_refund,
        refunds::cancel_refund,
    ),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "reads", description = "What the dashboard's pages show (any role)"),
        (name = "actions", description = "Dead-letter actions (operator; dry runs any role)"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An oncehook API token (oh_…)"))
                    .build(),
            ),
        );
    }
}

/// The API's routes: the document is public (it holds no data), everything else needs a
/// live token.
pub fn router(backend: Arc<dyn AdminBackend>, db: Db) -> Router {
    let protected = Router::new()
        .route("/api/v1/orders/{order_id}", get(handlers::order))
        .route(
            "/api/v1/orders/{order_id}/refunds",
            post(refunds::request_refund),
        )
        .route(
            "/api/v1/orders/{order_id}/refunds/{command_id}/cancel",
            post(refunds::cancel_refund),
        )
        .route("/api/v1/events", get(handlers::events))
        .route("/api/v1/events/{id}", get(handlers::event))
        .route("/api/v1/dead-letters", get(handlers::dead_letters))
        .route("/api/v1/dead-letters/redrive", post(handlers::redrive))
        .route("/api/v1/dead-letters/{id}/resolve", post(handlers::resolve))
        .route("/api/v1/dead-letters/{id}/discard", post(handlers::discard))
        .route("/api/v1/overview", get(handlers::overview))
        .route("/api/v1/reconciliation/runs", get(reconcile::runs))
        .route("/api/v1/reconciliation/diffs", get(reconcile::diffs))
        .route(
            "/api/v1/reconciliation/diffs/{id}/resolve",
            post(reconcile::resolve),
        )
        .route("/api/v1/{*rest}", any(unknown_path))
        // Inside the bearer layer: the token is known when the key is looked up.
        .layer(middleware::from_fn_with_state(
            db.clone(),
            idempotency::layer,
        ))
        .layer(middleware::from_fn_with_state(db, bearer))
        .with_state(ApiState { backend });
    Router::new()
        .route("/api/v1/openapi.json", get(openapi_json))
        .merge(protected)
}

async fn openapi_json() -> Response {
    // Built once: the document never changes while the process runs.
    static DOCUMENT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        ApiDoc::openapi()
            .to_pretty_json()
            .expect("the OpenAPI document serializes")
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
        .into_response()
}

async fn unknown_path() -> ApiError {
    ApiError::new(404, "no such API path; see /api/v1/openapi.json")
}

/// The longest token accepted; real ones are 46 characters. Anything longer is refused
/// before it is hashed or looked up.
const MAX_TOKEN_CHARS: usize = 128;

/// The credentials of an `Authorization` value in the Bearer scheme, whose name is matched
/// case-insensitively (RFC 9110 §11.1); `None` for another scheme or an empty token.
fn bearer_credentials(value: &str) -> Option<&str> {
    let (scheme, rest) = value.split_once(' ')?;
    let token = rest.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Which token sent a request: its row id, never its name, so a new token made under a
/// revoked one's name shares nothing with it (idempotency keys are scoped by this).
#[derive(Clone, Copy, Debug)]
pub struct TokenScope(pub i64);

/// `Authorization: Bearer <token>` → the token's `Principal` in the request's extensions;
/// 401 without a live token.
async fn bearer(State(db): State<Db>, mut req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_credentials)
        .filter(|t| t.len() <= MAX_TOKEN_CHARS);
    let Some(token) = token else {
        return ApiError::new(401, "send Authorization: Bearer <token>").into_response();
    };
    let row = match tokens::authenticate(&db, token, now_ms()).await {
        Ok(Some(row)) => row,
        Ok(None) => return ApiError::new(401, "unknown, expired or revoked token").into_response(),
        Err(e) => {
            let message = crate::http::admin::internal_error("checking an API token", &e);
            return ApiError::new(503, message).into_response();
        }
    };
    let Some(role) = Role::parse(&row.role) else {
        return ApiError::new(401, "the token's role is unknown").into_response();
    };
    let source = req
        .extensions()
        .get::<crate::http::client_addr::ClientAddr>()
        .map(|c| c.0.to_string());
    req.extensions_mut().insert(TokenScope(row.id));
    req.extensions_mut().insert(Principal {
        // Tokens are not users; the name in the audit log says which token acted.
        user_id: 0,
        name: format!("token:{}", row.name),
        role,
        must_change_password: false,
        source,
    });
    next.run(req).await
}
