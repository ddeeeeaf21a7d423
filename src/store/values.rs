//! Multi-row statements over a VALUES list, in chunks within the databases' parameter
//! limits: the set-based writes of the processor (`store::batch`) and the relay
//! (`store::outbox`).

use sqlx::any::AnyRow;
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
        let backend = Backend::of(tx);
        let mut group: Vec<Part> = Vec::new();
        let mut params = 0;
        for part in self.parts {
            if backend == Backend::Sqlite || part.params() > MAX_PARAMS {
                run_group(tx, std::mem::take(&mut group)).await?;
                params = 0;
                run_values(tx, part.head, part.tail, part.cols, &part.rows).await?;
                continue;
            }
            if params + part.params() > MAX_PARAMS {
                run_group(tx, std::mem::take(&mut group)).await?;
                params = 0;
            }
            params += part.params();
            group.push(part);
        }
        run_group(tx, group).await
    }
}

/// PostgreSQL: `WITH w0 AS (write), w1 AS (write) last write`, parameters numbered on
/// through the writes.
async fn run_group(tx: &mut Transaction<'_, Any>, parts: Vec<Part>) -> Result<(), sqlx::Error> {
    let Some(last) = parts.len().checked_sub(1) else {
        return Ok(());
    };
    let mut sql = String::new();
    let mut first_param = 1;
    for (i, part) in parts.iter().enumerate() {
        if i < last {
            sql.push_str(if i == 0 { "WITH " } else { ", " });
            sql.push_str(&format!("w{i} AS ("));
        } else if last > 0 {
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
        if i < last {
            sql.push(')');
        }
        first_param += part.params();
    }
    let mut q = sqlx::query(&sql);
    for part in parts {
        for row in part.rows {
            for v in row {
                q = match v {
                    Val::Text(t) => q.bind(t),
                    Val::Int(i) => q.bind(i),
                };
            }
        }
    }
    q.execute(&mut **tx).await?;
    Ok(())
}
