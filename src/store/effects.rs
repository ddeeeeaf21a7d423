//! The processing transaction: one event, one business change, exactly once.
//!
//! The story, in one transaction: claim the effect key (INSERT under a PRIMARY KEY, first:
//! the database decides who wins) → lock the order row → record the event's change of its
//! resource (a new fact, or the guarded UPDATE of an existing one) → derive the order's
//! totals and status from all its facts (`domain::money`) → write the ledger entries the
//! facts call for and not yet written, each with its outbox message, and a message when the
//! status changed → record a stale or refused event for people → remember the payment
//! references → file the inbox row (fenced on the claim). Any error rolls all of it back
//! and the event is claimed again later.

use serde_json::json;
use sqlx::any::AnyRow;
use sqlx::{Any, AnyConnection, Connection, Row, Transaction};

use super::inbox::{self, Claimed, Filed};
use super::values::{run_values, Val};
use crate::domain::event::MappedEvent;
use crate::domain::money::{class, guard, plan_entries};
use crate::domain::outbox::OutboxSettings;
use crate::domain::{
    project, Change, EffectKey, Entry, EntryKind, Fact, OrderStatus, Projection, ResourceKind,
    Stamp, Totals, Transition, Update,
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EffectOutcome {
    Applied {
        key: String,
        status: OrderStatus,
        moved: Moved,
    },
    Duplicate {
        key: String,
        reason: String,
    },
    /// Older than what the order already reflects; any new money it carried is counted.
    Stale {
        key: String,
        reason: String,
        moved: Moved,
    },
    /// A regression the model never applies (a failure after a succeeded payment);
    /// recorded among the order's stale events.
    Refused {
        key: String,
        reason: String,
        moved: Moved,
    },
    /// Currency does not fit the order (a business failure: nothing was written).
    Mismatch {
        key: String,
        reason: String,
    },
    /// Our claim expired and another worker owns the event; nothing was written.
    Fenced,
}

/// The money an event moved: how much each of the order's totals grew (a reversal shrinks
/// one), in its currency.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    pub paid: i64,
    pub refunded: i64,
    pub disputed: i64,
    pub currency: Option<String>,
}

pub struct EffectRequest<'a> {
    pub claim: &'a Claimed,
    pub event: &'a MappedEvent,
    pub order_id: &'a str,
    /// Which sinks get a message for each topic.
    pub outbox: &'a OutboxSettings,
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

/// The change an event makes to its resource.
pub fn change_of(event: &MappedEvent) -> Change {
    Change {
        transition: event.transition,
        resource_id: event.external_ref.clone(),
        parent_ref: event.parent_ref.clone(),
        stamp: Stamp {
            at_ms: event.occurred_at_ms,
            sequence: event.sequence,
            rank: event.transition.rank(),
        },
        amount: event.amount,
    }
}

/// The effect key of an event: a running total is a change only for a new total, so the
/// total is part of what it names.
pub fn effect_key(event: &MappedEvent, order_id: &str) -> EffectKey {
    if event.transition == Transition::RefundTotal {
        let named = format!("{}@{}", event.external_ref, event.amount.unwrap_or(0));
        EffectKey::new(event.transition, order_id, &named)
    } else {
        EffectKey::new(event.transition, order_id, &event.external_ref)
    }
}

/// The guarded UPDATE of one resource: a higher class wins; within a class, a newer stamp
/// (timestamp; on a tie the resource's own sequence when both have one, else the lifecycle
/// rank). Mirrors `domain::money::guard`; the property tests compare both.
const GUARDED_UPDATE: &str = "UPDATE order_facts SET state = $4, class = $5, at_ms = $6, \
     sequence = $7, rank = $8, event_id = $9, updated_at = $10 \
     WHERE order_id = $1 AND kind = $2 AND resource_id = $3 AND (class < $5 OR (class = $5 AND ( \
         at_ms < $6 OR (at_ms = $6 AND ( \
             (sequence IS NOT NULL AND $7 IS NOT NULL AND sequence <> $7 AND sequence < $7) \
             OR ((sequence IS NULL OR $7 IS NULL OR sequence = $7) AND rank < $8))))))";

