//! Bulk redrives as they run and after: one row each, written by the instance running it,
//! so the dead-letter page of any instance shows every job's progress and summary.

use sqlx::Row;

use super::Db;

/// One bulk redrive; times in Unix ms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRow {
    pub id: i64,
    pub actor: String,
    pub selection: String,
    pub started_at: i64,
    /// `None` while the matching dead letters are still being selected.
    pub total: Option<i64>,
    pub done: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
    pub summary: Option<String>,
}

impl JobRow {
    /// Unfinished, and its instance stopped writing: it will never finish.
    pub fn interrupted(&self, now: i64) -> bool {
        self.finished_at.is_none() && now - self.updated_at > INTERRUPTED_AFTER_MS
    }
}

/// The running instance writes a job's progress at least this often, even when it has not
/// moved (one item can take a while).
pub const REPORT_EVERY_MS: u64 = 100;
/// An unfinished job not written for this long was cut off: its instance stopped.
pub const INTERRUPTED_AFTER_MS: i64 = 15_000;
/// Jobs the page shows, newest first.
pub const RECENT: i64 = 10;

pub async fn start(db: &Db, actor: &str, selection: &str, now: i64) -> anyhow::Result<i64> {
    let id = sqlx::query_scalar(
        "INSERT INTO redrive_jobs (actor, selection, instance_id, started_at, updated_at) \
         VALUES ($1, $2, $3, $4, $4) RETURNING id",
    )
    .bind(actor)
    .bind(selection)
    .bind(db.instance_id())
    .bind(now)
    .fetch_one(db.writer())
    .await?;
    Ok(id)
}

/// `total` is `None` while the matching dead letters are still being selected.
pub async fn report(
    db: &Db,
    id: i64,
    done: usize,
    total: Option<usize>,
    now: i64,
) -> anyhow::Result<()> {
    sqlx::query("UPDATE redrive_jobs SET done = $1, total = $2, updated_at = $3 WHERE id = $4")
        .bind(done as i64)
        .bind(total.map(|t| t as i64))
        .bind(now)
        .bind(id)
        .execute(db.writer())
        .await?;
    Ok(())
}

pub async fn finish(
    db: &Db,
    id: i64,
    done: usize,
    total: usize,
    summary: &str,
    now: i64,
) -> anyhow::Result<()> {
    sqlx::query(
        "UPDATE redrive_jobs SET done = $1, total = $2, summary = $3, finished_at = $4, \
         updated_at = $4 WHERE id = $5",
    )
    .bind(done as i64)
    .bind(total as i64)
    .bind(summary)
    .bind(now)
    .bind(id)
    .execute(db.writer())
    .await?;
    Ok(())
}

/// The newest jobs, newest first.
pub async fn recent(db: &Db) -> anyhow::Result<Vec<JobRow>> {
    let rows = sqlx::query(
        "SELECT id, actor, selection, started_at, total, done, updated_at, finished_at, summary \
         FROM redrive_jobs ORDER BY id DESC LIMIT $1",
    )
    .bind(RECENT)
    .fetch_all(db.reader())
    .await?;
    let jobs = rows
        .iter()
        .map(|row| {
            Ok(JobRow {
                id: row.try_get(0)?,
                actor: row.try_get(1)?,
                selection: row.try_get(2)?,
                started_at: row.try_get(3)?,
                total: row.try_get(4)?,
                done: row.try_get(5)?,
                updated_at: row.try_get(6)?,
                finished_at: row.try_get(7)?,
                summary: row.try_get(8)?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()?;
    Ok(jobs)
}
