//! Bearer tokens for `/api/v1`: a name, a role and an expiry; only the token's SHA-256 is
//! stored, and the token itself is shown once, when it is made.

use anyhow::Context;
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::Row;

use app::backend::Role;

use super::read::rfc3339;
use super::users::valid_username;
use super::Db;

/// Every token starts with this, so secret scanners and people recognise one.
pub const TOKEN_PREFIX: &str = "oh_";
/// How many of the token's first characters are kept to tell tokens apart.
const SHOWN_PREFIX_CHARS: usize = 10;
/// `last_used_at` is written at most this often per token, so a busy API client does not
/// turn every read into a write.
const TOUCH_EVERY_MS: i64 = 60_000;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TokenRow {
    pub id: i64,
    pub name: String,
    /// The token's first characters (`oh_AbCdEfG`), never the whole token.
    pub prefix: String,
    /// viewer | operator | admin
    pub role: String,
    pub created_by: String,
    pub created_at: String,
    pub expires_at: String,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
    /// Unix ms, for the checks.
    #[serde(skip)]
    pub expires_at_ms: i64,
    #[serde(skip)]
    pub last_used_at_ms: Option<i64>,
}

impl TokenRow {
    pub fn is_live(&self, now: i64) -> bool {
        self.revoked_at.is_none() && self.expires_at_ms > now
    }
}

const COLUMNS: &str =
    "id, name, prefix, role, created_by, created_at, expires_at, last_used_at, revoked_at";

fn token_row(row: &sqlx::any::AnyRow) -> Result<TokenRow, sqlx::Error> {
    let expires_at_ms: i64 = row.try_get(6)?;
    let last_used_at_ms: Option<i64> = row.try_get(7)?;
    Ok(TokenRow {
        id: row.try_get(0)?,
        name: row.try_get(1)?,
        prefix: row.try_get(2)?,
        role: row.try_get(3)?,
        created_by: row.try_get(4)?,
        created_at: rfc3339(row.try_get(5)?),
        expires_at: rfc3339(expires_at_ms),
        last_used_at: last_used_at_ms.map(rfc3339),
        revoked_at: row.try_get::<Option<i64>, _>(8)?.map(rfc3339),
        expires_at_ms,
        last_used_at_ms,
    })
}

/// Hex SHA-256 of a token: what is stored and looked up.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A new token: the prefix and 256 random bits, base64url.
pub fn generate_token() -> String {
    use base64::Engine;
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// Who a token acts for, which bounds what it may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Maker {
    /// A dashboard user (by id): the token works only while that user is enabled, and
    /// never with more than the user's current role.
    User(i64),
    /// `oncehook token add` on the server: whoever has that shell already holds the
    /// configuration and the database, so the token is bounded by its own role and
    /// expiry only (and revoked with `oncehook token revoke`).
    Shell,
}

pub struct NewToken<'a> {
    pub name: &'a str,
    pub role: &'a str,
    /// The name shown as its maker (a username, or `$USER@cli`).
    pub created_by: &'a str,
    pub maker: Maker,
    pub now: i64,
    pub expires_at: i64,
}

/// Makes a token and writes its audit row in the same transaction; returns the row and the
/// token, which exists nowhere else afterwards. Fails when a live token has that name.
pub async fn create(
    db: &Db,
    new: &NewToken<'_>,
    source: Option<&str>,
) -> anyhow::Result<(TokenRow, String)> {
    anyhow::ensure!(
        valid_username(new.name),
        super::Refused("token names are 1-64 letters, digits or . _ @ -".into())
    );
    anyhow::ensure!(
        new.expires_at > new.now,
        super::Refused("the expiry must be in the future".into())
    );
    let token = generate_token();
    let prefix: String = token.chars().take(SHOWN_PREFIX_CHARS).collect();
    let mut tx = db.writer().begin().await?;
    let taken: Option<i64> =
        sqlx::query("SELECT id FROM api_tokens WHERE name = $1 AND revoked_at IS NULL")
            .bind(new.name)
            .fetch_optional(&mut *tx)
            .await?
            .map(|r| r.try_get(0))
            .transpose()?;
    anyhow::ensure!(
        taken.is_none(),
        super::Refused(format!(
            "a token named {} exists; revoke it first",
            new.name
        ))
    );
    let row = sqlx::query(&format!(
        "INSERT INTO api_tokens (name, token_hash, prefix, role, created_by, created_at, \
         expires_at, maker_user_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING {COLUMNS}"
    ))
    .bind(new.name)
    .bind(token_hash(&token))
    .bind(&prefix)
    .bind(new.role)
    .bind(new.created_by)
    .bind(new.now)
    .bind(new.expires_at)
    .bind(match new.maker {
        Maker::User(id) => Some(id),
        Maker::Shell => None,
    })
    .fetch_one(&mut *tx)
    .await
    .context("storing the token")?;
    let row = token_row(&row)?;
    audit_in(
        &mut tx,
        new.created_by,
        "api_token.add",
        &row,
        &format!("role {}, expires {}", row.role, row.expires_at),
        source,
        new.now,
    )
    .await?;
    super::commit_checked(tx).await?;
    Ok((row, token))
}