pub(crate) fn fact_row(row: AnyRow) -> anyhow::Result<Fact> {
    let kind: String = row.try_get("kind")?;
    let state: String = row.try_get("state")?;
    Ok(Fact {
        kind: ResourceKind::parse(&kind)
            .ok_or_else(|| anyhow::anyhow!("unknown resource kind {kind:?}"))?,
        resource_id: row.try_get("resource_id")?,
        parent_ref: row.try_get("parent_ref")?,
        state: Transition::parse(&state)
            .ok_or_else(|| anyhow::anyhow!("unknown state {state:?}"))?,
        stamp: Stamp {
            at_ms: row.try_get("at_ms")?,
            sequence: row.try_get("sequence")?,
            rank: row.try_get("rank")?,
        },
        amount: row.try_get("amount")?,
        money_seen: row.try_get::<i64, _>("money_seen")? != 0,
        canceled_at: row.try_get("canceled_at")?,
    })
}

pub(crate) const FACT_COLUMNS: &str =
    "kind, resource_id, parent_ref, state, at_ms, sequence, rank, amount, money_seen, canceled_at";

/// Every fact of an order.
pub async fn load_facts(conn: &mut AnyConnection, order_id: &str) -> anyhow::Result<Vec<Fact>> {
    let rows = sqlx::query(&format!(
        "SELECT {FACT_COLUMNS} FROM order_facts WHERE order_id = $1 ORDER BY kind, resource_id"
    ))
    .bind(order_id)
    .fetch_all(&mut *conn)
    .await?;
    rows.into_iter().map(fact_row).collect()
}

/// Every ledger entry of an order.
pub async fn load_entries(conn: &mut AnyConnection, order_id: &str) -> anyhow::Result<Vec<Entry>> {
    let rows = sqlx::query(
        "SELECT entry, external_ref, group_ref, amount, counted FROM order_ledger \
         WHERE order_id = $1 ORDER BY id",
    )
    .bind(order_id)
    .fetch_all(&mut *conn)
    .await?;
    rows.into_iter().map(entry_row).collect()
}

/// A ledger row whose first columns are `entry, external_ref, group_ref, amount, counted`.
pub(crate) fn entry_row(row: AnyRow) -> anyhow::Result<Entry> {
    let kind: String = row.try_get(0)?;
    Ok(Entry {
        kind: EntryKind::parse(&kind)
            .ok_or_else(|| anyhow::anyhow!("unknown ledger entry {kind:?}"))?,
        resource_id: row.try_get(1)?,
        group: row.try_get(2)?,
        amount: row.try_get::<Option<i64>, _>(3)?.unwrap_or(0),
        counted: row.try_get(4)?,
    })
}

/// The order row as it was before this event, read under its row lock.
#[derive(Clone, Debug)]
pub(crate) struct OrderBefore {
    pub(crate) status: OrderStatus,
    pub(crate) totals: Totals,
    pub(crate) currency: Option<String>,
    pub(crate) last_event_at: Option<i64>,
}

async fn lock_order(tx: &mut Transaction<'_, Any>, order_id: &str) -> anyhow::Result<OrderBefore> {
    // The row lock serialises every event of this order (PostgreSQL; SQLite has one
    // writer): the projection and the ledger plan below see all earlier facts.
    let lock = if super::Backend::of(tx) == super::Backend::Postgres {
        " FOR UPDATE"
    } else {
        ""
    };
    let row = sqlx::query(&format!(
        "SELECT status, currency, last_event_at, amount_paid, amount_refunded, amount_disputed \
         FROM orders WHERE order_id = $1{lock}"
    ))
    .bind(order_id)
    .fetch_one(&mut **tx)
    .await?;
    let status: String = row.try_get(0)?;
    Ok(OrderBefore {
        status: OrderStatus::parse(&status)
            .ok_or_else(|| anyhow::anyhow!("order {order_id} has unknown status {status:?}"))?,
        currency: row.try_get(1)?,
        last_event_at: row.try_get(2)?,
        totals: Totals {
            paid: row.try_get(3)?,
            refunded: row.try_get(4)?,
            disputed: row.try_get(5)?,
        },
    })
}

