//! SQLite's WAL checkpoints, off the write path.
//!
//! By default SQLite checkpoints inside the commit that grows the WAL past 1,000 pages:
//! that commit copies up to 4 MB of pages into the database file and syncs it before it
//! returns, while the single write connection (ingest, processor, relay) waits. Here the
//! writer only checkpoints as a backstop (`WRITER_AUTOCHECKPOINT_PAGES`), and a separate
//! connection runs a PASSIVE checkpoint every `EVERY`, concurrently with the writer's
//! commits (a passive checkpoint takes no lock a writer or reader waits on).

use std::time::Duration;

use sqlx::{AnyConnection, Connection, Executor};
use tokio_util::sync::CancellationToken;

use super::{Backend, Db};

/// The writer's own autocheckpoint, a backstop for when the checkpointer is not running
/// (a CLI command) or cannot keep up: 40 MB of WAL.
pub const WRITER_AUTOCHECKPOINT_PAGES: u32 = 10_000;

/// How often the checkpointer runs.
pub const EVERY: Duration = Duration::from_millis(250);

/// What one checkpoint did: frames in the WAL, and of those, copied into the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpointed {
    pub wal_frames: i64,
    pub copied_frames: i64,
}

/// One PASSIVE checkpoint on `conn`: copies what no reader still needs, waits for nobody.
pub async fn checkpoint(conn: &mut AnyConnection) -> anyhow::Result<Checkpointed> {
    let (_busy, wal_frames, copied_frames): (i64, i64, i64) =
        sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
            .fetch_one(&mut *conn)
            .await?;
    Ok(Checkpointed {
        wal_frames,
        copied_frames,
    })
}

async fn connect(db: &Db) -> anyhow::Result<AnyConnection> {
    let mut conn = AnyConnection::connect(db.url()).await?;
    // FULL: the database file is synced before the WAL may be reset over the frames just
    // copied, so a power loss cannot take both copies of a commit.
    conn.execute("PRAGMA synchronous = FULL; PRAGMA busy_timeout = 5000;")
        .await?;
    Ok(conn)
}

/// Checkpoints a SQLite database every `EVERY` until shutdown (nothing on PostgreSQL).
pub fn spawn_checkpointer(db: Db, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if db.backend != Backend::Sqlite {
            return;
        }
        let mut conn: Option<AnyConnection> = None;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(EVERY) => {}
                _ = shutdown.cancelled() => break,
            }
            let result = match conn.as_mut() {
                Some(c) => checkpoint(c).await,
                None => match connect(&db).await {
                    Ok(c) => checkpoint(conn.insert(c)).await,
                    Err(e) => Err(e),
                },
            };
            if let Err(error) = result {
                // The writer's own autocheckpoint still bounds the WAL meanwhile.
                tracing::warn!(
                    error = format!("{error:#}"),
                    "WAL checkpoint failed; reconnecting for the next one"
                );
                conn = None;
            }
        }
        if let Some(c) = conn {
            let _ = c.close().await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn sqlite() -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("wal.db").display());
        let db = Db::connect(&url).await.unwrap();
        db.migrate().await.unwrap();
        (dir, db)
    }

    /// Writes about `pages` WAL frames through the writer pool.
    async fn write_pages(db: &Db, pages: usize) {
        db.writer()
            .execute("CREATE TABLE IF NOT EXISTS filler (body TEXT)")
            .await
            .unwrap();
        for _ in 0..pages {
            sqlx::query("INSERT INTO filler (body) VALUES ($1)")
                .bind("x".repeat(4000))
                .execute(db.writer())
                .await
                .unwrap();
        }
    }

    /// The size of the database file (`""`) or of its WAL (`"-wal"`).
    fn file_size(dir: &tempfile::TempDir, suffix: &str) -> u64 {
        std::fs::metadata(dir.path().join(format!("wal.db{suffix}")))
            .map(|m| m.len())
            .unwrap_or(0)
    }

    #[tokio::test]
    async fn the_writer_leaves_checkpoints_below_the_backstop_to_the_checkpointer() {
        let (dir, db) = sqlite().await;
        let pages: i64 = sqlx::query_scalar("PRAGMA wal_autocheckpoint")
            .fetch_one(db.writer())
            .await
            .unwrap();
        assert_eq!(pages, i64::from(WRITER_AUTOCHECKPOINT_PAGES));
        // 1,500 pages: past SQLite's default of 1,000, under the backstop. No commit of the
        // writer checkpointed: the rows are in the WAL, not yet in the database file.
        let before = file_size(&dir, "");
        write_pages(&db, 1_500).await;
        assert!(file_size(&dir, "-wal") > 1_500 * 4096);
        assert!(
            file_size(&dir, "") < before + 100 * 4096,
            "the writer checkpointed: {before} -> {} bytes",
            file_size(&dir, "")
        );
    }

    #[tokio::test]
    async fn the_checkpointer_copies_the_wal_into_the_database() {
        let (dir, db) = sqlite().await;
        let shutdown = CancellationToken::new();
        let task = spawn_checkpointer(db.clone(), shutdown.clone());
        write_pages(&db, 1_500).await;
        // The database file takes the rows within a few rounds, the writer's pool
        // connection still open.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while file_size(&dir, "") < 1_500 * 4096 {
            assert!(
                std::time::Instant::now() < deadline,
                "not checkpointed: database {} bytes, WAL {} bytes",
                file_size(&dir, ""),
                file_size(&dir, "-wal")
            );
            tokio::time::sleep(EVERY).await;
        }
        shutdown.cancel();
        task.await.unwrap();
    }
}
