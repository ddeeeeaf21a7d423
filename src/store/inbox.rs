//! The inbox as a queue: claim due rows with a lease, then finish each one with an UPDATE
//! fenced on the claim's attempt number, so a worker whose lease expired cannot overwrite
//! the work of the worker that claimed the row after it.

use sqlx::any::AnyRow;
use sqlx::{Any, AnyConnection, Connection, Executor, Row};

use super::Db;

/// An inbox row claimed for processing.
#[derive(Clone, Debug)]
pub struct Claimed {
    pub id: i64,
    pub provider: String,
    pub event_id: String,
    pub raw_body: Vec<u8>,
    pub correlation_id: String,
    pub event_type: Option<String>,
    pub received_at: i64,
    /// The fence: this claim's attempt number.
    pub attempt: i64,
    /// `attempt` at the last redrive: attempts since then count against the retry limit.
    pub retries_base: i64,
    /// Errors of earlier attempts (JSON array), if any.
    pub error_history: Option<String>,
    /// How the claim holds its row, which decides what its filing checks.
    pub hold: Hold,
}

/// How a claim holds its inbox row until it is filed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// The claim wrote a lease: status 'processing', `attempts` bumped to the claim's
    /// attempt, due again when the lease runs out. A worker that dies leaves the lease for
    /// the next claim (or the instance's release) to take back.
    Lease,
    /// PostgreSQL, claimed and applied in one transaction (`claim_locked`): the row is left
    /// as it was and held by the transaction's advisory lock, which every other locked
    /// claim respects and a crash or rollback releases at once. The filing writes the
    /// attempt, so the row gets one new version per event instead of two.
    TxLock,
}

/// What a filing checks and writes for one claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fence {
    /// The claim's attempt number; the filing writes it.
    pub attempt: i64,
    /// The `attempts` the row must still hold: no other claim took it meanwhile.
    pub seen: i64,
    /// The status the row may hold besides 'processing' ('pending' for a locked claim).
    pub also: &'static str,
}

impl Claimed {
    /// Attempts that count against the retry limit (1 on the first).
    pub fn budget_attempt(&self) -> i64 {
        self.attempt - self.retries_base
    }

    /// The fence of this claim's filing.
    pub fn fence(&self) -> Fence {
        match self.hold {
            Hold::Lease => Fence {
                attempt: self.attempt,
                seen: self.attempt,
                also: "processing",
            },
            Hold::TxLock => Fence {
                attempt: self.attempt,
                seen: self.attempt - 1,
                also: "pending",
            },
        }
    }
}

/// How an event was filed. The strings are the inbox `status` column's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filed {
    Applied,
    Duplicate,
    Stale,
    Refused,
    Ignored,
    /// In the dead-letter queue.
    Dead,
}

impl Filed {
    pub fn as_str(self) -> &'static str {
        match self {
            Filed::Applied => "applied",
            Filed::Duplicate => "duplicate",
            Filed::Stale => "stale",
            Filed::Refused => "refused",
            Filed::Ignored => "ignored",
            Filed::Dead => "dead",
        }
    }
}

fn claimed(row: AnyRow) -> Result<Claimed, sqlx::Error> {
    Ok(Claimed {
        id: row.try_get("id")?,
        provider: row.try_get("provider")?,
        event_id: row.try_get("event_id")?,
        raw_body: row.try_get("raw_body")?,
        correlation_id: row.try_get("correlation_id")?,
        event_type: row.try_get("event_type")?,
        received_at: row.try_get("received_at")?,
        attempt: row.try_get("attempts")?,
        retries_base: row.try_get("retries_base")?,
        error_history: row.try_get("error_history")?,
        hold: Hold::Lease,
    })
}

/// Claims up to `limit` due rows (new, retry due, or lease expired) until `lease_until`,
/// in a commit of its own.
pub async fn claim(
    db: &Db,
    now: i64,
    lease_until: i64,
    limit: i64,
) -> anyhow::Result<Vec<Claimed>> {
    claim_in(db.writer(), db, now, lease_until, limit).await
}

