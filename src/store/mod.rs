//! Storage: one set of queries over sqlx's `Any` driver for SQLite and PostgreSQL. Only
//! the few statements that differ (row claiming, wake-ups) branch on the backend. Columns
//! are integers, text and bytes only (times in Unix ms), which `Any` maps on both.

pub mod batch;
pub mod commands;
pub mod connections;
pub mod dead_letters;
pub mod effects;
pub mod event_detail;
pub mod health;
pub mod idempotency;
pub mod inbox;
pub mod ingest;
pub mod instances;
pub mod outbox;
pub mod queue;
pub mod read;
pub mod reconcile;
pub mod redrive_jobs;
pub mod rollup;
pub mod tokens;
pub mod triage;
pub mod users;
pub mod values;
pub mod verify;
pub mod wal;

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

impl Backend {
    /// The backend a connection (or a transaction, through deref) talks to.
    pub fn of(conn: &sqlx::AnyConnection) -> Backend {
        if conn.backend_name() == "PostgreSQL" {
            Backend::Postgres
        } else {
            Backend::Sqlite
        }
    }
}

/// The database: a write pool and a separate, small, read-only pool for the dashboard and
/// other readers, so a flood of page reads never takes the connections ingest and the
/// processor commit with. On SQLite the write pool has one connection (SQLite has one
/// writer; queueing in-process beats SQLITE_BUSY) and readers (`query_only`) run beside
/// it in WAL mode; on PostgreSQL the read pool's sessions are read-only transactions.
#[derive(Clone, Debug)]
pub struct Db {
    pub backend: Backend,
    write: AnyPool,
    /// Where receipts are written (`store::ingest::store_receipts`), and nothing else: on
    /// SQLite the one write connection; on PostgreSQL durable sessions whose INSERTs run
    /// on cached plans. Private to this module so that no other statement, planned once
    /// and cached while the tables were small, can run there (the write pool's sessions
    /// plan every statement for the tables as they are).
    receipts: AnyPool,
    read: AnyPool,
    url: String,
    /// This process's name on its claims and in `instances` (store::instances).
    instance_id: std::sync::Arc<str>,
    /// Overview counts waiting to be written (store::rollup).
    rollup: std::sync::Arc<rollup::Rollup>,
    /// Whether the database can commit now, as the writers saw it (store::health).
    health: std::sync::Arc<health::CommitHealth>,
}

/// A pool's open PostgreSQL sessions, as PostgreSQL reports them: the settings that decide
/// durability and plan caching (the same on every session, read from one), and per
/// statement with parameters (its first 24 characters) the custom and generic plans made
/// for it, summed over the sessions.
#[derive(Debug, Default)]
pub struct Sessions {
    pub count: usize,
    pub plan_cache_mode: String,
    pub synchronous_commit: String,
    pub plans: std::collections::BTreeMap<String, Plans>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Plans {
    pub custom: i64,
    pub generic: i64,
    /// The most parameters of a prepared statement starting with this text.
    pub params: i64,
}

impl Sessions {
    async fn of(pool: &AnyPool) -> anyhow::Result<Sessions> {
        // Every open connection at once, so that each is looked at (one at a time, the
        // pool would hand back the same one). Counted by `size`, not `num_idle`: sqlx
        // returns a dropped connection to the pool on a spawned task, so the one that just
        // ran a caller's statements may not be idle yet; asking for the idle ones then
        // opened a fresh session that had prepared nothing (an intermittent CI failure).
        // Holding as many as the pool has open waits for that one, or opens new ones
        // (counted too) until it is back.
        let mut held = Vec::new();
        while held.is_empty() || held.len() < pool.size() as usize {
            held.push(pool.acquire().await?);
        }
        anyhow::ensure!(
            Backend::of(&held[0]) == Backend::Postgres,
            "sessions are reported on PostgreSQL only"
        );
        let mut sessions = Sessions {
            count: held.len(),
            ..Sessions::default()
        };
        (sessions.plan_cache_mode, sessions.synchronous_commit) = sqlx::query_as(
            "SELECT current_setting('plan_cache_mode'), current_setting('synchronous_commit')",
        )
        .fetch_one(&mut *held[0])
        .await?;
        for conn in &mut held {
            let rows: Vec<(String, i64, i64, i32)> = sqlx::query_as(
                "SELECT substr(statement, 1, 24), custom_plans, generic_plans, \
                 cardinality(parameter_types) \
                 FROM pg_prepared_statements WHERE cardinality(parameter_types) > 0",
            )
            .fetch_all(&mut **conn)
            .await?;
            for (statement, custom, generic, params) in rows {
                let seen = sessions.plans.entry(statement).or_default();
                seen.custom += custom;
                seen.generic += generic;
                seen.params = seen.params.max(i64::from(params));
            }
        }
        Ok(sessions)
    }