/// Records the change of one resource: a new fact, the guarded UPDATE of an existing one,
/// and always the monotone columns. Returns the guard's verdict.
async fn record_change(
    tx: &mut Transaction<'_, Any>,
    claim: &Claimed,
    order_id: &str,
    change: &Change,
    now: i64,
) -> anyhow::Result<Update> {
    let t = change.transition;
    let kind = t.resource().as_str();
    let created = sqlx::query(&format!(
        "INSERT INTO order_facts ({FACT_COLUMNS}, class, order_id, provider, event_id, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $15) \
         ON CONFLICT (order_id, kind, resource_id) DO NOTHING"
    ))
    .bind(kind)
    .bind(&change.resource_id)
    .bind(&change.parent_ref)
    .bind(t.as_str())
    .bind(change.stamp.at_ms)
    .bind(change.stamp.sequence)
    .bind(change.stamp.rank)
    .bind(change.amount)
    .bind(i64::from(t.proves_money()))
    .bind((t == Transition::Cancel).then_some(change.stamp.at_ms))
    .bind(class(t))
    .bind(order_id)
    .bind(&claim.provider)
    .bind(&claim.event_id)
    .bind(now)
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1;
    if created {
        return Ok(Update::Applied);
    }

    if t == Transition::RefundTotal {
        // A running total only grows: the largest observed is what counts.
        let grew = sqlx::query(
            "UPDATE order_facts SET amount = $4, at_ms = $5, event_id = $6, updated_at = $7 \
             WHERE order_id = $1 AND kind = $2 AND resource_id = $3 \
             AND (amount IS NULL OR amount < $4)",
        )
        .bind(order_id)
        .bind(kind)
        .bind(&change.resource_id)
        .bind(change.amount)
        .bind(change.stamp.at_ms)
        .bind(&claim.event_id)
        .bind(now)
        .execute(&mut **tx)
        .await?
        .rows_affected()
            == 1;
        if grew {
            return Ok(Update::Applied);
        }
    } else {
        let applied = sqlx::query(GUARDED_UPDATE)
            .bind(order_id)
            .bind(kind)
            .bind(&change.resource_id)
            .bind(t.as_str())
            .bind(class(t))
            .bind(change.stamp.at_ms)
            .bind(change.stamp.sequence)
            .bind(change.stamp.rank)
            .bind(&claim.event_id)
            .bind(now)
            .execute(&mut **tx)
            .await?
            .rows_affected()
            == 1;
        // Whatever the guard decided: money seen, the newest cancellation, the amount of
        // the first event proving money (or the first amount at all) and the parent.
        sqlx::query(
            "UPDATE order_facts SET \
             amount = CASE WHEN $4 = 1 AND money_seen = 0 THEN COALESCE($5, amount) \
                           ELSE COALESCE(amount, $5) END, \
             money_seen = CASE WHEN $4 = 1 THEN 1 ELSE money_seen END, \
             canceled_at = CASE WHEN $6 IS NULL THEN canceled_at \
                                WHEN canceled_at IS NULL OR canceled_at < $6 THEN $6 \
                                ELSE canceled_at END, \
             parent_ref = COALESCE(parent_ref, $7) \
             WHERE order_id = $1 AND kind = $2 AND resource_id = $3",
        )
        .bind(order_id)
        .bind(kind)
        .bind(&change.resource_id)
        .bind(i64::from(t.proves_money()))
        .bind(change.amount)
        .bind((t == Transition::Cancel).then_some(change.stamp.at_ms))
        .bind(&change.parent_ref)
        .execute(&mut **tx)
        .await?;
        if applied {
            return Ok(Update::Applied);
        }
    }
    // Not applied: ask the pure guard why, against the row as it was.
    let row = sqlx::query(&format!(
        "SELECT {FACT_COLUMNS} FROM order_facts WHERE order_id = $1 AND kind = $2 AND resource_id = $3"
    ))
    .bind(order_id)
    .bind(kind)
    .bind(&change.resource_id)
    .fetch_one(&mut **tx)
    .await?;
    let current = fact_row(row)?;
    Ok(match guard(&current, change) {
        Update::Applied => Update::Stale(format!(
            "{} of {} changes nothing new",
            t.as_str(),
            change.resource_id
        )),
        other => other,
    })
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
        outbox,
        now,
    } = req;
    let transition = event.transition;
    let key = effect_key(event, order_id);
    let mut tx = conn.begin().await?;

    // The order first, then the effect key: the set-based path (store/batch.rs) takes its
    // locks in that order too, so a worker on this path and one on that never wait on
    // each other in a cycle. A new order (the common case: its first event) is written
    // with its final state in one INSERT, and its facts are just this one; otherwise lock
    // it (and, below, read them all).
    let change = change_of(event);
    let first_fact = vec![Fact::new(&change)];
    let fresh = project(&first_fact);
    let created = sqlx::query(
        "INSERT INTO orders (order_id, status, currency, amount_paid, amount_refunded, \
         amount_disputed, attention, last_event_at, last_event_id, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10) ON CONFLICT (order_id) DO NOTHING",
    )
    .bind(order_id)
    .bind(fresh.status.as_str())
    .bind(&event.currency)
    .bind(fresh.totals.paid)
    .bind(fresh.totals.refunded)
    .bind(fresh.totals.disputed)
    .bind(attention_json(&fresh)?)
    .bind(event.occurred_at_ms)
    .bind(&claim.event_id)
    .bind(now)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    let locked = if created {
        None
    } else {
        Some(lock_order(&mut tx, order_id).await?)
    };

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
        if created {
            // Cannot happen while effects and orders are kept together (a key names its
            // order); should it, the duplicate must not leave an order it invented.
            sqlx::query("DELETE FROM orders WHERE order_id = $1")
                .bind(order_id)
                .execute(&mut *tx)
                .await?;
        }
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

    let (before, update, facts, existing) = match locked {
        None => {
            let before = OrderBefore {
                status: OrderStatus::Pending,
                currency: None,
                last_event_at: None,
                totals: Totals::default(),
            };
            let update = record_change(&mut tx, claim, order_id, &change, now).await?;
            (before, update, first_fact, Vec::new())
        }
        Some(before) => {
            if let (Some(order), Some(theirs)) = (&before.currency, &event.currency) {
                if order != theirs {
                    tx.rollback().await?;
                    return Ok(EffectOutcome::Mismatch {
                        key: key.to_string(),
                        reason: format!(
                        "currency mismatch: order {order_id} is in {order}, the event in {theirs}"
                    ),
                    });
                }
            }
            let update = record_change(&mut tx, claim, order_id, &change, now).await?;
            let facts = load_facts(&mut tx, order_id).await?;
            let existing = load_entries(&mut tx, order_id).await?;
            (before, update, facts, existing)
        }
    };
    let projection = if created { fresh } else { project(&facts) };
    let entries = plan_entries(&facts, &existing);

    let ctx = Written {
        claim,
        event,
        order_id,
        outbox,
        now,
        projection: &projection,
        currency: before.currency.as_deref().or(event.currency.as_deref()),
    };
    for entry in &entries {
        write_entry(&mut tx, &ctx, entry).await?;
    }
    if !created {
        let newest = before
            .last_event_at
            .map_or(event.occurred_at_ms, |b| b.max(event.occurred_at_ms));
        sqlx::query(
            "UPDATE orders SET status = $2, amount_paid = $3, amount_refunded = $4, \
             amount_disputed = $5, attention = $6, last_event_at = $7, \
             last_event_id = CASE WHEN $8 = 1 THEN $9 ELSE last_event_id END, \
             currency = COALESCE(currency, $10), updated_at = $11 WHERE order_id = $1",
        )
        .bind(order_id)
        .bind(projection.status.as_str())
        .bind(projection.totals.paid)
        .bind(projection.totals.refunded)
        .bind(projection.totals.disputed)
        .bind(attention_json(&projection)?)
        .bind(newest)
        .bind(i64::from(event.occurred_at_ms >= newest))
        .bind(&claim.event_id)
        .bind(&event.currency)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    }
    if projection.status != before.status {
        write_status_message(&mut tx, &ctx, &key, before.status).await?;
    }

    let outcome = classify(
        update,
        &before,
        &projection,
        event,
        &entries,
        &key,
        ctx.currency,
    );
    let (filed, reason) = match &outcome {
        EffectOutcome::Applied { .. } => (Filed::Applied, None),
        EffectOutcome::Stale { reason, .. } => (Filed::Stale, Some(reason.as_str())),
        EffectOutcome::Refused { reason, .. } => (Filed::Refused, Some(reason.as_str())),
        EffectOutcome::Duplicate { .. }
        | EffectOutcome::Mismatch { .. }
        | EffectOutcome::Fenced => {
            unreachable!("returned above")
        }
    };
    if let Some(reason) = reason {
        let kind = if filed == Filed::Refused {
            "refused"
        } else {
            "stale"
        };
        record_stale(&mut tx, &ctx, &key, kind, reason).await?;
    }

    remember_refs(&mut tx, &claim.provider, &event.lookup_refs, order_id).await?;
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