/// The same claim through `executor`: inside the caller's transaction (`queue::claim`),
/// for a batch that is claimed and applied in one commit.
pub async fn claim_in<'e, E>(
    executor: E,
    db: &Db,
    now: i64,
    lease_until: i64,
    limit: i64,
) -> anyhow::Result<Vec<Claimed>>
where
    E: Executor<'e, Database = Any>,
{
    let rows = super::queue::claim(
        executor,
        db,
        "inbox_events",
        "processing",
        CLAIM_COLUMNS,
        (now, lease_until, limit),
    )
    .await?;
    let mut claims = rows
        .into_iter()
        .map(claimed)
        .collect::<Result<Vec<_>, _>>()?;
    claims.sort_by_key(|c| c.id);
    Ok(claims)
}

/// The advisory lock namespace of locked claims (`classid` of the two-key form): "oh" + 18,
/// one past the instances' liveness lock.
const CLAIM_CLASS: i32 = 0x6f68_0013;

/// The columns a claim reads.
/// A thin notification is mapped from what the receiver fetched for it (`fetched_body`).
const CLAIM_COLUMNS: &str = "id, provider, event_id, event_type, \
    COALESCE(fetched_body, raw_body) AS raw_body, correlation_id, \
    received_at, attempts, retries_base, error_history";

/// PostgreSQL: claims up to `limit` due rows for the transaction `conn` is in, without
/// writing them (`Hold::TxLock`). Each row is held by a transaction-scoped advisory lock
/// (`pg_try_advisory_xact_lock`, never waited on), so other locked claims skip it, and the
/// rows are read again after the locks are taken, so a row filed or leased by a commit
/// that came between is left out. Only the first `candidates` due rows are looked at,
/// which bounds the locks one claim takes; rows other transactions hold are among them,
/// so `candidates` should exceed `limit` by what the other workers hold.
///
/// Why not `FOR UPDATE SKIP LOCKED` here: such a claim keeps the row lock of a row it
/// rejects on recheck (leased meanwhile by a claim that committed) until its transaction
/// ends, and a batch holds its transaction open while it takes order locks; the lease's
/// owner, filing that row while holding an order lock the batch waits for, closed a cycle
/// (`per_event_and_set_based_workers_on_the_same_orders_never_deadlock`). An advisory
/// lock nobody waits on cannot be part of a cycle.
pub async fn claim_locked(
    conn: &mut AnyConnection,
    now: i64,
    limit: i64,
    candidates: i64,
) -> anyhow::Result<Vec<Claimed>> {
    let held: Vec<i64> = sqlx::query_scalar(
        "WITH due AS MATERIALIZED (SELECT id \
             FROM oncehook_due_ids('inbox_events', 'processing', $1, $2, false) AS due (id)) \
         SELECT id FROM due WHERE pg_try_advisory_xact_lock($3, (id % 2147483647)::int4) LIMIT $4",
    )
    .bind(now)
    .bind(candidates.max(limit))
    .bind(CLAIM_CLASS)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    if held.is_empty() {
        return Ok(Vec::new());
    }
    // The rows by primary key only, their state checked here: with the due conditions in
    // the statement, PostgreSQL without statistics answered it from the `_due` index and
    // read every due row of a backlog to find these few (20,096 index entries for 32 rows
    // at a 20k backlog; `a_claim_reads_the_head_of_a_backlog_not_all_of_it`).
    let sql = format!(
        "SELECT {CLAIM_COLUMNS}, status, next_attempt_at FROM inbox_events WHERE id IN ({})",
        super::in_list(super::Backend::Postgres, 1, held.len())
    );
    let mut query = sqlx::query(&sql);
    for id in &held {
        query = query.bind(*id);
    }
    let mut claims = Vec::with_capacity(held.len());
    for row in query.fetch_all(&mut *conn).await? {
        let status: String = row.try_get("status")?;
        let due_at: i64 = row.try_get("next_attempt_at")?;
        if !matches!(status.as_str(), "pending" | "processing") || due_at > now {
            continue;
        }
        let mut claim = claimed(row)?;
        claim.attempt += 1;
        claim.hold = Hold::TxLock;
        claims.push(claim);
    }
    claims.sort_by_key(|c| c.id);
    Ok(claims)
}

