//! Processor failures: classified retries, the dead-letter queue, redrive (one, by event
//! id, by filter, dry run), resolve/discard, retention, and the database going away.

mod common;

use std::time::Duration;

use common::fixtures::*;
use common::{snapshot, Kind, TestApp, WriteLock};
use oncehook::config::Providers;
use oncehook::pipeline::redrive::{redrive, RedriveResult};
use oncehook::store::dead_letters::{self, Actor, DeadLetterFilter};

both!(
    transient_failure_retries_then_dead_letters_with_its_history,
    redrive_after_the_cause_is_fixed_applies_once,
    redrive_of_something_already_applied_is_a_no_op,
    bulk_redrive_by_filter_touches_only_the_matching_items,
    dry_run_changes_nothing,
    resolve_and_discard_need_a_reason_and_are_audited,
    retention_prunes_finished_rows_but_keeps_open_dead_letters_sources,
    database_unavailable_for_a_while_loses_nothing,
    concurrent_redrives_of_one_item_requeue_it_once,
    a_new_failure_never_reopens_an_old_unrelated_dead_letter,
);

const ACTOR: Actor<'static> = Actor {
    name: "oncall@test",
    reason: Some("cause fixed"),
    source: None,
};

/// An app whose "order not known yet" retries give up after 3 attempts.
async fn app(kind: Kind) -> TestApp {
    TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.processor.retry.max_attempts = 3;
    })
    .await
}

/// Processes, making waiting retries due each round, until nothing is left waiting.
async fn process_through_retries(app: &TestApp) {
    for _ in 0..10 {
        app.process().await;
        if app
            .count("SELECT COUNT(*) FROM inbox_events WHERE status = 'pending'")
            .await
            == 0
        {
            return;
        }
        app.make_due().await;
    }
}

async fn run(app: &TestApp, filter: DeadLetterFilter, dry_run: bool) -> Vec<RedriveResult> {
    let providers = Providers::build(&app.settings.providers).unwrap();
    redrive(&app.db, &providers, &filter, dry_run, &ACTOR, |_, _| {})
        .await
        .unwrap()
}

fn by_event(id: &str) -> DeadLetterFilter {
    DeadLetterFilter {
        event_id: Some(id.into()),
        ..Default::default()
    }
}

/// A refund naming only a payment nobody told us about: waits, then is dead-lettered.
async fn orphan_refund(app: &TestApp, n: u32) -> String {
    let id = format!("evt_orphan_{n}");
    app.post_stripe(&refund_created(
        &id,
        &format!("pi_orphan_{n}"),
        &format!("re_orphan_{n}"),
        100,
        T10_00 + 60,
    ))
    .await;
    id
}

async fn transient_failure_retries_then_dead_letters_with_its_history(kind: Kind) {
    let app = app(kind).await;
    let id = orphan_refund(&app, 1).await;
    app.process().await;
    assert_eq!(
        app.event_status(&id).await.0,
        "pending",
        "retried, not dead yet"
    );
    process_through_retries(&app).await;
    let (status, reason) = app.event_status(&id).await;
    assert_eq!(status, "dead");
    assert!(reason.unwrap().contains("gave up after 3 attempts"));
    let list = dead_letters::list(&app.db, &by_event(&id), oncehook::store::now_ms())
        .await
        .unwrap();
    assert_eq!(list.len(), 1);
    let dl = &list[0];
    assert_eq!(
        (dl.stage.as_str(), dl.error_class.as_str(), dl.attempts),
        ("processor", "unknown", 3)
    );
    let detail = dead_letters::show(&app.db, dl.id, oncehook::store::now_ms())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        detail.error_history.as_array().unwrap().len(),
        3,
        "{}",
        detail.error_history
    );
    assert!(
        detail.payload.contains("re_orphan_1"),
        "original payload kept"
    );
    assert_eq!(detail.summary.correlation_id.len(), 36);
    app.shutdown().await;
}

