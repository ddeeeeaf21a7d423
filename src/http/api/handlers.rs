//! The API's handlers. Each is thin: parse, turn the token's principal into the capability
//! the backend call needs, call it, answer JSON. Their `#[utoipa::path]` annotations are
//! the OpenAPI document.

use app::backend::{
    DlqPage, DlqQuery, EventDetail, InboxPage, InboxQuery, Operator, OrderDetail, Overview,
    Principal, Range, RedriveOutcome, Viewer,
};
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::input::{self, EVENTS_MAX_LIMIT};
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

/// 415 without `Content-Type: application/json`, 413 for a body beyond the limit, else
/// 400 (not JSON, or not the documented object).
pub(super) fn body<T>(b: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    b.map(|Json(b)| b).map_err(|e| {
        let status = match &e {
            JsonRejection::MissingJsonContentType(_) => 415,
            _ if e.status() == StatusCode::PAYLOAD_TOO_LARGE => 413,
            _ => 400,
        };
        ApiError::new(status, e.body_text())
    })
}

/// The `Idempotency-Key` header every POST takes (see `idempotency.rs`): 1 to 255 visible
/// ASCII characters; spaces and tabs inside (those around it are not part of it).
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Header)]
// Only documents the header: `idempotency::layer` reads it before any handler runs.
#[allow(dead_code)]
pub struct IdempotencyKey {
    /// The same key with the same request (method, path, content type, body) within 24 hours
    /// answers the first answer again (`Idempotent-Replayed: true`) without doing it twice;
    /// with another request it is a 422; while the first runs, a 409.
    #[param(
        rename = "Idempotency-Key",
        value_type = String,
        required = false,
        min_length = 1,
        max_length = 255,
        pattern = "^[\\t -~]*[!-~][\\t -~]*$"
    )]
    pub idempotency_key: Option<String>,
}

/// The order a path names.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Path)]
// Only documents the path: handlers take it as `Path<String>`.
#[allow(dead_code)]
pub struct OrderPath {
    #[param(schema_with = input::order_id_schema)]
    pub order_id: String,
}

/// One order: status, the sentence saying why, money totals, provider resources and the
/// whole story in time order.
#[utoipa::path(
    get,
    path = "/api/v1/orders/{order_id}",
    tag = "reads",
    params(OrderPath),
    responses(
        (status = 200, description = "The order", body = OrderDetail),
        (status = 400, description = "The path cannot be read (not UTF-8; an empty, `.` or `..` segment; an encoded `/` or `\\`)", body = ApiError),
        (status = 401, description = "No live token", body = ApiError,
         headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"oncehook\"`"))),
        (status = 404, description = "No such order", body = ApiError),
        (status = 503, description = "The database is not answering (details in the log under a reference)", body = ApiError),
    )
)]
pub async fn order(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    order_id: Result<Path<String>, PathRejection>,
) -> ApiResult<OrderDetail> {
    let order_id = path(order_id)?;
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
    /// Received at or after: `2026-12-01`, `2026-12-01T10:30`, `2026-12-01T10:30:15` (the
    /// date and time forms are UTC; `T` or a space between them) or RFC 3339 with seconds
    /// and an offset (`2026-12-01T10:30:15.250+01:00`, `…Z`). Only real calendar dates.
    #[param(schema_with = input::time_schema)]
    pub since: Option<String>,
    /// Received before, same forms.
    #[param(schema_with = input::time_schema)]
    pub until: Option<String>,
    /// A payload field and its value: `data.object.customer = cus_123`. The path is JSON
    /// object keys joined by `.` (none empty, no whitespace, control characters or `=` in a
    /// key); the value, trimmed and without surrounding `"`, must equal a string there, or
    /// the text of a number or boolean.
    #[param(schema_with = input::payload_schema)]
    pub payload: Option<String>,
    /// Only events older than this inbox id (the previous page's `next_before`).
    pub before: Option<i64>,
    /// Events per page (default 50).
    #[param(minimum = 1, maximum = 200, default = 50)]
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
        (status = 401, description = "No live token", body = ApiError,
         headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"oncehook\"`"))),
        (status = 422, description = "A parameter outside its bounds or pattern (`limit`, `since`, `until`, `payload`)", body = ApiError),
        (status = 429, description = "Too many payload-filter reads of this token at once", body = ApiError),
        (status = 503, description = "The database is not answering (details in the log under a reference)", body = ApiError),
    )
)]
pub async fn events(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    params: Result<Query<EventsParams>, QueryRejection>,
) -> ApiResult<InboxPage> {
    let p = query(params)?;
    let limit = input::limit(p.limit, 50, EVENTS_MAX_LIMIT)?;
    for (name, value) in [("since", &p.since), ("until", &p.until)] {
        if let Some(v) = value {
            input::time(name, v)?;
        }
    }
    if let Some(payload) = &p.payload {
        input::payload(payload)?;
    }
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
    Ok(Json(api.backend.inbox(&who, filter, limit).await?))
}

