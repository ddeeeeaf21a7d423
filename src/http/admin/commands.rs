//! Refund commands for the order page, the order's JSON and the API: a request checked and
//! stored (`store::commands`), and each command as a view and as moments of the story.

use app::backend::{
    CommandAttemptView, CommandView, Operator, OrderDetail, RefundRequest, TimelineEntry,
};
use app::error::AppError;

use crate::domain::commands::Refusal;
use crate::store::commands::{self, CommandRow, NewRefund};
use crate::store::dead_letters::Actor;
use crate::store::read::rfc3339;
use crate::store::{now_ms, Db};

pub async fn request_refund(
    db: &Db,
    who: &Operator,
    order_id: &str,
    request: RefundRequest,
) -> Result<CommandView, AppError> {
    if order_id.is_empty() || order_id.len() > 255 || order_id.chars().any(char::is_control) {
        return Err(AppError::NotFound);
    }
    let actor = Actor {
        name: &who.name,
        reason: None,
        source: who.source.as_deref(),
    };
    let stored = commands::request_refund(
        db,
        &NewRefund {
            order_id,
            amount: request.amount,
            reason: &request.reason,
            actor: &actor,
            now: now_ms(),
        },
    )
    .await
    .map_err(super::backend_error("asking for a refund"))?;
    match stored {
        Ok(row) => {
            let href = confirmed_href(db, &row).await;
            Ok(view(row, href))
        }
        Err(Refusal::UnknownOrder(_)) => Err(AppError::NotFound),
        Err(refusal) if refusal.is_conflict() => Err(AppError::Conflict(refusal.to_string())),
        Err(refusal) => Err(AppError::Invalid(refusal.to_string())),
    }
}

/// How long a page's form key answers with its first command (as our API's keys).
const PAGE_KEY_TTL_MS: i64 = 24 * 3_600_000;

/// A refund from the order page's confirmation form, once per form key and person.
pub async fn request_refund_once(
    db: &Db,
    who: &Operator,
    order_id: &str,
    request: RefundRequest,
    page_key: &str,
) -> Result<CommandView, AppError> {
    use crate::store::idempotency::{self, Begun};
    use sha2::{Digest, Sha256};
    let key = page_key.trim();
    if key.is_empty() || key.len() > 255 {
        return Err(AppError::Invalid(
            "the form has no valid key: reload the page".into(),
        ));
    }
    let scope = format!("page:{}", who.user_id);
    let digest = hex::encode(Sha256::digest(
        serde_json::to_vec(&(order_id, request.amount, &request.reason)).unwrap_or_default(),
    ));
    let now = now_ms();
    let begun = idempotency::begin(db, &scope, key, &digest, now, now - PAGE_KEY_TTL_MS)
        .await
        .map_err(super::backend_error("asking for a refund"))?;
    match begun {
        Begun::New => {}
        Begun::Replay { body, .. } => {
            return serde_json::from_slice(&body).map_err(|e| {
                AppError::Backend(super::internal_error("replaying a refund", &e.into()))
            })
        }
        Begun::Mismatch => {
            return Err(AppError::Invalid(
                "this form already asked for another refund: reload the order".into(),
            ))
        }
        Begun::Running => {
            return Err(AppError::Invalid(
                "this refund is being asked for already: reload the order in a moment".into(),
            ))
        }
    }
    let answer = request_refund(db, who, order_id, request).await;
    let kept = match &answer {
        Ok(command) => {
            let body = serde_json::to_vec(command).unwrap_or_default();
            idempotency::finish(db, &scope, key, 201, &body).await
        }
        // A refusal changes nothing: the same form may be corrected and sent again.
        Err(_) => idempotency::release(db, &scope, key).await,
    };
    kept.map_err(super::backend_error("asking for a refund"))?;
    answer
}

/// Withdraws a refund of `order_id` the relay has not started sending (operator; audited as
/// `command.cancel`): `NotFound` for no such command of the order, `Conflict` once it is
/// being sent or over.
pub async fn cancel(
    db: &Db,
    who: &Operator,
    order_id: &str,
    id: i64,
) -> Result<CommandView, AppError> {
    let current = commands::get(db, id)
        .await
        .map_err(super::backend_error("cancelling a refund"))?
        .filter(|c| c.order_id == order_id)
        .ok_or(AppError::NotFound)?;
    let actor = Actor {
        name: &who.name,
        reason: None,
        source: who.source.as_deref(),
    };
    let cancelled = commands::cancel(db, id, &actor, now_ms())
        .await
        .map_err(super::backend_error("cancelling a refund"))?;
    if !cancelled {
        return Err(AppError::Conflict(format!(
            "refund command #{id} is {} and can no longer be cancelled: only a request the relay has not started sending can be",
            match current.state.as_str() {
                "requested" => "being sent",
                other => other,
            }
        )));
    }
    let row = commands::get(db, id)
        .await
        .map_err(super::backend_error("cancelling a refund"))?
        .ok_or(AppError::NotFound)?;
    Ok(view(row, None))
}

