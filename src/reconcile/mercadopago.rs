//! Reconciliation of a Mercado Pago provider. Mercado Pago lists no events (its
//! notifications are thin and not kept for anyone to page), so one pass does the work of
//! both of Stripe's: it pages the payment search (`GET /v1/payments/search`, every payment
//! whose `date_last_updated` falls between the checkpoint minus the overlap, or
//! `window_days` back on the first run, and now), reads each payment exactly as the
//! receiver reads a fetched one (the payment and its views: its approval, each refund, its
//! running refund total, through the provider's mapping) and compares those facts with the
//! order's (`compare::judge`). A fact we lack is ingested through the inbox as the receiver
//! would have stored its notification: a notification built by oncehook whose fetched
//! payment is the view, so the processor maps it to the same transition, effect key and
//! ledger entries the webhook would have, and a late notification collapses onto it.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::compare::{judge, Resource, Synth};
use super::objects::{self, order_now};
use super::{DiffKind, Run, RunError};
use crate::domain::event::MappedEvent;
use crate::domain::Transition;
use crate::provider::api::PaymentSearch;
use crate::provider::mapping::mercadopago_views;
use crate::store::ingest::Receipt;
use crate::store::now_ms;
use crate::store::reconcile::{self as store, Counts, NewDiff};

/// The notification action a built event carries, as Mercado Pago's for a change.
const ACTION: &str = "payment.updated";

/// The search pass; its lower bound (Unix seconds).
pub(super) async fn pass(
    run: &mut Run<'_>,
    progress: &(dyn Fn(&Counts) + Send + Sync),
) -> Result<i64, RunError> {
    let db = run.r.db.clone();
    let provider = run.options.provider.clone();
    let s = run.settings().clone();
    let checkpoint = store::checkpoint(&db, &provider).await?;
    let window_start = run.now_s - s.window_days * 86_400;
    let since = match (run.options.since, checkpoint.created) {
        (Some(t), _) => t,
        (None, Some(c)) => c - s.overlap_secs,
        (None, None) => window_start,
    }
    .max(window_start);
    if !run.options.dry_run {
        store::update_run(&db, run.id, &run.counts, Some(since), now_ms()).await?;
    }
    // A clone shares the rate limit; the pages borrow it while the run changes.
    let client = run.api.client.clone();
    let mut pages = client.mercadopago_payments(PaymentSearch {
        begin_ms: since * 1000,
        end_ms: run.now_s * 1000,
        limit: s.page_size,
        external_reference: None,
    });
    let mut newest: Option<(String, i64)> = None;
    loop {
        run.check()?;
        run.api.count();
        let Some(page) = pages.next_page().await? else {
            break;
        };
        if let Some(last) = page.last() {
            if let Some(at) = crate::provider::api::updated_ms(last) {
                newest = Some((id_of(last), at / 1000));
            }
        }
        compare_page(run, &page).await?;
        run.save_counts().await?;
        progress(&run.counts);
    }
    if !run.options.dry_run {
        store::complete_pass(
            &db,
            &provider,
            newest.as_ref().map(|(id, at)| (id.as_str(), *at)),
            now_ms(),
        )
        .await?;
    }
    Ok(since)
}

/// A one-click fix of an order's missing fact: its payments searched again
/// (`external_reference`, the whole window) and compared.
pub(super) async fn compare_order_again(run: &mut Run<'_>, order_id: &str) -> Result<(), RunError> {
    let client = run.api.client.clone();
    let mut pages = client.mercadopago_payments(PaymentSearch {
        begin_ms: (run.now_s - run.settings().window_days * 86_400) * 1000,
        end_ms: run.now_s * 1000,
        limit: run.settings().page_size,
        external_reference: Some(order_id.to_string()),
    });
    let mut payments = Vec::new();
    loop {
        run.api.count();
        let Some(page) = pages.next_page().await? else {
            break;
        };
        payments.extend(page);
    }
    let of_order: Vec<&Value> = payments
        .iter()
        .filter(|p| p["external_reference"].as_str() == Some(order_id))
        .collect();
    compare_order(run, order_id, &of_order).await
}

