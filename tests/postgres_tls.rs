//! PostgreSQL over TLS: `sslmode=require` (and `verify-full` with the server's CA) work,
//! because sqlx is built with rustls.

mod common;

use sqlx::Row;

#[tokio::test]
async fn sslmode_require_connects_over_tls() {
    let Some(base) = common::postgres_base_url() else {
        return;
    };
    let separator = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{separator}sslmode=require");
    let db = oncehook::store::Db::connect(&url)
        .await
        .expect("sslmode=require connects (the test server has ssl = on)");
    let row = sqlx::query("SELECT ssl::int FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(db.writer())
        .await
        .unwrap();
    assert_eq!(row.get::<i32, _>(0), 1, "the session is encrypted");
    db.close().await;
}
