//! `provider_commands`: an operator's refund request stored in one transaction with its
//! outbox row and its audit row, and the state changes the relay and the processor make to
//! it, each inside the transaction that causes it (so a command's state never disagrees
//! with its outbox row or with the ledger).

use serde_json::json;
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use super::dead_letters::{audit, Actor};
use super::read::rfc3339;
use super::Db;
use crate::domain::commands::{self, CommandState, Refusal, Room, REFUND_TOPIC};

/// One command as stored, with the attempts the relay made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandRow {
    pub id: i64,
    pub order_id: String,
    pub kind: String,
    pub seq: i64,
    pub idempotency_key: String,
    pub provider: String,
    pub payment_ref: String,
    pub amount: i64,
    pub currency: String,
    pub reason: String,
    pub state: String,
    pub requested_by: String,
    pub requested_at: i64,
    pub outbox_id: i64,
    pub provider_object_id: Option<String>,
    pub sent_at: Option<i64>,
    pub confirmed_event_id: Option<String>,
    pub confirmed_at: Option<i64>,
    pub error: Option<String>,
    pub attempts: Vec<CommandAttempt>,
}

/// One send of a command (an `outbox_attempts` row of its outbox row).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandAttempt {
    pub attempt: i64,
    pub started_at: i64,
    pub duration_ms: i64,
    pub status_code: Option<i64>,
    pub error: Option<String>,
    pub answer: Option<String>,
}

/// A refund an operator asks for.
pub struct NewRefund<'a> {
    pub order_id: &'a str,
    /// Minor units; none: everything left.
    pub amount: Option<i64>,
    pub reason: &'a str,
    pub actor: &'a Actor<'a>,
    pub now: i64,
}

const COLUMNS: &str = "id, order_id, kind, seq, idempotency_key, provider, payment_ref, amount, \
     currency, reason, state, requested_by, requested_at, outbox_id, provider_object_id, sent_at, \
     confirmed_event_id, confirmed_at, error";

fn row(r: &AnyRow) -> Result<CommandRow, sqlx::Error> {
    Ok(CommandRow {
        id: r.try_get("id")?,
        order_id: r.try_get("order_id")?,
        kind: r.try_get("kind")?,
        seq: r.try_get("seq")?,
        idempotency_key: r.try_get("idempotency_key")?,
        provider: r.try_get("provider")?,
        payment_ref: r.try_get("payment_ref")?,
        amount: r.try_get("amount")?,
        currency: r.try_get("currency")?,
        reason: r.try_get("reason")?,
        state: r.try_get("state")?,
        requested_by: r.try_get("requested_by")?,
        requested_at: r.try_get("requested_at")?,
        outbox_id: r.try_get("outbox_id")?,
        provider_object_id: r.try_get("provider_object_id")?,
        sent_at: r.try_get("sent_at")?,
        confirmed_event_id: r.try_get("confirmed_event_id")?,
        confirmed_at: r.try_get("confirmed_at")?,
        error: r.try_get("error")?,
        attempts: Vec::new(),
    })
}

/// Takes the order's row lock (PostgreSQL; SQLite has one writer): everything that changes
/// what is left to refund — a request, a confirmation — runs under it.
async fn lock_order(
    tx: &mut Transaction<'_, Any>,
    order_id: &str,
) -> anyhow::Result<Option<(Option<String>, i64, i64)>> {
    let lock = if tx.backend_name() == "PostgreSQL" {
        " FOR UPDATE"
    } else {
        // SQLite: write first, so this transaction holds the database's write lock (waiting
        // out the busy timeout) before it reads. A transaction that read first and wrote
        // after another process's commit (`oncehook order refund` beside `serve`) fails
        // at once with SQLITE_BUSY_SNAPSHOT, whatever the timeout.
        sqlx::query("UPDATE orders SET order_id = order_id WHERE order_id = $1")
            .bind(order_id)
            .execute(&mut **tx)
            .await?;
        ""
    };
    let found = sqlx::query(&format!(
        "SELECT currency, amount_paid, amount_refunded FROM orders WHERE order_id = $1{lock}"
    ))
    .bind(order_id)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(match found {
        Some(r) => Some((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)),
        None => None,
    })
}

