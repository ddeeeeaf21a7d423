//! The order page's data: `read::order_view` turned into one chronological story, and the
//! search that finds an order from any id a person may hold.

use app::backend::{OrderDetail, OrderResourceView, SearchHit, TimelineEntry};
use sqlx::Row;

use crate::store::dead_letters::{self, DeadLetter};
use crate::store::read::{order_view_in, OrderView};
use crate::store::triage::{self, OrderRedrive};
use crate::store::{now_ms, Db};

/// Dead letters an order page lists (an order with more has a bigger problem than a page).
const ORDER_DEAD_LETTERS: i64 = 200;

/// The order's "why" is in the viewer's language `loc`.
pub async fn order_detail_in(
    db: &Db,
    order_id: &str,
    loc: app::locale::Locale,
) -> anyhow::Result<Option<OrderDetail>> {
    // The commands before the order: a refund command is confirmed in the transaction that
    // counts its money, so a command read as confirmed guarantees the order read after it
    // has the money. Read the other way round, a confirmation committed between the two
    // reads showed "confirmed" beside the old totals, and the page, seeing nothing in
    // flight, stopped reading the order again (e2e refunds.spec.ts, CI 2026-12-03).
    let commands = super::commands::of_order(db, order_id).await?;
    let Some(view) = order_view_in(db, order_id, loc).await? else {
        return Ok(None);
    };
    // Any status: a resolved or redriven dead letter is part of the story too.
    let dead = dead_letters::of_order(db, order_id, ORDER_DEAD_LETTERS, now_ms()).await?;
    let redrives = triage::redrives_of_order(db, order_id).await?;
    let diffs = super::reconcile::of_order(db, order_id).await?;
    let mut detail = detail_in(loc, view, &dead, &redrives);
    super::commands::add_to_story(&mut detail, commands);
    // What the refund form offers: the request path's own count, without its lock.
    if let Some(room) = crate::store::commands::room_now(db, order_id).await? {
        detail.refundable = room.left();
        detail.refund_note = room.note();
    }
    super::reconcile::add_to_story(&mut detail, &diffs);
    Ok(Some(detail))
}

/// The page's view of an order, its story in the viewer's language `loc`; pure, so the
/// story's order and wording are unit-tested.
pub fn detail_in(
    loc: app::locale::Locale,
    view: OrderView,
    dead: &[DeadLetter],
    redrives: &[OrderRedrive],
) -> OrderDetail {
    let timeline = timeline(loc, &view, dead, redrives);
    OrderDetail {
        resources: view
            .facts
            .iter()
            .map(|f| OrderResourceView {
                kind: f.kind.clone(),
                resource_id: f.resource_id.clone(),
                parent_ref: f.parent_ref.clone(),
                state: f.state.clone(),
                amount: f.amount,
                at: f.at.clone(),
                event_id: f.event_id.clone(),
            })
            .collect(),
        timeline,
        commands: Vec::new(),
        order_id: view.order_id,
        status: view.status,
        why: view.why,
        currency: view.currency,
        amount_paid: view.amount_paid,
        amount_refunded: view.amount_refunded,
        amount_disputed: view.amount_disputed,
        net: view.net,
        refundable: 0,
        refund_note: None,
        attention: view.attention,
        created_at: view.created_at,
        updated_at: view.updated_at,
    }
}

use app::sentences::story as say;

/// A time inside a story line: as the server writes it in English (unchanged), day first
/// in Portuguese.
fn moment(loc: app::locale::Locale, at: &str) -> String {
    match loc {
        app::locale::Locale::en => at.to_string(),
        _ => app::sentences::moment(loc, at),
    }
}

fn entry(at: &str, kind: &str, title: String) -> TimelineEntry {
    TimelineEntry {
        at: at.to_string(),
        kind: kind.to_string(),
        title,
        detail: None,
        href: None,
        status: None,
    }
}

