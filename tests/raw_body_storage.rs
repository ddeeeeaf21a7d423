//! A provider's body is kept byte-exact however the database stores it. On PostgreSQL a
//! body over the 2 KB toast threshold (real events are 2-6 KB) is compressed with lz4 where
//! the server has it (migration 0019): pglz was 8-9 % of PostgreSQL's CPU under load. And
//! it is kept out of the row (migration 0020), so the filing's UPDATE of the row's status
//! copies a few hundred bytes instead of the whole compressed body.

mod common;

use common::fixtures::payment_intent_succeeded;
use common::{now_secs, Kind, TestApp};
use sha2::Digest;
use sqlx::Row;

/// A Stripe `payment_intent.succeeded` of about 3 KB, as real ones are.
fn large_event(id: &str) -> Vec<u8> {
    let mut event = payment_intent_succeeded(
        id,
        &format!("pi_{id}"),
        &format!("order-{id}"),
        1999,
        now_secs(),
    );
    event["data"]["object"]["description"] = "a long description ".repeat(150).into();
    // Ids and digests, as real events carry, so that it does not compress to nothing.
    let ids: Vec<String> = (0..12)
        .map(|n| format!("{:x}", sha2::Sha256::digest(format!("{id}{n}"))))
        .collect();
    event["data"]["object"]["metadata"]["line_items"] = ids.into();
    event.to_string().into_bytes()
}

async fn a_large_body_is_stored_byte_exact(kind: Kind) -> TestApp {
    let app = TestApp::spawn(kind).await;
    let body = large_event("evt_large_body");
    assert!(body.len() > 2_500, "{} bytes", body.len());
    let response = app
        .post_stripe_with(&body, common::STRIPE_SECRET, now_secs())
        .await;
    assert_eq!(response.status(), 200);
    let stored: Vec<u8> =
        sqlx::query("SELECT raw_body FROM inbox_events WHERE event_id = 'evt_large_body'")
            .fetch_one(app.db.reader())
            .await
            .unwrap()
            .get(0);
    assert_eq!(stored, body, "the raw body comes back byte for byte");
    assert_eq!(app.process().await, 1);
    assert_eq!(
        app.order_status("order-evt_large_body").await.as_deref(),
        Some("paid"),
        "the processor reads the stored body back"
    );
    app
}

#[tokio::test]
async fn sqlite_keeps_a_large_body_byte_exact() {
    a_large_body_is_stored_byte_exact(Kind::Sqlite)
        .await
        .shutdown()
        .await;
}

#[tokio::test]
async fn postgres_keeps_a_large_body_byte_exact_and_compresses_it_with_lz4() {
    let app = a_large_body_is_stored_byte_exact(Kind::Postgres).await;
    let server_has_lz4 = app
        .count(
            "SELECT count(*) FROM pg_settings \
             WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)",
        )
        .await
        == 1;
    let method: Option<String> = sqlx::query(
        "SELECT pg_column_compression(raw_body) FROM inbox_events \
         WHERE event_id = 'evt_large_body'",
    )
    .fetch_one(app.db.reader())
    .await
    .unwrap()
    .get(0);
    let expected = if server_has_lz4 { "lz4" } else { "pglz" };
    assert_eq!(method.as_deref(), Some(expected));
    // Compressed, the body is still over a kilobyte: it lives in the inbox's TOAST table
    // (its own rows), and the row holds a pointer to it. A filing's UPDATE then writes a new
    // row of a few hundred bytes and keeps the pointer; with the body inline it copied the
    // whole compressed body, 1.1 KB of WAL and heap more per event.
    let (stored, compressed): (i32, i32) = sqlx::query_as(
        "SELECT length(raw_body), pg_column_size(raw_body) FROM inbox_events \
         WHERE event_id = 'evt_large_body'",
    )
    .fetch_one(app.db.reader())
    .await
    .unwrap();
    assert!(
        compressed > 700,
        "{stored} bytes compressed to {compressed}"
    );
    let toast: String = sqlx::query_scalar(
        "SELECT reltoastrelid::regclass::text FROM pg_class \
         WHERE oid = 'inbox_events'::regclass",
    )
    .fetch_one(app.db.reader())
    .await
    .unwrap();
    // The only event stored: every value there is its body's. One value, not several: a
    // lower target also moved the row's short text columns out, a TOAST row each.
    let (values, chunks): (i64, i64) = sqlx::query_as(&format!(
        "SELECT count(DISTINCT chunk_id), count(*) FROM {toast}"
    ))
    .fetch_one(app.db.reader())
    .await
    .unwrap();
    assert_eq!(
        values, 1,
        "the body ({stored} bytes, {compressed} compressed) is kept out of the row, alone: \
         {values} values in {chunks} chunks"
    );
    app.shutdown().await;
}