fn id_of(payment: &Value) -> String {
    match &payment["id"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// One page of payments, order by order (a payment naming no order is looked at alone).
async fn compare_page(run: &mut Run<'_>, payments: &[Value]) -> Result<(), RunError> {
    let mut by_order: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for p in payments {
        match p["external_reference"].as_str().filter(|o| !o.is_empty()) {
            Some(order_id) => by_order.entry(order_id).or_default().push(p),
            None => unknown_order(run, p).await?,
        }
    }
    for (order_id, payments) in by_order {
        run.check()?;
        compare_order(run, order_id, &payments).await?;
    }
    Ok(())
}

/// A payment's facts as the receiver stores them: its views (approval first, so that a
/// refund never waits for its payment), the payment itself, then its refunds and totals;
/// each with what the mapping reads in it. Views the mapping does not act on (`pending`)
/// are left out; a payment the mapping cannot read is a bad answer.
fn facts_of(run: &Run<'_>, payment: &Value) -> Result<Vec<(Value, MappedEvent)>, RunError> {
    let bytes = payment.to_string().into_bytes();
    let mut views = mercadopago_views(&bytes);
    let at = views
        .iter()
        .position(|(suffix, _)| suffix != "paid")
        .unwrap_or(views.len());
    views.insert(at, (String::new(), bytes));
    let mut out = Vec::new();
    for (_, view) in views {
        match run.provider.mapping.map(&view) {
            Ok(m) => {
                let value = serde_json::from_slice(&view)
                    .map_err(|e| RunError::BadAnswer(format!("a payment view: {e}")))?;
                out.push((value, m));
            }
            Err(e) if e.is_ignorable() => {}
            Err(e) => {
                return Err(RunError::BadAnswer(format!(
                    "payment {} lacks what its mapping needs: {e}",
                    payment["id"]
                )))
            }
        }
    }
    Ok(out)
}

/// Compares an order's payments (as the search answered them) with its facts.
async fn compare_order(
    run: &mut Run<'_>,
    order_id: &str,
    payments: &[&Value],
) -> Result<(), RunError> {
    let order = order_now(run, order_id).await?;
    let mut facts = Vec::new();
    for p in payments {
        facts.extend(facts_of(run, p)?);
    }
    let resources: Vec<Resource<'_>> = facts
        .iter()
        .map(|(view, m)| Resource {
            kind: m.transition.resource(),
            id: &m.external_ref,
            parent: m.parent_ref.as_deref(),
            status: view["status"].as_str().unwrap_or(&m.event_type),
            transition: m.transition,
            event_type: ACTION,
            at: m.occurred_at_ms / 1000,
            stamp_ms: Some(m.occurred_at_ms),
            amount: m.amount.unwrap_or(0),
            currency: m.currency.as_deref().unwrap_or("BRL"),
            object: view.clone(),
        })
        .collect();
    run.counts.objects_compared += resources.len() as i64;
    let findings = judge(
        order_id,
        order.currency.as_deref(),
        &order.facts,
        resources,
        run.now_s,
    );
    let provider = run.options.provider.clone();
    objects::apply(run, &provider, order_id, findings, built_receipt).await
}

/// An approved payment naming no order (no `external_reference`): for a person.
async fn unknown_order(run: &mut Run<'_>, payment: &Value) -> Result<(), RunError> {
    run.counts.objects_compared += 1;
    let paid = facts_of(run, payment)?
        .iter()
        .find(|(_, m)| m.transition == Transition::Pay)
        .map(|(_, m)| {
            (
                m.amount.unwrap_or(0),
                m.currency.clone().unwrap_or_default(),
            )
        });
    let Some((amount, currency)) = paid else {
        return Ok(());
    };
    let id = id_of(payment);
    run.found(NewDiff {
        provider: run.options.provider.clone(),
        kind: DiffKind::UnknownOrder.as_str().into(),
        subject: id.clone(),
        order_id: None,
        provider_event_id: None,
        object_id: Some(id.clone()),
        detail: format!(
            "payment {id} was approved at Mercado Pago ({amount} {currency}) but names no order (no external_reference)"
        ),
    })
    .await?;
    Ok(())
}

/// The notification the receiver would have stored for a view, built by oncehook: the
/// view is its fetched payment. The same view always gets the same id, so building it
/// again is a duplicate the inbox drops.
fn built_receipt(run: &Run<'_>, object_id: &str, s: &Synth) -> Receipt {
    let provider = &run.options.provider;
    let view = s.object.to_string().into_bytes();
    let mut digest = Sha256::new();
    for part in [
        provider.as_bytes(),
        object_id.as_bytes(),
        s.transition.as_str().as_bytes(),
        &view,
    ] {
        digest.update((part.len() as u64).to_be_bytes());
        digest.update(part);
    }
    let id = format!("mp_rc_{}", &hex::encode(digest.finalize())[..24]);
    // A refund view names its payment in `payment_id`; the payment is `id`.
    let payment_id = match s.object.get("payment_id") {
        Some(p) if !p.is_null() => p,
        _ => &s.object["id"],
    };
    let notification = json!({
        "id": id,
        "live_mode": false,
        "type": "payment",
        "action": s.event_type,
        "api_version": "v1",
        "date_created": crate::provider::api::search_date(s.created * 1000),
        "data": {"id": match payment_id { Value::String(p) => p.clone(), other => other.to_string() }},
        // Not Mercado Pago's: built by oncehook from the payment search.
        "oncehook_reconciliation": {"run_id": run.id, "built_from": object_id},
    });
    Receipt {
        provider: provider.clone(),
        event_id: id,
        event_type: Some(s.event_type.into()),
        api_version: Some("v1".into()),
        raw_body: notification.to_string().into_bytes(),
        correlation_id: run.correlation_id.clone(),
        received_at: now_ms(),
        fetched_body: Some(view),
        derived: false,
    }
}
