//! The events pass: `GET /v1/events` newest first, from the newest event down to the
//! checkpoint minus the overlap, one page in memory at a time, each compared with the inbox.
//! After every page the pass's position (its head and the oldest event compared) is saved,
//! so a run that dies resumes where it stopped; when it reaches its lower bound, its head
//! becomes the checkpoint.

use super::{DiffKind, Run, RunError};
use crate::provider::api::{Event, EventQuery};
use crate::store::dead_letters::{self, Actor, DeadLetterFilter};
use crate::store::ingest::{store_receipts, Receipt};
use crate::store::now_ms;
use crate::store::reconcile::{self as store, Counts, NewDiff};

/// The event type that names every payment when it begins: how the pass finds payments
/// whose later events were never generated.
const PAYMENT_CREATED: &str = "payment_intent.created";

/// Stripe takes at most 20 `types[]`; with more, every type is listed and filtered here.
const MAX_TYPES: usize = 20;

/// (whether it resumed a pass that died, its lower bound in Unix seconds)
pub(super) async fn pass(
    run: &mut Run<'_>,
    progress: &(dyn Fn(&Counts) + Send + Sync),
) -> Result<(bool, i64), RunError> {
    let db = run.r.db.clone();
    let provider = run.options.provider.clone();
    let s = run.settings().clone();
    let checkpoint = store::checkpoint(&db, &provider).await?;
    let window_start = run.now_s - s.window_days * 86_400;

    let resume = run.options.since.is_none() && checkpoint.pass_head_id.is_some();
    let (mut head, mut cursor, since) = if resume {
        (
            checkpoint
                .pass_head_id
                .clone()
                .zip(checkpoint.pass_head_created),
            checkpoint.pass_cursor.clone(),
            checkpoint.pass_since.unwrap_or(window_start),
        )
    } else {
        let since = match (run.options.since, checkpoint.created) {
            (Some(t), _) => t,
            (None, Some(c)) => c - s.overlap_secs,
            (None, None) => window_start,
        };
        if run.options.since.is_none() && since < window_start {
            let at = checkpoint.created.unwrap_or(since);
            run.found(NewDiff {
                provider: provider.clone(),
                kind: DiffKind::WindowExceeded.as_str().into(),
                subject: format!(
                    "checkpoint:{}",
                    checkpoint.event_id.as_deref().unwrap_or("-")
                ),
                order_id: None,
                provider_event_id: checkpoint.event_id.clone(),
                object_id: None,
                detail: format!(
                    "the last reconciled event is from {}, older than the {} days the provider keeps: \
                     events in between can no longer be listed; the objects pass still compares \
                     every order not in a final state",
                    time(at),
                    s.window_days
                ),
            })
            .await?;
        }
        (None, None, since.max(window_start))
    };

    let mapping = &run.provider.mapping;
    let mut types: Vec<String> = mapping.events.keys().cloned().collect();
    types.push(PAYMENT_CREATED.into());
    if types.len() > MAX_TYPES {
        types.clear();
    }
    loop {
        run.check()?;
        let query = EventQuery {
            created_gte: Some(since),
            types: types.clone(),
            limit: Some(s.page_size),
            starting_after: cursor.clone(),
            ..Default::default()
        };
        run.api.count();
        let page = run.api.client.events(&query).await?;
        if page.data.len() > s.page_size as usize {
            return Err(RunError::BadAnswer(format!(
                "a page of {} events where {} were asked for",
                page.data.len(),
                s.page_size
            )));
        }
        let Some(last) = page.data.last() else { break };
        cursor = Some(last.id.clone());
        if head.is_none() {
            head = page.data.first().map(|e| (e.id.clone(), e.created));
        }
        if run.api_version.is_none() {
            run.api_version = page.data.first().and_then(|e| e.api_version.clone());
        }
        compare_page(run, &page.data).await?;
        run.counts.events_compared += page.data.len() as i64;
        if !run.options.dry_run {
            if let Some((id, created)) = &head {
                store::save_pass(
                    &db,
                    &provider,
                    (id, *created),
                    cursor.as_deref(),
                    since,
                    now_ms(),
                )
                .await?;
            }
        }
        run.save_counts().await?;
        progress(&run.counts);
        if !page.has_more {
            break;
        }
    }
    if !run.options.dry_run {
        store::complete_pass(
            &db,
            &provider,
            head.as_ref().map(|(id, c)| (id.as_str(), *c)),
            now_ms(),
        )
        .await?;
    }
    Ok((resume, since))
}

fn time(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| secs.to_string())
}

/// The payment an event is about: the intent itself, or the one its object names.
fn payment_of(e: &Event) -> Option<&str> {
    let o = &e.data.object;
    if o["object"] == "payment_intent" {
        o["id"].as_str()
    } else {
        o["payment_intent"].as_str()
    }
    .filter(|id| id.starts_with("pi_"))
}

/// The event as JSON bytes, as the provider would post it.
fn body_of(e: &Event) -> Vec<u8> {
    e.to_json().to_string().into_bytes()
}