/// One event: payload, deliveries, attempts, effect key and what became of it.
#[utoipa::path(
    get,
    path = "/api/v1/events/{id}",
    tag = "reads",
    params(("id" = i64, Path, description = "The inbox id (`id` in the event list)")),
    responses(
        (status = 200, description = "The event", body = EventDetail),
        (status = 400, description = "The id is not a 64-bit integer", body = ApiError),
        (status = 401, description = "No live token", body = ApiError,
         headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"oncehook\"`"))),
        (status = 404, description = "No such event", body = ApiError),
        (status = 503, description = "The database is not answering (details in the log under a reference)", body = ApiError),
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
        (status = 401, description = "No live token", body = ApiError,
         headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"oncehook\"`"))),
        (status = 503, description = "The database is not answering (details in the log under a reference)", body = ApiError),
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

/// The overview's time ranges.
fn range_schema() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .enum_values(Some(input::RANGES))
        .default(Some("1h".into()))
        .build()
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OverviewParams {
    /// The last hour (default), day or week.
    #[param(schema_with = range_schema)]
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
        (status = 400, description = "The query cannot be read (a parameter twice)", body = ApiError),
        (status = 401, description = "No live token", body = ApiError,
         headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"oncehook\"`"))),
        (status = 422, description = "A range other than 1h, 24h or 7d", body = ApiError),
        (status = 503, description = "The database is not answering (details in the log under a reference)", body = ApiError),
    )
)]
pub async fn overview(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    params: Result<Query<OverviewParams>, QueryRejection>,
) -> ApiResult<Overview> {
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
    let who: Viewer = api.authorize(who, "overview.read", "overview").await?;
    Ok(Json(api.backend.overview(&who, range).await?))
}

fn yes() -> bool {
    true
}

/// Which dead letters to redrive, and whether to do it. The selection: one `id`, or every
/// dead letter matching the filters (open ones unless `status` says otherwise), across all
/// pages; the filters are those of `GET /api/v1/dead-letters`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct RedriveRequest {
    /// One dead letter.
    #[serde(default, deserialize_with = "input::integral")]
    #[schema(value_type = Option<i64>)]
    pub id: Option<i64>,
    /// transient | permanent | business | unknown
    pub class: Option<String>,
    pub provider: Option<String>,
    /// processor | outbox
    pub stage: Option<String>,
    /// Text the latest error contains.
    pub error: Option<String>,
    /// open (default) | redriven | resolved | discarded
    pub status: Option<String>,
    /// Why, for the audit log.
    pub reason: Option<String>,
    /// `true` (the default) only predicts and changes nothing; send `false` to redrive.
    #[serde(default = "yes")]
    #[schema(default = true)]
    pub dry_run: bool,
}

