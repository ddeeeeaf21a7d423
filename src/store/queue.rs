//! The claim shared by every queue table (inbox, outbox): due rows, oldest first, leased
//! until a deadline, the attempt counter bumped as the fence of this claim. PostgreSQL
//! skips rows another worker holds; SQLite has a single writer and needs no locking.

use sqlx::any::AnyRow;

use super::Db;

/// Claims up to `limit` rows of `table` due at `now` (new, retry due, or lease expired),
/// leased until `lease_until`, and returns the `returning` columns, oldest first.
/// The table needs `id`, `status` ('pending' / `claimed_status`), `attempts`, `next_attempt_at`.
/// Through the pool the claim is its own commit; inside a caller's transaction the rows are
/// the caller's until it commits (PostgreSQL: locked, skipped by every other claimer;
/// SQLite: the one writer), and a rollback returns them to the queue at once.
pub async fn claim<'e, E>(
    executor: E,
    db: &Db,
    table: &str,
    claimed_status: &str,
    returning: &str,
    (now, lease_until, limit): (i64, i64, i64),
) -> anyhow::Result<Vec<AnyRow>>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let rows = sqlx::query(&claim_sql(db, table, claimed_status, returning))
        .bind(lease_until)
        .bind(now)
        .bind(limit)
        .bind(db.instance_id())
        .fetch_all(executor)
        .await?;
    Ok(rows)
}

fn claim_sql(db: &Db, table: &str, claimed_status: &str, returning: &str) -> String {
    // Without statistics (or with statistics of an empty queue) both databases fetch every
    // due row and sort them on each claim instead of walking the partial `_due` index:
    // SQLite 53 ms vs 1 ms, PostgreSQL 15 ms vs 0.03 ms per claim at a 20k backlog
    // (BENCHMARKS.md). SQLite names the index; PostgreSQL has no hints, and its row search
    // runs in `oncehook_due_ids` (migration 0016), planned with sorting off. Its ids are
    // one array (an init plan, run once), so the rows are then updated through their
    // primary key: `id IN (SELECT oncehook_due_ids(…))` was a hash join over a sequential
    // scan of the whole table.
    let rows = match db.backend {
        super::Backend::Sqlite => format!(
            "id IN (SELECT id FROM {table} INDEXED BY {table}_due \
             WHERE status IN ('pending', '{claimed_status}') AND next_attempt_at <= $2 \
             ORDER BY next_attempt_at, id LIMIT $3)"
        ),
        super::Backend::Postgres => format!(
            "id = ANY(ARRAY(SELECT oncehook_due_ids('{table}', '{claimed_status}', $2, $3, true)))"
        ),
    };
    format!(
        "UPDATE {table} SET status = '{claimed_status}', attempts = attempts + 1, next_attempt_at = $1, \
         claimed_by = $4 \
         WHERE {rows} \
         RETURNING {returning}"
    )
}
