//! Multi-row statements over a VALUES list, in chunks within the databases' parameter
//! limits: the set-based writes of the processor (`store::batch`) and the relay
//! (`store::outbox`).

use sqlx::any::AnyRow;
use sqlx::{Any, Transaction};

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
    let backend = super::Backend::of(tx);
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
