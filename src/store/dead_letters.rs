//! The dead-letter queue: what an engineer needs without digging, and the operations on
//! it (redrive, resolve, discard), each recorded with who, when, why and the outcome.
//! A redrive puts the source item back on its normal path with its keys unchanged, so it
//! can never double an effect.

use serde::Serialize;
use serde_json::json;
use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};

use super::read::rfc3339;
use super::{bind_all, Db, SqlArg};
use crate::domain::failure::ErrorClass;

pub const STAGE_PROCESSOR: &str = "processor";
pub const STAGE_OUTBOX: &str = "outbox";

/// A failed item on its way into the queue.
#[derive(Clone, Debug)]
pub struct NewDeadLetter<'a> {
    pub stage: &'a str,
    pub sink: Option<&'a str>,
    pub source_id: i64,
    pub provider: Option<&'a str>,
    pub event_id: Option<&'a str>,
    pub event_type: Option<&'a str>,
    pub order_id: Option<&'a str>,
    pub payload: &'a [u8],
    pub class: ErrorClass,
    pub error: &'a str,
    /// Errors of the earlier attempts, a JSON array (or empty).
    pub earlier_errors: Option<&'a str>,
    pub attempts: i64,
    pub first_attempt_at: i64,
    pub correlation_id: &'a str,
    pub now: i64,
    pub resolve_by: i64,
}

fn history_with(existing: Option<&str>, at: i64, class: ErrorClass, error: &str) -> String {
    let mut list: Vec<serde_json::Value> = existing
        .and_then(|h| serde_json::from_str(h).ok())
        .unwrap_or_default();
    list.push(json!({"at": at, "class": class.as_str(), "error": error}));
    serde_json::Value::Array(list).to_string()
}

/// Appends an error to a JSON history (used for retries before an item dies).
pub fn append_history(existing: Option<&str>, at: i64, class: ErrorClass, error: &str) -> String {
    history_with(existing, at, class, error)
}

