//! People who sign in to the dashboard, and the audit rows their actions leave.

use anyhow::Context;
use serde::Serialize;
use sqlx::Row;

use super::read::rfc3339;
use super::Db;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct User {
    pub id: i64,
    pub username: String,
    #[serde(skip)]
    pub password_hash: String,
    /// viewer | operator | admin
    pub role: String,
    pub must_change_password: bool,
    pub disabled: bool,
    /// Unix ms; a session made before it is no longer valid.
    pub password_set_at: i64,
    pub last_sign_in_at: Option<String>,
    pub created_at: String,
    /// The dashboard language they chose (`en`, `pt-BR`); `None` follows the browser.
    pub locale: Option<String>,
}

const COLUMNS: &str = "id, username, password_hash, role, must_change_password, disabled, \
                       password_set_at, last_sign_in_at, created_at, locale";

fn user(row: &sqlx::any::AnyRow) -> Result<User, sqlx::Error> {
    Ok(User {
        id: row.try_get(0)?,
        username: row.try_get(1)?,
        password_hash: row.try_get(2)?,
        role: row.try_get(3)?,
        must_change_password: row.try_get::<i64, _>(4)? != 0,
        disabled: row.try_get::<i64, _>(5)? != 0,
        password_set_at: row.try_get(6)?,
        last_sign_in_at: row.try_get::<Option<i64>, _>(7)?.map(rfc3339),
        created_at: rfc3339(row.try_get(8)?),
        locale: row.try_get(9)?,
    })
}

/// A user name: 1 to 64 characters, letters, digits and `._@-`, no spaces, so it reads
/// the same in the audit log, the CLI and the top bar.
pub fn valid_username(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-'))
}

pub struct NewUser<'a> {
    pub username: &'a str,
    pub password_hash: &'a str,
    pub role: &'a str,
    pub must_change_password: bool,
    pub now: i64,
}

/// Adds a user; fails when the name is taken.
pub async fn add(db: &Db, new: &NewUser<'_>) -> anyhow::Result<i64> {
    anyhow::ensure!(
        valid_username(new.username),
        "user names are 1-64 letters, digits or . _ @ -"
    );
    let id: Option<i64> = sqlx::query(
        "INSERT INTO users (username, password_hash, role, must_change_password, disabled, \
         password_set_at, created_at, updated_at) VALUES ($1, $2, $3, $4, 0, $5, $5, $5) \
         ON CONFLICT (username) DO NOTHING RETURNING id",
    )
    .bind(new.username)
    .bind(new.password_hash)
    .bind(new.role)
    .bind(i64::from(new.must_change_password))
    .bind(new.now)
    .fetch_optional(db.writer())
    .await?
    .map(|r| r.try_get(0))
    .transpose()?;
    id.with_context(|| format!("a user named {} already exists", new.username))
}

/// Adds the user only when there is no user at all (first start). Several instances
/// starting at once on one PostgreSQL create it once: the loser's insert finds a user.
pub async fn add_if_none(db: &Db, new: &NewUser<'_>) -> anyhow::Result<bool> {
    let inserted = sqlx::query(
        "INSERT INTO users (username, password_hash, role, must_change_password, disabled, \
         password_set_at, created_at, updated_at) \
         SELECT $1, $2, $3, $4, 0, $5, $5, $5 WHERE NOT EXISTS (SELECT 1 FROM users) \
         ON CONFLICT (username) DO NOTHING",
    )
    .bind(new.username)
    .bind(new.password_hash)
    .bind(new.role)
    .bind(i64::from(new.must_change_password))
    .bind(new.now)
    .execute(db.writer())
    .await?
    .rows_affected();
    Ok(inserted == 1)
}

pub async fn count(db: &Db) -> anyhow::Result<i64> {
    Ok(sqlx::query("SELECT COUNT(*) FROM users")
        .fetch_one(db.reader())
        .await?
        .try_get(0)?)
}

