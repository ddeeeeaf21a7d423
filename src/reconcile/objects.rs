//! The objects pass: for each order of the provider changed within the window or not in a
//! final state, and each payment the events pass saw that we know no order for, fetch the
//! payment intent (with its latest charge), its refunds and disputes, compare them with the
//! order's facts (`compare`) and fix what can be fixed. All API calls of an order come
//! before any write for it, so an API failure leaves no half-fixed order.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;
use sha2::{Digest, Sha256};
use sqlx::Row;

use super::compare::{compare_payment, payment_transition, Finding, ProviderPayment, Synth};
use super::{DiffKind, Run, RunError};
use crate::domain::{Fact, ResourceKind, Transition};
use crate::provider::api::Expandable;
use crate::store::effects::load_facts;
use crate::store::ingest::{store_receipts, Receipt};
use crate::store::now_ms;
use crate::store::reconcile::{self as store, Counts, NewDiff};

/// The API version stamped on events built from objects when the events pass saw none
/// (Stripe renders objects in the account's version; the events carry it).
const FALLBACK_API_VERSION: &str = "2025-03-31.basil";

const PAGE: i64 = 100;

/// Waits (bounded by `reconcile.settle_secs`) until the processor has applied what the
/// events pass ingested, so the objects pass compares orders with those events in them.
pub(super) async fn settle(run: &Run<'_>) -> Result<(), RunError> {
    if run.options.dry_run || run.counts.fixed == 0 {
        return Ok(());
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(run.settings().settle_secs);
    while tokio::time::Instant::now() < deadline {
        run.check()?;
        if store::ingested_in_flight(&run.r.db, &run.correlation_id).await? == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tracing::warn!(
        run_id = run.id,
        "reconciliation: the processor has not applied every ingested event yet; comparing objects anyway"
    );
    Ok(())
}

/// Redrives what this run ingested and the processor dead-lettered meanwhile (a refund or
/// dispute read before its payment whose retries ran out): its order is known now. Same
/// keys, so it applies once or is a duplicate.
pub(super) async fn redrive_own(run: &Run<'_>) -> Result<usize, RunError> {
    if run.options.dry_run || run.counts.fixed == 0 {
        return Ok(0);
    }
    let reason = format!("reconciliation run {}: its order is known now", run.id);
    let actor = crate::store::dead_letters::Actor {
        name: "reconciler",
        reason: Some(&reason),
        source: None,
    };
    let (mut after, mut redriven) = (0, 0);
    loop {
        let page = store::own_dead_letters(&run.r.db, &run.correlation_id, after, PAGE).await?;
        let Some((last, _)) = page.last() else { break };
        after = *last;
        for (_, dead_letter) in page {
            run.check()?;
            crate::store::dead_letters::redrive_one(&run.r.db, dead_letter, &actor, now_ms())
                .await?;
            redriven += 1;
        }
    }
    Ok(redriven)
}

pub(super) async fn pass(
    run: &mut Run<'_>,
    since_s: i64,
    progress: &(dyn Fn(&Counts) + Send + Sync),
) -> Result<(), RunError> {
    let db = run.r.db.clone();
    let provider = run.options.provider.clone();
    let mut after = String::new();
    loop {
        let orders = store::orders_to_compare(&db, &provider, since_s * 1000, &after, PAGE).await?;
        let Some(last) = orders.last() else { break };
        after = last.clone();
        for order_id in &orders {
            run.check()?;
            compare_order(run, order_id, None).await?;
        }
        run.save_counts().await?;
        progress(&run.counts);
    }
    if run.options.dry_run {
        return Ok(());
    }
    let mut after = String::new();
    loop {
        let pis = store::pending_objects(&db, run.id, &after, PAGE).await?;
        let Some(last) = pis.last() else { break };
        after = last.clone();
        let refs: Vec<&str> = pis.iter().map(String::as_str).collect();
        let known = store::known_refs(&db, &provider, &refs).await?;
        for pi in pis.iter().filter(|p| !known.contains(*p)) {
            run.check()?;
            unknown_payment(run, pi).await?;
        }
        run.save_counts().await?;
        progress(&run.counts);
    }
    Ok(())
}

pub(super) struct OrderNow {
    pub currency: Option<String>,
    pub facts: Vec<Fact>,
}

pub(super) async fn order_now(run: &Run<'_>, order_id: &str) -> Result<OrderNow, RunError> {
    let mut conn = run
        .r
        .db
        .reader()
        .acquire()
        .await
        .map_err(anyhow::Error::from)?;
    let currency = sqlx::query("SELECT currency FROM orders WHERE order_id = $1")
        .bind(order_id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(anyhow::Error::from)?
        .map(|r| r.try_get::<Option<String>, _>(0))
        .transpose()
        .map_err(anyhow::Error::from)?
        .flatten();
    let facts = load_facts(&mut conn, order_id).await?;
    Ok(OrderNow { currency, facts })
}

/// Compares one order (with `extra`, a payment of it we did not know).
pub(super) async fn compare_order(
    run: &mut Run<'_>,
    order_id: &str,
    extra: Option<ProviderPayment>,
) -> Result<(), RunError> {
    let order = order_now(run, order_id).await?;
    let provider = run.options.provider.clone();
    let mut pis: BTreeSet<&str> = BTreeSet::new();
    for f in &order.facts {
        let payment = match f.kind {
            ResourceKind::Payment => Some(f.resource_id.as_str()),
            _ => f.parent_ref.as_deref(),
        };
        if let Some(pi) = payment.filter(|p| p.starts_with("pi_")) {
            pis.insert(pi);
        }
    }
    let mut payments = Vec::new();
    for pi in pis {
        if extra.as_ref().is_some_and(|e| e.intent.id == pi) {
            continue;
        }
        payments.push(fetch_payment(run, pi, &order.facts).await?);
    }
    payments.extend(extra);
    let mut findings = Vec::new();
    for p in &payments {
        run.counts.objects_compared += 1 + (p.refunds.len() + p.disputes.len()) as i64;
        findings.extend(compare_payment(
            order_id,
            order.currency.as_deref(),
            &order.facts,
            p,
            run.now_s,
        ));
    }
    apply(run, &provider, order_id, findings, built_receipt).await
}

/// A payment the events named that no order of ours knows.
async fn unknown_payment(run: &mut Run<'_>, pi: &str) -> Result<(), RunError> {
    let p = fetch_payment(run, pi, &[]).await?;
    match p.intent.metadata.get("order_id").filter(|o| !o.is_empty()) {
        Some(order_id) => {
            let order_id = order_id.clone();
            compare_order(run, &order_id, Some(p)).await
        }
        None => {
            run.counts.objects_compared += 1;
            if payment_transition(&p.intent).is_some_and(|(t, _)| t == Transition::Pay) {
                run.found(NewDiff {
                    provider: run.options.provider.clone(),
                    kind: DiffKind::UnknownOrder.as_str().into(),
                    subject: pi.to_string(),
                    order_id: None,
                    provider_event_id: None,
                    object_id: Some(pi.to_string()),
                    detail: format!(
                        "payment {pi} succeeded at the provider ({} {}) but names no order (no metadata.order_id) and no event of ours links it to one",
                        p.intent.amount_received,
                        p.intent.currency.to_ascii_uppercase()
                    ),
                })
                .await?;
            }
            Ok(())
        }
    }
}

async fn fetch_payment(
    run: &Run<'_>,
    pi: &str,
    facts: &[Fact],
) -> Result<ProviderPayment, RunError> {
    let client = &run.api.client;
    run.api.count();
    let intent = client.payment_intent(pi, true).await?;
    if intent.id != pi {
        return Err(RunError::BadAnswer(format!(
            "asked for payment intent {pi}, got {}",
            intent.id
        )));
    }
    let has = |kind: ResourceKind| {
        facts
            .iter()
            .any(|f| f.kind == kind && f.parent_ref.as_deref() == Some(pi))
    };
    let charge = intent.latest_charge.as_ref().and_then(Expandable::object);
    let refunds = if intent.status == "succeeded" || has(ResourceKind::Refund) {
        run.api.count();
        client.refunds_of(pi).await?
    } else {
        vec![]
    };
    let disputes = if charge.is_some_and(|c| c.disputed) || has(ResourceKind::Dispute) {
        run.api.count();
        client.disputes_of(pi).await?
    } else {
        vec![]
    };
    Ok(ProviderPayment {
        intent,
        refunds,
        disputes,
    })
}

/// The id of an event built from an object: the same object in the same state always gets
/// the same id, so building it again is a duplicate the inbox drops.
fn built_id(provider: &str, object_id: &str, t: Transition) -> String {
    let digest = Sha256::digest(format!("{provider}\0{object_id}\0{}", t.as_str()));
    format!("evt_rc_{}", &hex::encode(digest)[..24])
}

fn built_receipt(run: &Run<'_>, object_id: &str, s: &Synth) -> Receipt {
    let provider = &run.options.provider;
    let id = built_id(provider, object_id, s.transition);
    let api_version = run
        .api_version
        .clone()
        .unwrap_or_else(|| FALLBACK_API_VERSION.into());
    let body = json!({
        "id": id,
        "object": "event",
        "api_version": api_version,
        "created": s.created,
        "type": s.event_type,
        "data": {"object": s.object},
        "livemode": false,
        // Not the provider's: built by oncehook from the provider's objects.
        "oncehook_reconciliation": {"run_id": run.id, "built_from": object_id},
    });
    Receipt {
        provider: provider.clone(),
        event_id: id,
        event_type: Some(s.event_type.into()),
        api_version: Some(api_version),
        raw_body: body.to_string().into_bytes(),
        correlation_id: run.correlation_id.clone(),
        received_at: now_ms(),
        fetched_body: None,
        derived: false,
    }
}

/// How a fix becomes what the inbox takes: the provider's event shape built from an object.
pub(super) type BuildReceipt = fn(&Run<'_>, &str, &Synth) -> Receipt;

/// Records an order's findings, then ingests the fixes of all of them in one transaction.
pub(super) async fn apply(
    run: &mut Run<'_>,
    provider: &str,
    order_id: &str,
    findings: Vec<Finding>,
    build: BuildReceipt,
) -> Result<(), RunError> {
    let mut fixes: Vec<(i64, Vec<Receipt>)> = Vec::new();
    for f in findings {
        let found = run
            .found(NewDiff {
                provider: provider.to_string(),
                kind: f.kind.as_str().into(),
                subject: f.subject.clone(),
                order_id: Some(order_id.to_string()),
                provider_event_id: None,
                object_id: Some(f.object_id.clone()),
                detail: f.detail.clone(),
            })
            .await?;
        if let Some((diff_id, true)) = found {
            if run.auto_fix() && f.kind.auto_fixable() && !f.fix.is_empty() {
                let receipts = f.fix.iter().map(|s| build(run, &f.object_id, s)).collect();
                fixes.push((diff_id, receipts));
            }
        }
    }
    if fixes.is_empty() {
        return Ok(());
    }
    let all: Vec<Receipt> = fixes.iter().flat_map(|(_, r)| r.clone()).collect();
    store_receipts(&run.r.db, &all).await?;
    for (diff_id, receipts) in &fixes {
        let ids: Vec<&str> = receipts.iter().map(|r| r.event_id.as_str()).collect();
        run.fixed(
            *diff_id,
            &format!(
                "built {} from the provider's objects, with the keys its webhook would have",
                ids.join(", ")
            ),
            ids.first().copied(),
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_event_has_the_same_id_for_the_same_state() {
        let a = built_id("stripe", "re_1", Transition::Refund);
        assert_eq!(a, built_id("stripe", "re_1", Transition::Refund));
        assert_ne!(a, built_id("stripe", "re_1", Transition::RefundFailed));
        assert_ne!(a, built_id("other", "re_1", Transition::Refund));
        assert!(a.starts_with("evt_rc_") && a.len() == 31);
    }
}
