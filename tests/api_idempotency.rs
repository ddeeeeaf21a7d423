//! Our own API's `Idempotency-Key` over real HTTP, on both databases: the same key and
//! request replay the first answer without doing the work again, another request under the
//! key is a 422, a key still running is a 409, keys belong to their token and expire after
//! 24 hours — on every POST (a refund, a dead-letter action).

mod common;

use common::fixtures::*;
use common::{Kind, TestApp};
use oncehook::store::{now_ms, tokens};
use serde_json::{json, Value};

both!(
    the_same_key_and_body_replay_the_first_answer_and_refund_once,
    another_body_under_a_key_is_422_and_changes_nothing,
    a_key_still_running_is_409_and_concurrent_requests_make_one_command,
    keys_belong_to_their_token_and_expire_after_a_day,
    dead_letter_actions_replay_too,
);

async fn token(app: &TestApp, name: &str, role: &str) -> String {
    let now = now_ms();
    tokens::create(
        &app.db,
        &tokens::NewToken {
            name,
            role,
            created_by: "test",
            maker: tokens::Maker::Shell,
            now,
            expires_at: now + 86_400_000,
        },
        None,
    )
    .await
    .unwrap()
    .1
}

/// A paid order `ord-1` of 4200 (relay off: commands stay `requested`).
async fn paid(kind: Kind) -> TestApp {
    let app = TestApp::spawn(kind).await;
    app.post_stripe(&payment_intent_succeeded(
        "evt_pay_1",
        "pi_1",
        "ord-1",
        4200,
        T10_00,
    ))
    .await;
    app.process().await;
    app
}

async fn post(
    app: &TestApp,
    path: &str,
    token: &str,
    key: Option<&str>,
    body: Value,
) -> (u16, Value, bool) {
    let mut request = app
        .http
        .post(format!("{}{path}", app.url))
        .bearer_auth(token)
        .json(&body);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    let r = request.send().await.unwrap();
    let replayed = r.headers().get("idempotent-replayed").is_some();
    (
        r.status().as_u16(),
        r.json().await.unwrap_or(Value::Null),
        replayed,
    )
}

const REFUNDS: &str = "/api/v1/orders/ord-1/refunds";

async fn commands(app: &TestApp) -> i64 {
    app.count("SELECT COUNT(*) FROM provider_commands").await
}

async fn the_same_key_and_body_replay_the_first_answer_and_refund_once(kind: Kind) {
    let app = paid(kind).await;
    let ops = token(&app, "ops", "operator").await;
    let body = json!({"amount": 1000, "reason": "broken"});
    let first = post(&app, REFUNDS, &ops, Some("k-1"), body.clone()).await;
    assert_eq!((first.0, first.2), (201, false), "{}", first.1);
    let again = post(&app, REFUNDS, &ops, Some("k-1"), body.clone()).await;
    assert_eq!((again.0, again.2), (201, true));
    assert_eq!(again.1, first.1, "the first answer, byte for byte");
    assert_eq!(commands(&app).await, 1);
    assert_eq!(
        app.count("SELECT COUNT(*) FROM audit_log WHERE action = 'order.refund'")
            .await,
        1
    );
    // Without a key, each request is its own.
    post(&app, REFUNDS, &ops, None, body.clone()).await;
    assert_eq!(commands(&app).await, 2);
    // A refused request is an answer too: replayed, even once it would now succeed.
    let refused = post(
        &app,
        REFUNDS,
        &ops,
        Some("k-big"),
        json!({"amount": 3000, "reason": "x"}),
    )
    .await;
    // More than is left: a conflict with the order's state (409), kept like any answer.
    assert_eq!(refused.0, 409);
    app.http
        .post(format!("{}/api/v1/orders/ord-1/refunds", app.url))
        .bearer_auth(&ops)
        .json(&json!({"amount": 2200, "reason": "rest"}))
        .send()
        .await
        .unwrap();
    let replay = post(
        &app,
        REFUNDS,
        &ops,
        Some("k-big"),
        json!({"amount": 3000, "reason": "x"}),
    )
    .await;
    assert_eq!((replay.0, replay.2), (409, true));
    app.shutdown().await;
}

async fn another_body_under_a_key_is_422_and_changes_nothing(kind: Kind) {
    let app = paid(kind).await;
    let ops = token(&app, "ops", "operator").await;
    post(
        &app,
        REFUNDS,
        &ops,
        Some("k-1"),
        json!({"amount": 1000, "reason": "broken"}),
    )
    .await;
    let other = post(
        &app,
        REFUNDS,
        &ops,
        Some("k-1"),
        json!({"amount": 1001, "reason": "broken"}),
    )
    .await;
    assert_eq!(other.0, 422);
    assert!(
        other.1["error"]
            .as_str()
            .unwrap()
            .contains("used with another request"),
        "{}",
        other.1
    );
    // Another path under the key is another request too.
    let elsewhere = post(
        &app,
        "/api/v1/dead-letters/redrive",
        &ops,
        Some("k-1"),
        json!({}),
    )
    .await;
    assert_eq!(elsewhere.0, 422);
    assert_eq!(commands(&app).await, 1);
    let too_long = "k".repeat(256);
    let bad = post(&app, REFUNDS, &ops, Some(&too_long), json!({"reason": "x"})).await;
    assert_eq!(bad.0, 400);
    assert_eq!(commands(&app).await, 1);
    app.shutdown().await;
}