impl RedriveRequest {
    fn selection(&self) -> DlqQuery {
        DlqQuery {
            id: self.id,
            class: self.class.clone(),
            provider: self.provider.clone(),
            stage: self.stage.clone(),
            error: self.error.clone(),
            status: self.status.clone(),
        }
    }
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
    params(IdempotencyKey),
    request_body = RedriveRequest,
    responses(
        (status = 200, description = "What was (or would be) done", body = RedriveResponse),
        (status = 400, description = "The body is not a redrive request (not JSON, a field of another type), or a bad Idempotency-Key", body = ApiError),
        (status = 401, description = "No live token", body = ApiError,
         headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"oncehook\"`"))),
        (status = 403, description = "The token's role may not redrive", body = ApiError),
        (status = 409, description = "A request with this Idempotency-Key is still running", body = ApiError),
        (status = 413, description = "The body is larger than 1 MiB", body = ApiError),
        (status = 415, description = "No `Content-Type: application/json`", body = ApiError),
        (status = 422, description = "The Idempotency-Key was used with another request", body = ApiError),
        (status = 429, description = "Too many dry runs of this token at once", body = ApiError),
        (status = 503, description = "The database is not answering (details in the log under a reference)", body = ApiError),
    )
)]
pub async fn redrive(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    request: Result<Json<RedriveRequest>, JsonRejection>,
) -> ApiResult<RedriveResponse> {
    let request = body(request)?;
    let selection = request.selection();
    if request.dry_run {
        let who: Viewer = api
            .authorize(who, "dead_letter.preview", "dead_letters")
            .await?;
        let preview = api.backend.preview_redrive(&who, selection).await?;
        return Ok(Json(RedriveResponse {
            dry_run: true,
            matching: preview.matching,
            outcomes: preview.outcomes,
        }));
    }
    let target = selection.clone().normalized().audit_target();
    let who: Operator = api.authorize(who, "dead_letter.redrive", &target).await?;
    let outcomes = api.backend.redrive(&who, selection, request.reason).await?;
    Ok(Json(RedriveResponse {
        dry_run: false,
        matching: outcomes.len(),
        outcomes,
    }))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct CloseRequest {
    /// Why (required; it goes to the audit log): at most 500 characters, at least one of them
    /// neither whitespace nor a control character.
    #[schema(schema_with = input::reason_schema)]
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
    input::reason(&request.reason)?;
    let action = if resolve {
        "dead_letter.resolve"
    } else {
        "dead_letter.discard"
    };
    let target = format!("dead_letter:{id}");
    let who: Operator = api.authorize(who, action, &target).await?;
    // An unknown id is a 404; a known one already closed the backend refuses (409).
    let viewer: Viewer = api
        .authorize((*who).clone(), "dead_letter.read", &target)
        .await?;
    let one = DlqQuery {
        id: Some(id),
        ..DlqQuery::default()
    };
    if api
        .backend
        .dead_letters(&viewer, one)
        .await?
        .history
        .is_none()
    {
        return Err(ApiError::new(404, format!("no dead letter {id}")));
    }
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
    params(("id" = i64, Path, description = "The dead letter's id"), IdempotencyKey),
    request_body = CloseRequest,
    responses(
        (status = 200, description = "Resolved", body = CloseResponse),
        (status = 400, description = "The id is not a 64-bit integer (or empty), the body is not a close request, or a bad Idempotency-Key", body = ApiError),
        (status = 401, description = "No live token", body = ApiError,
         headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"oncehook\"`"))),
        (status = 403, description = "The token's role may not resolve", body = ApiError),
        (status = 404, description = "No such dead letter", body = ApiError),
        (status = 409, description = "The dead letter is already closed (resolved or discarded); or a request with this Idempotency-Key is still running", body = ApiError),
        (status = 413, description = "The body is larger than 1 MiB", body = ApiError),
        (status = 415, description = "No `Content-Type: application/json`", body = ApiError),
        (status = 422, description = "A reason outside its pattern; the Idempotency-Key was used with another request", body = ApiError),
        (status = 503, description = "The database is not answering (details in the log under a reference)", body = ApiError),
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
    params(("id" = i64, Path, description = "The dead letter's id"), IdempotencyKey),
    request_body = CloseRequest,
    responses(
        (status = 200, description = "Discarded", body = CloseResponse),
        (status = 400, description = "The id is not a 64-bit integer (or empty), the body is not a close request, or a bad Idempotency-Key", body = ApiError),
        (status = 401, description = "No live token", body = ApiError,
         headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"oncehook\"`"))),
        (status = 403, description = "The token's role may not discard", body = ApiError),
        (status = 404, description = "No such dead letter", body = ApiError),
        (status = 409, description = "The dead letter is already closed (resolved or discarded); or a request with this Idempotency-Key is still running", body = ApiError),
        (status = 413, description = "The body is larger than 1 MiB", body = ApiError),
        (status = 415, description = "No `Content-Type: application/json`", body = ApiError),
        (status = 422, description = "A reason outside its pattern; the Idempotency-Key was used with another request", body = ApiError),
        (status = 503, description = "The database is not answering (details in the log under a reference)", body = ApiError),
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
