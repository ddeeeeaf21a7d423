//! `api_idempotency`: the keys our own API's POSTs were sent with, per token, with the
//! request's digest and its answer. The INSERT decides who runs a key first (the database
//! decides, as for effects); the others are told what became of it.

use sqlx::Row;

use super::Db;

/// How long an API Idempotency-Key is remembered (Stripe's 24 hours); retention prunes
/// older ones.
pub const KEY_HOURS: i64 = 24;

/// What a request with a key meets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Begun {
    /// Nobody used the key (in the last 24 h): run the request, then `finish`.
    New,
    /// The same request ran to its end: its answer.
    Replay { status: u16, body: Vec<u8> },
    /// The key was used with another request.
    Mismatch,
    /// The first request with the key is still running.
    Running,
}

pub async fn begin(
    db: &Db,
    scope: &str,
    key: &str,
    digest: &str,
    now: i64,
    expired_before: i64,
) -> anyhow::Result<Begun> {
    // An expired key is a new one.
    sqlx::query(
        "DELETE FROM api_idempotency WHERE scope = $1 AND idempotency_key = $2 AND created_at < $3",
    )
    .bind(scope)
    .bind(key)
    .bind(expired_before)
    .execute(db.writer())
    .await?;
    let won = sqlx::query(
        "INSERT INTO api_idempotency (scope, idempotency_key, request_digest, created_at) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (scope, idempotency_key) DO NOTHING \
         RETURNING created_at",
    )
    .bind(scope)
    .bind(key)
    .bind(digest)
    .bind(now)
    .fetch_optional(db.writer())
    .await?
    .is_some();
    if won {
        return Ok(Begun::New);
    }
    let row = sqlx::query(
        "SELECT request_digest, response_status, response_body FROM api_idempotency \
         WHERE scope = $1 AND idempotency_key = $2",
    )
    .bind(scope)
    .bind(key)
    .fetch_optional(db.writer())
    .await?;
    let Some(row) = row else {
        // Released between our INSERT and SELECT: as if running (the client retries).
        return Ok(Begun::Running);
    };
    let theirs: String = row.try_get(0)?;
    if theirs != digest {
        return Ok(Begun::Mismatch);
    }
    let status: Option<i64> = row.try_get(1)?;
    Ok(match status {
        None => Begun::Running,
        Some(status) => Begun::Replay {
            status: u16::try_from(status).unwrap_or(500),
            body: row.try_get::<Option<Vec<u8>>, _>(2)?.unwrap_or_default(),
        },
    })
}

/// Keeps the answer of the request that ran with the key.
pub async fn finish(
    db: &Db,
    scope: &str,
    key: &str,
    status: u16,
    body: &[u8],
) -> anyhow::Result<()> {
    sqlx::query(
        "UPDATE api_idempotency SET response_status = $3, response_body = $4 \
         WHERE scope = $1 AND idempotency_key = $2",
    )
    .bind(scope)
    .bind(key)
    .bind(i64::from(status))
    .bind(body)
    .execute(db.writer())
    .await?;
    Ok(())
}

/// Frees the key: the request failed on our side (5xx) and may run again.
pub async fn release(db: &Db, scope: &str, key: &str) -> anyhow::Result<()> {
    sqlx::query("DELETE FROM api_idempotency WHERE scope = $1 AND idempotency_key = $2")
        .bind(scope)
        .bind(key)
        .execute(db.writer())
        .await?;
    Ok(())
}

/// Forgets keys older than `before` (the retention pruner's job).
pub async fn prune(db: &Db, before: i64) -> anyhow::Result<u64> {
    Ok(
        sqlx::query("DELETE FROM api_idempotency WHERE created_at < $1")
            .bind(before)
            .execute(db.writer())
            .await?
            .rows_affected(),
    )
}