pub async fn by_name(db: &Db, username: &str) -> anyhow::Result<Option<User>> {
    let row = sqlx::query(&format!("SELECT {COLUMNS} FROM users WHERE username = $1"))
        .bind(username)
        .fetch_optional(db.reader())
        .await?;
    Ok(row.as_ref().map(user).transpose()?)
}

pub async fn by_id(db: &Db, id: i64) -> anyhow::Result<Option<User>> {
    let row = sqlx::query(&format!("SELECT {COLUMNS} FROM users WHERE id = $1"))
        .bind(id)
        .fetch_optional(db.reader())
        .await?;
    Ok(row.as_ref().map(user).transpose()?)
}

pub async fn list(db: &Db) -> anyhow::Result<Vec<User>> {
    let rows = sqlx::query(&format!("SELECT {COLUMNS} FROM users ORDER BY username"))
        .fetch_all(db.reader())
        .await?;
    Ok(rows.iter().map(user).collect::<Result<_, _>>()?)
}

/// Disables (or enables again) a user; their sessions stop working at the next request.
/// Returns false when there is no such user.
pub async fn set_disabled(
    db: &Db,
    username: &str,
    disabled: bool,
    now: i64,
) -> anyhow::Result<bool> {
    let n = sqlx::query("UPDATE users SET disabled = $2, updated_at = $3 WHERE username = $1")
        .bind(username)
        .bind(i64::from(disabled))
        .bind(now)
        .execute(db.writer())
        .await?
        .rows_affected();
    Ok(n == 1)
}

/// Sets a new password hash. Every session made before `now` stops working.
pub async fn set_password(
    db: &Db,
    user_id: i64,
    password_hash: &str,
    must_change_password: bool,
    now: i64,
) -> anyhow::Result<bool> {
    let n = sqlx::query(
        "UPDATE users SET password_hash = $2, must_change_password = $3, password_set_at = $4, \
         updated_at = $4 WHERE id = $1",
    )
    .bind(user_id)
    .bind(password_hash)
    .bind(i64::from(must_change_password))
    .bind(now)
    .execute(db.writer())
    .await?
    .rows_affected();
    Ok(n == 1)
}

/// Sets (or with `None` clears) the user's dashboard language.
pub async fn set_locale(
    db: &Db,
    user_id: i64,
    locale: Option<&str>,
    now: i64,
) -> anyhow::Result<bool> {
    let n = sqlx::query("UPDATE users SET locale = $2, updated_at = $3 WHERE id = $1")
        .bind(user_id)
        .bind(locale)
        .bind(now)
        .execute(db.writer())
        .await?
        .rows_affected();
    Ok(n == 1)
}

pub async fn record_sign_in(db: &Db, user_id: i64, now: i64) -> anyhow::Result<()> {
    sqlx::query("UPDATE users SET last_sign_in_at = $2 WHERE id = $1")
        .bind(user_id)
        .bind(now)
        .execute(db.writer())
        .await?;
    Ok(())
}

/// One audit row: who did what to which target, why, and from where.
pub struct AuditEntry<'a> {
    pub actor: &'a str,
    pub action: &'a str,
    pub target: &'a str,
    pub reason: Option<&'a str>,
    pub details: Option<&'a str>,
    pub source: Option<&'a str>,
    pub now: i64,
}

pub async fn audit(db: &Db, entry: &AuditEntry<'_>) -> anyhow::Result<()> {
    insert_audit(db, entry).await.map(|_| ())
}

/// [`audit`], returning the row's id.
pub async fn insert_audit(db: &Db, entry: &AuditEntry<'_>) -> anyhow::Result<i64> {
    insert_audit_with(db.writer(), entry).await
}

/// The longest audit target kept: a longer one (a name or id someone typed or sent) is cut
/// to this many characters and marked with "…" before it is written, so one hostile request
/// cannot grow the log by its body size.
pub const MAX_AUDIT_TARGET_CHARS: usize = 200;