/// What the order has room to refund: its totals, the refunds asked for that still hold
/// their amount (all but `excluding`, the command a redrive is about to send again), and
/// the disputed amount the provider will not refund. Read on the caller's connection —
/// under the order's lock for a request or a redrive.
///
/// A command holds its amount while it is `requested` or `sent`, and while it is `failed`
/// with its dead letter still open (or being redriven): a redrive would send it. Only once
/// that dead letter is resolved or discarded for good is the amount free again.
///
/// A dispute counted against the order (open or lost) keeps its amount unless the provider
/// said `is_charge_refundable: true` in the dispute's newest event; unknown (another
/// provider's shape, or the event's body pruned) counts as not refundable.
pub async fn room(
    conn: &mut sqlx::AnyConnection,
    order_id: &str,
    paid: i64,
    refunded: i64,
    excluding: Option<i64>,
) -> anyhow::Result<Room> {
    let held: i64 = sqlx::query_scalar(
        "SELECT CAST(COALESCE(SUM(c.amount), 0) AS BIGINT) FROM provider_commands c \
         WHERE c.order_id = $1 AND c.id <> $2 AND (c.state IN ('requested', 'sent') \
         OR (c.state = 'failed' AND EXISTS (SELECT 1 FROM dead_letters d \
         WHERE d.stage = 'outbox' AND d.source_id = c.outbox_id \
         AND d.status IN ('open', 'redriven'))))",
    )
    .bind(order_id)
    .bind(excluding.unwrap_or(0))
    .fetch_one(&mut *conn)
    .await?;
    let rows = sqlx::query(
        "SELECT f.resource_id, f.state, f.amount, i.raw_body FROM order_facts f \
         LEFT JOIN inbox_events i ON i.provider = f.provider AND i.event_id = f.event_id \
         WHERE f.order_id = $1 AND f.kind = 'dispute' AND f.money_seen = 1 \
         AND f.state <> 'dispute_won' ORDER BY f.resource_id",
    )
    .bind(order_id)
    .fetch_all(&mut *conn)
    .await?;
    let mut room = Room {
        paid,
        refunded,
        held,
        ..Room::default()
    };
    for r in rows {
        let (id, state, amount, body): (String, String, Option<i64>, Option<Vec<u8>>) =
            (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
        if !charge_refundable(body.as_deref()) {
            room.disputed += amount.unwrap_or(0);
            room.disputes.push((id, state));
        }
    }
    Ok(room)
}

/// `data.object.is_charge_refundable` of a dispute event (Stripe's `charge.dispute.*`):
/// only an explicit `true` lets the disputed amount be refunded.
fn charge_refundable(body: Option<&[u8]>) -> bool {
    body.and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        .and_then(|v| v.pointer("/data/object/is_charge_refundable")?.as_bool())
        .unwrap_or(false)
}

/// What an order has room to refund now, read without a lock: what the order page offers
/// (the request checks again under the lock).
pub async fn room_now(db: &Db, order_id: &str) -> anyhow::Result<Option<Room>> {
    let mut conn = db.reader().acquire().await?;
    let totals = sqlx::query("SELECT amount_paid, amount_refunded FROM orders WHERE order_id = $1")
        .bind(order_id)
        .fetch_optional(&mut *conn)
        .await?;
    let Some(totals) = totals else {
        return Ok(None);
    };
    let (paid, refunded): (i64, i64) = (totals.try_get(0)?, totals.try_get(1)?);
    Ok(Some(room(&mut conn, order_id, paid, refunded, None).await?))
}

/// A redrive of command outbox row `outbox_id` is about to send it again: under the
/// order's lock, it must still fit in what is left to refund, counting every other
/// command that holds an amount. `Ok(Some(refusal))` when it no longer does (nothing is
/// changed); `Ok(None)` when it fits or the row is no command.
pub async fn recheck_redrive_in(
    tx: &mut Transaction<'_, Any>,
    outbox_id: i64,
) -> anyhow::Result<Option<String>> {
    let found = sqlx::query(
        "SELECT id, order_id, amount, currency FROM provider_commands \
         WHERE outbox_id = $1 AND state = 'failed'",
    )
    .bind(outbox_id)
    .fetch_optional(&mut **tx)
    .await?;
    let Some(found) = found else {
        return Ok(None);
    };
    let (id, order_id, amount, currency): (i64, String, i64, String) = (
        found.try_get(0)?,
        found.try_get(1)?,
        found.try_get(2)?,
        found.try_get(3)?,
    );
    let Some((_, paid, refunded)) = lock_order(tx, &order_id).await? else {
        return Ok(None);
    };
    let room = room(tx, &order_id, paid, refunded, Some(id)).await?;
    Ok(match room.refund(&order_id, Some(amount), &currency) {
        Ok(_) => None,
        Err(refusal) => Some(format!(
            "refused: refund command #{id} of order {order_id} would go over what is left to refund now: {refusal}"
        )),
    })
}

/// Stores a refund request: the command, its outbox row for the provider's sink and the
/// audit row, in one transaction — or refuses it with nothing stored. What is left to
/// refund is read under the order's lock (`room`) and counts every command that still holds
/// its amount and what disputes keep, so two operators asking at once cannot together ask
/// for more than was paid.
pub async fn request_refund(
    db: &Db,
    req: &NewRefund<'_>,
) -> anyhow::Result<Result<CommandRow, Refusal>> {
    let reason = match commands::parse_reason(req.reason) {
        Ok(r) => r,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let mut tx = db.writer().begin().await?;
    let Some((currency, paid, refunded)) = lock_order(&mut tx, req.order_id).await? else {
        return Ok(Err(Refusal::UnknownOrder(req.order_id.to_string())));
    };
    // The newest payment that succeeded is the one refunded.
    let payment = sqlx::query(
        "SELECT f.resource_id, e.provider FROM order_facts f \
         JOIN processed_effects e ON e.order_id = f.order_id AND e.external_ref = f.resource_id \
         WHERE f.order_id = $1 AND f.kind = 'payment' AND f.state IN ('pay', 'settle') \
         ORDER BY f.at_ms DESC, f.resource_id LIMIT 1",
    )
    .bind(req.order_id)
    .fetch_optional(&mut *tx)
    .await?;
    let (Some(payment), Some(currency)) = (payment, currency) else {
        return Ok(Err(Refusal::NoPayment(req.order_id.to_string())));
    };
    let (payment_ref, provider): (String, String) = (payment.try_get(0)?, payment.try_get(1)?);
    let room = room(&mut tx, req.order_id, paid, refunded, None).await?;
    let amount = match room.refund(req.order_id, req.amount, &currency) {
        Ok(a) => a,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let seq: i64 = sqlx::query_scalar(
        "SELECT CAST(COALESCE(MAX(seq), 0) + 1 AS BIGINT) FROM provider_commands \
         WHERE order_id = $1 AND kind = 'refund'",
    )
    .bind(req.order_id)
    .fetch_one(&mut *tx)
    .await?;
    let key = commands::refund_key(req.order_id, seq);
    // The outbox row's key is the command's key: the relay sends it as Idempotency-Key.
    let outbox_id: i64 = sqlx::query_scalar(
        "INSERT INTO outbox (idempotency_key, effect_key, order_id, topic, sink, payload, \
         correlation_id, status, next_attempt_at, created_at) \
         VALUES ($1, $1, $2, $3, $4, '{}', $5, 'pending', $6, $6) RETURNING id",
    )
    .bind(&key)
    .bind(req.order_id)
    .bind(REFUND_TOPIC)
    .bind(commands::sink_for(&provider))
    .bind(uuid::Uuid::new_v4().to_string())
    .bind(req.now)
    .fetch_one(&mut *tx)
    .await?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO provider_commands (order_id, kind, seq, idempotency_key, provider, \
         payment_ref, amount, currency, reason, state, requested_by, requested_at, outbox_id, \
         updated_at) VALUES ($1, 'refund', $2, $3, $4, $5, $6, $7, $8, 'requested', $9, $10, $11, $10) \
         RETURNING id",
    )
    .bind(req.order_id)
    .bind(seq)
    .bind(&key)
    .bind(&provider)
    .bind(&payment_ref)
    .bind(amount)
    .bind(&currency)
    .bind(&reason)
    .bind(req.actor.name)
    .bind(req.now)
    .bind(outbox_id)
    .fetch_one(&mut *tx)
    .await?;
    // What the relay sends: Stripe's form fields, the command named in the metadata so the
    // refund's webhook can be matched to it.
    let payload = json!({
        "command_id": id,
        "payment_intent": payment_ref,
        "amount": amount,
        "metadata": {"order_id": req.order_id, "command_id": id.to_string(), "reason": reason},
    });
    sqlx::query("UPDATE outbox SET payload = $1 WHERE id = $2")
        .bind(payload.to_string())
        .bind(outbox_id)
        .execute(&mut *tx)
        .await?;
    audit(
        &mut *tx,
        &Actor {
            reason: Some(&reason),
            ..req.actor.clone()
        },
        "order.refund",
        &format!("order:{}", req.order_id),
        Some(
            json!({"command_id": id, "amount": amount, "currency": currency, "idempotency_key": key})
                .to_string(),
        ),
        req.now,
    )
    .await?;
    tx.commit().await?;
    Ok(Ok(get(db, id).await?.expect("the command just written")))
}

/// One command with its attempts.
pub async fn get(db: &Db, id: i64) -> anyhow::Result<Option<CommandRow>> {
    let found = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM provider_commands WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(db.writer())
    .await?;
    let Some(found) = found else {
        return Ok(None);
    };
    let mut command = row(&found)?;
    command.attempts = attempts(db.writer(), command.outbox_id).await?;
    Ok(Some(command))
}

/// Every command of an order, oldest first, with their attempts.
pub async fn of_order(db: &Db, order_id: &str) -> anyhow::Result<Vec<CommandRow>> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM provider_commands WHERE order_id = $1 ORDER BY id"
    ))
    .bind(order_id)
    .fetch_all(db.reader())
    .await?;
    let mut commands = rows.iter().map(row).collect::<Result<Vec<_>, _>>()?;
    for c in &mut commands {
        c.attempts = attempts(db.reader(), c.outbox_id).await?;
    }
    Ok(commands)
}