    pub fn custom_plans(&self) -> i64 {
        self.plans.values().map(|p| p.custom).sum()
    }

    pub fn generic_plans(&self) -> i64 {
        self.plans.values().map(|p| p.generic).sum()
    }
}

/// A parameter of a query whose clauses are built at run time (filters).
pub(crate) enum SqlArg {
    Text(String),
    Int(i64),
}

/// Binds built-up parameters in order, matching the `$n` the clauses were given.
pub(crate) fn bind_all<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    args: Vec<SqlArg>,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    for arg in args {
        q = match arg {
            SqlArg::Text(t) => q.bind(t),
            SqlArg::Int(i) => q.bind(i),
        };
    }
    q
}

/// A change the store refuses for a reason the person asking can act on (a closed dead
/// letter, a taken token name): its text is shown to them. Every other error is a failure
/// on our side, whose text (SQL, driver, paths) stays in the log.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// A change the store refuses because of the current state of what it acts on (a dead
/// letter already closed): shown like `Refused`, answered 409 instead of 422.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Conflict(pub String);

/// A read transaction whose statements all see one snapshot: a page built from several
/// reads (an order's row, its facts, its ledger) never mixes states from before and after a
/// commit in between. SQLite's read transaction is one snapshot from its first read;
/// PostgreSQL's READ COMMITTED takes one per statement, so it asks for REPEATABLE READ.
pub async fn snapshot(db: &Db) -> anyhow::Result<sqlx::Transaction<'static, sqlx::Any>> {
    let mut tx = db.reader().begin().await?;
    if db.backend == Backend::Postgres {
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .execute(&mut *tx)
            .await?;
    }
    Ok(tx)
}

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn new_instance_id() -> std::sync::Arc<str> {
    let host = std::env::var("HOSTNAME").unwrap_or_default();
    format!(
        "{}{}{}",
        host,
        if host.is_empty() { "" } else { "/" },
        uuid::Uuid::new_v4().simple()
    )
    .into()
}

/// Connections of the read pool (dashboard, CLI listings, health).
const READ_POOL_SIZE: u32 = 4;

/// The PostgreSQL channel receivers NOTIFY after each committed batch.
pub const WAKE_CHANNEL: &str = "oncehook_inbox";