/// `target`, at most [`MAX_AUDIT_TARGET_CHARS`] characters.
pub fn capped_audit_target(target: &str) -> std::borrow::Cow<'_, str> {
    match target.char_indices().nth(MAX_AUDIT_TARGET_CHARS) {
        Some((end, _)) => format!("{}…", &target[..end]).into(),
        None => target.into(),
    }
}

/// The one place an audit row is written (every store module's audit goes through it), in
/// the caller's transaction or on the writer pool; returns the row's id.
pub(crate) async fn insert_audit_with<'e, E: sqlx::Executor<'e, Database = sqlx::Any>>(
    executor: E,
    entry: &AuditEntry<'_>,
) -> anyhow::Result<i64> {
    Ok(sqlx::query(
        "INSERT INTO audit_log (actor, action, target, reason, details, source, at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
    )
    .bind(entry.actor)
    .bind(entry.action)
    .bind(capped_audit_target(entry.target).into_owned())
    .bind(entry.reason)
    .bind(entry.details)
    .bind(entry.source)
    .bind(entry.now)
    .fetch_one(executor)
    .await?
    .try_get(0)?)
}

/// Replaces the details of one audit row: only for a row that counts something (refused
/// attempts of one window), once the count is final.
pub async fn set_audit_details(db: &Db, id: i64, details: &str) -> anyhow::Result<()> {
    sqlx::query("UPDATE audit_log SET details = $2 WHERE id = $1")
        .bind(id)
        .bind(details)
        .execute(db.writer())
        .await?;
    Ok(())
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AuditRow {
    pub id: i64,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub reason: Option<String>,
    pub details: Option<String>,
    pub source: Option<String>,
    pub at: String,
}

/// Audit rows newest first; `before` is the keyset cursor (an audit id).
pub async fn audit_page(
    db: &Db,
    actor: Option<&str>,
    before: Option<i64>,
    limit: i64,
) -> anyhow::Result<Vec<AuditRow>> {
    // Keyset on the primary key; the actor filter uses audit_log_actor (actor, id).
    let filter = match actor {
        Some(_) => "actor = $3 AND id < $1",
        None => "id < $1",
    };
    let sql = format!(
        "SELECT id, actor, action, target, reason, details, source, at FROM audit_log \
         WHERE {filter} ORDER BY id DESC LIMIT $2"
    );
    let mut q = sqlx::query(&sql)
        .bind(before.unwrap_or(i64::MAX))
        .bind(limit.clamp(1, 1000));
    if let Some(actor) = actor {
        q = q.bind(actor);
    }
    let rows = q.fetch_all(db.reader()).await?;
    rows.iter()
        .map(|r| {
            Ok(AuditRow {
                id: r.try_get(0)?,
                actor: r.try_get(1)?,
                action: r.try_get(2)?,
                target: r.try_get(3)?,
                reason: r.try_get(4)?,
                details: r.try_get(5)?,
                source: r.try_get(6)?,
                at: rfc3339(r.try_get(7)?),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn audit_targets_are_cut_at_200_characters() {
        let exact = "é".repeat(super::MAX_AUDIT_TARGET_CHARS);
        assert_eq!(super::capped_audit_target(&exact), exact.as_str());
        let long = format!("{exact}x");
        let cut = super::capped_audit_target(&long);
        assert_eq!(cut.chars().count(), super::MAX_AUDIT_TARGET_CHARS + 1);
        assert_eq!(cut, format!("{exact}…"));
        assert_eq!(super::capped_audit_target("order:1"), "order:1");
    }

    use super::valid_username;

    #[test]
    fn user_names_are_plain() {
        for ok in ["admin", "ana.souza", "on-call_2", "ops@example.com"] {
            assert!(valid_username(ok), "{ok}");
        }
        for bad in ["", "with space", "tab\t", "ünïcode", "<b>", &"x".repeat(65)] {
            assert!(!valid_username(bad), "{bad}");
        }
    }
}
