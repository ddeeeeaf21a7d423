//! Multi-row statements over a VALUES list, in chunks within the databases' parameter
//! limits: the set-based writes of the processor (`store::batch`) and the relay
//! (`store::outbox`).

use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::Query;
use sqlx::{Any, Transaction};

use super::Backend;

/// A value bound into a multi-row statement.
#[derive(Clone, Debug)]
pub enum Val {
    Text(Option<String>),
    Int(Option<i64>),
}

impl From<&str> for Val {
    fn from(v: &str) -> Self {
        Val::Text(Some(v.to_string()))
    }
}
impl From<String> for Val {
    fn from(v: String) -> Self {
        Val::Text(Some(v))
    }
}
impl From<Option<String>> for Val {
    fn from(v: Option<String>) -> Self {
        Val::Text(v)
    }
}
impl From<i64> for Val {
    fn from(v: i64) -> Self {
        Val::Int(Some(v))
    }
}
impl From<Option<i64>> for Val {
    fn from(v: Option<i64>) -> Self {
        Val::Int(v)
    }
}

/// Parameters per statement: SQLite's default limit is 32,766, PostgreSQL's 65,535.
pub const MAX_PARAMS: usize = 30_000;

/// Runs `head VALUES (…), (…) tail` over `rows` (each `cols` wide), in chunks that stay
/// within the parameter limit; returns the rows returned (when `tail` has RETURNING) and
/// the rows affected.
pub async fn run_values(
    tx: &mut Transaction<'_, Any>,
    head: &str,
    tail: &str,
    cols: usize,
    rows: &[Vec<Val>],
) -> Result<(Vec<AnyRow>, u64), sqlx::Error> {
    let mut returned = Vec::new();
    let mut affected = 0;
    let per_chunk = (MAX_PARAMS / cols).max(1);
    let backend = Backend::of(tx);
    for chunk in rows.chunks(per_chunk) {
        let sql = format!(
            "{head}{}{tail}",
            super::values_list(backend, chunk.len(), cols)
        );
        let mut q = sqlx::query(&sql);
        for row in chunk {
            debug_assert_eq!(row.len(), cols);
            for v in row {
                q = match v {
                    Val::Text(t) => q.bind(t.clone()),
                    Val::Int(i) => q.bind(*i),
                };
            }
        }
        if tail.contains("RETURNING") {
            returned.extend(q.fetch_all(&mut **tx).await?);
        } else {
            affected += q.execute(&mut **tx).await?.rows_affected();
        }
    }
    Ok((returned, affected))
}

/// Multi-row writes of one transaction that are independent of each other (none reads or
/// conflicts with what another writes), sent together. On PostgreSQL they go as one
/// statement, every write but the last a data-modifying CTE: one round trip for all of
/// them instead of one per table. Measured (BENCHMARKS.md, issue 18): with the receiver
/// beside it on two cores, a processing transaction spent 73 % of its time idle, waiting
/// for the server to send its next statement. SQLite has no writes in WITH: one statement
/// each there, as `run_values` does, in the order pushed.
#[derive(Default)]
pub struct Writes {
    parts: Vec<Part>,
}

struct Part {
    head: &'static str,
    tail: &'static str,
    cols: usize,
    rows: Vec<Vec<Val>>,
}

impl Part {
    fn params(&self) -> usize {
        self.cols * self.rows.len()
    }
}

impl Writes {
    /// `head VALUES (…), (…) tail` over `rows`, each `cols` wide; nothing when `rows` is
    /// empty. `tail` returns nothing (no RETURNING: the writes' rows are not read back).
    pub fn push(
        &mut self,
        head: &'static str,
        tail: &'static str,
        cols: usize,
        rows: Vec<Vec<Val>>,
    ) {
        debug_assert!(!tail.contains("RETURNING"));
        debug_assert!(rows.iter().all(|row| row.len() == cols));
        if !rows.is_empty() {
            self.parts.push(Part {
                head,
                tail,
                cols,
                rows,
            });
        }
    }

    /// Runs every write pushed. On PostgreSQL as few statements as the parameter limit
    /// allows (a write larger than the limit alone goes in chunks, as `run_values`).
    pub async fn run(self, tx: &mut Transaction<'_, Any>) -> Result<(), sqlx::Error> {
        self.run_then(tx, None).await.map(drop)
    }

