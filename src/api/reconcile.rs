//! `/api/v1/reconciliation/*`: runs and diffs (any role), resolving a diff (operator).

use app::backend::{DiffPage, DiffQuery, Operator, Principal, RunsPage, Viewer};
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{ApiError, ApiState};

type ApiResult<T> = Result<Json<T>, ApiError>;

fn bad_request(text: String) -> ApiError {
    ApiError::new(400, text)
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RunsParams {
    /// Keyset cursor: runs with a smaller id.
    pub before: Option<i64>,
    /// At most this many (default 50, at most 500).
    pub limit: Option<u32>,
}

/// Reconciliation runs, newest first, with the open diffs by kind and the last success.
#[utoipa::path(
    get,
    path = "/api/v1/reconciliation/runs",
    tag = "reads",
    params(RunsParams),
    responses(
        (status = 200, description = "Runs", body = RunsPage),
        (status = 401, description = "No live token", body = ApiError),
    )
)]
pub async fn runs(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    params: Result<Query<RunsParams>, QueryRejection>,
) -> ApiResult<RunsPage> {
    let Query(p) = params.map_err(|e| bad_request(e.body_text()))?;
    let who: Viewer = api
        .authorize(who, "reconciliation.read", "reconciliation")
        .await?;
    Ok(Json(
        api.backend
            .reconciliation_runs(&who, p.before, p.limit.unwrap_or(50))
            .await?,
    ))
}

/// Reconciliation diffs, newest first: each with its `kind`, `order_id`,
/// `provider_event_id` and `object_id` where there is one, `state` and `detail`.
#[utoipa::path(
    get,
    path = "/api/v1/reconciliation/diffs",
    tag = "reads",
    params(DiffQuery),
    responses(
        (status = 200, description = "Diffs", body = DiffPage),
        (status = 401, description = "No live token", body = ApiError),
    )
)]
pub async fn diffs(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    params: Result<Query<DiffQuery>, QueryRejection>,
) -> ApiResult<DiffPage> {
    let Query(q) = params.map_err(|e| bad_request(e.body_text()))?;
    let who: Viewer = api
        .authorize(who, "reconciliation.read", "reconciliation")
        .await?;
    Ok(Json(api.backend.reconciliation_diffs(&who, q).await?))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct ResolveDiff {
    /// Why it is accepted as it is (required; it goes to the audit log).
    pub reason: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Resolved {
    pub id: i64,
    pub state: String,
}

/// Accept an open diff as it is, with a reason (operator; audited).
#[utoipa::path(
    post,
    path = "/api/v1/reconciliation/diffs/{id}/resolve",
    tag = "actions",
    params(("id" = i64, Path, description = "The diff's id")),
    request_body = ResolveDiff,
    responses(
        (status = 200, description = "Resolved", body = Resolved),
        (status = 401, description = "No live token", body = ApiError),
        (status = 403, description = "The token's role may not resolve", body = ApiError),
        (status = 422, description = "No reason, or not an open diff", body = ApiError),
    )
)]
pub async fn resolve(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    id: Result<Path<i64>, PathRejection>,
    request: Result<Json<ResolveDiff>, JsonRejection>,
) -> ApiResult<Resolved> {
    let Path(id) = id.map_err(|e| bad_request(e.body_text()))?;
    let Json(request) = request.map_err(|e| bad_request(e.body_text()))?;
    let who: Operator = api
        .authorize(
            who,
            "reconciliation.resolve",
            &format!("reconciliation_diff:{id}"),
        )
        .await?;
    api.backend.resolve_diff(&who, id, request.reason).await?;
    Ok(Json(Resolved {
        id,
        state: "resolved".into(),
    }))
}
