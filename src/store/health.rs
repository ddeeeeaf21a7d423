//! Whether the database can commit now, as the writers saw it: the state behind `/healthz`
//! (503 while failing, so a load balancer stops sending), the overview's red banner, the
//! one alert per outage and `oncehook_database_commit_failing`.
//!
//! A failed write starts an outage (its cause and since-when). A successful write by the
//! writer that failed ends it, and so does any successful write once no writer has failed
//! for `CLEAR_AFTER_MS`: the heartbeat writes every second, so an idle server whose load
//! balancer stopped sending still sees the disk come back by itself. A success of another
//! writer while one keeps failing does not hide it (a full PostgreSQL tablespace can let
//! the heartbeat's update through while every new receipt fails).

use crate::domain::failure::ErrorClass;
use std::sync::Mutex;

use tokio::sync::watch;

/// Who wrote: a fixed set, so a metric label never comes from input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    Receipts,
    Processor,
    Relay,
    Heartbeat,
}

impl Writer {
    pub fn as_str(self) -> &'static str {
        match self {
            Writer::Receipts => "receipts",
            Writer::Processor => "processor",
            Writer::Relay => "relay",
            Writer::Heartbeat => "heartbeat",
        }
    }
}

/// Why a write failed, as far as an operator must act on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// SQLITE_FULL, PostgreSQL 53100: free space or grow the volume.
    DiskFull,
    /// SQLITE_IOERR (any extended code), PostgreSQL 58030: the disk or file system failed.
    IoError,
    /// No connection: the server is down, restarting, or refused us.
    Unreachable,
    Other,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::DiskFull => "disk_full",
            Cause::IoError => "io_error",
            Cause::Unreachable => "unreachable",
            Cause::Other => "other",
        }
    }

    /// The sentence for people (health check, banner, alert).
    pub fn describe(self) -> &'static str {
        match self {
            Cause::DiskFull => "the disk is full",
            Cause::IoError => "the disk reported an I/O error",
            Cause::Unreachable => "the database is unreachable",
            Cause::Other => "the database refused the write",
        }
    }

    /// The cause named by the first sqlx error in `error`'s chain.
    pub fn of(error: &anyhow::Error) -> Cause {
        for cause in error.chain() {
            if let Some(e) = cause.downcast_ref::<sqlx::Error>() {
                return Cause::of_sqlx(e);
            }
        }
        Cause::Other
    }

    pub fn of_sqlx(error: &sqlx::Error) -> Cause {
        match error {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_) => Cause::Unreachable,
            sqlx::Error::Database(db) => {
                let code = db.code().unwrap_or_default();
                // SQLite's extended codes keep the primary code in the low byte.
                let sqlite_primary = code.parse::<i64>().ok().map(|c| c & 0xff);
                match (code.as_ref(), sqlite_primary) {
                    ("53100", _) | (_, Some(13)) => Cause::DiskFull,
                    ("58030", _) | (_, Some(10)) => Cause::IoError,
                    (c, _) if c.starts_with("08") || c == "57P01" || c == "57P03" => {
                        Cause::Unreachable
                    }
                    _ => Cause::Other,
                }
            }
            _ => Cause::Other,
        }
    }
}

/// An outage: since when the database cannot commit, and why (the latest cause seen).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outage {
    pub since_ms: i64,
    pub cause: Cause,
    pub writer: Writer,
    pub last_failure_ms: i64,
}

impl Outage {
    pub fn describe(&self) -> String {
        format!(
            "the database cannot commit since {}: {} (seen by the {} writer)",
            chrono::DateTime::from_timestamp_millis(self.since_ms)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                .unwrap_or_default(),
            self.cause.describe(),
            self.writer.as_str()
        )
    }
}

/// After this long without a failed write, any successful write ends an outage.
pub const CLEAR_AFTER_MS: i64 = 3_000;

#[derive(Debug)]
pub struct CommitHealth {
    state: Mutex<Option<Outage>>,
    changes: watch::Sender<Option<Outage>>,
}

impl Default for CommitHealth {
    fn default() -> Self {
        CommitHealth {
            state: Mutex::new(None),
            changes: watch::channel(None).0,
        }
    }
}

impl CommitHealth {
    /// The outage now, if any.
    pub fn outage(&self) -> Option<Outage> {
        self.state.lock().map(|s| s.clone()).unwrap_or(None)
    }

    /// Every start and end of an outage (not every failure inside one).
    pub fn subscribe(&self) -> watch::Receiver<Option<Outage>> {
        self.changes.subscribe()
    }

    pub fn failed(&self, writer: Writer, error: &anyhow::Error, now_ms: i64) {
        let cause = Cause::of(error);
        crate::ops::metrics::commit_failed(writer.as_str(), cause.as_str());
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        match state.as_mut() {
            Some(outage) => {
                outage.cause = cause;
                outage.writer = writer;
                outage.last_failure_ms = now_ms;
            }
            None => {
                let outage = Outage {
                    since_ms: now_ms,
                    cause,
                    writer,
                    last_failure_ms: now_ms,
                };
                *state = Some(outage.clone());
                self.changes.send_replace(Some(outage));
            }
        }
    }

    pub fn succeeded(&self, writer: Writer, now_ms: i64) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let ends = match state.as_ref() {
            None => false,
            Some(outage) => {
                outage.writer == writer || now_ms - outage.last_failure_ms >= CLEAR_AFTER_MS
            }
        };
        if ends {
            *state = None;
            self.changes.send_replace(None);
        }
    }

    /// Records `result`'s outcome for `writer` and hands it back.
    pub fn record<T>(&self, writer: Writer, result: anyhow::Result<T>) -> anyhow::Result<T> {
        let now = super::now_ms();
        match &result {
            Ok(_) => self.succeeded(writer, now),
            Err(error) => self.failed(writer, error, now),
        }
        result
    }
}

