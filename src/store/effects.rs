//! The processing transaction: one event, one business change, exactly once.
//!
//! The story, in one transaction: claim the effect key (INSERT under a PRIMARY KEY, first:
//! the database decides who wins) → make sure the order exists → apply the transition
//! with the ordering guard in the UPDATE's WHERE clause → on success write the ledger row
//! and the outbox rows, otherwise record the stale or refused event → remember the
//! payment references → file the inbox row (fenced on the claim). Any error rolls all of
//! it back and the event is claimed again later.

use serde_json::json;
use sqlx::{Any, AnyConnection, Connection, Row, Transaction};

use super::inbox::{self, Claimed, Filed};
use crate::domain::{judge, EffectKey, OrderHead, OrderStatus, Stamp, Transition, Verdict};
use crate::mapping::MappedEvent;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EffectOutcome {
    Applied {
        key: String,
        status: OrderStatus,
    },
    Duplicate {
        key: String,
        reason: String,
    },
    Stale {
        key: String,
        reason: String,
    },
    /// The state machine forbids it (a business failure: nothing was written).
    Refused {
        key: String,
        reason: String,
    },
    /// Amount or currency does not fit the order (a business failure: nothing was written).
    Mismatch {
        key: String,
        reason: String,
    },
    /// Our claim expired and another worker owns the event; nothing was written.
    Fenced,
}

pub struct EffectRequest<'a> {
    pub claim: &'a Claimed,
    pub event: &'a MappedEvent,
    pub order_id: &'a str,
    /// Sinks that get an outbox row for every applied transition.
    pub sinks: &'a [String],
    pub now: i64,
}

/// The order an event names only through a payment reference, if an earlier event told us.
pub async fn resolve_order(
    conn: &mut AnyConnection,
    provider: &str,
    refs: &[String],
) -> anyhow::Result<Option<String>> {
    for reference in refs {
        let row =
            sqlx::query("SELECT order_id FROM payment_refs WHERE provider = $1 AND reference = $2")
                .bind(provider)
                .bind(reference)
                .fetch_optional(&mut *conn)
                .await?;
        if let Some(row) = row {
            return Ok(Some(row.try_get(0)?));
        }
    }
    Ok(None)
}

fn guard_sql(transition: Transition) -> String {
    let from: Vec<String> = transition
        .allowed_from()
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    // Mirrors `Stamp::is_newer_than` and `Transition::allowed_from`; the property tests
    // run the same histories through both.
    format!(
        "UPDATE orders SET status = $2, last_event_at = $3, last_sequence = $4, last_rank = $5, \
         last_event_id = $6, currency = COALESCE(currency, $7), updated_at = $8 \
         WHERE order_id = $1 AND status IN ({}) \
         AND (last_event_at IS NULL OR last_event_at < $3 OR (last_event_at = $3 AND ( \
             (last_sequence IS NOT NULL AND $4 IS NOT NULL AND last_sequence <> $4 AND last_sequence < $4) \
             OR ((last_sequence IS NULL OR $4 IS NULL OR last_sequence = $4) AND last_rank < $5))))",
        from.join(", ")
    )
}

