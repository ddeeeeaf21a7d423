//! The `provider:NAME` sinks: a provider command's outbox row sent to the provider's API,
//! one attempt per relay attempt, under the row's idempotency key (`order:{id}:refund:{n}`),
//! so the relay's stored retries — after a timeout, a lost answer, a restart or a redrive —
//! all carry the same key and the provider makes one refund.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::sinks::{excerpt, SendError, Sent};
use crate::domain::commands::REFUND_TOPIC;
use crate::domain::failure::{ErrorClass, Failure};
use crate::provider::api::{ApiClient, ApiError, CreateRefund};
use crate::store::outbox::OutboxItem;

/// The payload `store::commands::request_refund` writes.
#[derive(Deserialize)]
struct RefundPayload {
    payment_intent: String,
    amount: i64,
    metadata: BTreeMap<String, String>,
}

pub(super) async fn send(client: &ApiClient, item: &OutboxItem) -> Result<Sent, SendError> {
    if item.topic != REFUND_TOPIC {
        return Err(SendError::new(
            ErrorClass::Permanent,
            format!("a provider sink sends commands, not {}", item.topic),
        ));
    }
    let payload: RefundPayload = serde_json::from_str(&item.payload).map_err(|e| {
        SendError::new(ErrorClass::Permanent, format!("the command's payload: {e}"))
    })?;
    if client.is_mercadopago() {
        return send_mercadopago(client, item, &payload).await;
    }
    // Past the provider's memory of the key, the same key no longer protects: a refund made
    // by an earlier send whose answer was lost would be made again. Ask first.
    if crate::store::now_ms() - item.created_at > crate::provider::api::IDEMPOTENCY_KEY_MEMORY_MS {
        if let Some(found) = made_earlier(client, &payload).await? {
            return Ok(found);
        }
    }
    let params = CreateRefund {
        payment_intent: payload.payment_intent,
        amount: Some(payload.amount),
        // Stripe's `reason` is an enum; the operator's words travel in the metadata.
        reason: None,
        metadata: payload.metadata,
    };
    match client
        .create_refund_once(&params, &item.idempotency_key)
        .await
    {
        Ok(refund) => Ok(Sent {
            status_code: Some(200),
            excerpt: excerpt(&format!(
                "refund {} {} {} {}",
                refund.id,
                refund.amount,
                refund.currency,
                refund.status.as_deref().unwrap_or("(no status)")
            )),
            object_id: Some(refund.id),
        }),
        Err((error, retry_after)) => Err(refusal(&error, retry_after)),
    }
}

/// Mercado Pago: `POST /v1/payments/{id}/refunds` of the command's amount under the row's
/// key as `X-Idempotency-Key`; every stored retry carries the same key.
async fn send_mercadopago(
    client: &ApiClient,
    item: &OutboxItem,
    payload: &RefundPayload,
) -> Result<Sent, SendError> {
    match client
        .mercadopago_refund_once(
            &payload.payment_intent,
            Some(payload.amount),
            &item.idempotency_key,
        )
        .await
    {
        Ok(refund) => {
            let id = match &refund["id"] {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            Ok(Sent {
                status_code: Some(201),
                excerpt: excerpt(&format!(
                    "refund {id} of payment {} {} BRL {}",
                    payload.payment_intent,
                    refund["amount"],
                    refund["status"].as_str().unwrap_or("(no status)")
                )),
                object_id: Some(id),
            })
        }
        Err((error, retry_after)) => Err(refusal(&error, retry_after)),
    }
}

/// The refund an earlier send of this command made, if the provider has one: a refund of
/// the same payment whose metadata names the same order and command (the relay writes
/// both). Recorded as the send's answer, so the command is `sent` with the provider's id,
/// and `confirmed` at once when its webhook was already counted. A lookup that fails is
/// retried as a transient failure: sending blind is what this avoids.
async fn made_earlier(
    client: &ApiClient,
    payload: &RefundPayload,
) -> Result<Option<Sent>, SendError> {
    let (Some(command), Some(order)) = (
        payload.metadata.get("command_id"),
        payload.metadata.get("order_id"),
    ) else {
        return Ok(None);
    };
    let refunds = client
        .refunds_of(&payload.payment_intent)
        .await
        .map_err(|e| {
            let mut e = refusal(&e, None);
            e.failure.class = ErrorClass::Transient;
            e.failure.message = format!(
                "looking up an earlier refund (the key is older than the provider's 24 h): {}",
                e.failure.message
            );
            e
        })?;
    let found = refunds.into_iter().find(|r| {
        r.metadata.get("command_id") == Some(command) && r.metadata.get("order_id") == Some(order)
    });
    Ok(found.map(|refund| Sent {
        status_code: Some(200),
        excerpt: excerpt(&format!(
            "found refund {} {} {} {} made earlier under this command (not sent again: the key is older than the provider's 24 h)",
            refund.id,
            refund.amount,
            refund.currency,
            refund.status.as_deref().unwrap_or("(no status)")
        )),
        object_id: Some(refund.id),
    }))
}

/// Timeouts, lost answers, 409 (the key still in use), 429 and 5xx retry, honouring the
/// provider's `Retry-After`; any other answer (`idempotency_error`, an invalid request, a
/// bad key) is permanent: the dead letter keeps the provider's type, code and message.
fn refusal(error: &ApiError, retry_after: Option<std::time::Duration>) -> SendError {
    let class = if error.is_transient() {
        ErrorClass::Transient
    } else {
        ErrorClass::Permanent
    };
    let mut failure = Failure::new(class, format!("provider: {error}"));
    failure.retry_after = retry_after;
    SendError {
        failure,
        status_code: error.status().map(i64::from),
        excerpt: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_keep_the_providers_words_and_class() {
        let idempotency = ApiError::Api {
            status: 400,
            kind: "idempotency_error".into(),
            code: None,
            message: "Keys for idempotent requests can only be used with the same parameters"
                .into(),
            should_retry: None,
        };
        let e = refusal(&idempotency, None);
        assert_eq!(e.failure.class, ErrorClass::Permanent);
        assert_eq!(e.status_code, Some(400));
        assert!(e.failure.message.contains("idempotency_error"));
        assert!(e.failure.message.contains("same parameters"));

        let missing = ApiError::Api {
            status: 400,
            kind: "invalid_request_error".into(),
            code: Some("charge_already_refunded".into()),
            message: "already refunded".into(),
            should_retry: None,
        };
        assert!(refusal(&missing, None)
            .failure
            .message
            .contains("(charge_already_refunded)"));

        let limited = ApiError::Api {
            status: 429,
            kind: "invalid_request_error".into(),
            code: Some("rate_limit".into()),
            message: "slow down".into(),
            should_retry: None,
        };
        let e = refusal(&limited, Some(std::time::Duration::from_secs(3)));
        assert_eq!(e.failure.class, ErrorClass::Transient);
        assert_eq!(
            e.failure.retry_after,
            Some(std::time::Duration::from_secs(3))
        );
        assert_eq!(
            refusal(&ApiError::Timeout(100), None).failure.class,
            ErrorClass::Transient
        );
    }
}
