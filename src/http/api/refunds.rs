//! `POST /api/v1/orders/{order_id}/refunds`: an operator asks the provider for a refund.
//! The command is stored with its outbox message and sent by the relay; the answer is the
//! command as stored (`requested`), to follow in the order's `commands`.

use app::backend::{CommandView, Operator, Principal};
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Deserialize;
use utoipa::ToSchema;

use super::handlers::{body, path, IdempotencyKey, OrderPath};
use super::input;
use super::{ApiError, ApiState};

/// A refund an operator asks for.
#[derive(Debug, Deserialize, ToSchema)]
pub struct RefundRequest {
    /// Minor units of the order's currency, at least 1; none: everything left to refund.
    #[serde(default, deserialize_with = "input::integral")]
    #[schema(value_type = Option<i64>, minimum = 1)]
    pub amount: Option<i64>,
    /// Why (kept in the audit log and the refund's metadata): at most 500 characters, at
    /// least one of them neither whitespace nor a control character (control characters are
    /// dropped and the reason trimmed before it is kept).
    #[schema(schema_with = input::reason_schema)]
    pub reason: String,
}

/// Ask for a refund of an order (operator; refusals are audited). Refused with nothing
/// stored or sent beyond what is left to refund (refunds asked for that still hold their
/// amount count, and a disputed amount the provider will not refund is not left), without a
/// refundable payment, or for an unknown order.
#[utoipa::path(
    post,
    path = "/api/v1/orders/{order_id}/refunds",
    tag = "actions",
    params(OrderPath, IdempotencyKey),
    request_body = RefundRequest,
    responses(
        (status = 201, description = "Stored; the relay sends it", body = CommandView),
        (status = 400, description = "The path cannot be read (not UTF-8; an empty, `.` or `..` segment; an encoded `/` or `\\`), the body is not a refund request (not JSON, a field of another type), or a bad Idempotency-Key", body = ApiError),
        (status = 401, description = "No live token", body = ApiError,
         headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"oncehook\"`"))),
        (status = 403, description = "The token's role may not refund", body = ApiError),
        (status = 404, description = "No such order", body = ApiError),
        (status = 409, description = "The order's state refuses it: more than what is left to refund or nothing left (refunds asked for that still hold their amount count: in flight, or failed with their dead letter open), or the rest is disputed and the provider does not allow a refund of a disputed charge; or a request with this Idempotency-Key is still running", body = ApiError),
        (status = 413, description = "The body is larger than 1 MiB", body = ApiError),
        (status = 415, description = "No `Content-Type: application/json`", body = ApiError),
        (status = 422, description = "An amount below 1 or a reason outside its pattern; no refundable payment; the Idempotency-Key was used with another request", body = ApiError),
        (status = 503, description = "The database is not answering (details in the log under a reference)", body = ApiError),
    )
)]
pub async fn request_refund(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    order_id: Result<Path<String>, PathRejection>,
    request: Result<Json<RefundRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<CommandView>), ApiError> {
    let order_id = path(order_id)?;
    let who: Operator = api
        .authorize(who, "order.refund", &format!("order:{order_id}"))
        .await?;
    let request = body(request)?;
    if let Some(amount) = request.amount.filter(|a| *a < 1) {
        return Err(ApiError::new(
            422,
            format!("the amount must be a positive number of minor units, not {amount}"),
        ));
    }
    input::reason(&request.reason)?;
    let request = app::backend::RefundRequest {
        amount: request.amount,
        reason: request.reason,
    };
    let command = api.backend.request_refund(&who, &order_id, request).await?;
    Ok((StatusCode::CREATED, Json(command)))
}

/// Cancel a refund the relay has not started sending (operator; audited as
/// `command.cancel`). Once it is being sent, or sent, it can only run its course: Stripe
/// may already have made the refund.
#[utoipa::path(
    post,
    path = "/api/v1/orders/{order_id}/refunds/{command_id}/cancel",
    tag = "actions",
    params(
        OrderPath,
        ("command_id" = i64, Path, description = "The refund command's id (`commands[].id` of the order)"),
        IdempotencyKey
    ),
    responses(
        (status = 200, description = "Cancelled: nothing was or will be sent", body = CommandView),
        (status = 400, description = "The path cannot be read (an order id outside its pattern, a command id that is not a 64-bit integer), or a bad Idempotency-Key", body = ApiError),
        (status = 401, description = "No live token", body = ApiError,
         headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"oncehook\"`"))),
        (status = 403, description = "The token's role may not cancel", body = ApiError),
        (status = 404, description = "No such refund command of this order", body = ApiError),
        (status = 409, description = "The command is no longer cancellable: being sent or over (sent, confirmed, failed, cancelled); or a request with this Idempotency-Key is still running", body = ApiError),
        (status = 413, description = "A body (none is needed) larger than 1 MiB", body = ApiError),
        (status = 422, description = "The Idempotency-Key was used with another request", body = ApiError),
        (status = 503, description = "The database is not answering (details in the log under a reference)", body = ApiError),
    )
)]
pub async fn cancel_refund(
    State(api): State<ApiState>,
    Extension(who): Extension<Principal>,
    ids: Result<Path<(String, i64)>, PathRejection>,
) -> Result<Json<CommandView>, ApiError> {
    let (order_id, command_id) = path(ids)?;
    let who: Operator = api
        .authorize(who, "command.cancel", &format!("command:{command_id}"))
        .await?;
    let command = api
        .backend
        .cancel_command(&who, &order_id, command_id)
        .await?;
    Ok(Json(command))
}
