//! The outbox's idempotency keys and the ledger's effect keys are unique per order
//! (migrations `0016`/`0018_unique_keys_beside_their_order`): the same key twice for one
//! order is still refused, on both databases, and SQLite's rebuild of the two tables keeps
//! every row, its id, and the outbox's never-reused id counter.

mod common;

use common::{Kind, TestDb};
use sqlx::Row;

async fn insert_outbox(db: &oncehook::store::Db, order: &str, key: &str) -> Result<(), String> {
    sqlx::query(
        "INSERT INTO outbox (idempotency_key, effect_key, order_id, topic, sink, payload, \
         correlation_id, status, next_attempt_at, created_at) \
         VALUES ($1, 'e', $2, 't', 'log', '{}', 'c', 'pending', 0, 0)",
    )
    .bind(key)
    .bind(order)
    .execute(db.writer())
    .await
    .map(|_| ())
    .map_err(|e| e.to_string())
}

async fn insert_ledger(db: &oncehook::store::Db, order: &str, key: &str) -> Result<(), String> {
    sqlx::query(
        "INSERT INTO order_ledger (order_id, transition, status_after, amount, currency, \
         external_ref, effect_key, provider, event_id, occurred_at, recorded_at) \
         VALUES ($1, 'pay', 'paid', 100, 'eur', 'pi', $2, 'stripe', 'evt', 0, 0)",
    )
    .bind(order)
    .bind(key)
    .execute(db.writer())
    .await
    .map(|_| ())
    .map_err(|e| e.to_string())
}

async fn a_key_twice_for_one_order_is_refused(kind: Kind) {
    let handle = TestDb::new(kind).await;
    let db = handle.connect().await;
    insert_outbox(&db, "order-1", "k1").await.unwrap();
    let twice = insert_outbox(&db, "order-1", "k1").await.unwrap_err();
    assert!(twice.to_lowercase().contains("unique"), "{twice}");
    insert_ledger(&db, "order-1", "e1").await.unwrap();
    let twice = insert_ledger(&db, "order-1", "e1").await.unwrap_err();
    assert!(twice.to_lowercase().contains("unique"), "{twice}");
    // The digests include the order id, so another order never brings the same key; the
    // rule no longer needs the whole table's index to say so.
    insert_outbox(&db, "order-2", "k2").await.unwrap();
    insert_ledger(&db, "order-2", "e2").await.unwrap();
}

#[tokio::test]
async fn sqlite_refuses_a_key_twice_for_one_order() {
    a_key_twice_for_one_order_is_refused(Kind::Sqlite).await;
}

#[tokio::test]
async fn postgres_refuses_a_key_twice_for_one_order() {
    a_key_twice_for_one_order_is_refused(Kind::Postgres).await;
}

/// The SQLite migrations as files, in order.
fn sqlite_migrations() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

#[tokio::test]
async fn sqlites_rebuild_keeps_rows_ids_and_the_id_counter() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/m.db?mode=rwc", dir.path().display());
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&url).await.unwrap();
    let migrations = sqlite_migrations();
    let rebuild = migrations
        .iter()
        .position(|(name, _)| name.starts_with("0016_"))
        .expect("the rebuild migration");
    for (_, sql) in &migrations[..rebuild] {
        sqlx::raw_sql(sql).execute(&pool).await.unwrap();
    }
    // Rows as an older version left them; the outbox's newest ids were pruned, so its
    // counter (600) is above every id left.
    sqlx::raw_sql(
        "INSERT INTO outbox (id, idempotency_key, effect_key, order_id, topic, sink, payload, \
           correlation_id, status, next_attempt_at, created_at, claimed_by) \
         VALUES (7, 'k7', 'e7', 'order-7', 't', 'log', '{\"a\":1}', 'c7', 'delivering', 5, 4, 'i1'), \
                (600, 'k600', 'e600', 'order-600', 't', 'log', '{}', 'c600', 'pending', 0, 0, NULL); \
         DELETE FROM outbox WHERE id = 600; \
         INSERT INTO order_ledger (id, order_id, transition, status_after, amount, currency, \
           external_ref, effect_key, provider, event_id, occurred_at, recorded_at, entry, \
           group_ref, counted) \
         VALUES (3, 'order-7', 'refund', 'partially_refunded', 250, 'eur', 're_1', 'l3', \
           'stripe', 'evt_3', 10, 11, 'refund', 'ch_1', 1);",
    )
    .execute(&pool)
    .await
    .unwrap();
    for (_, sql) in &migrations[rebuild..] {
        sqlx::raw_sql(sql).execute(&pool).await.unwrap();
    }

    let outbox = sqlx::query(
        "SELECT id, idempotency_key, order_id, payload, status, next_attempt_at, claimed_by \
         FROM outbox",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(outbox.len(), 1);
    let row = &outbox[0];
    assert_eq!(row.get::<i64, _>(0), 7);
    assert_eq!(row.get::<String, _>(1), "k7");
    assert_eq!(row.get::<String, _>(3), "{\"a\":1}");
    assert_eq!(row.get::<String, _>(4), "delivering");
    assert_eq!(row.get::<i64, _>(5), 5);
    assert_eq!(row.get::<Option<String>, _>(6).as_deref(), Some("i1"));
    let ledger =
        sqlx::query("SELECT id, entry, group_ref, counted, amount, effect_key FROM order_ledger")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].get::<i64, _>(0), 3);
    assert_eq!(ledger[0].get::<String, _>(1), "refund");
    assert_eq!(
        ledger[0].get::<Option<String>, _>(2).as_deref(),
        Some("ch_1")
    );
    assert_eq!(ledger[0].get::<i64, _>(3), 1);
    assert_eq!(ledger[0].get::<i64, _>(4), 250);

    // A new row takes an id above every id ever handed out, not the pruned 600 again.
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO outbox (idempotency_key, effect_key, order_id, topic, sink, payload, \
         correlation_id, status, next_attempt_at, created_at) \
         VALUES ('k8', 'e8', 'order-8', 't', 'log', '{}', 'c8', 'pending', 0, 0) RETURNING id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(id, 601);

    // The indexes the processor and the pages read are all there.
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'index' \
         AND tbl_name IN ('outbox', 'order_ledger') ORDER BY name",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    // (The order lookups go through the unique keys since migration 0017:
    // tests/order_lookups.rs.)
    assert_eq!(
        indexes,
        [
            "outbox_due",
            "sqlite_autoindex_order_ledger_1",
            "sqlite_autoindex_outbox_1",
        ]
    );
    // The unique keys lead with the order.
    for (index, columns) in [
        ("sqlite_autoindex_outbox_1", ["order_id", "idempotency_key"]),
        (
            "sqlite_autoindex_order_ledger_1",
            ["order_id", "effect_key"],
        ),
    ] {
        let named: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT name FROM pragma_index_info('{index}') ORDER BY seqno"
        ))
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(named, columns, "{index}");
    }
}
