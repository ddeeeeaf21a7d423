//! HTTP: the webhook receiver, health, and the dashboard, in one router.

pub mod dashboard;
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
    /// Sign-in, sessions and CSRF protection around the dashboard (src/auth/).
    pub access: Option<crate::auth::Access>,
}

pub fn router(parts: WebParts) -> Router {
    let mut router = Router::new().route("/healthz", get(health).with_state(parts.db));
    if let Some(state) = parts.webhooks {
        router = router.route(
            "/webhooks/{provider}",
            post(webhooks::receive)
                .layer(DefaultBodyLimit::max(parts.max_body_bytes))
                .with_state(state),
        );
    }
    if let Some((backend, site_root)) = parts.dashboard {
        let dashboard = dashboard::dashboard_router(backend, site_root);
        router = router.merge(match &parts.access {
            Some(access) => access.protect(dashboard),
            None => dashboard,
        });
    }
    router.layer(TraceLayer::new_for_http())
}

/// 200 when the database answers, 503 when it does not (load balancers take us out).
async fn health(State(db): State<Db>) -> (StatusCode, &'static str) {
    match sqlx::query("SELECT 1").execute(db.reader()).await {
        Ok(_) => (StatusCode::OK, "ok"),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "database unavailable"),
    }
}