impl Db {
    /// The overview's per-minute counts, written behind (`rollup().flush(db)`).
    pub fn rollup(&self) -> &rollup::Rollup {
        &self.rollup
    }

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
            if !dir.as_os_str().is_empty() && !dir.exists() {
                crate::support::files::create_private_dir(dir)?;
            }
        }
        create_private_file(std::path::Path::new(file))?;
        let url = if url.contains('?') {
            url.to_string()
        } else {
            format!("{url}?mode=rwc")
        };
        let options = AnyConnectOptions::from_str(&url).context("invalid SQLite URL")?;
        // FULL, not NORMAL: in WAL mode NORMAL can lose the last commits on power loss,
        // and the provider does not resend an event we acknowledged. Checkpoints are left
        // to a separate connection (store::wal) up to a backstop; the WAL file is cut back
        // to 64 MB after it was reset; the one writer keeps 16 MB of pages cached.
        // Temporary storage in memory: every multi-row statement that may hit a
        // constraint keeps a statement journal (the pages it changed, to undo just that
        // statement), and with the default it was a temporary file: one pwrite per page,
        // 15 % of the server's CPU while processing a backlog (perf, BENCHMARKS.md). It
        // holds one statement's or savepoint's pages, and durability is the WAL's.
        const _: () = assert!(wal::WRITER_AUTOCHECKPOINT_PAGES == 10_000);
        let pragmas = "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; \
                       PRAGMA busy_timeout = 5000; PRAGMA wal_autocheckpoint = 10000; \
                       PRAGMA journal_size_limit = 67108864; PRAGMA cache_size = -16384; \
                       PRAGMA temp_store = MEMORY;";
        let read_pragmas = "PRAGMA busy_timeout = 5000; PRAGMA query_only = ON;";
        let pool = |max: u32, pragmas: &'static str| {
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
        let write = connections::discard_unfinished_transactions(pool(1, pragmas), true)
            .connect_with(options.clone())
            .await
            .context("opening SQLite")?;
        let read = pool(READ_POOL_SIZE, read_pragmas)
            .connect_with(options)
            .await
            .context("opening SQLite")?;
        Ok(Db {
            backend: Backend::Sqlite,
            receipts: write.clone(),
            write,
            read,
            url,
            instance_id: new_instance_id(),
            rollup: Default::default(),
            health: Default::default(),
        })
    }

    async fn connect_postgres(url: &str) -> anyhow::Result<Db> {
        if let Some(warning) = postgres_tls_warning(url) {
            tracing::warn!("{warning}");
        }
        let options = AnyConnectOptions::from_str(&with_statement_cache(url))
            .context("invalid PostgreSQL URL")?;
        let pool = |max: u32, session: &'static str| {
            AnyPoolOptions::new()
                .max_connections(max)
                .acquire_timeout(Duration::from_secs(3))
                // No ping per checkout: one round trip less per ingest batch and per
                // processing transaction; a broken connection fails its statement instead.
                .test_before_acquire(false)
                .after_connect(move |conn, _| {
                    Box::pin(async move {
                        conn.execute(session).await?;
                        Ok(())
                    })
                })
        };
        // Durable commits are the contract behind every 2xx, whatever the server's
        // default says. Every statement is planned for the tables as they are when it
        // runs: sqlx prepares each statement once per connection, and PostgreSQL's cached
        // generic plan, made when the tables were empty, stays until statistics change,
        // which on a server with autovacuum off is never. Measured (BENCHMARKS.md): the
        // batch's `orders … IN (…) FOR UPDATE` and `payment_refs … IN (…)` lookups ran as
        // scans of the whole table (27–53 ms per batch at 4,000 orders, growing with
        // every order) instead of index probes; processing a 20k backlog went from 973 to
        // 1,637 effects/s with this alone. Planning costs a fraction of a millisecond.
        let write = connections::discard_unfinished_transactions(
            pool(
                16,
                "SET synchronous_commit = on; SET plan_cache_mode = force_custom_plan",
            ),
            false,
        )
        .connect_with(options.clone())
        .await
        .context("connecting to PostgreSQL")?;
        // The receiver's writers insert rows through VALUES lists and nothing else: a plan
        // that does not depend on the tables' size, so PostgreSQL may cache it (the default
        // plan_cache_mode). Planning each receipt batch's INSERT was a third of the
        // planning time of a server under load (pg_stat_statements, BENCHMARKS.md).
        let receipts = connections::discard_unfinished_transactions(
            pool(16, "SET synchronous_commit = on"),
            false,
        )
        .connect_with(options.clone())
        .await
        .context("connecting to PostgreSQL")?;
        let read = pool(READ_POOL_SIZE, "SET default_transaction_read_only = on")
            .connect_with(options)
            .await
            .context("connecting to PostgreSQL")?;
        Ok(Db {
            backend: Backend::Postgres,
            write,
            receipts,
            read,
            url: url.to_string(),
            instance_id: new_instance_id(),
            rollup: Default::default(),
            health: Default::default(),
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

    /// Whether the database can commit now (`store::health`): writers record here.
    pub fn health(&self) -> &health::CommitHealth {
        &self.health
    }

    pub fn writer(&self) -> &AnyPool {
        &self.write
    }

    /// What the receipt pool's idle PostgreSQL sessions are (`Sessions`). Nothing outside
    /// this module can run a statement there (`store::ingest::store_receipts` is the one
    /// user of the pool); tests and diagnosis look through this.
    pub async fn receipt_sessions(&self) -> anyhow::Result<Sessions> {
        Sessions::of(&self.receipts).await
    }

    /// The same for the write pool's idle PostgreSQL sessions.
    pub async fn write_sessions(&self) -> anyhow::Result<Sessions> {
        Sessions::of(&self.write).await
    }

    pub fn reader(&self) -> &AnyPool {
        &self.read
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The id this process's claims carry.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    pub async fn close(&self) {
        self.write.close().await;
        self.receipts.close().await;
        self.read.close().await;
    }
}

/// Prepared statements each PostgreSQL connection keeps, unless the URL sets its own
/// `statement-cache-capacity`. The set-based batch writes one statement text per table and
/// row count (a claim of 32 gives up to 32 texts for each of a dozen statements); with
/// sqlx's default of 100, texts were evicted and prepared again (one more round trip and a
/// parse each) all the time under a live stream of varying batch sizes. But the cache is
/// counted in statements, not bytes, and each entry keeps its text (a VALUES list of up to
/// `values::MAX_PREPARED_PARAMS` placeholders, tens of KB): at 1,024 the server's RSS grew
/// through a 60 s probe at 3,594 events/s to 160 MiB, over the 150 MB bound; at 256 it
/// peaked at 131 MiB with the same latency (BENCHMARKS.md, issue 18, 2026-12-05 midday).
const STATEMENT_CACHE: usize = 256;

fn with_statement_cache(url: &str) -> String {
    if url.contains("statement-cache-capacity=") {
        return url.to_string();
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}statement-cache-capacity={STATEMENT_CACHE}")
}

/// Creates the SQLite file readable by its owner only (0600) before SQLite opens it; its
/// `-wal` and `-shm` files inherit the database file's permissions.
fn create_private_file(file: &std::path::Path) -> anyhow::Result<()> {
    if file.as_os_str().is_empty() || file.to_str() == Some(":memory:") || file.exists() {
        return Ok(());
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(file)
        .with_context(|| format!("creating {}", file.display()))?;
    Ok(())
}

/// A warning when a PostgreSQL URL reaches past this machine without TLS (`sslmode`
/// absent, `disable`, `allow` or `prefer`, which falls back to plaintext silently).
pub fn postgres_tls_warning(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let (authority, query) = match rest.split_once('?') {
        Some((a, q)) => (a, q),
        None => (rest, ""),
    };
    let authority = authority.split('/').next().unwrap_or("");
    let hostport = authority.rsplit('@').next().unwrap_or(authority);
    let host = if let Some(v6) = hostport.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        hostport.split(':').next().unwrap_or("")
    };
    let query_host = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("host="))
        .unwrap_or("");
    let host = if host.is_empty() { query_host } else { host };
    let local = host.is_empty()
        || host.starts_with('/')
        || host.starts_with("%2F")
        || host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if local {
        return None;
    }
    let sslmode = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("sslmode="))
        .unwrap_or("prefer");
    match sslmode {
        "require" | "verify-ca" | "verify-full" => None,
        mode => Some(format!(
            "PostgreSQL at {host} is reached without required TLS (sslmode={mode}): \
             credentials and payment data may cross the network in clear; use \
             sslmode=verify-full (with sslrootcert=… for a private CA)"
        )),
    }
}

