//! The relay logs a successful attempt and marks its row delivered in one transaction: the
//! attempts log never shows a delivery the row does not, and a resend after a failed mark
//! logs one success, not two.

mod common;

use common::fixtures::*;
use common::{Kind, TestApp};

both!(a_failed_mark_logs_nothing_and_the_resend_is_logged_once);

async fn a_failed_mark_logs_nothing_and_the_resend_is_logged_once(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
    })
    .await;
    app.post_stripe(&payment_intent_succeeded(
        "evt_l", "pi_l", "ord-l", 100, T10_00,
    ))
    .await;
    app.process().await;
    let rows = app.count("SELECT COUNT(*) FROM outbox").await;
    assert_eq!(rows, 2);

    // The database refuses to mark anything delivered for a while.
    let refuse = match kind {
        Kind::Sqlite => vec![
            "CREATE TRIGGER refuse_mark BEFORE UPDATE OF status ON outbox \
             WHEN NEW.status = 'delivered' BEGIN SELECT RAISE(ABORT, 'mark refused'); END",
        ],
        Kind::Postgres => vec![
            "CREATE FUNCTION refuse_mark() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'mark refused'; END $$",
            "CREATE TRIGGER refuse_mark BEFORE UPDATE ON outbox FOR EACH ROW \
             WHEN (NEW.status = 'delivered') EXECUTE FUNCTION refuse_mark()",
        ],
    };
    for sql in refuse {
        sqlx::query(sql).execute(app.db.writer()).await.unwrap();
    }
    app.relay().run_once().await.unwrap();
    assert_eq!(
        app.count("SELECT COUNT(*) FROM outbox WHERE status = 'delivered'")
            .await,
        0
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM outbox_attempts").await,
        0,
        "no logged success for a row that is not marked"
    );

    let allow = match kind {
        Kind::Sqlite => "DROP TRIGGER refuse_mark",
        Kind::Postgres => "DROP TRIGGER refuse_mark ON outbox",
    };
    sqlx::query(allow).execute(app.db.writer()).await.unwrap();
    // The leases of the unmarked rows run out; resend now.
    sqlx::query("UPDATE outbox SET next_attempt_at = 0 WHERE status = 'delivering'")
        .execute(app.db.writer())
        .await
        .unwrap();
    app.relay().run_until_idle().await.unwrap();
    assert_eq!(
        app.count("SELECT COUNT(*) FROM outbox WHERE status = 'delivered'")
            .await,
        rows
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM outbox_attempts").await,
        rows,
        "one logged attempt per delivered row"
    );
    app.shutdown().await;
}