/// The outcome of an effect that won its key, from the guard's verdict and the order
/// before and after; the per-event transaction and the set-based batch share it.
pub(crate) fn classify(
    update: Update,
    before: &OrderBefore,
    projection: &Projection,
    event: &MappedEvent,
    entries: &[Entry],
    key: &EffectKey,
    currency: Option<&str>,
) -> EffectOutcome {
    let transition = event.transition;
    // What people read: a refused regression, an update older than its resource's latest,
    // or news that arrived after newer news and changed nothing (its money, if new, is in
    // the ledger all the same).
    // A refund or dispute that moved the totals is news whenever it arrives; anything else
    // stamped no later than the order's newest news that left its status alone is stale.
    let not_newer = before
        .last_event_at
        .is_some_and(|last| event.occurred_at_ms <= last);
    let moved_refund_or_dispute = !matches!(transition.resource(), ResourceKind::Payment)
        && projection.totals != before.totals;
    let older_than_order = not_newer && !moved_refund_or_dispute;
    let moved = Moved {
        paid: projection.totals.paid - before.totals.paid,
        refunded: projection.totals.refunded - before.totals.refunded,
        disputed: projection.totals.disputed - before.totals.disputed,
        currency: currency.map(str::to_owned),
    };
    match update {
        Update::Refused(reason) => EffectOutcome::Refused {
            key: key.to_string(),
            reason,
            moved,
        },
        Update::Stale(reason) => EffectOutcome::Stale {
            key: key.to_string(),
            reason: with_money_note(reason, entries),
            moved,
        },
        Update::Applied if older_than_order && projection.status == before.status => {
            EffectOutcome::Stale {
                key: key.to_string(),
                reason: with_money_note(
                    format!(
                        "{} of {} arrived after newer news and left the order {}",
                        transition.as_str(),
                        event.external_ref,
                        projection.status.as_str()
                    ),
                    entries,
                ),
                moved,
            }
        }
        Update::Applied => EffectOutcome::Applied {
            key: key.to_string(),
            status: projection.status,
            moved,
        },
    }
}