/// The final word on an event. Returns false when the claim was fenced off (another
/// worker owns the row now): the caller must roll back.
pub async fn file<'e, E>(
    executor: E,
    claim: &Claimed,
    filed: Filed,
    reason: Option<&str>,
    order_id: Option<&str>,
    effect_key: Option<&str>,
    now: i64,
) -> anyhow::Result<bool>
where
    E: Executor<'e, Database = Any>,
{
    let done = sqlx::query(
        "UPDATE inbox_events SET status = $1, reason = $2, order_id = $3, effect_key = $4, \
         processed_at = $5, attempts = $7 \
         WHERE id = $6 AND attempts = $8 AND status IN ('processing', $9)",
    )
    .bind(filed.as_str())
    .bind(reason)
    .bind(order_id)
    .bind(effect_key)
    .bind(now)
    .bind(claim.id)
    .bind(claim.fence().attempt)
    .bind(claim.fence().seen)
    .bind(claim.fence().also)
    .execute(executor)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Puts a claimed row back in the queue, due at `next_attempt_at`, with the reason shown
/// and, when it was a failure, added to the row's error history.
pub async fn retry_later(
    conn: &mut AnyConnection,
    claim: &Claimed,
    next_attempt_at: i64,
    reason: &str,
    failure: Option<crate::domain::failure::ErrorClass>,
) -> anyhow::Result<bool> {
    let history = match failure {
        Some(class) => Some(super::dead_letters::append_history(
            claim.error_history.as_deref(),
            super::now_ms(),
            class,
            reason,
        )),
        None => claim.error_history.clone(),
    };
    let done = sqlx::query(
        "UPDATE inbox_events SET status = 'pending', next_attempt_at = $1, reason = $2, \
         error_history = $5, attempts = $4 \
         WHERE id = $3 AND attempts = $6 AND status IN ('processing', $7)",
    )
    .bind(next_attempt_at)
    .bind(reason)
    .bind(claim.id)
    .bind(claim.fence().attempt)
    .bind(history)
    .bind(claim.fence().seen)
    .bind(claim.fence().also)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Moves a claimed event to the dead-letter queue: the inbox row is filed `dead` and the
/// dead letter written in one transaction. Returns the dead letter's id, or `None` when
/// the claim was fenced off.
pub async fn dead_letter(
    conn: &mut AnyConnection,
    claim: &Claimed,
    failure: &crate::domain::failure::Failure,
    order_id: Option<&str>,
    resolve_by: i64,
) -> anyhow::Result<Option<i64>> {
    let now = super::now_ms();
    let mut tx = conn.begin().await?;
    if !file(
        &mut *tx,
        claim,
        Filed::Dead,
        Some(&failure.message),
        order_id,
        None,
        now,
    )
    .await?
    {
        return Ok(None);
    }
    let id = super::dead_letters::put(
        &mut tx,
        &super::dead_letters::NewDeadLetter {
            stage: super::dead_letters::STAGE_PROCESSOR,
            sink: None,
            source_id: claim.id,
            provider: Some(&claim.provider),
            event_id: Some(&claim.event_id),
            event_type: claim.event_type.as_deref(),
            order_id,
            payload: &claim.raw_body,
            class: failure.class,
            error: &failure.message,
            earlier_errors: claim.error_history.as_deref(),
            attempts: claim.attempt,
            first_attempt_at: claim.received_at,
            correlation_id: &claim.correlation_id,
            now,
            resolve_by,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(Some(id))
}