/// Whether the database is a PostgreSQL server running with `autovacuum = off`: dead
/// tuples of the queues and of the orders the processor rewrites then stay until someone
/// vacuums (migration 0013's per-table settings only act when autovacuum runs).
pub async fn autovacuum_is_off(db: &Db) -> bool {
    if db.backend != Backend::Postgres {
        return false;
    }
    let setting: Option<String> = sqlx::query_scalar("SELECT current_setting('autovacuum')")
        .fetch_one(db.reader())
        .await
        .ok();
    setting.as_deref() == Some("off")
}

/// What `serve` logs when autovacuum is off; `vacuuming`: whether this instance vacuums
/// the hot tables itself (a processor with `processor.vacuum_secs` > 0).
pub fn autovacuum_warning(vacuuming: bool) -> String {
    let what = "PostgreSQL runs with autovacuum = off: finished inbox and outbox rows and \
                rewritten orders are never vacuumed by the server, so claims would slow \
                down as they pile up";
    if vacuuming {
        format!(
            "{what}; oncehook vacuums {} itself every processor.vacuum_secs (turning \
             autovacuum on in postgresql.conf covers every other table too)",
            HOT_TABLES.join(", ")
        )
    } else {
        format!(
            "{what}; this instance does not vacuum them (processor off or \
             processor.vacuum_secs = 0): turn autovacuum on, or let a processing instance \
             vacuum"
        )
    }
}