/// Files the item in the queue (or reopens its earlier entry, keeping the history).
/// Runs on the caller's transaction. Returns the dead letter's id.
pub async fn put(conn: &mut sqlx::AnyConnection, dl: &NewDeadLetter<'_>) -> anyhow::Result<i64> {
    let existing = sqlx::query(
        "SELECT id, error_history FROM dead_letters WHERE stage = $1 AND source_id = $2",
    )
    .bind(dl.stage)
    .bind(dl.source_id)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(row) = existing {
        let id: i64 = row.try_get(0)?;
        let history: String = row.try_get(1)?;
        let history = history_with(Some(&history), dl.now, dl.class, dl.error);
        sqlx::query(
            "UPDATE dead_letters SET status = 'open', error_class = $2, last_error = $3, \
             error_history = $4, attempts = $5, last_attempt_at = $6, updated_at = $6, resolve_by = $7 \
             WHERE id = $1",
        )
        .bind(id)
        .bind(dl.class.as_str())
        .bind(dl.error)
        .bind(history)
        .bind(dl.attempts)
        .bind(dl.now)
        .bind(dl.resolve_by)
        .execute(&mut *conn)
        .await?;
        return Ok(id);
    }
    let history = history_with(dl.earlier_errors, dl.now, dl.class, dl.error);
    let row = sqlx::query(
        "INSERT INTO dead_letters (stage, sink, source_id, provider, event_id, event_type, order_id, \
         payload, error_class, last_error, error_history, attempts, first_attempt_at, last_attempt_at, \
         correlation_id, status, resolve_by, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, 'open', $16, $14, $14) \
         RETURNING id",
    )
    .bind(dl.stage)
    .bind(dl.sink)
    .bind(dl.source_id)
    .bind(dl.provider)
    .bind(dl.event_id)
    .bind(dl.event_type)
    .bind(dl.order_id)
    .bind(dl.payload)
    .bind(dl.class.as_str())
    .bind(dl.error)
    .bind(history)
    .bind(dl.attempts)
    .bind(dl.first_attempt_at)
    .bind(dl.now)
    .bind(dl.correlation_id)
    .bind(dl.resolve_by)
    .fetch_one(&mut *conn)
    .await?;
    Ok(row.try_get(0)?)
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DeadLetter {
    pub id: i64,
    pub stage: String,
    pub sink: Option<String>,
    pub source_id: i64,
    pub provider: Option<String>,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub order_id: Option<String>,
    pub error_class: String,
    pub last_error: String,
    pub attempts: i64,
    pub status: String,
    pub correlation_id: String,
    pub first_attempt_at: String,
    pub last_attempt_at: String,
    pub resolve_by: String,
    /// Seconds since it entered the queue.
    pub age_secs: i64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DeadLetterDetail {
    #[serde(flatten)]
    pub summary: DeadLetter,
    pub error_history: serde_json::Value,
    /// The original payload: UTF-8 text when it is, else hex.
    pub payload: String,
    pub redrives: Vec<RedriveRecord>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RedriveRecord {
    pub actor: String,
    pub reason: Option<String>,
    pub outcome: String,
    pub at: String,
}

const COLUMNS: &str = "id, stage, sink, source_id, provider, event_id, event_type, order_id, error_class, \
    last_error, attempts, status, correlation_id, first_attempt_at, last_attempt_at, resolve_by, created_at";

fn summary(row: &AnyRow, now: i64) -> Result<DeadLetter, sqlx::Error> {
    let created: i64 = row.try_get("created_at")?;
    Ok(DeadLetter {
        id: row.try_get("id")?,
        stage: row.try_get("stage")?,
        sink: row.try_get("sink")?,
        source_id: row.try_get("source_id")?,
        provider: row.try_get("provider")?,
        event_id: row.try_get("event_id")?,
        event_type: row.try_get("event_type")?,
        order_id: row.try_get("order_id")?,
        error_class: row.try_get("error_class")?,
        last_error: row.try_get("last_error")?,
        attempts: row.try_get("attempts")?,
        status: row.try_get("status")?,
        correlation_id: row.try_get("correlation_id")?,
        first_attempt_at: rfc3339(row.try_get("first_attempt_at")?),
        last_attempt_at: rfc3339(row.try_get("last_attempt_at")?),
        resolve_by: rfc3339(row.try_get("resolve_by")?),
        age_secs: (now - created).max(0) / 1000,
    })
}

/// Which dead letters an operation is about. Empty fields match everything.
#[derive(Clone, Debug, Default)]
pub struct DeadLetterFilter {
    pub ids: Vec<i64>,
    pub event_id: Option<String>,
    /// Default for lists and bulk redrives: `open`.
    pub status: Option<String>,
    pub class: Option<String>,
    pub stage: Option<String>,
    pub provider: Option<String>,
    pub event_type: Option<String>,
    pub order_id: Option<String>,
    /// Substring of the latest error.
    pub error_contains: Option<String>,
    /// Entered the queue at or after / before these Unix ms.
    pub since: Option<i64>,
    pub until: Option<i64>,
    /// Keyset cursor: ids below this.
    pub before: Option<i64>,
    pub limit: i64,
}

impl DeadLetterFilter {
    fn where_clause(&self) -> (String, Vec<SqlArg>) {
        let mut clauses: Vec<String> = vec![];
        let mut args: Vec<SqlArg> = vec![];
        fn push(clauses: &mut Vec<String>, args: &mut Vec<SqlArg>, clause: &str, arg: SqlArg) {
            args.push(arg);
            clauses.push(clause.replace('?', &format!("${}", args.len())));
        }
        if !self.ids.is_empty() {
            let mut placeholders = vec![];
            for id in &self.ids {
                args.push(SqlArg::Int(*id));
                placeholders.push(format!("${}", args.len()));
            }
            clauses.push(format!("id IN ({})", placeholders.join(", ")));
        }
        for (col, value) in [
            ("event_id", &self.event_id),
            ("status", &self.status),
            ("error_class", &self.class),
            ("stage", &self.stage),
            ("provider", &self.provider),
            ("event_type", &self.event_type),
            ("order_id", &self.order_id),
        ] {
            if let Some(v) = value {
                push(
                    &mut clauses,
                    &mut args,
                    &format!("{col} = ?"),
                    SqlArg::Text(v.clone()),
                );
            }
        }
        if let Some(text) = &self.error_contains {
            push(
                &mut clauses,
                &mut args,
                // A backslash escapes, so a `%` or `_` a person types is that character.
                "last_error LIKE ? ESCAPE '\\'",
                SqlArg::Text(format!("%{}%", like_literal(text))),
            );
        }
        if let Some(t) = self.since {
            push(&mut clauses, &mut args, "created_at >= ?", SqlArg::Int(t));
        }
        if let Some(t) = self.until {
            push(&mut clauses, &mut args, "created_at < ?", SqlArg::Int(t));
        }
        if let Some(b) = self.before {
            push(&mut clauses, &mut args, "id < ?", SqlArg::Int(b));
        }
        let clause = if clauses.is_empty() {
            "1 = 1".to_string()
        } else {
            clauses.join(" AND ")
        };
        (clause, args)
    }
}

/// `text` as a LIKE pattern that matches exactly it (escape character `\`).
fn like_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\\' | '%' | '_') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// How many dead letters match the filter (its `limit` aside).
pub async fn count(db: &Db, filter: &DeadLetterFilter) -> anyhow::Result<i64> {
    let (clause, args) = filter.where_clause();
    let sql = format!("SELECT COUNT(*) FROM dead_letters WHERE {clause}");
    let row = bind_all(sqlx::query(&sql), args)
        .fetch_one(db.reader())
        .await?;
    Ok(row.try_get(0)?)
}

fn summaries(rows: &[sqlx::any::AnyRow], now: i64) -> anyhow::Result<Vec<DeadLetter>> {
    Ok(rows
        .iter()
        .map(|r| summary(r, now))
        .collect::<Result<_, _>>()?)
}

/// Newest first.
pub async fn list(db: &Db, filter: &DeadLetterFilter, now: i64) -> anyhow::Result<Vec<DeadLetter>> {
    let (clause, args) = filter.where_clause();
    let sql = format!(
        "SELECT {COLUMNS} FROM dead_letters WHERE {clause} ORDER BY id DESC LIMIT {}",
        filter.limit.clamp(1, 10_000)
    );
    let rows = bind_all(sqlx::query(&sql), args)
        .fetch_all(db.reader())
        .await?;
    summaries(&rows, now)
}

/// The SQL selecting the ids of an order's dead letters (`$1`: the order id): those filed
/// with the order, and those of its events that were filed before the order was known (a
/// refund that came before its payment), found through their inbox row.
pub const ORDER_DEAD_LETTER_IDS: &str = "SELECT id FROM dead_letters WHERE order_id = $1 \
     UNION SELECT id FROM dead_letters WHERE stage = 'processor' \
     AND source_id IN (SELECT id FROM inbox_events WHERE order_id = $1)";

/// An order's dead letters, newest first, at most `limit`.
pub async fn of_order(
    db: &Db,
    order_id: &str,
    limit: i64,
    now: i64,
) -> anyhow::Result<Vec<DeadLetter>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM dead_letters WHERE id IN ({ORDER_DEAD_LETTER_IDS}) \
         ORDER BY id DESC LIMIT {}",
        limit.clamp(1, 10_000)
    );
    let rows = sqlx::query(&sql)
        .bind(order_id)
        .fetch_all(db.reader())
        .await?;
    summaries(&rows, now)
}

pub async fn show(db: &Db, id: i64, now: i64) -> anyhow::Result<Option<DeadLetterDetail>> {
    let Some(row) = sqlx::query(&format!(
        "SELECT {COLUMNS}, error_history, payload FROM dead_letters WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(db.reader())
    .await?
    else {
        return Ok(None);
    };
    let payload: Vec<u8> = row.try_get("payload")?;
    let history: String = row.try_get("error_history")?;
    let redrives = sqlx::query(
        "SELECT actor, reason, outcome, at FROM redrives WHERE dead_letter_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(db.reader())
    .await?
    .iter()
    .map(|r| {
        Ok(RedriveRecord {
            actor: r.try_get(0)?,
            reason: r.try_get(1)?,
            outcome: r.try_get(2)?,
            at: rfc3339(r.try_get(3)?),
        })
    })
    .collect::<Result<_, sqlx::Error>>()?;
    Ok(Some(DeadLetterDetail {
        summary: summary(&row, now)?,
        error_history: serde_json::from_str(&history).unwrap_or(serde_json::Value::String(history)),
        payload: String::from_utf8(payload.clone()).unwrap_or_else(|_| hex::encode(payload)),
        redrives,
    }))
}

/// Who does something and why; every change is written to the audit log with it.
#[derive(Clone, Debug)]
pub struct Actor<'a> {
    pub name: &'a str,
    pub reason: Option<&'a str>,
    /// The client address the action came from (`None` from the CLI), as every other
    /// audited action records it.
    pub source: Option<&'a str>,
}

pub async fn audit<'e, E: Executor<'e, Database = Any>>(
    executor: E,
    actor: &Actor<'_>,
    action: &str,
    target: &str,
    details: Option<String>,
    now: i64,
) -> anyhow::Result<()> {
    super::users::insert_audit_with(
        executor,
        &super::users::AuditEntry {
            actor: actor.name,
            action,
            target,
            reason: actor.reason,
            details: details.as_deref(),
            source: actor.source,
            now,
        },
    )
    .await?;
    Ok(())
}

/// Puts one open dead letter back on its normal path. Returns the recorded outcome.
///
/// Both UPDATEs check the status they change from, so of two concurrent redrives of one
/// item exactly one requeues it: the other finds the dead letter no longer open (or the
/// source row no longer dead, e.g. already being delivered again) and is recorded as
/// skipped. The first statement is a write, so on SQLite the transaction takes the write
/// lock at once instead of failing to upgrade a read.
pub async fn redrive_one(db: &Db, id: i64, actor: &Actor<'_>, now: i64) -> anyhow::Result<String> {
    let mut tx = db.writer().begin().await?;
    let claimed = sqlx::query(
        "UPDATE dead_letters SET status = 'redriven', updated_at = $2 WHERE id = $1 AND status = 'open'",
    )
    .bind(id)
    .bind(now)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    let row = sqlx::query("SELECT stage, source_id, status FROM dead_letters WHERE id = $1")
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no dead letter {id}"))?;
    let (stage, source_id, status): (String, i64, String) =
        (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
    let outcome = if !claimed {
        format!("skipped: status is {status}")
    } else {
        let table = match stage.as_str() {
            STAGE_PROCESSOR => "inbox_events",
            STAGE_OUTBOX => "outbox",
            other => anyhow::bail!("dead letter {id}: unknown stage {other}"),
        };
        // A refund command goes out again only if it still fits in what is left to refund
        // (a refund made elsewhere may have taken the money while it waited): checked under
        // the order's lock, as a request is. Refused, the dead letter stays open and
        // nothing moves.
        let refused = if stage == STAGE_OUTBOX {
            super::commands::recheck_redrive_in(&mut tx, source_id).await?
        } else {
            None
        };
        if let Some(refused) = refused {
            sqlx::query("UPDATE dead_letters SET status = 'open' WHERE id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            record(&mut tx, id, actor, &refused, now).await?;
            tx.commit().await?;
            return Ok(refused);
        }
        // Same row, same keys: the item goes through the normal path again, with a fresh
        // retry budget.
        let requeued = sqlx::query(&format!(
            "UPDATE {table} SET status = 'pending', next_attempt_at = $1, retries_base = attempts \
             WHERE id = $2 AND status = 'dead'"
        ))
        .bind(now)
        .bind(source_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if requeued == 1 {
            if stage == STAGE_OUTBOX {
                // A provider command goes back to `requested`, its key unchanged.
                super::commands::requeued_in(&mut tx, source_id, now).await?;
            }
            "requeued".to_string()
        } else {
            // Leave the dead letter as it was: nothing was requeued.
            sqlx::query("UPDATE dead_letters SET status = 'open' WHERE id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            let source: Option<String> =
                sqlx::query_scalar(&format!("SELECT status FROM {table} WHERE id = $1"))
                    .bind(source_id)
                    .fetch_optional(&mut *tx)
                    .await?;
            match source {
                None => format!("skipped: its {table} row {source_id} no longer exists (pruned)"),
                Some(s) => format!("skipped: its {table} row {source_id} is {s}, not dead"),
            }
        }
    };
    record(&mut tx, id, actor, &outcome, now).await?;
    tx.commit().await?;
    Ok(outcome)
}

/// A redrive's outcome, in the redrives table and the audit log.
async fn record(
    tx: &mut sqlx::Transaction<'_, Any>,
    id: i64,
    actor: &Actor<'_>,
    outcome: &str,
    now: i64,
) -> anyhow::Result<()> {
    sqlx::query("INSERT INTO redrives (dead_letter_id, actor, reason, outcome, dry_run, at) VALUES ($1, $2, $3, $4, 0, $5)")
        .bind(id)
        .bind(actor.name)
        .bind(actor.reason)
        .bind(outcome)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    audit(
        &mut **tx,
        actor,
        "dead_letter.redrive",
        &format!("dead_letter:{id}"),
        Some(outcome.to_string()),
        now,
    )
    .await
}

/// Resolves (fixed elsewhere) or discards (will not be fixed) an open dead letter; both need a reason.
pub async fn close(
    db: &Db,
    id: i64,
    status: &str,
    actor: &Actor<'_>,
    now: i64,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        matches!(status, "resolved" | "discarded"),
        super::Refused("status must be resolved or discarded".into())
    );
    anyhow::ensure!(
        actor.reason.is_some_and(|r| !r.trim().is_empty()),
        super::Refused(format!(
            "a reason is required to mark a dead letter {status}"
        ))
    );
    let mut tx = db.writer().begin().await?;
    let done = sqlx::query("UPDATE dead_letters SET status = $2, updated_at = $3 WHERE id = $1 AND status IN ('open', 'redriven')")
        .bind(id)
        .bind(status)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    anyhow::ensure!(
        done == 1,
        super::Conflict(format!(
            "dead letter {id} does not exist or is already closed"
        ))
    );
    let action = if status == "resolved" {
        "dead_letter.resolve"
    } else {
        "dead_letter.discard"
    };
    audit(
        &mut *tx,
        actor,
        action,
        &format!("dead_letter:{id}"),
        None,
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
