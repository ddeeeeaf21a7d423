//! A failed write transaction never leaves its connection behind.
//!
//! When SQLite's COMMIT fails (a full disk: SQLITE_FULL, an I/O error) it may or may not
//! have rolled the transaction back itself, and sqlx's idea of the connection's transaction
//! depth then disagrees with SQLite's: the ROLLBACK sqlx sends on drop fails ("no
//! transaction is active") and its depth stays 1. The next `begin()` on that connection
//! sends `SAVEPOINT` instead of `BEGIN`; when that transaction's commit fails too, its
//! `ROLLBACK TO SAVEPOINT` leaves SQLite inside a transaction for good, and every later
//! "commit" only releases a nested savepoint. Measured before this module
//! (tests/storage_faults.rs): 1,088 of 1,408 acknowledged receipts never reached the file.
//!
//! So every pool that writes checks each connection as it comes back: one that is still in
//! a transaction, by sqlx's count, is closed, not reused; the next checkout opens a fresh
//! one. The rule sits on the pools, so no writer (receipts, processor, relay,
//! reconciliation, refunds, sessions, audit) has to remember it.

use sqlx::pool::PoolOptions;
use sqlx::{Connection, Database};

/// `options` with the check on every release. On SQLite the check first waits for what the
/// connection's worker still has queued (the drop's ROLLBACK is sent, not awaited); on
/// PostgreSQL sqlx counts a queued ROLLBACK at once, so no round trip is spent.
pub fn discard_unfinished_transactions<DB: Database>(
    options: PoolOptions<DB>,
    sqlite: bool,
) -> PoolOptions<DB> {
    options.after_release(move |conn, _meta| {
        Box::pin(async move {
            if sqlite {
                conn.ping().await?;
            }
            if conn.is_in_transaction() {
                tracing::warn!(
                    "a write connection came back inside a transaction (a failed commit?): \
                     closing it instead of reusing it"
                );
                crate::ops::metrics::connection_discarded();
                return Ok(false);
            }
            Ok(true)
        })
    })
}