async fn redrive_after_the_cause_is_fixed_applies_once(kind: Kind) {
    let app = app(kind).await;
    let id = orphan_refund(&app, 2).await;
    process_through_retries(&app).await;
    assert_eq!(app.event_status(&id).await.0, "dead");
    // The cause: the payment was never seen. It arrives now.
    app.post_stripe(&payment_intent_succeeded(
        "evt_orphan_pay",
        "pi_orphan_2",
        "order-o2",
        100,
        T10_00,
    ))
    .await;
    app.process().await;
    let dry = run(&app, by_event(&id), true).await;
    assert!(
        dry[0]
            .outcome
            .starts_with("apply: refund of re_orphan_2 on order order-o2"),
        "{dry:?}"
    );
    let done = run(&app, by_event(&id), false).await;
    assert_eq!(done[0].outcome, "requeued");
    app.process().await;
    assert_eq!(app.event_status(&id).await.0, "applied");
    assert_eq!(
        app.order_status("order-o2").await.as_deref(),
        Some("refunded")
    );
    // A second redrive of the same dead letter is skipped; reprocessing can't double it.
    let again = run(
        &app,
        DeadLetterFilter {
            ids: vec![done[0].dead_letter_id],
            ..Default::default()
        },
        false,
    )
    .await;
    assert!(
        again[0].outcome.starts_with("skipped: status is redriven"),
        "{again:?}"
    );
    app.process().await;
    assert_eq!(
        app.count("SELECT COUNT(*) FROM order_ledger WHERE transition = 'refund'")
            .await,
        1
    );
    let (status, history): (String, String) =
        sqlx::query_as("SELECT status, error_history FROM dead_letters")
            .fetch_one(app.db.reader())
            .await
            .unwrap();
    assert_eq!(status, "redriven");
    assert!(history.contains("order not known yet"), "history kept");
    app.shutdown().await;
}

async fn redrive_of_something_already_applied_is_a_no_op(kind: Kind) {
    let app = app(kind).await;
    // An invoice naming only its payment dies before the payment event arrives.
    app.post_stripe(&invoice_payment_succeeded_old(
        "evt_inv_first",
        "pi_late",
        100,
        T10_00,
    ))
    .await;
    process_through_retries(&app).await;
    assert_eq!(app.event_status("evt_inv_first").await.0, "dead");
    app.post_stripe(&payment_intent_succeeded(
        "evt_pi_late",
        "pi_late",
        "order-late",
        100,
        T10_00,
    ))
    .await;
    app.process().await;
    let before = snapshot(&app.db).await;
    let dry = run(&app, by_event("evt_inv_first"), true).await;
    assert!(
        dry[0]
            .outcome
            .starts_with("duplicate: effect already recorded by event evt_pi_late"),
        "{dry:?}"
    );
    run(&app, by_event("evt_inv_first"), false).await;
    app.process().await;
    assert_eq!(app.event_status("evt_inv_first").await.0, "duplicate");
    let after = snapshot(&app.db).await;
    assert_eq!(after.effects, before.effects, "no second effect");
    assert_eq!(after.ledger, before.ledger);
    assert_eq!(after.outbox, before.outbox);
    app.shutdown().await;
}

async fn bulk_redrive_by_filter_touches_only_the_matching_items(kind: Kind) {
    let app = app(kind).await;
    for n in 10..13 {
        orphan_refund(&app, n).await;
    }
    for n in 0..2 {
        let raw = format!("not json {n}").into_bytes();
        app.post_stripe_with(&raw, common::STRIPE_SECRET, common::now_secs())
            .await;
    }
    process_through_retries(&app).await;
    assert_eq!(
        app.count("SELECT COUNT(*) FROM dead_letters WHERE status = 'open'")
            .await,
        5
    );
    let unknown = DeadLetterFilter {
        class: Some("unknown".into()),
        error_contains: Some("order not known".into()),
        ..Default::default()
    };
    let done = run(&app, unknown, false).await;
    assert_eq!(done.len(), 3);
    assert!(done.iter().all(|r| r.outcome == "requeued"));
    let still_open: Vec<String> =
        sqlx::query_scalar("SELECT error_class FROM dead_letters WHERE status = 'open'")
            .fetch_all(app.db.reader())
            .await
            .unwrap();
    assert_eq!(still_open, vec!["permanent", "permanent"]);
    assert_eq!(
        app.count("SELECT COUNT(*) FROM inbox_events WHERE status = 'pending'")
            .await,
        3
    );
    app.shutdown().await;
}

async fn dry_run_changes_nothing(kind: Kind) {
    let app = app(kind).await;
    orphan_refund(&app, 20).await;
    app.post_stripe_with(b"{broken", common::STRIPE_SECRET, common::now_secs())
        .await;
    process_through_retries(&app).await;
    let before = snapshot(&app.db).await;
    let dead_before: Vec<(i64, String, String)> =
        sqlx::query_as("SELECT id, status, error_history FROM dead_letters ORDER BY id")
            .fetch_all(app.db.reader())
            .await
            .unwrap();
    let predictions = run(&app, DeadLetterFilter::default(), true).await;
    assert_eq!(predictions.len(), 2);
    let outcomes: Vec<&str> = predictions.iter().map(|p| p.outcome.as_str()).collect();
    assert!(
        outcomes
            .iter()
            .any(|o| o.starts_with("wait: order not known yet")),
        "{outcomes:?}"
    );
    assert!(
        outcomes
            .iter()
            .any(|o| o.starts_with("fail again (permanent): body is not JSON")),
        "{outcomes:?}"
    );
    assert_eq!(snapshot(&app.db).await, before);
    let dead_after: Vec<(i64, String, String)> =
        sqlx::query_as("SELECT id, status, error_history FROM dead_letters ORDER BY id")
            .fetch_all(app.db.reader())
            .await
            .unwrap();
    assert_eq!(dead_after, dead_before);
    assert_eq!(app.count("SELECT COUNT(*) FROM redrives").await, 0);
    assert_eq!(app.count("SELECT COUNT(*) FROM audit_log").await, 0);
    app.shutdown().await;
}

