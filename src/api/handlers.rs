//! The API's handlers. Each is thin: parse, turn the token's principal into the capability
//! the backend call needs, call it, answer JSON. Their `#[utoipa::path]` annotations are
//! the OpenAPI document.

use app::backend::{
    DlqPage, DlqQuery, EventDetail, InboxPage, InboxQuery, Operator, OrderDetail, Overview,
    Principal, Range, RedriveOutcome, Viewer,
};
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{ApiError, ApiState};

type ApiResult<T> = Result<Json<T>, ApiError>;

fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::new(400, e.body_text()))
}

pub(super) fn path<T>(p: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    p.map(|Path(p)| p)
        .map_err(|e| ApiError::new(400, e.body_text()))
}

pub(super) fn body<T>(b: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    b.map(|Json(b)| b)
        .map_err(|e| ApiError::new(400, e.body_text()))
}

/// One order: status, the sentence saying why, money totals, provider resources and the
/// whole story in time order.
#[utoipa::path(
    get,
    path = "/api/v1/orders/{order_id}",
    tag = "reads",
    params(("order_id" = String, Path, description = "The order id the provider's events name")),
    responses(
        (status = 200, description = "The order", body = OrderDetail),
        (status = 401, description = "No live token", body = ApiError),
        (status = 404, description = "No such order", body = ApiError),
    )
)]
pub async fn order(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(order_id): Path<String>,
) -> ApiResult<OrderDetail> {
    let who: Viewer = api
        .authorize(who, "order.read", &format!("order:{order_id}"))
        .await?;
    Ok(Json(api.backend.order_detail(&who, &order_id).await?))
}

/// Inbox filters and the keyset cursor.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsParams {
    pub provider: Option<String>,
    /// pending, processing, applied, duplicate, stale, ignored, failed, dead
    pub status: Option<String>,
    /// The event type (`payment_intent.succeeded`).
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub event_type: Option<String>,
    pub order: Option<String>,
    /// The provider's event id.
    pub event: Option<String>,
    /// The correlation id of any delivery.
    pub correlation: Option<String>,
    /// Received at or after, UTC: `2026-12-01`, `2026-12-01T10:30` or RFC 3339.
    pub since: Option<String>,
    /// Received before, same forms.
    pub until: Option<String>,
    /// A payload field and its value: `data.object.customer = cus_123`.
    pub payload: Option<String>,
    /// Only events older than this inbox id (the previous page's `next_before`).
    pub before: Option<i64>,
    /// Events per page, 1 to 200 (default 50).
    pub limit: Option<u32>,
}

/// The inbox, newest first, with filters; page with `before = next_before`.
#[utoipa::path(
    get,
    path = "/api/v1/events",
    tag = "reads",
    params(EventsParams),
    responses(
        (status = 200, description = "A page of events", body = InboxPage),
        (status = 400, description = "A parameter is not of its type", body = ApiError),
        (status = 401, description = "No live token", body = ApiError),
        (status = 422, description = "A filter cannot be read (time, payload field)", body = ApiError),
    )
)]
pub async fn events(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    params: Result<Query<EventsParams>, QueryRejection>,
) -> ApiResult<InboxPage> {
    let p = query(params)?;
    let who: Viewer = api.authorize(who, "inbox.read", "inbox").await?;
    let filter = InboxQuery {
        provider: p.provider,
        status: p.status,
        event_type: p.event_type,
        order_id: p.order,
        event_id: p.event,
        correlation_id: p.correlation,
        since: p.since,
        until: p.until,
        payload: p.payload,
        before: p.before,
    };
    Ok(Json(
        api.backend
            .inbox(&who, filter, p.limit.unwrap_or(50).clamp(1, 200))
            .await?,
    ))
}

/// One event: payload, deliveries, attempts, effect key and what became of it.
#[utoipa::path(
    get,
    path = "/api/v1/events/{id}",
    tag = "reads",
    params(("id" = i64, Path, description = "The inbox id (`id` in the event list)")),
    responses(
        (status = 200, description = "The event", body = EventDetail),
        (status = 401, description = "No live token", body = ApiError),
        (status = 404, description = "No such event", body = ApiError),
    )
)]
pub async fn event(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    id: Result<Path<i64>, PathRejection>,
) -> ApiResult<EventDetail> {
    let id = path(id)?;
    let who: Viewer = api
        .authorize(who, "event.read", &format!("event:{id}"))
        .await?;
    Ok(Json(api.backend.event_detail(&who, id).await?))
}

/// Dead letters matching the filter (open ones unless `status` says otherwise), grouped by
/// error class and message, oldest first, with the counts of the triage page.
#[utoipa::path(
    get,
    path = "/api/v1/dead-letters",
    tag = "reads",
    params(DlqQuery),
    responses(
        (status = 200, description = "Dead letters, grouped", body = DlqPage),
        (status = 400, description = "A parameter is not of its type", body = ApiError),
        (status = 401, description = "No live token", body = ApiError),
    )
)]
pub async fn dead_letters(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    params: Result<Query<DlqQuery>, QueryRejection>,
) -> ApiResult<DlqPage> {
    let who: Viewer = api
        .authorize(who, "dead_letters.read", "dead_letters")
        .await?;
    Ok(Json(api.backend.dead_letters(&who, query(params)?).await?))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OverviewParams {
    /// `1h` (default), `24h` or `7d`.
    pub range: Option<String>,
}

/// The overview's KPIs and per-bucket series for the last hour, day or week.
#[utoipa::path(
    get,
    path = "/api/v1/overview",
    tag = "reads",
    params(OverviewParams),
    responses(
        (status = 200, description = "KPIs and series", body = Overview),
        (status = 401, description = "No live token", body = ApiError),
        (status = 422, description = "Unknown range", body = ApiError),
    )
)]
pub async fn overview(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    params: Result<Query<OverviewParams>, QueryRejection>,
) -> ApiResult<Overview> {
    let who: Viewer = api.authorize(who, "overview.read", "overview").await?;
    let range = match query(params)?.range.as_deref() {
        None | Some("1h") => Range::Hour,
        Some("24h") => Range::Day,
        Some("7d") => Range::Week,
        Some(other) => {
            return Err(ApiError::new(
                422,
                format!("range {other:?}: use 1h, 24h or 7d"),
            ))
        }
    };
    Ok(Json(api.backend.overview(&who, range).await?))
}