async fn audit_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    actor: &str,
    action: &str,
    row: &TokenRow,
    details: &str,
    source: Option<&str>,
    now: i64,
) -> anyhow::Result<()> {
    let target = format!("api_token:{} ({})", row.name, row.prefix);
    super::users::insert_audit_with(
        &mut **tx,
        &super::users::AuditEntry {
            actor,
            action,
            target: &target,
            reason: None,
            details: Some(details),
            source,
            now,
        },
    )
    .await?;
    Ok(())
}

/// Every token, live ones first, newest first within.
pub async fn list(db: &Db) -> anyhow::Result<Vec<TokenRow>> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM api_tokens \
         ORDER BY CASE WHEN revoked_at IS NULL THEN 0 ELSE 1 END, id DESC"
    ))
    .fetch_all(db.reader())
    .await?;
    Ok(rows.iter().map(token_row).collect::<Result<_, _>>()?)
}

/// Revokes the live token with this name (it stops working at once); audited.
pub async fn revoke(
    db: &Db,
    name: &str,
    actor: &str,
    source: Option<&str>,
    now: i64,
) -> anyhow::Result<TokenRow> {
    let mut tx = db.writer().begin().await?;
    let row = sqlx::query(&format!(
        "UPDATE api_tokens SET revoked_at = $1 WHERE name = $2 AND revoked_at IS NULL \
         RETURNING {COLUMNS}"
    ))
    .bind(now)
    .bind(name)
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| super::Refused(format!("no live token named {name}")))?;
    let row = token_row(&row)?;
    audit_in(&mut tx, actor, "api_token.revoke", &row, "", source, now).await?;
    super::commit_checked(tx).await?;
    Ok(row)
}

/// The token a bearer presents, when it is live (not revoked, not expired) and its maker
/// may still act: a token made by a dashboard user works only while that user exists and is
/// enabled, and its `role` is returned capped at the user's role now, so lowering a
/// person's role lowers their tokens' at once. Records the use (at most once a minute).
pub async fn authenticate(db: &Db, token: &str, now: i64) -> anyhow::Result<Option<TokenRow>> {
    // Looked up by hash: the comparison happens on a digest the caller cannot steer, so its
    // timing says nothing about the stored tokens.
    let row = sqlx::query(&format!(
        "SELECT {}, t.maker_user_id, u.role, u.disabled FROM api_tokens t \
         LEFT JOIN users u ON u.id = t.maker_user_id WHERE t.token_hash = $1",
        COLUMNS
            .split(", ")
            .map(|c| format!("t.{c}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .bind(token_hash(token))
    .fetch_optional(db.reader())
    .await?;
    let Some(found) = row else {
        return Ok(None);
    };
    let mut row = token_row(&found)?;
    if !row.is_live(now) {
        return Ok(None);
    }
    let maker: Option<i64> = found.try_get(9)?;
    if maker.is_some() {
        let maker_role: Option<String> = found.try_get(10)?;
        let disabled: Option<i64> = found.try_get(11)?;
        let (Some(maker_role), Some(0)) = (maker_role, disabled) else {
            // The maker is disabled (or gone): so is the token.
            return Ok(None);
        };
        row.role = capped_role(&row.role, &maker_role);
    }
    if row
        .last_used_at_ms
        .is_none_or(|last| now - last >= TOUCH_EVERY_MS)
    {
        sqlx::query("UPDATE api_tokens SET last_used_at = $1 WHERE id = $2")
            .bind(now)
            .bind(row.id)
            .execute(db.writer())
            .await?;
    }
    Ok(Some(row))
}

/// The lower of a token's role and its maker's; an unknown role on either side gives the
/// token's own text back only if it is the lower, so the check after refuses it.
fn capped_role(token: &str, maker: &str) -> String {
    match (Role::parse(token), Role::parse(maker)) {
        (Some(t), Some(m)) => t.min(m).as_str().to_string(),
        // Neither is trusted: a text no role parses from, which the caller refuses.
        _ => "unknown".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_prefixed_random_and_hashed() {
        let a = generate_token();
        let b = generate_token();
        assert!(a.starts_with(TOKEN_PREFIX));
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 43, "{a}");
        assert_ne!(a, b);
        assert_eq!(token_hash(&a).len(), 64);
        assert_ne!(token_hash(&a), token_hash(&b));
    }

    #[test]
    fn a_token_acts_with_the_lower_of_its_role_and_its_makers() {
        assert_eq!(capped_role("operator", "viewer"), "viewer");
        assert_eq!(capped_role("viewer", "admin"), "viewer");
        assert_eq!(capped_role("admin", "operator"), "operator");
        assert_eq!(capped_role("admin", "admin"), "admin");
        assert!(Role::parse(&capped_role("admin", "root")).is_none());
        assert!(Role::parse(&capped_role("root", "admin")).is_none());
    }
}