async fn resolve_and_discard_need_a_reason_and_are_audited(kind: Kind) {
    let app = app(kind).await;
    for n in 0..2 {
        app.post_stripe_with(
            format!("junk {n}").as_bytes(),
            common::STRIPE_SECRET,
            common::now_secs(),
        )
        .await;
    }
    app.process().await;
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM dead_letters ORDER BY id")
        .fetch_all(app.db.reader())
        .await
        .unwrap();
    let now = oncehook::store::now_ms();
    let no_reason = Actor {
        name: "oncall@test",
        reason: None,
        source: None,
    };
    let err = dead_letters::close(&app.db, ids[0], "discarded", &no_reason, now)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("reason is required"), "{err}");
    dead_letters::close(
        &app.db,
        ids[0],
        "discarded",
        &Actor {
            name: "a",
            reason: Some("test junk"),
            source: None,
        },
        now,
    )
    .await
    .unwrap();
    dead_letters::close(
        &app.db,
        ids[1],
        "resolved",
        &Actor {
            name: "b",
            reason: Some("replayed by hand"),
            source: None,
        },
        now,
    )
    .await
    .unwrap();
    let err = dead_letters::close(&app.db, ids[1], "resolved", &ACTOR, now)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("already closed"), "{err}");
    let audit: Vec<(String, String, String)> =
        sqlx::query_as("SELECT actor, action, reason FROM audit_log ORDER BY id")
            .fetch_all(app.db.reader())
            .await
            .unwrap();
    assert_eq!(
        audit,
        vec![
            ("a".into(), "dead_letter.discard".into(), "test junk".into()),
            (
                "b".into(),
                "dead_letter.resolve".into(),
                "replayed by hand".into()
            )
        ]
    );
    app.shutdown().await;
}

async fn retention_prunes_finished_rows_but_keeps_open_dead_letters_sources(kind: Kind) {
    let app = app(kind).await;
    app.post_stripe(&payment_intent_succeeded(
        "evt_old_ok",
        "pi_old",
        "order-old",
        100,
        T10_00,
    ))
    .await;
    app.post_stripe_with(b"old junk", common::STRIPE_SECRET, common::now_secs())
        .await;
    app.process().await;
    app.relay().run_until_idle().await.unwrap();
    // Everything is 40 days old.
    let forty_days_ago = oncehook::store::now_ms() - 40 * 86_400_000;
    for sql in [
        "UPDATE inbox_events SET received_at = $1",
        "UPDATE deliveries SET received_at = $1",
        "UPDATE outbox SET delivered_at = $1",
    ] {
        sqlx::query(sql)
            .bind(forty_days_ago)
            .execute(app.db.writer())
            .await
            .unwrap();
    }
    let pruned = oncehook::pipeline::retention::prune(
        &app.db,
        &app.settings.retention,
        oncehook::store::now_ms(),
    )
    .await
    .unwrap();
    assert_eq!(pruned.inbox_events, 1, "{pruned:?}");
    assert_eq!(
        pruned.outbox, 2,
        "payment.recorded and order.paid: {pruned:?}"
    );
    let left: Vec<String> = sqlx::query_scalar("SELECT status FROM inbox_events")
        .fetch_all(app.db.reader())
        .await
        .unwrap();
    assert_eq!(left, vec!["dead"], "the open dead letter's event is kept");
    assert_eq!(
        app.count("SELECT COUNT(*) FROM deliveries").await,
        1,
        "and its delivery log"
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM processed_effects").await,
        1,
        "effect keys are never pruned"
    );
    assert_eq!(app.count("SELECT COUNT(*) FROM dead_letters").await, 1);
    // A late redelivery of the pruned event is still a duplicate effect.
    app.post_stripe(&payment_intent_succeeded(
        "evt_old_ok",
        "pi_old",
        "order-old",
        100,
        T10_00,
    ))
    .await;
    app.process().await;
    assert_eq!(app.event_status("evt_old_ok").await.0, "duplicate");
    app.shutdown().await;
}

