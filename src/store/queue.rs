//! The claim shared by every queue table (inbox, outbox): due rows, oldest first, leased
//! until a deadline, the attempt counter bumped as the fence of this claim. PostgreSQL
//! skips rows another worker holds; SQLite has a single writer and needs no locking.

use super::Db;

/// `UPDATE … RETURNING` claiming up to `$3` rows of `table` due at `$2`, leased until `$1`.
/// The table needs `id`, `status` ('pending' / `claimed_status`), `attempts`, `next_attempt_at`.
pub fn claim_sql(db: &Db, table: &str, claimed_status: &str, returning: &str) -> String {
    format!(
        "UPDATE {table} SET status = '{claimed_status}', attempts = attempts + 1, next_attempt_at = $1 \
         WHERE id IN (SELECT id FROM {table} \
             WHERE status IN ('pending', '{claimed_status}') AND next_attempt_at <= $2 \
             ORDER BY next_attempt_at, id LIMIT $3 {}) \
         RETURNING {returning}",
        db.skip_locked()
    )
}