    /// Runs every write pushed, then `then`, and returns its rows. On PostgreSQL `then` is
    /// the main query of the writes' last statement (every write before it a CTE): a
    /// batch's filing rides with its writes instead of taking a round trip of its own.
    /// Elsewhere it is a statement of its own after the writes.
    pub async fn run_then(
        self,
        tx: &mut Transaction<'_, Any>,
        then: Option<Then>,
    ) -> Result<Vec<AnyRow>, sqlx::Error> {
        let backend = Backend::of(tx);
        let mut group: Vec<Part> = Vec::new();
        let mut params = 0;
        for part in self.parts {
            if backend == Backend::Sqlite || part.params() > MAX_PARAMS {
                run_group(tx, std::mem::take(&mut group), None).await?;
                params = 0;
                run_values(tx, part.head, part.tail, part.cols, &part.rows).await?;
                continue;
            }
            if params + part.params() > MAX_PARAMS {
                run_group(tx, std::mem::take(&mut group), None).await?;
                params = 0;
            }
            params += part.params();
            group.push(part);
        }
        match then {
            Some(then) if backend == Backend::Sqlite => {
                let sql = (then.sql)(backend, 1);
                bind_rows(sqlx::query(&sql), [then.binds])
                    .fetch_all(&mut **tx)
                    .await
            }
            Some(then) if params + then.binds.len() > MAX_PARAMS => {
                run_group(tx, group, None).await?;
                run_group(tx, Vec::new(), Some(then)).await
            }
            then => run_group(tx, group, then).await,
        }
    }
}

/// A query that ends a `Writes` and returns rows (see `Writes::run_then`).
pub struct Then {
    /// The query's text, given the backend and the number of its first parameter.
    pub sql: fn(Backend, usize) -> String,
    pub binds: Vec<Val>,
}

/// Binds every value of `rows`, in order.
fn bind_rows<'q>(
    mut q: Query<'q, Any, AnyArguments<'q>>,
    rows: impl IntoIterator<Item = Vec<Val>>,
) -> Query<'q, Any, AnyArguments<'q>> {
    for row in rows {
        for v in row {
            q = match v {
                Val::Text(t) => q.bind(t),
                Val::Int(i) => q.bind(i),
            };
        }
    }
    q
}

/// The most parameters of a batch's writes statement that is kept prepared. A live stream's
/// batches, up to the usual claim of 32 events (a payment is 64 parameters: 2,050 for 32),
/// keep theirs: run unprepared, each is parsed and analysed again; on the Intel VM at
/// 2,500/s, p50 receipt → effect was 27–32 ms unprepared against 21–26 ms prepared (p99
/// moved as much between probes of one build as between builds: BENCHMARKS.md, issue 18).
/// Backlog claims of 128 (about 8,200 parameters) run unprepared: their texts (tens of KB,
/// one per combination of row counts) in each connection's cache (then of 1,024
/// statements) raised the server's peak RSS from 86–91 MiB to 120–160 MiB, and one parse
/// is spread over 128 events.
pub const MAX_PREPARED_PARAMS: usize = 4_096;

/// PostgreSQL: `WITH w0 AS (write), w1 AS (write) last write`, parameters numbered on
/// through the writes; with `then`, every write is a CTE and `then` the main query, whose
/// rows are returned.
async fn run_group(
    tx: &mut Transaction<'_, Any>,
    parts: Vec<Part>,
    then: Option<Then>,
) -> Result<Vec<AnyRow>, sqlx::Error> {
    if parts.is_empty() && then.is_none() {
        return Ok(Vec::new());
    }
    // The index of the part that is the main statement, if a write is.
    let main = if then.is_some() {
        None
    } else {
        parts.len().checked_sub(1)
    };
    let mut sql = String::new();
    let mut first_param = 1;
    for (i, part) in parts.iter().enumerate() {
        if Some(i) != main {
            sql.push_str(if i == 0 { "WITH " } else { ", " });
            sql.push_str(&format!("w{i} AS ("));
        } else if i > 0 {
            sql.push(' ');
        }
        sql.push_str(part.head);
        super::push_values_list(
            &mut sql,
            Backend::Postgres,
            first_param,
            part.rows.len(),
            part.cols,
        );
        sql.push_str(part.tail);
        if Some(i) != main {
            sql.push(')');
        }
        first_param += part.params();
    }
    let mut binds: Vec<Vec<Val>> = parts.into_iter().flat_map(|p| p.rows).collect();
    let returns = then.is_some();
    if let Some(then) = then {
        if !sql.is_empty() {
            sql.push(' ');
        }
        sql.push_str(&(then.sql)(Backend::Postgres, first_param));
        binds.push(then.binds);
    }
    let persistent = binds.iter().map(Vec::len).sum::<usize>() <= MAX_PREPARED_PARAMS;
    let query = bind_rows(sqlx::query(&sql), binds).persistent(persistent);
    if returns {
        return query.fetch_all(&mut **tx).await;
    }
    query.execute(&mut **tx).await?;
    Ok(Vec::new())
}
