//! Redrive: one dead letter, a selection, or everything matching a filter, optionally as a
//! dry run that says what each item would do now without changing anything. The library
//! API behind `oncehook dlq redrive` (and later the dashboard).

use serde::Serialize;
use sqlx::Row;

use crate::domain::{project, Facts, OrderStatus, Update};
use crate::provider::settings::Providers;
use crate::store::dead_letters::{self, Actor, DeadLetterFilter, STAGE_OUTBOX, STAGE_PROCESSOR};
use crate::store::effects::{change_of, effect_key, load_facts, resolve_order};
use crate::store::{now_ms, Db};

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RedriveResult {
    pub dead_letter_id: i64,
    pub stage: String,
    pub event_id: Option<String>,
    /// The outcome (`requeued`, `skipped: …`), or for a dry run the prediction
    /// (`apply …`, `duplicate …`, `stale …`, `fail again …`, `wait …`, `resend …`).
    pub outcome: String,
}

/// Selects the dead letters, newest first, page by page (keyset), up to `max`.
pub async fn select(
    db: &Db,
    filter: &DeadLetterFilter,
    max: usize,
) -> anyhow::Result<Vec<dead_letters::DeadLetter>> {
    let mut filter = filter.clone();
    if filter.ids.is_empty() && filter.status.is_none() {
        filter.status = Some("open".into());
    }
    if max == 0 {
        return Ok(vec![]);
    }
    // Pages no larger than what is asked for: a caller wanting 200 reads 200 rows.
    let page_size = max.clamp(1, 500);
    let mut out = Vec::new();
    loop {
        filter.limit = page_size.min(max - out.len()) as i64;
        let page = dead_letters::list(db, &filter, now_ms()).await?;
        let Some(last) = page.last() else { break };
        filter.before = Some(last.id);
        let done = (page.len() as i64) < filter.limit;
        out.extend(page);
        if done || out.len() >= max {
            break;
        }
    }
    out.truncate(max);
    Ok(out)
}

/// What a dry run shows: how many dead letters match, and the prediction for the newest
/// `show` of them. Reads a count and `show` rows, however many match.
pub async fn preview(
    db: &Db,
    providers: &Providers,
    filter: &DeadLetterFilter,
    show: usize,
) -> anyhow::Result<(usize, Vec<RedriveResult>)> {
    let mut filter = filter.clone();
    if filter.ids.is_empty() && filter.status.is_none() {
        filter.status = Some("open".into());
    }
    let matching = dead_letters::count(db, &filter).await?;
    let mut results = Vec::with_capacity(show);
    for dl in select(db, &filter, show).await? {
        let outcome = predict(db, providers, &dl).await?;
        results.push(RedriveResult {
            dead_letter_id: dl.id,
            stage: dl.stage,
            event_id: dl.event_id,
            outcome,
        });
    }
    Ok((usize::try_from(matching).unwrap_or(0), results))
}

/// Redrives (or predicts) every selected dead letter; `progress(done, total)` after each.
pub async fn redrive(
    db: &Db,
    providers: &Providers,
    filter: &DeadLetterFilter,
    dry_run: bool,
    actor: &Actor<'_>,
    mut progress: impl FnMut(usize, usize),
) -> anyhow::Result<Vec<RedriveResult>> {
    let selected = select(db, filter, usize::MAX).await?;
    let total = selected.len();
    // The total is known before the first item: a progress display starts at "0 of N".
    progress(0, total);
    let mut results = Vec::with_capacity(total);
    for (n, dl) in selected.into_iter().enumerate() {
        let outcome = if dry_run {
            predict(db, providers, &dl).await?
        } else {
            dead_letters::redrive_one(db, dl.id, actor, now_ms()).await?
        };
        results.push(RedriveResult {
            dead_letter_id: dl.id,
            stage: dl.stage,
            event_id: dl.event_id,
            outcome,
        });
        progress(n + 1, total);
    }
    Ok(results)
}