pub(crate) async fn order_head(
    conn: &mut sqlx::AnyConnection,
    order_id: &str,
) -> anyhow::Result<Option<OrderHead>> {
    let row = sqlx::query(
        "SELECT status, last_event_at, last_sequence, last_rank FROM orders WHERE order_id = $1",
    )
    .bind(order_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let status: String = row.try_get(0)?;
    let at: Option<i64> = row.try_get(1)?;
    Ok(Some(OrderHead {
        status: OrderStatus::parse(&status)
            .ok_or_else(|| anyhow::anyhow!("order {order_id} has unknown status {status:?}"))?,
        last: match at {
            Some(at_ms) => Some(Stamp {
                at_ms,
                sequence: row.try_get(2)?,
                rank: row.try_get::<Option<i64>, _>(3)?.unwrap_or(0),
            }),
            None => None,
        },
    }))
}

/// Runs in its own transaction on `conn`, or in a savepoint when `conn` is already in one
/// (the processor's group commit): an outcome that writes nothing rolls back only itself.
pub async fn apply(
    conn: &mut AnyConnection,
    req: EffectRequest<'_>,
) -> anyhow::Result<EffectOutcome> {
    let EffectRequest {
        claim,
        event,
        order_id,
        sinks,
        now,
    } = req;
    let transition = event.transition;
    let key = EffectKey::new(transition, order_id, &event.external_ref);
    let mut tx = conn.begin().await?;

    let won = sqlx::query(
        "INSERT INTO processed_effects (effect_key, transition, order_id, external_ref, provider, \
         event_id, outcome, applied_at) VALUES ($1, $2, $3, $4, $5, $6, 'applied', $7) \
         ON CONFLICT (effect_key) DO NOTHING RETURNING effect_key",
    )
    .bind(key.as_str())
    .bind(transition.as_str())
    .bind(order_id)
    .bind(&event.external_ref)
    .bind(&claim.provider)
    .bind(&claim.event_id)
    .bind(now)
    .fetch_optional(&mut *tx)
    .await?
    .is_some();

    if !won {
        let winner: String =
            sqlx::query("SELECT event_id FROM processed_effects WHERE effect_key = $1")
                .bind(key.as_str())
                .fetch_one(&mut *tx)
                .await?
                .try_get(0)?;
        let reason = format!(
            "{} of {} already recorded by event {winner}",
            transition.as_str(),
            event.external_ref
        );
        if !inbox::file(
            &mut *tx,
            claim,
            Filed::Duplicate,
            Some(&reason),
            Some(order_id),
            Some(key.as_str()),
            now,
        )
        .await?
        {
            return Ok(EffectOutcome::Fenced);
        }
        tx.commit().await?;
        return Ok(EffectOutcome::Duplicate {
            key: key.to_string(),
            reason,
        });
    }

    sqlx::query(
        "INSERT INTO orders (order_id, status, currency, created_at, updated_at) \
         VALUES ($1, 'pending', $2, $3, $3) ON CONFLICT (order_id) DO NOTHING",
    )
    .bind(order_id)
    .bind(&event.currency)
    .bind(now)
    .execute(&mut *tx)
    .await?;

    if let Some(reason) = mismatch(&mut tx, event, order_id).await? {
        tx.rollback().await?;
        return Ok(EffectOutcome::Mismatch {
            key: key.to_string(),
            reason,
        });
    }

    let stamp = Stamp {
        at_ms: event.occurred_at_ms,
        sequence: event.sequence,
        rank: transition.rank(),
    };
    let updated = sqlx::query(&guard_sql(transition))
        .bind(order_id)
        .bind(transition.target().as_str())
        .bind(stamp.at_ms)
        .bind(stamp.sequence)
        .bind(stamp.rank)
        .bind(&claim.event_id)
        .bind(&event.currency)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();

    let outcome = if updated == 1 {
        record_applied(&mut tx, claim, event, order_id, &key, sinks, now).await?;
        EffectOutcome::Applied {
            key: key.to_string(),
            status: transition.target(),
        }
    } else {
        let head = order_head(&mut tx, order_id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("order {order_id} vanished mid-transaction"))?;
        match judge(&head, transition, &stamp) {
            Verdict::Stale(reason) => {
                record_stale(
                    &mut tx,
                    claim,
                    event,
                    order_id,
                    &key,
                    &reason,
                    head.status,
                    now,
                )
                .await?;
                EffectOutcome::Stale {
                    key: key.to_string(),
                    reason,
                }
            }
            Verdict::Refused(reason) => {
                // The key stays free: once someone fixes the cause, a redrive can apply it.
                tx.rollback().await?;
                return Ok(EffectOutcome::Refused {
                    key: key.to_string(),
                    reason,
                });
            }
            Verdict::Apply => {
                anyhow::bail!("guard refused what the state machine allows ({order_id})")
            }
        }
    };

    remember_refs(&mut tx, &claim.provider, &event.lookup_refs, order_id).await?;
    let (filed, reason) = match &outcome {
        EffectOutcome::Applied { .. } => (Filed::Applied, None),
        EffectOutcome::Stale { reason, .. } => (Filed::Stale, Some(reason.as_str())),
        EffectOutcome::Duplicate { .. }
        | EffectOutcome::Refused { .. }
        | EffectOutcome::Mismatch { .. }
        | EffectOutcome::Fenced => unreachable!("returned above"),
    };
    if !inbox::file(
        &mut *tx,
        claim,
        filed,
        reason,
        Some(order_id),
        Some(key.as_str()),
        now,
    )
    .await?
    {
        return Ok(EffectOutcome::Fenced);
    }
    tx.commit().await?;
    Ok(outcome)
}

async fn record_applied(
    tx: &mut Transaction<'_, Any>,
    claim: &Claimed,
    event: &MappedEvent,
    order_id: &str,
    key: &EffectKey,
    sinks: &[String],
    now: i64,
) -> anyhow::Result<()> {
    let status = event.transition.target();
    sqlx::query(
        "INSERT INTO order_ledger (order_id, transition, status_after, amount, currency, \
         external_ref, effect_key, provider, event_id, occurred_at, recorded_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(order_id)
    .bind(event.transition.as_str())
    .bind(status.as_str())
    .bind(event.amount)
    .bind(&event.currency)
    .bind(&event.external_ref)
    .bind(key.as_str())
    .bind(&claim.provider)
    .bind(&claim.event_id)
    .bind(event.occurred_at_ms)
    .bind(now)
    .execute(&mut **tx)
    .await?;

    let topic = format!("order.{}", status.as_str());
    for sink in sinks {
        let idempotency_key = key.outbox_key(sink, &topic);
        let payload = json!({
            "type": topic,
            "order_id": order_id,
            "status": status.as_str(),
            "transition": event.transition.as_str(),
            "amount": event.amount,
            "currency": event.currency,
            "external_ref": event.external_ref,
            "provider": claim.provider,
            "event_id": claim.event_id,
            "event_type": event.event_type,
            "occurred_at_ms": event.occurred_at_ms,
            "effect_key": key.as_str(),
            "idempotency_key": idempotency_key,
        });
        sqlx::query(
            "INSERT INTO outbox (idempotency_key, effect_key, order_id, topic, sink, payload, \
             correlation_id, status, next_attempt_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $8)",
        )
        .bind(&idempotency_key)
        .bind(key.as_str())
        .bind(order_id)
        .bind(&topic)
        .bind(sink)
        .bind(payload.to_string())
        .bind(&claim.correlation_id)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Amount and currency checks against what the order already holds; a reason when the
/// event does not fit (a business failure for an engineer to look at).
pub(crate) async fn mismatch(
    conn: &mut sqlx::AnyConnection,
    event: &MappedEvent,
    order_id: &str,
) -> anyhow::Result<Option<String>> {
    let row = sqlx::query(
        "SELECT o.currency, \
         CAST(COALESCE((SELECT SUM(CASE WHEN l.transition = 'pay' THEN l.amount \
              WHEN l.transition = 'refund' THEN -l.amount ELSE 0 END) \
              FROM order_ledger l WHERE l.order_id = o.order_id), 0) AS BIGINT), \
         (SELECT COUNT(*) FROM order_ledger l WHERE l.order_id = o.order_id AND l.transition = 'pay') \
         FROM orders o WHERE o.order_id = $1",
    )
    .bind(order_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let currency: Option<String> = row.try_get(0)?;
    let net_paid: i64 = row.try_get(1)?;
    let payments: i64 = row.try_get(2)?;
    if let (Some(order), Some(event)) = (&currency, &event.currency) {
        if order != event {
            return Ok(Some(format!(
                "currency mismatch: order {order_id} is in {order}, the event in {event}"
            )));
        }
    }
    if event.transition == Transition::Refund && payments > 0 {
        if let Some(amount) = event.amount {
            if amount > net_paid {
                return Ok(Some(format!(
                    "amount mismatch: refund of {amount} exceeds the {net_paid} still paid on order {order_id}"
                )));
            }
        }
    }
    Ok(None)
}

#[allow(clippy::too_many_arguments)]
async fn record_stale(
    tx: &mut Transaction<'_, Any>,
    claim: &Claimed,
    event: &MappedEvent,
    order_id: &str,
    key: &EffectKey,
    reason: &str,
    order_status: OrderStatus,
    now: i64,
) -> anyhow::Result<()> {
    let kind = "stale";
    sqlx::query("UPDATE processed_effects SET outcome = $2 WHERE effect_key = $1")
        .bind(key.as_str())
        .bind(kind)
        .execute(&mut **tx)
        .await?;
    sqlx::query(
        "INSERT INTO stale_events (order_id, provider, event_id, transition, kind, reason, \
         order_status, amount, currency, occurred_at, recorded_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(order_id)
    .bind(&claim.provider)
    .bind(&claim.event_id)
    .bind(event.transition.as_str())
    .bind(kind)
    .bind(reason)
    .bind(order_status.as_str())
    .bind(event.amount)
    .bind(&event.currency)
    .bind(event.occurred_at_ms)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn remember_refs(
    tx: &mut Transaction<'_, Any>,
    provider: &str,
    refs: &[String],
    order_id: &str,
) -> anyhow::Result<()> {
    // Sorted, so concurrent transactions take these index locks in one order.
    let mut refs: Vec<&String> = refs.iter().collect();
    refs.sort();
    refs.dedup();
    for reference in refs {
        sqlx::query(
            "INSERT INTO payment_refs (provider, reference, order_id) VALUES ($1, $2, $3) \
             ON CONFLICT (provider, reference) DO NOTHING",
        )
        .bind(provider)
        .bind(reference)
        .bind(order_id)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}