/// The tables the processor rewrites rows of: each claimed or finished queue row, each
/// order's placeholder turned projection and each fact upserted leaves a dead tuple.
const HOT_TABLES: [&str; 4] = ["inbox_events", "outbox", "orders", "order_facts"];

/// VACUUM (and ANALYZE) of the hot tables, for a PostgreSQL server whose autovacuum is
/// off. Every claim walks the due index from its oldest entry, and a claimed or finished
/// row leaves its old entry there until a vacuum removes it: measured in a 30-minute soak
/// at 700 deliveries/s with autovacuum off and nothing vacuuming, p50 receipt → effect
/// grew from 16 to 70 ms, minute after minute; with the two queues vacuumed, p50 stayed
/// flat but p99 still grew 2 ms a minute, so the orders and facts are vacuumed too.
/// `SKIP_LOCKED`: an instance whose peer is vacuuming a table skips it rather than waiting.
pub async fn vacuum_hot_tables(db: &Db) -> anyhow::Result<()> {
    if db.backend != Backend::Postgres {
        return Ok(());
    }
    let tables = HOT_TABLES.join(", ");
    db.writer()
        .execute(format!("VACUUM (SKIP_LOCKED, ANALYZE) {tables}").as_str())
        .await
        .with_context(|| format!("vacuuming {tables}"))?;
    Ok(())
}

/// Parameter `i` (1-based) of a generated statement: `$i` on PostgreSQL, a bare `?` on
/// SQLite, where bare `?`s are numbered by position.
///
/// Why not `$i` on SQLite too: SQLite keeps every named parameter (`$i`, `?NNN`) in a
/// list that `sqlite3_bind_parameter_name` walks from the start, and sqlx's binder asks
/// for the name of each parameter in turn, so binding a statement with P named parameters
/// costs P²/2 steps (2.6 million for a 256-receipt ingest insert of 2,304). Measured: 8 %
/// of the server's CPU under live traffic. Bare `?`s are not in the list. The rule that
/// comes with it: a statement that uses these must take every parameter from them, in
/// order of appearance (sqlx counts bare `?`s apart from named ones, so a `$1` before
/// them would bind the wrong values).
pub fn placeholder(backend: Backend, i: usize) -> String {
    match backend {
        Backend::Postgres => format!("${i}"),
        Backend::Sqlite => "?".to_string(),
    }
}

/// Placeholders for a multi-row VALUES list, row by row, from parameter 1.
pub fn values_list(backend: Backend, rows: usize, cols: usize) -> String {
    let mut out = String::with_capacity(rows * cols * 6);
    push_values_list(&mut out, backend, 1, rows, cols);
    out
}

/// `values_list` appended to `out`, numbered from parameter `first` (PostgreSQL), without
/// a string per placeholder: a batch's statements carry thousands.
pub fn push_values_list(
    out: &mut String,
    backend: Backend,
    first: usize,
    rows: usize,
    cols: usize,
) {
    use std::fmt::Write;
    for r in 0..rows {
        if r > 0 {
            out.push_str(", ");
        }
        out.push('(');
        for c in 0..cols {
            if c > 0 {
                out.push_str(", ");
            }
            match backend {
                Backend::Postgres => {
                    let _ = write!(out, "${}", first + r * cols + c);
                }
                Backend::Sqlite => out.push('?'),
            }
        }
        out.push(')');
    }
}