/// The class of a database error (here, beside the causes it reads): connection trouble, busy/locked, serialization
/// failures and deadlocks are transient; everything else is unknown.
pub fn classify_db_error(error: &anyhow::Error) -> ErrorClass {
    for cause in error.chain() {
        if let Some(e) = cause.downcast_ref::<sqlx::Error>() {
            return match e {
                sqlx::Error::Io(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::WorkerCrashed
                | sqlx::Error::Tls(_)
                | sqlx::Error::Protocol(_) => ErrorClass::Transient,
                sqlx::Error::Database(db) => {
                    let code = db.code().unwrap_or_default();
                    let message = db.message().to_ascii_lowercase();
                    // 40001 serialization failure, 40P01 deadlock, 57P01 admin shutdown,
                    // 55P03 lock not available, 08xxx connection; SQLite 5 busy, 6 locked.
                    let transient = [
                        "40001", "40P01", "57P01", "57P03", "55P03", "5", "6", "517", "261",
                    ]
                    .contains(&code.as_ref())
                        || code.starts_with("08")
                        || message.contains("database is locked")
                        || message.contains("busy");
                    // A full disk or an I/O error clears when space or the disk comes
                    // back: retry, never dead-letter for it.
                    let transient =
                        transient || matches!(Cause::of_sqlx(e), Cause::DiskFull | Cause::IoError);
                    if transient {
                        ErrorClass::Transient
                    } else {
                        ErrorClass::Unknown
                    }
                }
                _ => ErrorClass::Unknown,
            };
        }
    }
    ErrorClass::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> anyhow::Error {
        anyhow::anyhow!("disk")
    }

    #[test]
    fn an_outage_starts_once_and_keeps_its_since() {
        let h = CommitHealth::default();
        let mut changes = h.subscribe();
        h.failed(Writer::Receipts, &full(), 1_000);
        h.failed(Writer::Receipts, &full(), 2_000);
        let outage = h.outage().unwrap();
        assert_eq!((outage.since_ms, outage.last_failure_ms), (1_000, 2_000));
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        h.failed(Writer::Processor, &full(), 2_500);
        assert!(!changes.has_changed().unwrap(), "one change per outage");
    }

    #[test]
    fn another_writer_s_success_does_not_hide_a_failing_one() {
        let h = CommitHealth::default();
        h.failed(Writer::Receipts, &full(), 1_000);
        h.succeeded(Writer::Heartbeat, 1_500);
        assert!(h.outage().is_some());
        // The failing writer succeeds: over at once.
        h.succeeded(Writer::Receipts, 1_600);
        assert!(h.outage().is_none());
    }

    #[test]
    fn any_success_ends_it_once_nobody_failed_for_a_while() {
        let h = CommitHealth::default();
        h.failed(Writer::Receipts, &full(), 1_000);
        h.succeeded(Writer::Heartbeat, 1_000 + CLEAR_AFTER_MS - 1);
        assert!(h.outage().is_some());
        h.succeeded(Writer::Heartbeat, 1_000 + CLEAR_AFTER_MS);
        assert!(h.outage().is_none());
    }

    #[test]
    fn causes_come_from_the_database_codes() {
        let sqlite_full = sqlx::Error::Database(Box::new(Fake("13")));
        assert_eq!(Cause::of_sqlx(&sqlite_full), Cause::DiskFull);
        // SQLITE_IOERR_WRITE = 778 = 10 | 3 << 8.
        let io = sqlx::Error::Database(Box::new(Fake("778")));
        assert_eq!(Cause::of_sqlx(&io), Cause::IoError);
        let pg_full = sqlx::Error::Database(Box::new(Fake("53100")));
        assert_eq!(Cause::of_sqlx(&pg_full), Cause::DiskFull);
        let shutdown = sqlx::Error::Database(Box::new(Fake("57P01")));
        assert_eq!(Cause::of_sqlx(&shutdown), Cause::Unreachable);
        assert_eq!(
            Cause::of_sqlx(&sqlx::Error::PoolTimedOut),
            Cause::Unreachable
        );
        let unique = sqlx::Error::Database(Box::new(Fake("23505")));
        assert_eq!(Cause::of_sqlx(&unique), Cause::Other);
        assert_eq!(
            Cause::of(&anyhow::Error::from(sqlx::Error::PoolClosed).context("storing")),
            Cause::Unreachable
        );
    }

    #[derive(Debug)]
    struct Fake(&'static str);

    impl std::fmt::Display for Fake {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "code {}", self.0)
        }
    }

    impl std::error::Error for Fake {}

    impl sqlx::error::DatabaseError for Fake {
        fn message(&self) -> &str {
            "fake"
        }
        fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
            Some(self.0.into())
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    #[test]
    fn pool_timeouts_are_transient_other_errors_unknown() {
        let e = anyhow::Error::new(sqlx::Error::PoolTimedOut).context("claiming");
        assert_eq!(classify_db_error(&e), ErrorClass::Transient);
        assert_eq!(
            classify_db_error(&anyhow::anyhow!("weird")),
            ErrorClass::Unknown
        );
        let e = anyhow::Error::new(sqlx::Error::RowNotFound);
        assert_eq!(classify_db_error(&e), ErrorClass::Unknown);
    }
}