pub(super) async fn compare_page(run: &mut Run<'_>, events: &[Event]) -> Result<(), RunError> {
    let db = run.r.db.clone();
    let provider = run.options.provider.clone();
    let mapping = run.provider.mapping.clone();
    let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    let held = store::inbox_statuses(&db, &provider, &ids).await?;

    // Missing events of this page, fixed in one transaction: all or none.
    let mut ingest: Vec<(i64, Receipt)> = Vec::new();
    for e in events {
        if !mapping.events.contains_key(&e.event_type) {
            continue;
        }
        match held.get(&e.id) {
            None => {
                let body = body_of(e);
                let mapped = match mapping.map(&body) {
                    Ok(m) => Some(m),
                    Err(err) if err.is_ignorable() => None,
                    Err(err) => {
                        return Err(RunError::BadAnswer(format!(
                            "event {} ({}) lacks what its mapping needs: {err}",
                            e.id, e.event_type
                        )))
                    }
                };
                let found = run
                    .found(NewDiff {
                        provider: provider.clone(),
                        kind: DiffKind::MissingEvent.as_str().into(),
                        subject: e.id.clone(),
                        order_id: mapped.as_ref().and_then(|m| m.order_id.clone()),
                        provider_event_id: Some(e.id.clone()),
                        object_id: mapped.as_ref().map(|m| m.external_ref.clone()),
                        detail: format!(
                            "{} of {} is at the provider, not in our inbox",
                            e.event_type,
                            time(e.created)
                        ),
                    })
                    .await?;
                if let Some((diff_id, true)) = found {
                    if run.auto_fix() {
                        ingest.push((diff_id, receipt(run, e, &e.id, body)));
                    }
                }
            }
            Some((inbox_id, status)) if status == "dead" => {
                unprocessed(run, e, *inbox_id).await?;
            }
            Some(_) => {}
        }
    }
    if !ingest.is_empty() {
        let receipts: Vec<Receipt> = ingest.iter().map(|(_, r)| r.clone()).collect();
        store_receipts(&db, &receipts).await?;
        for (diff_id, r) in &ingest {
            run.fixed(
                *diff_id,
                "fetched from the provider's API and ingested as its webhook would have been",
                Some(&r.event_id),
            )
            .await?;
        }
    }

    // Payments we know no order for: the objects pass fetches them.
    if !run.options.dry_run {
        let pis: Vec<&str> = events.iter().filter_map(payment_of).collect();
        let known = store::known_refs(&db, &provider, &pis).await?;
        let unknown: Vec<&str> = pis.into_iter().filter(|p| !known.contains(*p)).collect();
        store::add_pending_objects(&db, run.id, &unknown).await?;
    }
    Ok(())
}

pub(super) fn receipt(run: &Run<'_>, e: &Event, event_id: &str, body: Vec<u8>) -> Receipt {
    Receipt {
        provider: run.options.provider.clone(),
        event_id: event_id.to_string(),
        event_type: Some(e.event_type.clone()),
        api_version: e.api_version.clone(),
        raw_body: body,
        correlation_id: run.correlation_id.clone(),
        received_at: now_ms(),
        fetched_body: None,
        derived: false,
    }
}

/// An event we hold but never applied (dead-lettered): redriven when that can work now;
/// when its stored copy can never apply (an API version too old) but the provider's copy
/// can, that copy is ingested under a derived id and the dead letter resolved. Otherwise
/// the diff stays open for a person.
async fn unprocessed(run: &mut Run<'_>, e: &Event, inbox_id: i64) -> Result<(), RunError> {
    let db = run.r.db.clone();
    let Some(dl_id) = store::open_dead_letter_of(&db, inbox_id).await? else {
        // A person resolved or discarded its dead letter: decided, not a diff.
        return Ok(());
    };
    let filter = DeadLetterFilter {
        ids: vec![dl_id],
        status: Some("open".into()),
        limit: 1,
        ..Default::default()
    };
    let Some(dl) = dead_letters::list(&db, &filter, now_ms())
        .await?
        .into_iter()
        .next()
    else {
        return Ok(());
    };
    let prediction = crate::pipeline::redrive::predict(&db, &run.r.providers, &dl).await?;
    let found = run
        .found(NewDiff {
            provider: run.options.provider.clone(),
            kind: DiffKind::Unprocessed.as_str().into(),
            subject: e.id.clone(),
            order_id: dl.order_id.clone(),
            provider_event_id: Some(e.id.clone()),
            object_id: None,
            detail: format!(
                "{} is in our inbox but dead-lettered ({}): a redrive would {prediction}",
                e.event_type, dl.last_error
            ),
        })
        .await?;
    let Some((diff_id, true)) = found else {
        return Ok(());
    };
    if !run.auto_fix() {
        return Ok(());
    }
    let reason = format!("reconciliation run {}", run.id);
    let actor = Actor {
        name: "reconciler",
        reason: Some(&reason),
        source: None,
    };
    if !prediction.starts_with("fail again") {
        let outcome = dead_letters::redrive_one(&db, dl_id, &actor, now_ms()).await?;
        run.fixed(
            diff_id,
            &format!("redriven (dead letter {dl_id}): {outcome}"),
            None,
        )
        .await?;
        return Ok(());
    }
    let body = body_of(e);
    if prediction.starts_with("fail again (permanent)") && run.provider.mapping.map(&body).is_ok() {
        let copy_id = format!("{}.reconciled", e.id);
        store_receipts(&db, &[receipt(run, e, &copy_id, body)]).await?;
        let why = format!(
            "the stored copy cannot apply; the provider's current copy was ingested as {copy_id} by reconciliation run {}",
            run.id
        );
        let closing = Actor {
            name: "reconciler",
            reason: Some(&why),
            source: None,
        };
        dead_letters::close(&db, dl_id, "resolved", &closing, now_ms()).await?;
        run.fixed(diff_id, &why, Some(&copy_id)).await?;
    }
    Ok(())
}
