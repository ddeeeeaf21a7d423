//! HTTP: the webhook receiver, health, and the dashboard, in one router.

pub mod admin;
pub mod api;
pub mod auth;
pub mod client_addr;
pub mod dashboard;
pub mod metrics;
pub mod settings;
pub mod webhooks;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use tower_http::trace::TraceLayer;

use crate::store::Db;

pub struct WebParts {
    pub webhooks: Option<webhooks::WebhookState>,
    pub max_body_bytes: usize,
    pub db: Db,
    pub dashboard: Option<(Arc<dyn app::backend::AdminBackend>, std::path::PathBuf)>,
    /// Sign-in, sessions and CSRF protection around the dashboard (src/http/auth/).
    pub access: Option<crate::http::auth::Access>,
    /// `serve --demo`: every dashboard page's top bar says "demo data".
    pub demo: bool,
}

pub fn router(parts: WebParts) -> Router {
    let mut router = Router::new().route("/healthz", get(health).with_state(parts.db.clone()));
    if let Some(state) = parts.webhooks {
        let oversize = (parts.max_body_bytes, state.warnings.clone());
        router = router.route(
            "/webhooks/{provider}",
            post(webhooks::receive)
                .layer(DefaultBodyLimit::max(parts.max_body_bytes))
                .layer(axum::middleware::from_fn_with_state(
                    oversize,
                    refuse_announced_oversize,
                ))
                .with_state(state),
        );
    }
    if parts.dashboard.is_some() {
        // With the dashboard on the admin listener, outside its sign-in: scrapers have no
        // session. It shows counts and ages, never payloads or ids.
        router = router.route("/metrics", get(metrics).with_state(parts.db.clone()));
    }
    if let Some((backend, _)) = &parts.dashboard {
        // Beside the dashboard, outside its sign-in and CSRF layers: bearer tokens only.
        router = router.merge(crate::http::api::router(backend.clone(), parts.db.clone()));
    }
    if let Some((backend, site_root)) = parts.dashboard {
        let public = dashboard::public_paths(&site_root);
        let dashboard = dashboard::dashboard_router(backend, site_root, parts.demo);
        router = router.merge(match &parts.access {
            Some(access) => access.protect(dashboard, public),
            None => dashboard,
        });
    }
    router
        // Before any route or fallback: a path that normalises to another is refused.
        .layer(axum::middleware::from_fn(
            crate::http::auth::gate::refuse_ambiguous_paths,
        ))
        .layer(axum::middleware::from_fn(security_headers))
        .layer(TraceLayer::new_for_http())
}

/// The nonce of this response's Content-Security-Policy; the dashboard renders it into its
/// inline scripts (Leptos' hydration script is an inline module script).
#[derive(Clone, Debug)]
pub struct CspNonce(pub String);

/// Security headers on every response: a CSP allowing scripts only from this origin or
/// carrying this response's nonce (plus `'wasm-unsafe-eval'`, which instantiating the
/// dashboard's WebAssembly needs), no framing, no MIME sniffing, no referrer, and
/// `Cache-Control: no-store` on everything but the static bundle under `/pkg/`.
async fn security_headers(
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{header, HeaderValue};
    use base64::Engine;
    use rand::RngCore;
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    let nonce = base64::engine::general_purpose::STANDARD.encode(bytes);
    request.extensions_mut().insert(CspNonce(nonce.clone()));
    let bundle_path = request.uri().path().starts_with("/pkg/");
    let mut response = next.run(request).await;
    // `cargo leptos watch` (development only) reloads the page through a websocket on its
    // own port; nothing else ever connects anywhere but this origin.
    static CONNECT: std::sync::LazyLock<&str> = std::sync::LazyLock::new(|| {
        if std::env::var_os("LEPTOS_WATCH").is_some() {
            "'self' ws:"
        } else {
            "'self'"
        }
    });
    let connect = *CONNECT;
    let csp = format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; \
         style-src 'self'; img-src 'self' data:; connect-src {connect}; object-src 'none'; \
         base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    );
    let status = response.status();
    let bundle_file = bundle_path && (status.is_success() || status == StatusCode::NOT_MODIFIED);
    let headers = response.headers_mut();
    if let Ok(csp) = HeaderValue::from_str(&csp) {
        headers.insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // Pages show customer data and the token page a secret: no cache (browser, proxy) keeps
    // any answer but a file of the static bundle actually served. Decided on the status
    // too, so a crafted `/pkg/...` path that reaches anything else is not cacheable.
    if !bundle_file {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// 413 from the `Content-Length` alone, before any of the body is read (the body limit
/// still stops chunked bodies while they are read).
async fn refuse_announced_oversize(
    State((limit, warnings)): State<(usize, Arc<webhooks::BadWebhookWarnings>)>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let announced = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        if let Some(suppressed) = warnings.oversize.allow() {
            tracing::warn!(
                announced,
                limit,
                suppressed,
                "body refused from its Content-Length"
            );
        }
        let mut response = (
            StatusCode::PAYLOAD_TOO_LARGE,
            axum::Json(serde_json::json!({ "error": format!("body larger than {limit} bytes") })),
        )
            .into_response();
        // The body was never read: the connection cannot be reused.
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        return response;
    }
    next.run(request).await
}

/// Prometheus exposition of this process's counters and the database's backlog gauges.
async fn metrics(State(db): State<Db>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let Some(handle) = crate::ops::metrics::handle() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics recorder not installed",
        )
            .into_response();
    };
    match metrics::render(&handle, &db).await {
        Ok(text) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(error) => {
            tracing::warn!(
                error = format!("{error:#}"),
                "metrics: database gauges unavailable"
            );
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response()
        }
    }
}

/// 200 when the database answers and commits; 503 with the reason and `Retry-After` while
/// it cannot commit (`store::health`) or does not answer, so a load balancer stops sending.
async fn health(State(db): State<Db>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let unavailable = |reason: String| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [(axum::http::header::RETRY_AFTER, "5")],
            reason,
        )
            .into_response()
    };
    if let Some(outage) = db.health().outage() {
        return unavailable(outage.describe());
    }
    match sqlx::query("SELECT 1").execute(db.reader()).await {
        Ok(_) => (StatusCode::OK, "ok").into_response(),
        Err(_) => unavailable("the database is unreachable".into()),
    }
}
