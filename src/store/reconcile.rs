//! Reconciliation's tables (migration 0011): the lease that keeps one run per provider at a
//! time across instances, runs and their counters, the per-provider checkpoint of the events
//! pass, the diffs (unique per provider, kind and subject, so a second run adds nothing) and
//! the payments a run must still fetch.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::dead_letters::{audit, Actor};
use super::{bind_all, Db, Refused, SqlArg};

/// Takes the provider's lease when it is free or expired. True when this holder has it.
pub async fn acquire_lease(
    db: &Db,
    provider: &str,
    holder: &str,
    until: i64,
    now: i64,
) -> anyhow::Result<bool> {
    // One statement: of two instances racing, the database lets one win.
    let taken = sqlx::query(
        "INSERT INTO reconciliation_leases (provider, holder, expires_at) VALUES ($1, $2, $3) \
         ON CONFLICT (provider) DO UPDATE SET holder = excluded.holder, run_id = NULL, \
         expires_at = excluded.expires_at WHERE reconciliation_leases.expires_at < $4",
    )
    .bind(provider)
    .bind(holder)
    .bind(until)
    .bind(now)
    .execute(db.writer())
    .await?
    .rows_affected();
    Ok(taken == 1)
}

/// Extends the lease; false when another holder took it (this run must stop).
pub async fn renew_lease(
    db: &Db,
    provider: &str,
    holder: &str,
    run_id: Option<i64>,
    until: i64,
) -> anyhow::Result<bool> {
    let renewed = sqlx::query(
        "UPDATE reconciliation_leases SET expires_at = $3, run_id = COALESCE($4, run_id) \
         WHERE provider = $1 AND holder = $2",
    )
    .bind(provider)
    .bind(holder)
    .bind(until)
    .bind(run_id)
    .execute(db.writer())
    .await?
    .rows_affected();
    Ok(renewed == 1)
}

pub async fn release_lease(db: &Db, provider: &str, holder: &str) -> anyhow::Result<()> {
    sqlx::query(
        "UPDATE reconciliation_leases SET expires_at = 0 WHERE provider = $1 AND holder = $2",
    )
    .bind(provider)
    .bind(holder)
    .execute(db.writer())
    .await?;
    Ok(())
}

/// The run holding the provider's lease now, if any.
pub async fn lease_holder_run(db: &Db, provider: &str, now: i64) -> anyhow::Result<Option<i64>> {
    let row = sqlx::query(
        "SELECT run_id FROM reconciliation_leases WHERE provider = $1 AND expires_at >= $2",
    )
    .bind(provider)
    .bind(now)
    .fetch_optional(db.reader())
    .await?;
    Ok(row.and_then(|r| r.try_get::<Option<i64>, _>(0).ok().flatten()))
}

/// Starts a run. Runs of this provider still marked `running` died with their process (we
/// hold the lease now): they become `interrupted`.
pub async fn start_run(
    db: &Db,
    provider: &str,
    source: &str,
    dry_run: bool,
    since_s: i64,
    now: i64,
) -> anyhow::Result<i64> {
    let mut tx = db.writer().begin().await?;
    sqlx::query(
        "UPDATE reconciliation_runs SET status = 'interrupted', finished_at = updated_at, \
         error = COALESCE(error, 'its process stopped during the run; the next run resumed from the checkpoint') \
         WHERE provider = $1 AND status = 'running'",
    )
    .bind(provider)
    .execute(&mut *tx)
    .await?;
    let id: i64 = sqlx::query(
        "INSERT INTO reconciliation_runs (provider, source, status, dry_run, since_s, started_at, \
         updated_at) VALUES ($1, $2, 'running', $3, $4, $5, $5) RETURNING id",
    )
    .bind(provider)
    .bind(source)
    .bind(i64::from(dry_run))
    .bind(since_s)
    .bind(now)
    .fetch_one(&mut *tx)
    .await?
    .try_get(0)?;
    tx.commit().await?;
    Ok(id)
}

/// What a run has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub events_compared: i64,
    pub objects_compared: i64,
    pub api_calls: i64,
    pub diffs_found: i64,
    pub fixed: i64,
}

