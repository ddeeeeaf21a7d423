//! The simulator's own database (SQLite, a file or `sqlite::memory:`): the provider's
//! objects as the API serves them, every event generated, and the idempotency keys of
//! `POST /v1/refunds`. It is a stand-in's scratch state, not anyone's money: no fsync is
//! waited for (synchronous = OFF), so the simulator is never the slow side of a test.

use std::str::FromStr;

use serde_json::Value;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS objects (
    id       TEXT PRIMARY KEY,
    kind     TEXT NOT NULL,
    order_id TEXT,
    -- the payment intent a refund or dispute belongs to; the charge's for a charge
    parent   TEXT,
    created  INTEGER NOT NULL,
    body     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS objects_by_parent ON objects (kind, parent, created);
CREATE TABLE IF NOT EXISTS events (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    id        TEXT NOT NULL UNIQUE,
    type      TEXT NOT NULL,
    created   INTEGER NOT NULL,
    order_id  TEXT,
    -- the resource whose state the event announces, and that state (none: noise)
    resource  TEXT,
    state     TEXT,
    body      TEXT NOT NULL,
    delivered INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS events_by_time ON events (created, seq);
CREATE TABLE IF NOT EXISTS idempotency_keys (
    key        TEXT PRIMARY KEY,
    params     TEXT NOT NULL,
    -- NULL while the first request with the key runs
    status     INTEGER,
    body       TEXT,
    created_ms INTEGER NOT NULL
);
"#;

#[derive(Clone, Debug)]
pub struct SimDb {
    pool: SqlitePool,
}

/// An object to write: id, kind, order id, parent, created, JSON body.
pub type ObjectRow = (String, String, Option<String>, Option<String>, i64, String);

/// An event as stored: its place in the log and its JSON.
#[derive(Clone, Debug)]
pub struct StoredEvent {
    pub seq: i64,
    pub id: String,
    pub event_type: String,
    pub created: i64,
    pub order_id: Option<String>,
    pub resource: Option<String>,
    pub state: Option<String>,
    pub body: String,
}

/// Filters of `GET /v1/events`, already checked.
#[derive(Clone, Debug, Default)]
pub struct EventFilter {
    pub created_min: Option<i64>,
    pub created_max: Option<i64>,
    pub types: Vec<String>,
    pub starting_after: Option<(i64, i64)>,
    pub ending_before: Option<(i64, i64)>,
    pub limit: i64,
}

/// How long an idempotency key is remembered: Stripe keeps them 24 hours.
pub const KEY_TTL_MS: i64 = 24 * 3_600_000;

/// What an idempotency key says about a new request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyState {
    /// First use: the request runs (and the key is now held).
    New,
    /// Same key, same parameters, finished: replay this answer.
    Done { status: u16, body: String },
    /// Same key, other parameters.
    Mismatch,
    /// Same key, first request still running.
    Running,
}

impl SimDb {
    /// `sqlite::memory:` or a file path / `sqlite://` URL.
    pub async fn open(url: &str) -> anyhow::Result<SimDb> {
        let memory = url == "sqlite::memory:" || url == ":memory:";
        let options = if memory {
            SqliteConnectOptions::from_str("sqlite::memory:")?
        } else {
            let path = url.strip_prefix("sqlite://").unwrap_or(url);
            SqliteConnectOptions::new()
                .filename(path)
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
        }
        .synchronous(SqliteSynchronous::Off);
        // One connection: an in-memory database lives in its connection, and one writer is
        // all SQLite has anyway.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options)
            .await?;
        sqlx::raw_sql(SCHEMA).execute(&pool).await?;
        Ok(SimDb { pool })
    }

    /// Writes objects (upsert) and new events in one transaction, a few hundred rows per
    /// statement: one statement a row made storing cost as much as generating.
    pub async fn write(
        &self,
        objects: &[ObjectRow],
        events: &[super::engine::NewEvent],
    ) -> anyhow::Result<()> {
        // Well under SQLite's 32,766 bound parameters per statement.
        const ROWS: usize = 500;
        let mut tx = self.pool.begin().await?;
        for chunk in objects.chunks(ROWS) {
            let mut insert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "INSERT INTO objects (id, kind, order_id, parent, created, body) ",
            );
            insert.push_values(
                chunk,
                |mut row, (id, kind, order_id, parent, created, body)| {
                    row.push_bind(id)
                        .push_bind(kind)
                        .push_bind(order_id)
                        .push_bind(parent)
                        .push_bind(created)
                        .push_bind(body);
                },
            );
            insert.push(" ON CONFLICT (id) DO UPDATE SET body = excluded.body");
            insert.build().execute(&mut *tx).await?;
        }
        for chunk in events.chunks(ROWS) {
            let mut insert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "INSERT INTO events (id, type, created, order_id, resource, state, body) ",
            );
            insert.push_values(chunk, |mut row, e| {
                // Borrowed, never copied: the body is serde_json's output, always UTF-8.
                let body = String::from_utf8_lossy(&e.json);
                row.push_bind(&e.id)
                    .push_bind(&e.event_type)
                    .push_bind(e.created)
                    .push_bind(&e.order_id)
                    .push_bind(&e.resource)
                    .push_bind(&e.state)
                    .push_bind(body);
            });
            insert.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub async fn object(&self, id: &str) -> anyhow::Result<Option<(String, Value)>> {
        let row = sqlx::query("SELECT kind, body FROM objects WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| Ok((r.try_get(0)?, serde_json::from_str(r.try_get(1)?)?)))
            .transpose()
    }

    /// Objects of `kind` under `parent`, newest first, after the cursor `(created, id)`.
    pub async fn children(
        &self,
        kind: &str,
        parent: &str,
        after: Option<(i64, String)>,
        limit: i64,
    ) -> anyhow::Result<Vec<Value>> {
        let (created, id) = after.unwrap_or((i64::MAX, String::new()));
        let rows = sqlx::query(
            "SELECT body FROM objects WHERE kind = ? AND parent = ? AND (created < ? OR (created = ? AND id < ?))
             ORDER BY created DESC, id DESC LIMIT ?",
        )
        .bind(kind)
        .bind(parent)
        .bind(created)
        .bind(created)
        .bind(if id.is_empty() { "\u{10FFFF}".to_string() } else { id })
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok(serde_json::from_str(r.try_get(0)?)?))
            .collect()
    }

    pub async fn objects_of_kind(&self, kind: &str) -> anyhow::Result<Vec<Value>> {
        let rows = sqlx::query("SELECT body FROM objects WHERE kind = ? ORDER BY created, id")
            .bind(kind)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| Ok(serde_json::from_str(r.try_get(0)?)?))
            .collect()
    }

    /// The event's place in the log, `(created, seq)`.
    pub async fn event_cursor(&self, id: &str) -> anyhow::Result<Option<(i64, i64)>> {
        let row = sqlx::query("SELECT created, seq FROM events WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).transpose()
    }

    pub async fn event(&self, id: &str) -> anyhow::Result<Option<StoredEvent>> {
        let row = sqlx::query(
            "SELECT seq, id, type, created, order_id, resource, state, body FROM events WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| stored(&r)).transpose()
    }

    /// One page of events, newest first, and whether more lie beyond it (older ones, or
    /// newer ones when paging with `ending_before`).
    pub async fn events(&self, f: &EventFilter) -> anyhow::Result<(Vec<StoredEvent>, bool)> {
        let mut sql = String::from(
            "SELECT seq, id, type, created, order_id, resource, state, body FROM events WHERE created >= ? AND created <= ?",
        );
        if !f.types.is_empty() {
            sql.push_str(" AND type IN (");
            sql.push_str(&vec!["?"; f.types.len()].join(", "));
            sql.push(')');
        }
        // ending_before pages towards newer events: read them oldest first, then flip.
        let ascending = f.ending_before.is_some() && f.starting_after.is_none();
        if f.starting_after.is_some() {
            sql.push_str(" AND (created < ? OR (created = ? AND seq < ?))");
        } else if ascending {
            sql.push_str(" AND (created > ? OR (created = ? AND seq > ?))");
        }
        sql.push_str(if ascending {
            " ORDER BY created ASC, seq ASC LIMIT ?"
        } else {
            " ORDER BY created DESC, seq DESC LIMIT ?"
        });
        let mut q = sqlx::query(&sql)
            .bind(f.created_min.unwrap_or(i64::MIN))
            .bind(f.created_max.unwrap_or(i64::MAX));
        for t in &f.types {
            q = q.bind(t);
        }
        if let Some((created, seq)) = f.starting_after.or(f.ending_before) {
            q = q.bind(created).bind(created).bind(seq);
        }
        let rows = q.bind(f.limit + 1).fetch_all(&self.pool).await?;
        let mut events: Vec<StoredEvent> =
            rows.iter().map(stored).collect::<anyhow::Result<_>>()?;
        let more = events.len() as i64 > f.limit;
        events.truncate(f.limit.max(0) as usize);
        if ascending {
            events.reverse();
        }
        Ok((events, more))
    }

    /// Records that these events reached the target with a 2xx (at least once).
    pub async fn mark_delivered(&self, ids: &[String]) -> anyhow::Result<()> {
        let mut tx = self.pool.begin().await?;
        for chunk in ids.chunks(500) {
            let mut update = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "UPDATE events SET delivered = 1 WHERE id IN (",
            );
            let mut list = update.separated(", ");
            for id in chunk {
                list.push_bind(id);
            }
            update.push(")");
            update.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// `(resource, state)` pairs announced by at least one delivered event.
    pub async fn delivered_states(&self) -> anyhow::Result<Vec<(String, String)>> {
        let rows = sqlx::query(
            "SELECT DISTINCT resource, state FROM events WHERE delivered = 1 AND resource IS NOT NULL",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect()
    }

    /// Events per type, for the report.
    pub async fn event_types(&self) -> anyhow::Result<Vec<(String, i64)>> {
        let rows = sqlx::query("SELECT type, COUNT(*) FROM events GROUP BY type ORDER BY type")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect()
    }

    pub async fn count_events(&self) -> anyhow::Result<i64> {
        Ok(sqlx::query("SELECT COUNT(*) FROM events")
            .fetch_one(&self.pool)
            .await?
            .try_get(0)?)
    }

    /// Claims `key` for a request with `params` at `now_ms`, or says what the earlier use
    /// decided. A key first used more than `KEY_TTL_MS` before is forgotten first.
    pub async fn claim_key(
        &self,
        key: &str,
        params: &str,
        now_ms: i64,
    ) -> anyhow::Result<KeyState> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM idempotency_keys WHERE key = ? AND created_ms < ?")
            .bind(key)
            .bind(now_ms - KEY_TTL_MS)
            .execute(&mut *tx)
            .await?;
        let inserted = sqlx::query(
            "INSERT INTO idempotency_keys (key, params, created_ms) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING",
        )
        .bind(key)
        .bind(params)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        let state = if inserted {
            KeyState::New
        } else {
            let row =
                sqlx::query("SELECT params, status, body FROM idempotency_keys WHERE key = ?")
                    .bind(key)
                    .fetch_one(&mut *tx)
                    .await?;
            let (stored, status, body): (String, Option<i64>, Option<String>) =
                (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            match (stored == params, status) {
                (false, _) => KeyState::Mismatch,
                (true, None) => KeyState::Running,
                (true, Some(status)) => KeyState::Done {
                    status: status as u16,
                    body: body.unwrap_or_default(),
                },
            }
        };
        tx.commit().await?;
        Ok(state)
    }

    /// Moves every key's first use `by_ms` into the past, as if that much time had gone
    /// by: how a test reaches the end of the provider's 24-hour memory of keys without
    /// waiting for it.
    pub async fn age_keys(&self, by_ms: i64) -> anyhow::Result<()> {
        sqlx::query("UPDATE idempotency_keys SET created_ms = created_ms - ?")
            .bind(by_ms)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Saves the answer given under `key`, for replays.
    pub async fn finish_key(&self, key: &str, status: u16, body: &str) -> anyhow::Result<()> {
        sqlx::query("UPDATE idempotency_keys SET status = ?, body = ? WHERE key = ?")
            .bind(status as i64)
            .bind(body)
            .bind(key)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Lets go of a key whose request did not finish (so a retry may run it).
    pub async fn release_key(&self, key: &str) -> anyhow::Result<()> {
        sqlx::query("DELETE FROM idempotency_keys WHERE key = ? AND status IS NULL")
            .bind(key)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

fn stored(r: &sqlx::sqlite::SqliteRow) -> anyhow::Result<StoredEvent> {
    Ok(StoredEvent {
        seq: r.try_get(0)?,
        id: r.try_get(1)?,
        event_type: r.try_get(2)?,
        created: r.try_get(3)?,
        order_id: r.try_get(4)?,
        resource: r.try_get(5)?,
        state: r.try_get(6)?,
        body: r.try_get(7)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_idempotency_key_is_remembered_for_24_hours_then_forgotten() {
        let db = SimDb::open("sqlite::memory:").await.unwrap();
        let t0 = 1_760_000_000_000;
        assert_eq!(db.claim_key("k", "a", t0).await.unwrap(), KeyState::New);
        assert_eq!(
            db.claim_key("k", "a", t0 + 1).await.unwrap(),
            KeyState::Running
        );
        db.finish_key("k", 200, "{\"id\":\"re_1\"}").await.unwrap();
        let last_moment = t0 + KEY_TTL_MS;
        assert_eq!(
            db.claim_key("k", "a", last_moment).await.unwrap(),
            KeyState::Done {
                status: 200,
                body: "{\"id\":\"re_1\"}".into()
            }
        );
        assert_eq!(
            db.claim_key("k", "b", last_moment).await.unwrap(),
            KeyState::Mismatch
        );
        // A millisecond past 24 hours the key is new again, whatever the parameters.
        assert_eq!(
            db.claim_key("k", "b", last_moment + 1).await.unwrap(),
            KeyState::New
        );
        assert_eq!(
            db.claim_key("k", "a", last_moment + 2).await.unwrap(),
            KeyState::Mismatch
        );
    }
}