/// Deliveries, processing, money, stale events, outbox messages, dead letters and
/// redrives, oldest first. Entries at the same instant keep that causal order.
fn timeline(
    loc: app::locale::Locale,
    view: &OrderView,
    dead: &[DeadLetter],
    redrives: &[OrderRedrive],
) -> Vec<TimelineEntry> {
    let inbox_id = |provider: &str, event_id: &str| {
        view.events
            .iter()
            .find(|e| e.provider == provider && e.event_id == event_id)
            .map(|e| format!("/events/{}", e.id))
    };
    let mut story = Vec::new();
    for d in &view.deliveries {
        let event_type = view
            .events
            .iter()
            .find(|e| e.provider == d.provider && e.event_id == d.event_id)
            .and_then(|e| e.event_type.clone())
            .unwrap_or_else(|| say::event(loc));
        let mut e = if d.duplicate {
            let mut e = entry(
                &d.received_at,
                "redelivery",
                say::redelivered(loc, &event_type, &d.event_id),
            );
            e.detail = Some(say::duplicate(loc, &d.correlation_id));
            e
        } else {
            let mut e = entry(
                &d.received_at,
                "delivery",
                say::received(loc, &event_type, &d.event_id, &d.provider),
            );
            e.detail = Some(say::correlation(loc, &d.correlation_id));
            e
        };
        e.href = inbox_id(&d.provider, &d.event_id);
        story.push(e);
    }
    for ev in &view.events {
        let Some(at) = &ev.processed_at else {
            let mut e = entry(
                &ev.received_at,
                "processed",
                say::waiting(loc, &ev.event_id),
            );
            e.status = Some(ev.status.clone());
            e.href = Some(format!("/events/{}", ev.id));
            story.push(e);
            continue;
        };
        let mut e = entry(at, "processed", say::processed(loc, &ev.event_id));
        e.status = Some(ev.status.clone());
        e.detail = ev.reason.clone();
        e.href = Some(format!("/events/{}", ev.id));
        story.push(e);
    }
    for l in &view.ledger {
        let currency = l.currency.as_deref().or(view.currency.as_deref());
        let counted = app::format::money_in(loc, l.counted, currency);
        let mut e = entry(
            &l.recorded_at,
            "money",
            say::counted(
                loc,
                &say::entry(loc, &l.entry),
                &l.external_ref,
                &say::of_amount(loc, l.amount, currency),
                &counted,
            ),
        );
        e.detail = Some(say::from_event(
            loc,
            &l.event_id,
            &moment(loc, &l.occurred_at),
            &l.status_after,
        ));
        e.href = inbox_id(&l.provider, &l.event_id);
        story.push(e);
    }
    for s in &view.stale_events {
        let currency = s.currency.as_deref().or(view.currency.as_deref());
        let mut e = entry(
            &s.recorded_at,
            "stale",
            say::changed_nothing(
                loc,
                &app::components::transition_label(loc, &s.transition),
                &s.event_id,
                &say::of_amount(loc, s.amount, currency),
            ),
        );
        e.status = Some(s.kind.clone());
        e.detail = Some(say::stale_detail(
            loc,
            &s.reason,
            &moment(loc, &s.occurred_at),
            &s.order_status,
        ));
        e.href = inbox_id(&s.provider, &s.event_id);
        story.push(e);
    }
    for o in &view.outbox {
        let mut e = entry(
            &o.created_at,
            "outbox",
            say::message(loc, &o.topic, &o.sink),
        );
        e.status = Some(o.status.clone());
        e.detail = Some(match &o.delivered_at {
            Some(at) => say::delivered_after(loc, &moment(loc, at), o.attempts, &o.idempotency_key),
            None => say::attempts_so_far(loc, o.attempts, &o.idempotency_key),
        });
        story.push(e);
    }
    for d in dead {
        let mut e = entry(
            &d.first_attempt_at,
            "dead-letter",
            say::dead_letter(loc, d.id, &d.stage, &d.error_class, &d.last_error),
        );
        e.status = Some(d.status.clone());
        e.detail = Some(say::deal_by(loc, d.attempts, &moment(loc, &d.resolve_by)));
        e.href = Some(format!("/dlq?id={}&status={}", d.id, d.status));
        story.push(e);
    }
    for r in redrives {
        let mut e = entry(
            &r.at,
            "redrive",
            say::redriven_by(loc, r.dead_letter_id, &r.actor),
        );
        e.detail = Some(match &r.reason {
            Some(reason) => say::outcome_reason(loc, &r.outcome, reason),
            None => r.outcome.clone(),
        });
        story.push(e);
    }
    // Stable: entries of one instant stay in the causal order they were pushed in.
    story.sort_by(|a, b| a.at.cmp(&b.at));
    story
}

/// An order id, an event id, or a provider reference an event named (payment intent,
/// charge, refund, dispute), matched exactly. `providers` are the configured ones, so each
/// lookup uses the `(provider, …)` unique indexes.
pub async fn search(db: &Db, providers: &[String], text: &str) -> anyhow::Result<SearchHit> {
    let pool = db.reader();
    if let Some(order) = sqlx::query("SELECT order_id FROM orders WHERE order_id = $1")
        .bind(text)
        .fetch_optional(pool)
        .await?
    {
        return Ok(SearchHit::Order(order.try_get(0)?));
    }
    for provider in providers {
        if let Some(row) =
            sqlx::query("SELECT order_id FROM payment_refs WHERE provider = $1 AND reference = $2")
                .bind(provider)
                .bind(text)
                .fetch_optional(pool)
                .await?
        {
            return Ok(SearchHit::Order(row.try_get(0)?));
        }
        if let Some(row) = sqlx::query(
            "SELECT id, order_id FROM inbox_events WHERE provider = $1 AND event_id = $2",
        )
        .bind(provider)
        .bind(text)
        .fetch_optional(pool)
        .await?
        {
            return Ok(match row.try_get::<Option<String>, _>(1)? {
                Some(order) => SearchHit::Order(order),
                None => SearchHit::Event(row.try_get(0)?),
            });
        }
    }
    Ok(SearchHit::Nothing)
}
