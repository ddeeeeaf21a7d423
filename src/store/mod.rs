//! Storage: one set of queries over sqlx's `Any` driver for SQLite and PostgreSQL. Only
//! the few statements that differ (row claiming, wake-ups) branch on the backend. Columns
//! are integers, text and bytes only (times in Unix ms), which `Any` maps on both.

pub mod dead_letters;
pub mod effects;
pub mod event_detail;
pub mod inbox;
pub mod ingest;
pub mod outbox;
pub mod queue;
pub mod read;
pub mod triage;
pub mod users;

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Executor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The database: a write pool and a read pool. On SQLite the write pool has one
/// connection (SQLite has one writer; queueing in-process beats SQLITE_BUSY), readers
/// run beside it in WAL mode. On PostgreSQL both are the same pool.
#[derive(Clone, Debug)]
pub struct Db {
    pub backend: Backend,
    write: AnyPool,
    read: AnyPool,
    url: String,
}

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The PostgreSQL channel receivers NOTIFY after each committed batch.
pub const WAKE_CHANNEL: &str = "oncehook_inbox";

impl Db {
    pub async fn connect(url: &str) -> anyhow::Result<Db> {
        sqlx::any::install_default_drivers();
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            Self::connect_sqlite(url, path).await
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Self::connect_postgres(url).await
        } else {
            anyhow::bail!("unsupported database URL (use sqlite://PATH or postgres://…)")
        }
    }

    async fn connect_sqlite(url: &str, path: &str) -> anyhow::Result<Db> {
        let file = path.split('?').next().unwrap_or(path);
        if let Some(dir) = std::path::Path::new(file).parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
        }
        let url = if url.contains('?') {
            url.to_string()
        } else {
            format!("{url}?mode=rwc")
        };
        let options = AnyConnectOptions::from_str(&url).context("invalid SQLite URL")?;
        // FULL, not NORMAL: in WAL mode NORMAL can lose the last commits on power loss,
        // and the provider does not resend an event we acknowledged.
        let pragmas =
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA busy_timeout = 5000;";
        let pool = |max: u32| {
            AnyPoolOptions::new()
                .max_connections(max)
                .acquire_timeout(Duration::from_secs(5))
                // No ping per checkout (a round trip each time); a broken connection
                // still fails the statement that uses it, and callers handle that.
                .test_before_acquire(false)
                .after_connect(move |conn, _| {
                    Box::pin(async move {
                        conn.execute(pragmas).await?;
                        Ok(())
                    })
                })
        };
        let write = pool(1)
            .connect_with(options.clone())
            .await
            .context("opening SQLite")?;
        let read = pool(4)
            .connect_with(options)
            .await
            .context("opening SQLite")?;
        Ok(Db {
            backend: Backend::Sqlite,
            write,
            read,
            url,
        })
    }

    async fn connect_postgres(url: &str) -> anyhow::Result<Db> {
        let options = AnyConnectOptions::from_str(url).context("invalid PostgreSQL URL")?;
        let pool = AnyPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(3))
            // No ping per checkout: one round trip less per ingest batch and per
            // processing transaction; a broken connection fails its statement instead.
            .test_before_acquire(false)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    // Durable commits are the contract behind every 2xx, whatever the
                    // server's default says.
                    conn.execute("SET synchronous_commit = on").await?;
                    Ok(())
                })
            })
            .connect_with(options)
            .await
            .context("connecting to PostgreSQL")?;
        Ok(Db {
            backend: Backend::Postgres,
            write: pool.clone(),
            read: pool,
            url: url.to_string(),
        })
    }

    pub async fn migrate(&self) -> anyhow::Result<()> {
        let migrator = match self.backend {
            Backend::Sqlite => sqlx::migrate!("./migrations/sqlite"),
            Backend::Postgres => sqlx::migrate!("./migrations/postgres"),
        };
        migrator
            .run(&self.write)
            .await
            .context("running migrations")?;
        Ok(())
    }

    pub fn writer(&self) -> &AnyPool {
        &self.write
    }

    pub fn reader(&self) -> &AnyPool {
        &self.read
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub async fn close(&self) {
        self.write.close().await;
        self.read.close().await;
    }

    /// Lets the caller's statements run with `FOR UPDATE SKIP LOCKED` where it exists.
    pub(crate) fn skip_locked(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite => "",
            Backend::Postgres => "FOR UPDATE SKIP LOCKED",
        }
    }
}

/// `$1, $2, …` placeholders for a multi-row VALUES list (works on both backends).
pub(crate) fn values_list(rows: usize, cols: usize) -> String {
    let mut out = String::with_capacity(rows * cols * 5);
    for r in 0..rows {
        if r > 0 {
            out.push_str(", ");
        }
        out.push('(');
        for c in 0..cols {
            if c > 0 {
                out.push_str(", ");
            }
            out.push('$');
            out.push_str(&(r * cols + c + 1).to_string());
        }
        out.push(')');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn values_list_numbers_placeholders_row_major() {
        assert_eq!(super::values_list(2, 2), "($1, $2), ($3, $4)");
        assert_eq!(super::values_list(1, 3), "($1, $2, $3)");
    }
}
