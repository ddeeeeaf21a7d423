//! `POST /api/v1/orders/{order_id}/refunds`: an operator asks the provider for a refund.
//! The command is stored with its outbox message and sent by the relay; the answer is the
//! command as stored (`requested`), to follow in the order's `commands`.

use app::backend::{CommandView, Operator, Principal, RefundRequest};
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};

use super::handlers::{body, path};
use super::{ApiError, ApiState};

/// Ask for a refund of an order (operator; refusals are audited). Refused with nothing
/// stored or sent beyond what is left to refund (refunds asked for and still in flight
/// count), without a refundable payment, or for an unknown order.
#[utoipa::path(
    post,
    path = "/api/v1/orders/{order_id}/refunds",
    tag = "actions",
    params(("order_id" = String, Path, description = "The order id the provider's events name")),
    request_body = RefundRequest,
    responses(
        (status = 201, description = "Stored; the relay sends it", body = CommandView),
        (status = 400, description = "The body is not a refund request", body = ApiError),
        (status = 401, description = "No live token", body = ApiError),
        (status = 403, description = "The token's role may not refund", body = ApiError),
        (status = 404, description = "No such order", body = ApiError),
        (status = 422, description = "More than what is left to refund, no refundable payment, or no reason", body = ApiError),
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
    let command = api.backend.request_refund(&who, &order_id, request).await?;
    Ok((StatusCode::CREATED, Json(command)))
}