async fn attempts(pool: &sqlx::AnyPool, outbox_id: i64) -> anyhow::Result<Vec<CommandAttempt>> {
    let rows = sqlx::query(
        "SELECT attempt, started_at, duration_ms, status_code, error, response_excerpt \
         FROM outbox_attempts WHERE outbox_id = $1 ORDER BY id",
    )
    .bind(outbox_id)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(CommandAttempt {
                attempt: r.try_get(0)?,
                started_at: r.try_get(1)?,
                duration_ms: r.try_get(2)?,
                status_code: r.try_get(3)?,
                error: r.try_get(4)?,
                answer: r.try_get(5)?,
            })
        })
        .collect()
}

/// The relay's send of outbox row `outbox_id` got a 2xx naming the provider's object:
/// the command is `sent` — or `confirmed` at once when the refund's webhook was already
/// counted (it can arrive before the answer). Runs in the relay's marking transaction.
pub async fn mark_sent_in(
    tx: &mut Transaction<'_, Any>,
    outbox_id: i64,
    object_id: &str,
    now: i64,
) -> anyhow::Result<()> {
    let order: Option<String> =
        sqlx::query_scalar("SELECT order_id FROM provider_commands WHERE outbox_id = $1")
            .bind(outbox_id)
            .fetch_optional(&mut **tx)
            .await?;
    let Some(order_id) = order else {
        return Ok(());
    };
    // Under the order's lock, so the processor counting this refund right now either sees
    // the object id below or has committed its ledger entry before the check after it.
    lock_order(tx, &order_id).await?;
    sqlx::query(
        "UPDATE provider_commands SET state = 'sent', provider_object_id = $2, sent_at = $3, \
         error = NULL, updated_at = $3 WHERE outbox_id = $1 AND state IN ('requested', 'failed')",
    )
    .bind(outbox_id)
    .bind(object_id)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    let counted: Option<String> = sqlx::query_scalar(
        "SELECT event_id FROM order_ledger WHERE order_id = $1 AND external_ref = $2 \
         AND entry = 'refund' ORDER BY id LIMIT 1",
    )
    .bind(&order_id)
    .bind(object_id)
    .fetch_optional(&mut **tx)
    .await?;
    if let Some(event_id) = counted {
        confirm_in(tx, &order_id, object_id, &event_id, now).await?;
    }
    Ok(())
}