pub(crate) fn attention_json(p: &Projection) -> anyhow::Result<Option<String>> {
    Ok((!p.attention.is_empty())
        .then(|| serde_json::to_string(&p.attention))
        .transpose()?)
}

pub(crate) fn with_money_note(reason: String, entries: &[Entry]) -> String {
    let counted: Vec<String> = entries
        .iter()
        .map(|e| format!("{} {} {}", e.kind.as_str(), e.resource_id, e.amount))
        .collect();
    if counted.is_empty() {
        reason
    } else {
        format!(
            "{reason}; its money is in the ledger ({})",
            counted.join(", ")
        )
    }
}

/// What every row this event writes shares.
pub(crate) struct Written<'a> {
    pub(crate) claim: &'a Claimed,
    pub(crate) event: &'a MappedEvent,
    pub(crate) order_id: &'a str,
    pub(crate) outbox: &'a OutboxSettings,
    pub(crate) now: i64,
    pub(crate) projection: &'a Projection,
    pub(crate) currency: Option<&'a str>,
}

impl Written<'_> {
    fn totals_json(&self) -> serde_json::Value {
        let t = self.projection.totals;
        json!({
            "paid": t.paid, "refunded": t.refunded, "disputed": t.disputed, "net": t.net(),
            "currency": self.currency,
        })
    }
}

/// The key of a ledger entry: unique per (entry kind, order, resource).
pub fn entry_key(order_id: &str, entry: &Entry) -> EffectKey {
    EffectKey::from_parts(&["ledger", entry.kind.as_str(), order_id, &entry.identity()])
}

/// One `order_ledger` row, as the per-event and the set-based paths write it.
pub(crate) struct LedgerRow {
    pub(crate) order_id: String,
    pub(crate) transition: &'static str,
    pub(crate) status_after: &'static str,
    pub(crate) amount: i64,
    pub(crate) currency: Option<String>,
    pub(crate) external_ref: String,
    pub(crate) effect_key: String,
    pub(crate) provider: String,
    pub(crate) event_id: String,
    pub(crate) occurred_at: i64,
    pub(crate) recorded_at: i64,
    pub(crate) entry: &'static str,
    pub(crate) group_ref: Option<String>,
    pub(crate) counted: i64,
}

/// One `outbox` row (status `pending`, due at once).
pub(crate) struct OutboxRow {
    pub(crate) idempotency_key: String,
    pub(crate) effect_key: String,
    pub(crate) order_id: String,
    pub(crate) topic: String,
    pub(crate) sink: String,
    pub(crate) payload: String,
    pub(crate) correlation_id: String,
    pub(crate) now: i64,
}

