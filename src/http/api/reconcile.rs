//! `/api/v1/reconciliation/*`: runs and diffs (any role), resolving a diff (operator).

use app::backend::{DiffPage, DiffQuery, Operator, Principal, RunsPage, Viewer};
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::handlers::{body, path, IdempotencyKey};
use super::input::{self, RECONCILIATION_MAX_LIMIT};
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
    /// At most this many (default 50).
    #[param(minimum = 1, maximum = 500, default = 50)]
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
        (status = 400, description = "A parameter is not of its type", body = ApiError),
        (status = 401, description = "No live token", body = ApiError,
         headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"oncehook\"`"))),
        (status = 422, description = "`limit` outside 1 to 500", body = ApiError),
        (status = 503, description = "The database is not answering (details in the log under a reference)", body = ApiError),
    )
)]
pub async fn runs(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    params: Result<Query<RunsParams>, QueryRejection>,
) -> ApiResult<RunsPage> {
    let Query(p) = params.map_err(|e| bad_request(e.body_text()))?;
    let limit = input::limit(p.limit, 50, RECONCILIATION_MAX_LIMIT)?;
    let who: Viewer = api
        .authorize(who, "reconciliation.read", "reconciliation")
        .await?;
    Ok(Json(
        api.backend
            .reconciliation_runs(&who, p.before, limit)
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
        (status = 400, description = "A parameter is not of its type", body = ApiError),
        (status = 401, description = "No live token", body = ApiError,
         headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"oncehook\"`"))),
        (status = 422, description = "`limit` outside 1 to 500", body = ApiError),
        (status = 503, description = "The database is not answering (details in the log under a reference)", body = ApiError),
    )
)]
pub async fn diffs(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    params: Result<Query<DiffQuery>, QueryRejection>,
) -> ApiResult<DiffPage> {
    let Query(mut q) = params.map_err(|e| bad_request(e.body_text()))?;
    q.limit = Some(input::limit(q.limit, 50, RECONCILIATION_MAX_LIMIT)?);
    let who: Viewer = api
        .authorize(who, "reconciliation.read", "reconciliation")
        .await?;
    Ok(Json(api.backend.reconciliation_diffs(&who, q).await?))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct ResolveDiff {
    /// Why it is accepted as it is (required; it goes to the audit log): at most 500
    /// characters, at least one of them neither whitespace nor a control character.
    #[schema(schema_with = input::reason_schema)]
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
    params(("id" = i64, Path, description = "The diff's id"), IdempotencyKey),
    request_body = ResolveDiff,
    responses(
        (status = 200, description = "Resolved", body = Resolved),
        (status = 400, description = "The id is not a 64-bit integer (or empty), the body is not a resolve request, or a bad Idempotency-Key", body = ApiError),
        (status = 401, description = "No live token", body = ApiError,
         headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"oncehook\"`"))),
        (status = 403, description = "The token's role may not resolve", body = ApiError),
        (status = 404, description = "No such diff", body = ApiError),
        (status = 409, description = "A request with this Idempotency-Key is still running", body = ApiError),
        (status = 413, description = "The body is larger than 1 MiB", body = ApiError),
        (status = 415, description = "No `Content-Type: application/json`", body = ApiError),
        (status = 422, description = "A reason outside its pattern; not an open diff; the Idempotency-Key was used with another request", body = ApiError),
        (status = 503, description = "The database is not answering (details in the log under a reference)", body = ApiError),
    )
)]
pub async fn resolve(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    id: Result<Path<i64>, PathRejection>,
    request: Result<Json<ResolveDiff>, JsonRejection>,
) -> ApiResult<Resolved> {
    let id = path(id)?;
    let request = body(request)?;
    input::reason(&request.reason)?;
    let who: Operator = api
        .authorize(
            who,
            "reconciliation.resolve",
            &format!("reconciliation_diff:{id}"),
        )
        .await?;
    // An unknown id is a 404; a known one that is not open the backend refuses (422).
    let viewer: Viewer = api
        .authorize(
            (*who).clone(),
            "reconciliation.read",
            &format!("reconciliation_diff:{id}"),
        )
        .await?;
    let around = DiffQuery {
        before: id.checked_add(1),
        limit: Some(1),
        ..DiffQuery::default()
    };
    let page = api.backend.reconciliation_diffs(&viewer, around).await?;
    if page.diffs.first().map(|d| d.id) != Some(id) {
        return Err(ApiError::new(404, format!("no reconciliation diff {id}")));
    }
    api.backend.resolve_diff(&who, id, request.reason).await?;
    Ok(Json(Resolved {
        id,
        state: "resolved".into(),
    }))
}