/// The refund `object_id` of an order was counted by event `event_id`: its command (if
/// oncehook asked for it) is `confirmed`. Runs in the processing transaction.
pub async fn confirm_in(
    tx: &mut Transaction<'_, Any>,
    order_id: &str,
    object_id: &str,
    event_id: &str,
    now: i64,
) -> anyhow::Result<()> {
    sqlx::query(
        "UPDATE provider_commands SET state = 'confirmed', confirmed_event_id = $3, \
         confirmed_at = $4, updated_at = $4 \
         WHERE order_id = $1 AND provider_object_id = $2 AND state IN ('requested', 'sent', 'failed')",
    )
    .bind(order_id)
    .bind(object_id)
    .bind(event_id)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The relay dead-lettered the command's outbox row: `failed`, with the provider's words.
pub async fn mark_failed_in(
    tx: &mut Transaction<'_, Any>,
    outbox_id: i64,
    error: &str,
    now: i64,
) -> anyhow::Result<()> {
    sqlx::query(
        "UPDATE provider_commands SET state = 'failed', error = $2, updated_at = $3 \
         WHERE outbox_id = $1 AND state = 'requested'",
    )
    .bind(outbox_id)
    .bind(error)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// A redrive put the command's outbox row back on the queue: `requested` again, with the
/// same key.
pub async fn requeued_in(
    tx: &mut Transaction<'_, Any>,
    outbox_id: i64,
    now: i64,
) -> anyhow::Result<()> {
    sqlx::query(
        "UPDATE provider_commands SET state = 'requested', updated_at = $2 \
         WHERE outbox_id = $1 AND state = 'failed'",
    )
    .bind(outbox_id)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Withdraws a command the relay has not started sending: its outbox row is taken off the
/// queue in the same transaction. `Ok(false)` when it is no longer `requested` and pending
/// (sent, being sent, or already over).
pub async fn cancel(db: &Db, id: i64, actor: &Actor<'_>, now: i64) -> anyhow::Result<bool> {
    let mut tx = db.writer().begin().await?;
    let withdrawn = sqlx::query(
        "UPDATE outbox SET status = 'cancelled', last_error = 'cancelled by an operator' \
         WHERE status = 'pending' AND attempts = 0 AND id = \
         (SELECT outbox_id FROM provider_commands WHERE id = $1 AND state = 'requested')",
    )
    .bind(id)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if !withdrawn {
        tx.rollback().await?;
        return Ok(false);
    }
    sqlx::query("UPDATE provider_commands SET state = 'cancelled', updated_at = $2 WHERE id = $1")
        .bind(id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    audit(
        &mut *tx,
        actor,
        "command.cancel",
        &format!("command:{id}"),
        None,
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// Commands by state, and the request time of the oldest still in flight: what the
/// overview and /metrics show.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandStats {
    pub by_state: Vec<(String, i64)>,
    pub oldest_in_flight_at: Option<i64>,
    /// `sent` before `sent_before` and still without their webhook.
    pub sent_too_long: i64,
}

pub async fn stats(db: &Db, sent_before: i64) -> anyhow::Result<CommandStats> {
    // One pass over the table (read at every /metrics scrape and overview): per state its
    // count, the oldest request still in flight, and sends unconfirmed for too long.
    let rows = sqlx::query(
        "SELECT state, CAST(COUNT(*) AS BIGINT), MIN(requested_at), \
         CAST(SUM(CASE WHEN sent_at < $1 THEN 1 ELSE 0 END) AS BIGINT) \
         FROM provider_commands GROUP BY state",
    )
    .bind(sent_before)
    .fetch_all(db.reader())
    .await?;
    let mut counted = std::collections::HashMap::new();
    let (mut oldest_in_flight_at, mut sent_too_long) = (None::<i64>, 0);
    for r in rows {
        let (state, n, oldest, late): (String, i64, Option<i64>, Option<i64>) =
            (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
        if state == "requested" || state == "sent" {
            oldest_in_flight_at = match (oldest_in_flight_at, oldest) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        if state == "sent" {
            sent_too_long = late.unwrap_or(0);
        }
        counted.insert(state, n);
    }
    let by_state = CommandState::ALL
        .iter()
        .map(|state| {
            let n = counted.get(state.as_str()).copied().unwrap_or(0);
            (state.as_str().to_string(), n)
        })
        .collect();
    Ok(CommandStats {
        by_state,
        oldest_in_flight_at,
        sent_too_long,
    })
}

/// What the order's "why" sentence adds for refunds oncehook asked for: which command each
/// counted refund came from, and who asked.
pub async fn why_note(db: &Db, order_id: &str) -> anyhow::Result<String> {
    why_note_in(db, order_id, app::locale::Locale::en).await
}

/// [`why_note`] in the viewer's language.
pub async fn why_note_in(
    db: &Db,
    order_id: &str,
    loc: app::locale::Locale,
) -> anyhow::Result<String> {
    let rows = sqlx::query(
        "SELECT id, provider_object_id, requested_by FROM provider_commands \
         WHERE order_id = $1 AND state = 'confirmed' ORDER BY id",
    )
    .bind(order_id)
    .fetch_all(db.reader())
    .await?;
    let mut note = String::new();
    for r in rows {
        let (id, refund, by): (i64, Option<String>, String) =
            (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?);
        note.push_str(&app::sentences::command(
            loc,
            &refund.unwrap_or_default(),
            id,
            &by,
        ));
    }
    Ok(note)
}

/// A time for people, as the rest of the order's JSON writes them.
pub fn at(ms: i64) -> String {
    rfc3339(ms)
}