/// What redriving this dead letter would do now. Reads only.
pub async fn predict(
    db: &Db,
    providers: &Providers,
    dl: &dead_letters::DeadLetter,
) -> anyhow::Result<String> {
    if dl.status != "open" {
        return Ok(format!("skip: status is {}", dl.status));
    }
    match dl.stage.as_str() {
        STAGE_OUTBOX => {
            let key: Option<String> =
                sqlx::query("SELECT idempotency_key FROM outbox WHERE id = $1")
                    .bind(dl.source_id)
                    .fetch_optional(db.reader())
                    .await?
                    .map(|r| r.try_get(0))
                    .transpose()?;
            Ok(match key {
                Some(key) => format!(
                    "resend through {} with the same idempotency key {key}",
                    dl.sink.as_deref().unwrap_or("?")
                ),
                None => "skip: the outbox row was pruned".into(),
            })
        }
        STAGE_PROCESSOR => predict_event(db, providers, dl.source_id).await,
        other => Ok(format!("skip: unknown stage {other}")),
    }
}

async fn predict_event(db: &Db, providers: &Providers, inbox_id: i64) -> anyhow::Result<String> {
    let Some(row) = sqlx::query("SELECT provider, raw_body FROM inbox_events WHERE id = $1")
        .bind(inbox_id)
        .fetch_optional(db.reader())
        .await?
    else {
        return Ok("skip: the inbox row was pruned".into());
    };
    let provider_name: String = row.try_get(0)?;
    let body: Vec<u8> = row.try_get(1)?;
    let Some(provider) = providers.get(&provider_name) else {
        return Ok(format!(
            "fail again (permanent): provider {provider_name} is not configured"
        ));
    };
    let event = match provider.mapping.map(&body) {
        Ok(e) => e,
        Err(e) if e.is_ignorable() => return Ok(format!("ignore: {e}")),
        Err(e) => return Ok(format!("fail again (permanent): {e}")),
    };
    let mut conn = db.reader().acquire().await?;
    let order_id = match &event.order_id {
        Some(o) => o.clone(),
        None => match resolve_order(&mut conn, &provider_name, &event.lookup_refs).await? {
            Some(o) => o,
            None => {
                return Ok(format!(
                    "wait: order not known yet for {}",
                    event.lookup_refs.join(", ")
                ))
            }
        },
    };
    let key = effect_key(&event, &order_id);
    let winner: Option<String> =
        sqlx::query("SELECT event_id FROM processed_effects WHERE effect_key = $1")
            .bind(key.as_str())
            .fetch_optional(&mut *conn)
            .await?
            .map(|r| r.try_get(0))
            .transpose()?;
    if let Some(winner) = winner {
        return Ok(format!(
            "duplicate: effect already recorded by event {winner}"
        ));
    }
    let order: Option<(Option<String>, String)> =
        sqlx::query("SELECT currency, status FROM orders WHERE order_id = $1")
            .bind(&order_id)
            .fetch_optional(&mut *conn)
            .await?
            .map(|r| Ok::<_, sqlx::Error>((r.try_get(0)?, r.try_get(1)?)))
            .transpose()?;
    if let (Some((Some(theirs), _)), Some(ours)) = (&order, &event.currency) {
        if theirs != ours {
            return Ok(format!(
                "fail again (business): currency mismatch: order {order_id} is in {theirs}, the event in {ours}"
            ));
        }
    }
    // The same rules the processing transaction applies, on the stored facts, in memory.
    let mut facts = Facts {
        facts: load_facts(&mut conn, &order_id).await?,
    };
    let before = project(&facts.facts);
    let update = facts.apply(&change_of(&event));
    let after = project(&facts.facts);
    let status_before = order
        .as_ref()
        .and_then(|(_, s)| OrderStatus::parse(s))
        .unwrap_or(before.status);
    let money = |p: &crate::domain::Projection| {
        format!(
            "paid {} refunded {} disputed {}",
            p.totals.paid, p.totals.refunded, p.totals.disputed
        )
    };
    Ok(match update {
        Update::Applied => format!(
            "apply: {} of {} on order {order_id} ({} → {}; {} → {})",
            event.transition.as_str(),
            event.external_ref,
            status_before.as_str(),
            after.status.as_str(),
            money(&before),
            money(&after)
        ),
        Update::Stale(reason) if before.totals != after.totals => {
            format!(
                "stale, money counted: {reason} ({} → {})",
                money(&before),
                money(&after)
            )
        }
        Update::Stale(reason) => format!("stale: {reason}"),
        Update::Refused(reason) => format!("record as refused: {reason}"),
    })
}
