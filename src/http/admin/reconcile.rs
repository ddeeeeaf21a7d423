//! The reconciliation reads behind the page and `/api/v1/reconciliation/*`.

use app::backend::{
    DiffGroup, DiffPage, DiffQuery, DiffView, OpenKind, RunView, RunsPage, GROUP_ROWS,
};

use crate::store::reconcile::{self as store, DiffFilter, DiffRow, RunRow};
use crate::store::Db;

const DEFAULT_LIMIT: u32 = 50;
const MAX_LIMIT: u32 = 500;

fn run_view(r: RunRow) -> RunView {
    RunView {
        id: r.id,
        provider: r.provider,
        source: r.source,
        status: r.status,
        events_compared: r.events_compared,
        objects_compared: r.objects_compared,
        api_calls: r.api_calls,
        diffs_found: r.diffs_found,
        fixed: r.fixed,
        error: r.error,
        started_at: r.started_at,
        finished_at: r.finished_at,
    }
}

pub fn diff_view(d: DiffRow) -> DiffView {
    DiffView {
        id: d.id,
        provider: d.provider,
        kind: d.kind,
        order_id: d.order_id,
        provider_event_id: d.provider_event_id,
        object_id: d.object_id,
        state: d.state,
        detail: d.detail,
        resolution: d.resolution,
        closed_by: d.closed_by,
        fix_event_id: d.fix_event_id,
        first_run_id: d.first_run_id,
        found_at: d.found_at,
        closed_at: d.closed_at,
    }
}

pub async fn runs(db: &Db, before: Option<i64>, limit: u32) -> anyhow::Result<RunsPage> {
    let limit = limit.clamp(1, MAX_LIMIT);
    let runs = store::list_runs(db, None, before, i64::from(limit)).await?;
    let next_before = (runs.len() == limit as usize)
        .then(|| runs.last().map(|r| r.id))
        .flatten();
    let open = store::open_by_kind(db)
        .await?
        .into_iter()
        .map(|(kind, count, oldest_found_at)| OpenKind {
            kind,
            count,
            oldest_found_at,
        })
        .collect();
    let last_success_at = store::last_succeeded(db, None)
        .await?
        .map(|r| r.finished_at.unwrap_or(r.updated_at));
    Ok(RunsPage {
        runs: runs.into_iter().map(run_view).collect(),
        open,
        last_success_at,
        next_before,
    })
}

/// Empty strings from a form mean "any".
fn any(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

pub async fn diffs(db: &Db, q: DiffQuery) -> anyhow::Result<DiffPage> {
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let diffs = store::list_diffs(
        db,
        &DiffFilter {
            state: any(q.state),
            kind: any(q.kind),
            provider: any(q.provider),
            order_id: any(q.order_id),
            run_id: q.run_id,
            before: q.before,
            limit: i64::from(limit),
        },
    )
    .await?;
    let next_before = (diffs.len() == limit as usize)
        .then(|| diffs.last().map(|d| d.id))
        .flatten();
    Ok(DiffPage {
        diffs: diffs.into_iter().map(diff_view).collect(),
        next_before,
    })
}

/// Runs the page shows at a time.
const PAGE_RUNS: u32 = 10;

pub async fn page(
    db: &Db,
    query: DiffQuery,
    runs_before: Option<i64>,
) -> anyhow::Result<(RunsPage, Vec<DiffGroup>, Option<DiffPage>)> {
    let runs = runs(db, runs_before, PAGE_RUNS).await?;
    if !query.grouped() {
        return Ok((runs, Vec::new(), Some(diffs(db, query).await?)));
    }
    let mut groups = Vec::new();
    for kind in &runs.open {
        // One indexed read per kind (state, kind, id): fast whatever the number of diffs.
        let newest = store::list_diffs(
            db,
            &DiffFilter {
                state: Some("open".into()),
                kind: Some(kind.kind.clone()),
                provider: any(query.provider.clone()),
                limit: GROUP_ROWS as i64,
                ..Default::default()
            },
        )
        .await?;
        groups.push(DiffGroup {
            kind: kind.kind.clone(),
            count: kind.count,
            oldest_found_at: kind.oldest_found_at,
            diffs: newest.into_iter().map(diff_view).collect(),
        });
    }
    Ok((runs, groups, None))
}

/// An order's diffs (any state), oldest first, for its story.
pub async fn of_order(db: &Db, order_id: &str) -> anyhow::Result<Vec<DiffView>> {
    let mut diffs = store::list_diffs(
        db,
        &DiffFilter {
            order_id: Some(order_id.to_string()),
            limit: 200,
            ..Default::default()
        },
    )
    .await?;
    diffs.reverse();
    Ok(diffs.into_iter().map(diff_view).collect())
}

/// "reconciled" entries in an order's story: what the provider showed when a run found the
/// diff, and what was fixed or why it was accepted, when that happened.
pub fn add_to_story(detail: &mut app::backend::OrderDetail, diffs: &[DiffView]) {
    use crate::store::read::rfc3339;
    for d in diffs {
        let href = Some(format!(
            "/reconciliation?order_id={}&state={}",
            app::backend::percent_encode(d.order_id.as_deref().unwrap_or_default()),
            d.state
        ));
        detail.timeline.push(app::backend::TimelineEntry {
            at: rfc3339(d.found_at),
            kind: "reconciled".into(),
            title: format!(
                "reconciliation run {} found {}: {}",
                d.first_run_id,
                d.kind.replace('_', " "),
                d.detail
            ),
            detail: Some(format!(
                "Diff #{} ({}){}.",
                d.id,
                app::backend::kind_meaning(&d.kind),
                d.object_id
                    .as_deref()
                    .or(d.provider_event_id.as_deref())
                    .map(|o| format!(", compared on {o}"))
                    .unwrap_or_default()
            )),
            href: href.clone(),
            status: Some(d.state.clone()),
        });
        if let Some(at) = d.closed_at {
            detail.timeline.push(app::backend::TimelineEntry {
                at: rfc3339(at),
                kind: "reconciled".into(),
                title: format!(
                    "diff #{} {} by {}",
                    d.id,
                    d.state,
                    d.closed_by.as_deref().unwrap_or("?")
                ),
                detail: Some(format!(
                    "{}{}",
                    d.resolution.as_deref().unwrap_or_default(),
                    d.fix_event_id
                        .as_deref()
                        .map(|e| format!(" (event {e})"))
                        .unwrap_or_default()
                )),
                href,
                status: Some(d.state.clone()),
            });
        }
    }
    detail.timeline.sort_by(|a, b| a.at.cmp(&b.at));
}