/// The page of the event that confirmed a command.
async fn confirmed_href(db: &Db, row: &CommandRow) -> Option<String> {
    let event_id = row.confirmed_event_id.as_ref()?;
    let id: Option<i64> =
        sqlx::query_scalar("SELECT id FROM inbox_events WHERE provider = $1 AND event_id = $2")
            .bind(&row.provider)
            .bind(event_id)
            .fetch_optional(db.reader())
            .await
            .ok()
            .flatten();
    id.map(|id| format!("/events/{id}"))
}

pub async fn of_order(db: &Db, order_id: &str) -> anyhow::Result<Vec<CommandView>> {
    let mut views = Vec::new();
    for row in commands::of_order(db, order_id).await? {
        let href = confirmed_href(db, &row).await;
        views.push(view(row, href));
    }
    Ok(views)
}

pub fn view(row: CommandRow, confirmed_href: Option<String>) -> CommandView {
    CommandView {
        id: row.id,
        kind: row.kind,
        state: row.state,
        amount: row.amount,
        currency: row.currency,
        reason: row.reason,
        idempotency_key: row.idempotency_key,
        provider: row.provider,
        payment_ref: row.payment_ref,
        requested_by: row.requested_by,
        requested_at: rfc3339(row.requested_at),
        provider_object_id: row.provider_object_id,
        sent_at: row.sent_at.map(rfc3339),
        confirmed_event_id: row.confirmed_event_id,
        confirmed_href,
        confirmed_at: row.confirmed_at.map(rfc3339),
        error: row.error,
        attempts: row
            .attempts
            .into_iter()
            .map(|a| CommandAttemptView {
                attempt: a.attempt,
                at: rfc3339(a.started_at),
                duration_ms: a.duration_ms,
                status_code: a.status_code,
                error: a.error,
                answer: a.answer,
            })
            .collect(),
    }
}

fn moment(at: &str, title: String) -> TimelineEntry {
    TimelineEntry {
        at: at.to_string(),
        kind: "command".into(),
        title,
        detail: None,
        href: None,
        status: None,
    }
}

/// Each command's moments — asked, each send and its answer, confirmed — merged into the
/// story (which stays in time order), and the commands beside it.
pub fn add_to_story(detail: &mut OrderDetail, commands: Vec<CommandView>) {
    for c in &commands {
        let money = app::format::money(c.amount, Some(&c.currency));
        let mut asked = moment(
            &c.requested_at,
            format!("refund of {money} asked for by {}", c.requested_by),
        );
        asked.status = Some(c.state.clone());
        asked.detail = Some(format!(
            "Command #{}: \"{}\"; sent to {} for {} with idempotency key {}.",
            c.id, c.reason, c.provider, c.payment_ref, c.idempotency_key
        ));
        detail.timeline.push(asked);
        for a in &c.attempts {
            let answer = match (&a.status_code, &a.error, &a.answer) {
                (_, Some(error), _) => error.clone(),
                (Some(code), None, Some(answer)) => format!("{code}: {answer}"),
                (Some(code), None, None) => format!("{code}"),
                (None, None, _) => "no answer".into(),
            };
            let mut e = moment(
                &a.at,
                format!("refund command #{} attempt {}: {answer}", c.id, a.attempt),
            );
            e.detail = Some(format!(
                "Idempotency key {}; took {} ms.",
                c.idempotency_key, a.duration_ms
            ));
            detail.timeline.push(e);
        }
        if let (Some(at), Some(event)) = (&c.confirmed_at, &c.confirmed_event_id) {
            let mut e = moment(
                at,
                format!(
                    "refund command #{} confirmed: {} counted from {event}",
                    c.id,
                    c.provider_object_id.as_deref().unwrap_or("the refund")
                ),
            );
            e.href = c.confirmed_href.clone();
            e.status = Some("confirmed".into());
            detail.timeline.push(e);
        }
    }
    detail.timeline.sort_by(|a, b| a.at.cmp(&b.at));
    detail.commands = commands;
}
