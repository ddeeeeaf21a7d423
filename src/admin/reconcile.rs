//! The reconciliation reads behind the page and `/api/v1/reconciliation/*`.

use app::backend::{DiffPage, DiffQuery, DiffView, OpenKind, RunView, RunsPage};

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

fn diff_view(d: DiffRow) -> DiffView {
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