pub async fn update_run(
    db: &Db,
    id: i64,
    c: &Counts,
    since_s: Option<i64>,
    now: i64,
) -> anyhow::Result<()> {
    sqlx::query(
        "UPDATE reconciliation_runs SET events_compared = $2, objects_compared = $3, \
         api_calls = $4, diffs_found = $5, fixed = $6, updated_at = $7, \
         since_s = COALESCE($8, since_s) WHERE id = $1",
    )
    .bind(id)
    .bind(c.events_compared)
    .bind(c.objects_compared)
    .bind(c.api_calls)
    .bind(c.diffs_found)
    .bind(c.fixed)
    .bind(now)
    .bind(since_s)
    .execute(db.writer())
    .await?;
    Ok(())
}

pub async fn finish_run(
    db: &Db,
    id: i64,
    status: &str,
    c: &Counts,
    error: Option<&str>,
    now: i64,
) -> anyhow::Result<()> {
    update_run(db, id, c, None, now).await?;
    sqlx::query(
        "UPDATE reconciliation_runs SET status = $2, error = $3, finished_at = $4 WHERE id = $1",
    )
    .bind(id)
    .bind(status)
    .bind(error)
    .bind(now)
    .execute(db.writer())
    .await?;
    Ok(())
}

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Checkpoint {
    /// The newest event a finished pass compared.
    pub event_id: Option<String>,
    pub created: Option<i64>,
    /// A pass under way: its newest event, its cursor and its lower bound.
    pub pass_head_id: Option<String>,
    pub pass_head_created: Option<i64>,
    pub pass_cursor: Option<String>,
    pub pass_since: Option<i64>,
}

pub async fn checkpoint(db: &Db, provider: &str) -> anyhow::Result<Checkpoint> {
    let row = sqlx::query(
        "SELECT event_id, created, pass_head_id, pass_head_created, pass_cursor, pass_since \
         FROM reconciliation_checkpoints WHERE provider = $1",
    )
    .bind(provider)
    .fetch_optional(db.writer())
    .await?;
    let Some(r) = row else {
        return Ok(Checkpoint::default());
    };
    Ok(Checkpoint {
        event_id: r.try_get(0)?,
        created: r.try_get(1)?,
        pass_head_id: r.try_get(2)?,
        pass_head_created: r.try_get(3)?,
        pass_cursor: r.try_get(4)?,
        pass_since: r.try_get(5)?,
    })
}

/// Saves where the pass under way stands (after each page).
pub async fn save_pass(
    db: &Db,
    provider: &str,
    head: (&str, i64),
    cursor: Option<&str>,
    since: i64,
    now: i64,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO reconciliation_checkpoints (provider, pass_head_id, pass_head_created, \
         pass_cursor, pass_since, updated_at) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (provider) DO UPDATE SET pass_head_id = excluded.pass_head_id, \
         pass_head_created = excluded.pass_head_created, pass_cursor = excluded.pass_cursor, \
         pass_since = excluded.pass_since, updated_at = excluded.updated_at",
    )
    .bind(provider)
    .bind(head.0)
    .bind(head.1)
    .bind(cursor)
    .bind(since)
    .bind(now)
    .execute(db.writer())
    .await?;
    Ok(())
}

/// The pass reached its lower bound: its head becomes the checkpoint.
pub async fn complete_pass(
    db: &Db,
    provider: &str,
    head: Option<(&str, i64)>,
    now: i64,
) -> anyhow::Result<()> {
    let (id, created) = head.unzip();
    sqlx::query(
        "INSERT INTO reconciliation_checkpoints (provider, event_id, created, updated_at) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (provider) DO UPDATE SET \
         event_id = COALESCE(excluded.event_id, reconciliation_checkpoints.event_id), \
         created = COALESCE(excluded.created, reconciliation_checkpoints.created), \
         pass_head_id = NULL, pass_head_created = NULL, pass_cursor = NULL, pass_since = NULL, \
         updated_at = excluded.updated_at",
    )
    .bind(provider)
    .bind(id)
    .bind(created)
    .bind(now)
    .execute(db.writer())
    .await?;
    Ok(())
}

/// A mismatch as a run found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewDiff {
    pub provider: String,
    pub kind: String,
    pub subject: String,
    pub order_id: Option<String>,
    pub provider_event_id: Option<String>,
    pub object_id: Option<String>,
    pub detail: String,
}