/// One `stale_events` row.
pub(crate) struct StaleRow {
    pub(crate) order_id: String,
    pub(crate) provider: String,
    pub(crate) event_id: String,
    pub(crate) transition: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) reason: String,
    pub(crate) order_status: &'static str,
    pub(crate) amount: Option<i64>,
    pub(crate) currency: Option<String>,
    pub(crate) occurred_at: i64,
    pub(crate) recorded_at: i64,
}

// The values of each row in the column order of its INSERT below, for the per-event path
// and the set-based batch alike.
impl LedgerRow {
    pub(crate) const COLUMNS: usize = 14;

    pub(crate) fn into_values(self) -> Vec<Val> {
        vec![
            self.order_id.into(),
            self.transition.into(),
            self.status_after.into(),
            self.amount.into(),
            self.currency.into(),
            self.external_ref.into(),
            self.effect_key.into(),
            self.provider.into(),
            self.event_id.into(),
            self.occurred_at.into(),
            self.recorded_at.into(),
            self.entry.into(),
            self.group_ref.into(),
            self.counted.into(),
        ]
    }
}

impl OutboxRow {
    pub(crate) const COLUMNS: usize = 10;

    pub(crate) fn into_values(self) -> Vec<Val> {
        vec![
            self.idempotency_key.into(),
            self.effect_key.into(),
            self.order_id.into(),
            self.topic.into(),
            self.sink.into(),
            self.payload.into(),
            self.correlation_id.into(),
            "pending".into(),
            self.now.into(),
            self.now.into(),
        ]
    }
}

impl StaleRow {
    pub(crate) const COLUMNS: usize = 11;

    pub(crate) fn into_values(self) -> Vec<Val> {
        vec![
            self.order_id.into(),
            self.provider.into(),
            self.event_id.into(),
            self.transition.into(),
            self.kind.into(),
            self.reason.into(),
            self.order_status.into(),
            self.amount.into(),
            self.currency.into(),
            self.occurred_at.into(),
            self.recorded_at.into(),
        ]
    }
}

/// The ledger row of an entry and the outbox rows announcing it.
pub(crate) fn entry_rows(ctx: &Written<'_>, entry: &Entry) -> (LedgerRow, Vec<OutboxRow>) {
    let key = entry_key(ctx.order_id, entry);
    let ledger = LedgerRow {
        order_id: ctx.order_id.to_string(),
        transition: ctx.event.transition.as_str(),
        status_after: ctx.projection.status.as_str(),
        amount: entry.amount,
        currency: ctx.currency.map(str::to_owned),
        external_ref: entry.resource_id.clone(),
        effect_key: key.as_str().to_string(),
        provider: ctx.claim.provider.clone(),
        event_id: ctx.claim.event_id.clone(),
        occurred_at: ctx.event.occurred_at_ms,
        recorded_at: ctx.now,
        entry: entry.kind.as_str(),
        group_ref: entry.group.clone(),
        counted: entry.counted,
    };
    let topic = entry.kind.topic();
    let payload = json!({
        "type": topic,
        "order_id": ctx.order_id,
        "entry": entry.kind.as_str(),
        "resource_id": entry.resource_id,
        "amount": entry.amount,
        "counted": entry.counted,
        "currency": ctx.currency,
        "status": ctx.projection.status.as_str(),
        "totals": ctx.totals_json(),
    });
    (ledger, message_rows(ctx, &key, topic, payload))
}

/// The outbox rows announcing a change of the order's status from `from`.
pub(crate) fn status_rows(ctx: &Written<'_>, key: &EffectKey, from: OrderStatus) -> Vec<OutboxRow> {
    let status = ctx.projection.status;
    let topic = format!("order.{}", status.as_str());
    let payload = json!({
        "type": topic,
        "order_id": ctx.order_id,
        "status": status.as_str(),
        "previous_status": from.as_str(),
        "transition": ctx.event.transition.as_str(),
        "amount": ctx.event.amount,
        "currency": ctx.currency,
        "external_ref": ctx.event.external_ref,
        "totals": ctx.totals_json(),
        "attention": ctx.projection.attention,
    });
    message_rows(ctx, key, &topic, payload)
}