/// Placeholders `start, start+1, …` for an IN list of `n` values.
pub fn in_list(backend: Backend, start: usize, n: usize) -> String {
    (start..start + n)
        .map(|i| placeholder(backend, i))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Commits, failing when the transaction can no longer commit. On PostgreSQL a statement
/// that fails outside a savepoint aborts the whole transaction, and COMMIT then rolls back
/// without an error: a group commit would report events as handled that were never
/// written. A statement run first fails in an aborted transaction, which tells.
pub async fn commit_checked(mut tx: sqlx::Transaction<'_, sqlx::Any>) -> anyhow::Result<()> {
    if let Err(error) = sqlx::query("SELECT 1").execute(&mut *tx).await {
        let _ = tx.rollback().await;
        anyhow::bail!("the transaction was aborted and rolled back: {error}");
    }
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_statement_cache_is_raised_unless_the_url_sets_it() {
        use super::with_statement_cache as w;
        assert_eq!(
            w("postgres://u@h/db"),
            "postgres://u@h/db?statement-cache-capacity=256"
        );
        assert_eq!(
            w("postgres://u@h/db?sslmode=require"),
            "postgres://u@h/db?sslmode=require&statement-cache-capacity=256"
        );
        let own = "postgres://u@h/db?statement-cache-capacity=10";
        assert_eq!(w(own), own);
        // The URL sqlx parses keeps every other parameter and takes the capacity.
        let options: sqlx::postgres::PgConnectOptions =
            w("postgres://u@h/db?application_name=x").parse().unwrap();
        assert_eq!(options.get_application_name(), Some("x"));
    }

    #[test]
    fn plaintext_postgres_beyond_loopback_is_warned_about() {
        use super::postgres_tls_warning as w;
        assert!(w("postgres://u:p@db.internal/x").is_some());
        assert!(w("postgres://u@10.0.0.5:5432/x?sslmode=prefer").is_some());
        assert!(w("postgres://u@db.internal/x?sslmode=disable").is_some());
        assert!(w("postgres://u@db.internal/x?sslmode=require").is_none());
        assert!(w("postgres://u@db.internal/x?application_name=a&sslmode=verify-full").is_none());
        assert!(w("postgres://postgres@127.0.0.1:5432/postgres").is_none());
        assert!(w("postgres://u@localhost/x").is_none());
        assert!(w("postgres://u@[::1]:5432/x").is_none());
        assert!(w("postgres:///x?host=/var/run/postgresql").is_none());
        let text = w("postgres://u:hunter2@db.internal/x").unwrap();
        assert!(!text.contains("hunter2"), "{text}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn sqlite_directory_is_0700_and_its_files_0600() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let file = dir.join("oncehook.db");
        let db = super::Db::connect(&format!("sqlite://{}", file.display()))
            .await
            .unwrap();
        db.migrate().await.unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
        assert!(dir.join("oncehook.db-wal").exists(), "WAL file checked too");
        db.close().await;
    }

    #[tokio::test]
    async fn the_sqlite_writer_keeps_statement_journals_in_memory_and_binds_positionally() {
        use sqlx::Row;
        let tmp = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", tmp.path().join("o.db").display());
        let db = super::Db::connect(&url).await.unwrap();
        // 2 = MEMORY: no temporary file written per page a multi-row statement changes.
        let temp_store: i64 = sqlx::query("PRAGMA temp_store")
            .fetch_one(db.writer())
            .await
            .unwrap()
            .try_get(0)
            .unwrap();
        assert_eq!(temp_store, 2);
        // A statement of 3,000 positional parameters binds each value to its own place.
        let rows = 1_000;
        let sql = format!(
            "WITH v (a, b, c) AS (VALUES {}) SELECT a, b, c FROM v",
            super::values_list(super::Backend::Sqlite, rows, 3)
        );
        let mut q = sqlx::query(&sql);
        for i in 0..rows as i64 {
            q = q.bind(i).bind(format!("b{i}")).bind(-i);
        }
        let got = q.fetch_all(db.writer()).await.unwrap();
        assert_eq!(got.len(), rows);
        for (i, row) in got.iter().enumerate() {
            let i = i as i64;
            assert_eq!(row.try_get::<i64, _>(0).unwrap(), i);
            assert_eq!(row.try_get::<String, _>(1).unwrap(), format!("b{i}"));
            assert_eq!(row.try_get::<i64, _>(2).unwrap(), -i);
        }
        db.close().await;
    }

    #[test]
    fn values_list_numbers_placeholders_row_major() {
        use super::{in_list, values_list, Backend::*};
        assert_eq!(values_list(Postgres, 2, 2), "($1, $2), ($3, $4)");
        assert_eq!(values_list(Postgres, 1, 3), "($1, $2, $3)");
        assert_eq!(in_list(Postgres, 2, 3), "$2, $3, $4");
        // Positional on SQLite: no named parameter for its binder to look up.
        assert_eq!(values_list(Sqlite, 2, 2), "(?, ?), (?, ?)");
        assert_eq!(in_list(Sqlite, 2, 3), "?, ?, ?");
        let mut out = String::from("VALUES ");
        super::push_values_list(&mut out, Postgres, 5, 2, 2);
        assert_eq!(out, "VALUES ($5, $6), ($7, $8)");
    }
}