async fn a_key_still_running_is_409_and_concurrent_requests_make_one_command(kind: Kind) {
    let app = paid(kind).await;
    let ops = token(&app, "ops", "operator").await;
    // Another instance is running a request with this key right now (keys are scoped by
    // the token's id).
    let body = json!({"amount": 100, "reason": "x"});
    let id: i64 = sqlx::query_scalar("SELECT id FROM api_tokens WHERE name = 'ops'")
        .fetch_one(app.db.reader())
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO api_idempotency (scope, idempotency_key, request_digest, created_at) \
         VALUES ($1, 'k-run', 'theirs', $2)",
    )
    .bind(format!("token-id:{id}"))
    .bind(now_ms())
    .execute(app.db.writer())
    .await
    .unwrap();
    let running = post(&app, REFUNDS, &ops, Some("k-run"), body.clone()).await;
    // Another digest is a mismatch; the same digest still running is a 409.
    assert_eq!(running.0, 422);
    let digest_of_ours = {
        post(&app, REFUNDS, &ops, Some("k-probe"), body.clone()).await;
        let d: String = sqlx::query_scalar(
            "SELECT request_digest FROM api_idempotency WHERE idempotency_key = 'k-probe'",
        )
        .fetch_one(app.db.reader())
        .await
        .unwrap();
        d
    };
    sqlx::query("UPDATE api_idempotency SET request_digest = $1 WHERE idempotency_key = 'k-run'")
        .bind(&digest_of_ours)
        .execute(app.db.writer())
        .await
        .unwrap();
    let running = post(&app, REFUNDS, &ops, Some("k-run"), body.clone()).await;
    assert_eq!(running.0, 409, "{}", running.1);
    assert!(running.1["error"]
        .as_str()
        .unwrap()
        .contains("still running"));
    assert_eq!(commands(&app).await, 1, "only the probe's");

    // Ten at once with one key: one command; every answer is it or "still running".
    let mut at_once = Vec::new();
    for _ in 0..10 {
        let request = app
            .http
            .post(format!("{}{REFUNDS}", app.url))
            .bearer_auth(&ops)
            .header("Idempotency-Key", "k-burst")
            .json(&body);
        at_once.push(tokio::spawn(async move {
            let r = request.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }));
    }
    let mut answers = Vec::new();
    for a in at_once {
        answers.push(a.await.unwrap());
    }
    assert_eq!(commands(&app).await, 2);
    let created: Vec<_> = answers.iter().filter(|(s, _)| *s == 201).collect();
    assert!(!created.is_empty(), "{answers:?}");
    assert!(created.iter().all(|(_, b)| b["id"] == created[0].1["id"]));
    assert!(
        answers.iter().all(|(s, _)| *s == 201 || *s == 409),
        "{answers:?}"
    );
    app.shutdown().await;
}

async fn keys_belong_to_their_token_and_expire_after_a_day(kind: Kind) {
    let app = paid(kind).await;
    let ops = token(&app, "ops", "operator").await;
    let other = token(&app, "ops-2", "operator").await;
    let body = json!({"amount": 100, "reason": "x"});
    let mine = post(&app, REFUNDS, &ops, Some("k-1"), body.clone()).await;
    let theirs = post(&app, REFUNDS, &other, Some("k-1"), body.clone()).await;
    assert_eq!((theirs.0, theirs.2), (201, false));
    assert_ne!(mine.1["id"], theirs.1["id"]);
    assert_eq!(commands(&app).await, 2);
    // A token's keys are its own, not its name's: a new token under a revoked one's name
    // does not replay the old one's answers.
    tokens::revoke(&app.db, "ops-2", "test", None, now_ms())
        .await
        .unwrap();
    let successor = token(&app, "ops-2", "operator").await;
    let fresh = post(&app, REFUNDS, &successor, Some("k-1"), body.clone()).await;
    assert_eq!((fresh.0, fresh.2), (201, false), "{}", fresh.1);
    assert_ne!(fresh.1["id"], theirs.1["id"]);
    assert_eq!(commands(&app).await, 3);
    // A day and a bit later the key is new again.
    sqlx::query("UPDATE api_idempotency SET created_at = created_at - 90000000")
        .execute(app.db.writer())
        .await
        .unwrap();
    let later = post(
        &app,
        REFUNDS,
        &ops,
        Some("k-1"),
        json!({"amount": 200, "reason": "y"}),
    )
    .await;
    assert_eq!((later.0, later.2), (201, false), "{}", later.1);
    assert_eq!(commands(&app).await, 4);
    app.shutdown().await;
}

async fn dead_letter_actions_replay_too(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        // An unknown order is dead-lettered at the first attempt.
        s.processor.retry.max_attempts = 1;
    })
    .await;
    // A refund of a payment nobody told us about: a dead letter.
    let r = app
        .post_stripe(&refund_created("evt_orphan", "pi_x", "re_x", 1000, T10_00))
        .await;
    assert_eq!(r.status(), 200);
    app.process().await;
    let id: i64 = sqlx::query_scalar("SELECT id FROM dead_letters")
        .fetch_one(app.db.reader())
        .await
        .unwrap();
    let ops = token(&app, "ops", "operator").await;
    let path = format!("/api/v1/dead-letters/{id}/resolve");
    let body = json!({"reason": "fixed upstream"});
    let first = post(&app, &path, &ops, Some("r-1"), body.clone()).await;
    assert_eq!(first.0, 200, "{}", first.1);
    // Without the key a second resolve is refused (no longer open); with it, replayed.
    let again = post(&app, &path, &ops, Some("r-1"), body.clone()).await;
    assert_eq!((again.0, again.2, &again.1), (200, true, &first.1));
    assert_eq!(
        app.count("SELECT COUNT(*) FROM audit_log WHERE action = 'dead_letter.resolve'")
            .await,
        1
    );
    let without = post(&app, &path, &ops, None, body).await;
    // Already closed: a conflict with the dead letter's state.
    assert_eq!(without.0, 409);
    app.shutdown().await;
}