/// One outbox row per sink routed for `topic`, keyed on the effect or entry key.
fn message_rows(
    ctx: &Written<'_>,
    key: &EffectKey,
    topic: &str,
    mut payload: serde_json::Value,
) -> Vec<OutboxRow> {
    payload["provider"] = json!(ctx.claim.provider);
    payload["event_id"] = json!(ctx.claim.event_id);
    payload["event_type"] = json!(ctx.event.event_type);
    payload["occurred_at_ms"] = json!(ctx.event.occurred_at_ms);
    payload["effect_key"] = json!(key.as_str());
    ctx.outbox
        .sinks_for(topic)
        .into_iter()
        .map(|sink| {
            let idempotency_key = key.outbox_key(&sink, topic);
            payload["idempotency_key"] = json!(idempotency_key);
            OutboxRow {
                idempotency_key,
                effect_key: key.as_str().to_string(),
                order_id: ctx.order_id.to_string(),
                topic: topic.to_string(),
                sink,
                payload: payload.to_string(),
                correlation_id: ctx.claim.correlation_id.clone(),
                now: ctx.now,
            }
        })
        .collect()
}

/// The stale-events row of a stale or refused event.
pub(crate) fn stale_row(ctx: &Written<'_>, kind: &'static str, reason: &str) -> StaleRow {
    StaleRow {
        order_id: ctx.order_id.to_string(),
        provider: ctx.claim.provider.clone(),
        event_id: ctx.claim.event_id.clone(),
        transition: ctx.event.transition.as_str(),
        kind,
        reason: reason.to_string(),
        order_status: ctx.projection.status.as_str(),
        amount: ctx.event.amount,
        currency: ctx.event.currency.clone(),
        occurred_at: ctx.event.occurred_at_ms,
        recorded_at: ctx.now,
    }
}

pub(crate) const LEDGER_INSERT: &str = "INSERT INTO order_ledger (order_id, transition, \
     status_after, amount, currency, external_ref, effect_key, provider, event_id, occurred_at, \
     recorded_at, entry, group_ref, counted) VALUES ";

pub(crate) const OUTBOX_INSERT: &str = "INSERT INTO outbox (idempotency_key, effect_key, \
     order_id, topic, sink, payload, correlation_id, status, next_attempt_at, created_at) VALUES ";

pub(crate) const STALE_INSERT: &str = "INSERT INTO stale_events (order_id, provider, event_id, \
     transition, kind, reason, order_status, amount, currency, occurred_at, recorded_at) VALUES ";

async fn write_entry(
    tx: &mut Transaction<'_, Any>,
    ctx: &Written<'_>,
    entry: &Entry,
) -> anyhow::Result<()> {
    let (row, messages) = entry_rows(ctx, entry);
    run_values(
        tx,
        LEDGER_INSERT,
        "",
        LedgerRow::COLUMNS,
        &[row.into_values()],
    )
    .await?;
    if entry.kind == EntryKind::Refund {
        // A refund oncehook asked for is confirmed once its money is counted.
        super::commands::confirm_in(
            tx,
            ctx.order_id,
            &entry.resource_id,
            &ctx.claim.event_id,
            ctx.now,
        )
        .await?;
    }
    write_messages(tx, messages).await
}

async fn write_status_message(
    tx: &mut Transaction<'_, Any>,
    ctx: &Written<'_>,
    key: &EffectKey,
    from: OrderStatus,
) -> anyhow::Result<()> {
    write_messages(tx, status_rows(ctx, key, from)).await
}

async fn write_messages(tx: &mut Transaction<'_, Any>, rows: Vec<OutboxRow>) -> anyhow::Result<()> {
    if !rows.is_empty() {
        let rows: Vec<Vec<Val>> = rows.into_iter().map(OutboxRow::into_values).collect();
        run_values(tx, OUTBOX_INSERT, "", OutboxRow::COLUMNS, &rows).await?;
    }
    Ok(())
}

async fn record_stale(
    tx: &mut Transaction<'_, Any>,
    ctx: &Written<'_>,
    key: &EffectKey,
    kind: &'static str,
    reason: &str,
) -> anyhow::Result<()> {
    sqlx::query("UPDATE processed_effects SET outcome = $2 WHERE effect_key = $1")
        .bind(key.as_str())
        .bind(kind)
        .execute(&mut **tx)
        .await?;
    let row = stale_row(ctx, kind, reason);
    run_values(
        tx,
        STALE_INSERT,
        "",
        StaleRow::COLUMNS,
        &[row.into_values()],
    )
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