/// Records a diff once; an existing one (any state) is kept as it is, only its last run
/// noted. Returns its id, its state, and whether this call created it.
pub async fn upsert_diff(
    db: &Db,
    d: &NewDiff,
    run_id: i64,
    now: i64,
) -> anyhow::Result<(i64, String, bool)> {
    let created = sqlx::query(
        "INSERT INTO reconciliation_diffs (provider, kind, subject, order_id, provider_event_id, \
         object_id, state, detail, first_run_id, last_run_id, found_at) \
         VALUES ($1, $2, $3, $4, $5, $6, 'open', $7, $8, $8, $9) \
         ON CONFLICT (provider, kind, subject) DO NOTHING RETURNING id",
    )
    .bind(&d.provider)
    .bind(&d.kind)
    .bind(&d.subject)
    .bind(&d.order_id)
    .bind(&d.provider_event_id)
    .bind(&d.object_id)
    .bind(&d.detail)
    .bind(run_id)
    .bind(now)
    .fetch_optional(db.writer())
    .await?;
    if let Some(r) = created {
        return Ok((r.try_get(0)?, "open".into(), true));
    }
    let r = sqlx::query(
        "SELECT id, state FROM reconciliation_diffs WHERE provider = $1 AND kind = $2 AND subject = $3",
    )
    .bind(&d.provider)
    .bind(&d.kind)
    .bind(&d.subject)
    .fetch_one(db.writer())
    .await?;
    Ok((r.try_get(0)?, r.try_get(1)?, false))
}

/// Marks an open diff fixed with what was done; false when it was no longer open.
pub async fn mark_fixed(
    db: &Db,
    id: i64,
    resolution: &str,
    fix_event_id: Option<&str>,
    by: &str,
    now: i64,
) -> anyhow::Result<bool> {
    let done = sqlx::query(
        "UPDATE reconciliation_diffs SET state = 'fixed', resolution = $2, fix_event_id = $3, \
         closed_by = $4, closed_at = $5 WHERE id = $1 AND state = 'open'",
    )
    .bind(id)
    .bind(resolution)
    .bind(fix_event_id)
    .bind(by)
    .bind(now)
    .execute(db.writer())
    .await?
    .rows_affected();
    Ok(done == 1)
}