/// The database refuses the processor's writes for a while (a lock held elsewhere), then
/// comes back: every event is applied exactly once, nothing is lost.
async fn database_unavailable_for_a_while_loses_nothing(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.workers = 2;
        s.processor.retry.base_ms = 20;
        s.processor.retry.cap_ms = 200;
        s.processor.retry.max_attempts = 1_000;
        s.outbox.relay.retry.base_ms = 20;
        s.receiver.commit_timeout_ms = 500;
    })
    .await;
    let lock = WriteLock::take(&app, "orders").await;
    let release = async move {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        lock.release().await;
    };
    // Providers retry until they get a 2xx.
    let senders = (0..10).map(|i| {
        let app = &app;
        async move {
            let e = payment_intent_succeeded(
                &format!("evt_dn{i}"),
                &format!("pi_dn{i}"),
                &format!("order-dn{i}"),
                100,
                T10_00,
            );
            for _ in 0..100 {
                if app.post_stripe(&e).await.status() == 200 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("evt_dn{i} never acknowledged");
        }
    });
    tokio::join!(futures::future::join_all(senders), release);
    app.wait_until_processed().await;
    assert_eq!(
        app.count("SELECT COUNT(*) FROM inbox_events WHERE status = 'applied'")
            .await,
        10
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM processed_effects").await,
        10
    );
    assert_eq!(app.count("SELECT COUNT(*) FROM order_ledger").await, 10);
    assert_eq!(app.count("SELECT COUNT(*) FROM dead_letters").await, 0);
    app.shutdown().await;
}

async fn concurrent_redrives_of_one_item_requeue_it_once(kind: Kind) {
    let app = app(kind).await;
    let id = orphan_refund(&app, 7).await;
    process_through_retries(&app).await;
    let dead_letter: i64 = sqlx::query_scalar("SELECT id FROM dead_letters WHERE event_id = $1")
        .bind(&id)
        .fetch_one(app.db.reader())
        .await
        .unwrap();
    app.post_stripe(&payment_intent_succeeded(
        "evt_pay_7",
        "pi_orphan_7",
        "order-o7",
        100,
        T10_00,
    ))
    .await;
    app.process().await;
    // Eight operators click "redrive" at once.
    let now = oncehook::store::now_ms();
    let outcomes = futures::future::join_all(
        (0..8).map(|_| dead_letters::redrive_one(&app.db, dead_letter, &ACTOR, now)),
    )
    .await;
    let outcomes: Vec<String> = outcomes.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        outcomes.iter().filter(|o| *o == "requeued").count(),
        1,
        "{outcomes:?}"
    );
    assert!(outcomes
        .iter()
        .all(|o| o == "requeued" || o.starts_with("skipped")));
    app.process().await;
    assert_eq!(app.event_status(&id).await.0, "applied");
    assert_eq!(
        app.count("SELECT COUNT(*) FROM order_ledger WHERE entry = 'refund'")
            .await,
        1
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM redrives WHERE outcome = 'requeued'")
            .await,
        1
    );
    app.shutdown().await;
}

/// SQLite reuses the largest INTEGER PRIMARY KEY once its row is deleted; a dead letter is
/// keyed by its source row's id, so a reused id would reopen someone else's dead letter.
async fn a_new_failure_never_reopens_an_old_unrelated_dead_letter(kind: Kind) {
    let app = app(kind).await;
    let first = orphan_refund(&app, 8).await;
    process_through_retries(&app).await;
    let (old_id, old_source): (i64, i64) =
        sqlx::query_as("SELECT id, source_id FROM dead_letters WHERE event_id = $1")
            .bind(&first)
            .fetch_one(app.db.reader())
            .await
            .unwrap();
    dead_letters::close(
        &app.db,
        old_id,
        "discarded",
        &ACTOR,
        oncehook::store::now_ms(),
    )
    .await
    .unwrap();
    // Retention removes its (newest) inbox row.
    sqlx::query("UPDATE inbox_events SET received_at = 0")
        .execute(app.db.writer())
        .await
        .unwrap();
    oncehook::pipeline::retention::prune(
        &app.db,
        &app.settings.retention,
        oncehook::store::now_ms(),
    )
    .await
    .unwrap();
    assert_eq!(app.count("SELECT COUNT(*) FROM inbox_events").await, 0);

    let second = orphan_refund(&app, 9).await;
    process_through_retries(&app).await;
    let new_source: i64 = sqlx::query_scalar("SELECT id FROM inbox_events WHERE event_id = $1")
        .bind(&second)
        .fetch_one(app.db.reader())
        .await
        .unwrap();
    assert_ne!(new_source, old_source, "ids are never reused");
    let letters: Vec<(String, String)> =
        sqlx::query_as("SELECT event_id, status FROM dead_letters ORDER BY id")
            .fetch_all(app.db.reader())
            .await
            .unwrap();
    assert_eq!(
        letters,
        vec![
            (first.clone(), "discarded".to_string()),
            (second.clone(), "open".to_string())
        ]
    );
    app.shutdown().await;
}