fn yes() -> bool {
    true
}

/// Which dead letters to redrive, and whether to do it.
#[derive(Debug, Deserialize, ToSchema)]
pub struct RedriveRequest {
    /// The selection: one `id`, or every dead letter matching the filters (open ones unless
    /// `status` says otherwise), across all pages.
    #[serde(flatten)]
    pub filter: DlqQuery,
    /// Why, for the audit log.
    pub reason: Option<String>,
    /// `true` (the default) only predicts and changes nothing; send `false` to redrive.
    #[serde(default = "yes")]
    #[schema(default = true)]
    pub dry_run: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RedriveResponse {
    pub dry_run: bool,
    /// How many dead letters the selection matched.
    pub matching: usize,
    /// Per dead letter: what was done (or, in a dry run, what would be; at most 200 listed).
    pub outcomes: Vec<RedriveOutcome>,
}

/// Redrive dead letters: a dry run by default (any role), the real run with
/// `"dry_run": false` (operator; refusals are audited).
#[utoipa::path(
    post,
    path = "/api/v1/dead-letters/redrive",
    tag = "actions",
    request_body = RedriveRequest,
    responses(
        (status = 200, description = "What was (or would be) done", body = RedriveResponse),
        (status = 400, description = "The body is not a redrive request", body = ApiError),
        (status = 401, description = "No live token", body = ApiError),
        (status = 403, description = "The token's role may not redrive", body = ApiError),
    )
)]
pub async fn redrive(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    request: Result<Json<RedriveRequest>, JsonRejection>,
) -> ApiResult<RedriveResponse> {
    let request = body(request)?;
    if request.dry_run {
        let who: Viewer = api
            .authorize(who, "dead_letter.preview", "dead_letters")
            .await?;
        let preview = api.backend.preview_redrive(&who, request.filter).await?;
        return Ok(Json(RedriveResponse {
            dry_run: true,
            matching: preview.matching,
            outcomes: preview.outcomes,
        }));
    }
    let target = request.filter.clone().normalized().audit_target();
    let who: Operator = api.authorize(who, "dead_letter.redrive", &target).await?;
    let outcomes = api
        .backend
        .redrive(&who, request.filter, request.reason)
        .await?;
    Ok(Json(RedriveResponse {
        dry_run: false,
        matching: outcomes.len(),
        outcomes,
    }))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct CloseRequest {
    /// Why (required; it goes to the audit log).
    pub reason: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CloseResponse {
    pub id: i64,
    /// resolved | discarded
    pub status: String,
}

async fn close(
    api: ApiState,
    who: Principal,
    id: i64,
    resolve: bool,
    request: Result<Json<CloseRequest>, JsonRejection>,
) -> ApiResult<CloseResponse> {
    let request = body(request)?;
    let action = if resolve {
        "dead_letter.resolve"
    } else {
        "dead_letter.discard"
    };
    let who: Operator = api
        .authorize(who, action, &format!("dead_letter:{id}"))
        .await?;
    api.backend
        .close_dead_letter(&who, id, resolve, request.reason)
        .await?;
    Ok(Json(CloseResponse {
        id,
        status: if resolve { "resolved" } else { "discarded" }.into(),
    }))
}

/// Mark an open dead letter resolved (fixed elsewhere), with a reason (operator).
#[utoipa::path(
    post,
    path = "/api/v1/dead-letters/{id}/resolve",
    tag = "actions",
    params(("id" = i64, Path, description = "The dead letter's id")),
    request_body = CloseRequest,
    responses(
        (status = 200, description = "Resolved", body = CloseResponse),
        (status = 401, description = "No live token", body = ApiError),
        (status = 403, description = "The token's role may not resolve", body = ApiError),
        (status = 422, description = "No reason, or not an open dead letter", body = ApiError),
    )
)]
pub async fn resolve(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    id: Result<Path<i64>, PathRejection>,
    request: Result<Json<CloseRequest>, JsonRejection>,
) -> ApiResult<CloseResponse> {
    close(api, who, path(id)?, true, request).await
}

/// Discard an open dead letter (it will not be fixed), with a reason (operator).
#[utoipa::path(
    post,
    path = "/api/v1/dead-letters/{id}/discard",
    tag = "actions",
    params(("id" = i64, Path, description = "The dead letter's id")),
    request_body = CloseRequest,
    responses(
        (status = 200, description = "Discarded", body = CloseResponse),
        (status = 401, description = "No live token", body = ApiError),
        (status = 403, description = "The token's role may not discard", body = ApiError),
        (status = 422, description = "No reason, or not an open dead letter", body = ApiError),
    )
)]
pub async fn discard(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    id: Result<Path<i64>, PathRejection>,
    request: Result<Json<CloseRequest>, JsonRejection>,
) -> ApiResult<CloseResponse> {
    close(api, who, path(id)?, false, request).await
}