/// A person accepts an open diff with a reason (operator role; audited).
pub async fn resolve(db: &Db, id: i64, actor: &Actor<'_>, now: i64) -> anyhow::Result<()> {
    let reason = actor
        .reason
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .ok_or_else(|| Refused("a reason is required to resolve a diff".into()))?;
    let mut tx = db.writer().begin().await?;
    let done = sqlx::query(
        "UPDATE reconciliation_diffs SET state = 'resolved', resolution = $2, closed_by = $3, \
         closed_at = $4 WHERE id = $1 AND state = 'open'",
    )
    .bind(id)
    .bind(reason)
    .bind(actor.name)
    .bind(now)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if done != 1 {
        return Err(Refused(format!("diff {id} does not exist or is not open")).into());
    }
    audit(
        &mut *tx,
        actor,
        "reconciliation.resolve",
        &format!("reconciliation_diff:{id}"),
        None,
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct DiffRow {
    pub id: i64,
    pub provider: String,
    /// missing_event | unprocessed | missing_fact | status_mismatch | amount_mismatch |
    /// unknown_order | window_exceeded
    pub kind: String,
    pub order_id: Option<String>,
    pub provider_event_id: Option<String>,
    pub object_id: Option<String>,
    /// open | fixed | resolved
    pub state: String,
    pub detail: String,
    /// What a fix did, or why a person resolved it.
    pub resolution: Option<String>,
    pub closed_by: Option<String>,
    /// The event a fix ingested (fetched from the API or built from its objects).
    pub fix_event_id: Option<String>,
    pub first_run_id: i64,
    pub found_at: i64,
    pub closed_at: Option<i64>,
}

const DIFF_COLUMNS: &str = "id, provider, kind, order_id, provider_event_id, object_id, state, \
     detail, resolution, closed_by, fix_event_id, first_run_id, found_at, closed_at";

fn diff_row(r: AnyRow) -> anyhow::Result<DiffRow> {
    Ok(DiffRow {
        id: r.try_get(0)?,
        provider: r.try_get(1)?,
        kind: r.try_get(2)?,
        order_id: r.try_get(3)?,
        provider_event_id: r.try_get(4)?,
        object_id: r.try_get(5)?,
        state: r.try_get(6)?,
        detail: r.try_get(7)?,
        resolution: r.try_get(8)?,
        closed_by: r.try_get(9)?,
        fix_event_id: r.try_get(10)?,
        first_run_id: r.try_get(11)?,
        found_at: r.try_get(12)?,
        closed_at: r.try_get(13)?,
    })
}

/// Filters of the diffs list (the page's URL and the API's query).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiffFilter {
    pub state: Option<String>,
    pub kind: Option<String>,
    pub provider: Option<String>,
    pub order_id: Option<String>,
    pub run_id: Option<i64>,
    /// Keyset: diffs with a smaller id (newest first).
    pub before: Option<i64>,
    pub limit: i64,
}

pub async fn list_diffs(db: &Db, f: &DiffFilter) -> anyhow::Result<Vec<DiffRow>> {
    let mut clauses = Vec::new();
    let mut args = Vec::new();
    let mut arg = |clause: &str, a: SqlArg, args: &mut Vec<SqlArg>| {
        args.push(a);
        clauses.push(clause.replace('?', &format!("${}", args.len())));
    };
    if let Some(s) = &f.state {
        arg("state = ?", SqlArg::Text(s.clone()), &mut args);
    }
    if let Some(k) = &f.kind {
        arg("kind = ?", SqlArg::Text(k.clone()), &mut args);
    }
    if let Some(p) = &f.provider {
        arg("provider = ?", SqlArg::Text(p.clone()), &mut args);
    }
    if let Some(o) = &f.order_id {
        arg("order_id = ?", SqlArg::Text(o.clone()), &mut args);
    }
    if let Some(r) = f.run_id {
        arg("first_run_id = ?", SqlArg::Int(r), &mut args);
    }
    if let Some(b) = f.before {
        arg("id < ?", SqlArg::Int(b), &mut args);
    }
    let filter = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    let sql = format!(
        "SELECT {DIFF_COLUMNS} FROM reconciliation_diffs {filter} ORDER BY id DESC LIMIT {}",
        f.limit.clamp(1, 1_000)
    );
    let rows = bind_all(sqlx::query(&sql), args)
        .fetch_all(db.reader())
        .await?;
    rows.into_iter().map(diff_row).collect()
}

pub async fn diff(db: &Db, id: i64) -> anyhow::Result<Option<DiffRow>> {
    let row = sqlx::query(&format!(
        "SELECT {DIFF_COLUMNS} FROM reconciliation_diffs WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(db.reader())
    .await?;
    row.map(diff_row).transpose()
}

/// Open diffs by kind: (kind, count, oldest found_at).
pub async fn open_by_kind(db: &Db) -> anyhow::Result<Vec<(String, i64, i64)>> {
    let rows = sqlx::query(
        "SELECT kind, COUNT(*), MIN(found_at) FROM reconciliation_diffs WHERE state = 'open' \
         GROUP BY kind ORDER BY kind",
    )
    .fetch_all(db.reader())
    .await?;
    rows.into_iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .collect()
}

/// Diffs ever found by kind (open, fixed or resolved): the counters of `/metrics`.
pub async fn found_by_kind(db: &Db) -> anyhow::Result<Vec<(String, String, i64)>> {
    let rows = sqlx::query(
        "SELECT kind, state, COUNT(*) FROM reconciliation_diffs GROUP BY kind, state ORDER BY kind, state",
    )
    .fetch_all(db.reader())
    .await?;
    rows.into_iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .collect()
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct RunRow {
    pub id: i64,
    pub provider: String,
    pub source: String,
    /// running | succeeded | failed | interrupted
    pub status: String,
    pub dry_run: bool,
    pub since_s: i64,
    pub events_compared: i64,
    pub objects_compared: i64,
    pub api_calls: i64,
    pub diffs_found: i64,
    pub fixed: i64,
    pub error: Option<String>,
    pub started_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
}

const RUN_COLUMNS: &str = "id, provider, source, status, dry_run, since_s, events_compared, \
     objects_compared, api_calls, diffs_found, fixed, error, started_at, updated_at, finished_at";

fn run_row(r: AnyRow) -> anyhow::Result<RunRow> {
    Ok(RunRow {
        id: r.try_get(0)?,
        provider: r.try_get(1)?,
        source: r.try_get(2)?,
        status: r.try_get(3)?,
        dry_run: r.try_get::<i64, _>(4)? != 0,
        since_s: r.try_get(5)?,
        events_compared: r.try_get(6)?,
        objects_compared: r.try_get(7)?,
        api_calls: r.try_get(8)?,
        diffs_found: r.try_get(9)?,
        fixed: r.try_get(10)?,
        error: r.try_get(11)?,
        started_at: r.try_get(12)?,
        updated_at: r.try_get(13)?,
        finished_at: r.try_get(14)?,
    })
}

/// Runs newest first, keyset on id.
pub async fn list_runs(
    db: &Db,
    provider: Option<&str>,
    before: Option<i64>,
    limit: i64,
) -> anyhow::Result<Vec<RunRow>> {
    let rows = sqlx::query(&format!(
        "SELECT {RUN_COLUMNS} FROM reconciliation_runs WHERE ($1 IS NULL OR provider = $1) \
         AND ($2 IS NULL OR id < $2) ORDER BY id DESC LIMIT $3"
    ))
    .bind(provider)
    .bind(before)
    .bind(limit.clamp(1, 500))
    .fetch_all(db.reader())
    .await?;
    rows.into_iter().map(run_row).collect()
}

pub async fn run(db: &Db, id: i64) -> anyhow::Result<Option<RunRow>> {
    let row = sqlx::query(&format!(
        "SELECT {RUN_COLUMNS} FROM reconciliation_runs WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(db.reader())
    .await?;
    row.map(run_row).transpose()
}

/// The newest full runs (not one-click fixes') of a provider, newest first, whatever their
/// status.
pub async fn newest_full_runs(db: &Db, provider: &str, limit: i64) -> anyhow::Result<Vec<RunRow>> {
    sqlx::query(&format!(
        "SELECT {RUN_COLUMNS} FROM reconciliation_runs WHERE provider = $1 AND source <> 'fix' \
         ORDER BY id DESC LIMIT $2"
    ))
    .bind(provider)
    .bind(limit)
    .fetch_all(db.reader())
    .await?
    .into_iter()
    .map(run_row)
    .collect()
}

/// The newest full run that succeeded (any provider, or one); a one-click fix's run
/// compares one diff, so it does not count.
pub async fn last_succeeded(db: &Db, provider: Option<&str>) -> anyhow::Result<Option<RunRow>> {
    let row = sqlx::query(&format!(
        "SELECT {RUN_COLUMNS} FROM reconciliation_runs WHERE status = 'succeeded' AND dry_run = 0 \
         AND source <> 'fix' AND ($1 IS NULL OR provider = $1) ORDER BY finished_at DESC, id DESC LIMIT 1"
    ))
    .bind(provider)
    .fetch_optional(db.reader())
    .await?;
    row.map(run_row).transpose()
}

/// The inbox status and id of each of these events that we hold.
pub async fn inbox_statuses(
    db: &Db,
    provider: &str,
    event_ids: &[&str],
) -> anyhow::Result<std::collections::HashMap<String, (i64, String)>> {
    if event_ids.is_empty() {
        return Ok(Default::default());
    }
    let marks: Vec<String> = (0..event_ids.len())
        .map(|i| format!("${}", i + 2))
        .collect();
    let sql = format!(
        "SELECT event_id, id, status FROM inbox_events WHERE provider = $1 AND event_id IN ({})",
        marks.join(", ")
    );
    let mut q = sqlx::query(&sql).bind(provider);
    for id in event_ids {
        q = q.bind(*id);
    }
    q.fetch_all(db.writer())
        .await?
        .into_iter()
        .map(|r| Ok((r.try_get(0)?, (r.try_get(1)?, r.try_get(2)?))))
        .collect()
}

/// Which of these payment references we already know an order for.
pub async fn known_refs(
    db: &Db,
    provider: &str,
    refs: &[&str],
) -> anyhow::Result<std::collections::HashSet<String>> {
    if refs.is_empty() {
        return Ok(Default::default());
    }
    let marks: Vec<String> = (0..refs.len()).map(|i| format!("${}", i + 2)).collect();
    let sql = format!(
        "SELECT reference FROM payment_refs WHERE provider = $1 AND reference IN ({})",
        marks.join(", ")
    );
    let mut q = sqlx::query(&sql).bind(provider);
    for r in refs {
        q = q.bind(*r);
    }
    q.fetch_all(db.writer())
        .await?
        .into_iter()
        .map(|r| Ok(r.try_get(0)?))
        .collect()
}

pub async fn add_pending_objects(db: &Db, run_id: i64, ids: &[&str]) -> anyhow::Result<()> {
    for id in ids {
        sqlx::query(
            "INSERT INTO reconciliation_pending_objects (run_id, object_id) VALUES ($1, $2) \
             ON CONFLICT (run_id, object_id) DO NOTHING",
        )
        .bind(run_id)
        .bind(*id)
        .execute(db.writer())
        .await?;
    }
    Ok(())
}

/// A page of the run's pending objects after `after`, in id order.
pub async fn pending_objects(
    db: &Db,
    run_id: i64,
    after: &str,
    limit: i64,
) -> anyhow::Result<Vec<String>> {
    sqlx::query(
        "SELECT object_id FROM reconciliation_pending_objects WHERE run_id = $1 AND object_id > $2 \
         ORDER BY object_id LIMIT $3",
    )
    .bind(run_id)
    .bind(after)
    .bind(limit)
    .fetch_all(db.writer())
    .await?
    .into_iter()
    .map(|r| Ok(r.try_get(0)?))
    .collect()
}

pub async fn drop_pending_objects(db: &Db, run_id: i64) -> anyhow::Result<()> {
    sqlx::query("DELETE FROM reconciliation_pending_objects WHERE run_id = $1")
        .bind(run_id)
        .execute(db.writer())
        .await?;
    Ok(())
}

/// Orders of this provider changed since `since_ms` or not in a final state, after `after`
/// in order-id order: the objects pass's work, a page at a time.
pub async fn orders_to_compare(
    db: &Db,
    provider: &str,
    since_ms: i64,
    after: &str,
    limit: i64,
) -> anyhow::Result<Vec<String>> {
    sqlx::query(
        "SELECT o.order_id FROM orders o WHERE o.order_id > $1 \
         AND (o.updated_at >= $2 OR o.status NOT IN ('refunded', 'canceled', 'failed')) \
         AND EXISTS (SELECT 1 FROM order_facts f WHERE f.order_id = o.order_id AND f.provider = $3) \
         ORDER BY o.order_id LIMIT $4",
    )
    .bind(after)
    .bind(since_ms)
    .bind(provider)
    .bind(limit)
    .fetch_all(db.reader())
    .await?
    .into_iter()
    .map(|r| Ok(r.try_get(0)?))
    .collect()
}

/// Events a run ingested that the processor has not finished yet.
pub async fn ingested_in_flight(db: &Db, correlation_id: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query(
        "SELECT COUNT(*) FROM inbox_events WHERE correlation_id = $1 \
         AND status IN ('pending', 'processing')",
    )
    .bind(correlation_id)
    .fetch_one(db.writer())
    .await?
    .try_get(0)?)
}

/// The open dead letter of an inbox row, if any.
pub async fn open_dead_letter_of(db: &Db, inbox_id: i64) -> anyhow::Result<Option<i64>> {
    Ok(sqlx::query(
        "SELECT id FROM dead_letters WHERE stage = 'processor' AND source_id = $1 AND status = 'open'",
    )
    .bind(inbox_id)
    .fetch_optional(db.writer())
    .await?
    .map(|r| r.try_get(0))
    .transpose()?)
}

/// Open dead letters of events a run ingested (`correlation_id`), after inbox id `after`:
/// (inbox id, dead letter id). A refund fetched before its payment (the events pass reads
/// newest first) can run out of retries while its order is still unknown.
pub async fn own_dead_letters(
    db: &Db,
    correlation_id: &str,
    after: i64,
    limit: i64,
) -> anyhow::Result<Vec<(i64, i64)>> {
    sqlx::query(
        "SELECT i.id, d.id FROM inbox_events i JOIN dead_letters d \
         ON d.stage = 'processor' AND d.source_id = i.id AND d.status = 'open' \
         WHERE i.correlation_id = $1 AND i.status = 'dead' AND i.id > $2 ORDER BY i.id LIMIT $3",
    )
    .bind(correlation_id)
    .bind(after)
    .bind(limit)
    .fetch_all(db.writer())
    .await?
    .into_iter()
    .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
    .collect()
}
