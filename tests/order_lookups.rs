//! An order's events, messages and ledger are read through indexes that lead with the order,
//! and an event writes no index entry that nothing reads (migrations
//! PostgreSQL `0021`, SQLite `0017_fewer_index_entries_per_event`): the outbox's and the ledger's unique
//! `(order_id, key)` indexes serve their order lookups, so no second `(order_id, id)` index
//! is kept beside them, and the inbox's order index holds filed events only (a pending
//! event has no order yet; every lookup names one). Both databases.

mod common;

use common::{Kind, TestApp};
use oncehook::store::read::EventFilter;
use oncehook::store::Backend;
use sqlx::Row;

both!(
    the_order_lookups_are_served_by_indexes_leading_with_the_order,
    no_index_duplicates_the_lead_of_a_unique_key_and_the_order_index_skips_unfiled_events,
);

/// The plan of `sql` (with `order` bound to each `$n`), one step a line. On PostgreSQL with
/// sequential scans and bitmap scans discouraged, so a tiny test table does not hide which
/// index would serve it at a million rows.
async fn plan(app: &TestApp, sql: &str, binds: &[&str]) -> String {
    let mut conn = app.db.reader().acquire().await.unwrap();
    let (explain, column) = match app.db.backend {
        Backend::Sqlite => ("EXPLAIN QUERY PLAN", 3),
        Backend::Postgres => ("EXPLAIN", 0),
    };
    let discouraged = ["enable_seqscan", "enable_bitmapscan"];
    common::planner_steps(&mut conn, &discouraged, true).await;
    let explained = format!("{explain} {sql}");
    let mut query = sqlx::query(&explained);
    for bind in binds {
        query = query.bind(bind.to_string());
    }
    let lines: Vec<String> = query
        .fetch_all(&mut *conn)
        .await
        .unwrap()
        .iter()
        .map(|row| row.get::<String, _>(column))
        .collect();
    common::planner_steps(&mut conn, &discouraged, false).await;
    lines.join("\n")
}

async fn the_order_lookups_are_served_by_indexes_leading_with_the_order(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| s.processor.enabled = false).await;
    // The order page's and the batch's lookups, and the consistency check's range.
    let (outbox, ledger) = match kind {
        Kind::Sqlite => (
            "sqlite_autoindex_outbox_1",
            "sqlite_autoindex_order_ledger_1",
        ),
        Kind::Postgres => (
            "outbox_order_idempotency_key",
            "order_ledger_order_effect_key",
        ),
    };
    for (sql, binds, index) in [
        (
            "SELECT id, topic FROM outbox WHERE order_id = $1 ORDER BY id",
            &["order-1"][..],
            outbox,
        ),
        (
            "SELECT id, entry FROM order_ledger WHERE order_id = $1 ORDER BY id",
            &["order-1"][..],
            ledger,
        ),
        (
            "SELECT entry FROM order_ledger WHERE order_id IN ($1, $2)",
            &["order-1", "order-2"][..],
            ledger,
        ),
        (
            "SELECT order_id, entry FROM order_ledger WHERE order_id >= $1 AND order_id <= $2 \
             ORDER BY order_id, id",
            &["order-1", "order-9"][..],
            ledger,
        ),
        (
            "SELECT DISTINCT effect_key FROM outbox WHERE order_id >= $1 AND order_id <= $2",
            &["order-1", "order-9"][..],
            outbox,
        ),
        (
            "SELECT id FROM inbox_events WHERE order_id = $1",
            &["order-1"][..],
            "inbox_events_order",
        ),
    ] {
        let plan = plan(&app, sql, binds).await;
        assert!(plan.contains(index), "{sql}:\n{plan}");
        assert!(
            !plan.contains("Seq Scan") && !plan.contains("SCAN outbox"),
            "{sql}:\n{plan}"
        );
        assert!(!plan.contains("SCAN order_ledger"), "{sql}:\n{plan}");
    }
    // The inbox page filtered by order, as the dashboard asks for it.
    let mut conn = app.db.reader().acquire().await.unwrap();
    let filter = EventFilter {
        order_id: Some("order-1".into()),
        before: Some(1_000),
        limit: 51,
        ..Default::default()
    };
    let page = oncehook::store::read::plan_of_events(&app.db, &mut conn, &filter)
        .await
        .unwrap();
    assert!(page.contains("inbox_events_order"), "{page}");
    drop(conn);
    app.shutdown().await;
}

async fn no_index_duplicates_the_lead_of_a_unique_key_and_the_order_index_skips_unfiled_events(
    kind: Kind,
) {
    let app = TestApp::spawn_with(kind, |s| s.processor.enabled = false).await;
    let sql = match kind {
        Kind::Sqlite => {
            "SELECT name, COALESCE(sql, '') FROM sqlite_master WHERE type = 'index' \
             AND tbl_name IN ('outbox', 'order_ledger', 'inbox_events') ORDER BY name"
        }
        Kind::Postgres => {
            "SELECT indexname::text, indexdef FROM pg_indexes \
             WHERE tablename IN ('outbox', 'order_ledger', 'inbox_events') ORDER BY indexname"
        }
    };
    let indexes: Vec<(String, String)> = sqlx::query_as(sql)
        .fetch_all(app.db.reader())
        .await
        .unwrap();
    let names: Vec<&str> = indexes.iter().map(|(n, _)| n.as_str()).collect();
    for gone in ["outbox_order", "order_ledger_order"] {
        assert!(!names.contains(&gone), "{gone} is still there: {names:?}");
    }
    let (_, order) = indexes
        .iter()
        .find(|(n, _)| n == "inbox_events_order")
        .unwrap_or_else(|| panic!("no inbox_events_order: {names:?}"));
    assert!(
        order
            .to_lowercase()
            .replace(['(', ')'], "")
            .contains("where order_id is not null"),
        "{order}"
    );
    app.shutdown().await;
}
