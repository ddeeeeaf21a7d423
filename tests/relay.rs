//! The outbox relay against a real local merchant endpoint and SMTP receiver.

mod common;

use std::time::Duration;

use common::fixtures::*;
use common::peers::{Merchant, Reply, SmtpReceiver};
use common::{Kind, TestApp};
use oncehook::config::{OutboxRoute, SinkKind, SinkSettings};
use oncehook::pipeline::relay::Delivered;

both!(
    sink_that_times_out_after_succeeding_gets_the_same_key_again,
    retry_after_on_429_is_honoured,
    relay_killed_between_send_and_mark_resends_with_the_same_key,
    permanent_sink_failure_dead_letters_at_once_and_alerts,
    transient_sink_failure_retries_with_growing_delays_then_dead_letters,
    redrive_after_the_sink_is_fixed_delivers_once,
    email_sink_delivers_over_smtp_with_the_key_as_message_id,
    redirects_are_never_followed_and_fail_permanently,
    only_an_excerpt_of_a_sink_response_is_read,
    a_claim_is_marked_delivered_together_and_a_lost_lease_fails_only_its_row,
);

const SINK_SECRET: &str = "whsec_c2luay1zZWNyZXQtZm9yLXRlc3RzLTI0Ynl0ZXM=";

/// An app whose `order.paid` rows go to the merchant's HTTP endpoint.
async fn app_with_merchant(
    kind: Kind,
    merchant: &Merchant,
    tweak: impl FnOnce(&mut oncehook::config::Settings),
) -> TestApp {
    let url = merchant.url.clone();
    TestApp::spawn_with(kind, move |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.sinks.insert(
            "fulfilment".into(),
            SinkSettings {
                kind: SinkKind::Http {
                    url,
                    secret: Some(SINK_SECRET.into()),
                    timeout_ms: 300,
                },
                concurrency: 2,
                rate_per_sec: None,
            },
        );
        // Only the routed topic leaves: no default sinks for the money facts' topics.
        s.outbox.sinks = vec![];
        s.outbox.routes = vec![OutboxRoute {
            topics: vec!["order.paid".into()],
            sinks: vec!["fulfilment".into()],
        }];
        s.outbox.relay.retry.base_ms = 10;
        s.outbox.relay.retry.cap_ms = 200;
        tweak(s);
    })
    .await
}

async fn pay(app: &TestApp, n: u32) {
    let e = payment_intent_succeeded(
        &format!("evt_r{n}"),
        &format!("pi_r{n}"),
        &format!("order-r{n}"),
        4200,
        T10_00,
    );
    assert_eq!(app.post_stripe(&e).await.status(), 200);
    app.process().await;
}

/// Runs the relay until nothing is due, making scheduled retries due at once.
async fn relay_until_settled(app: &TestApp) -> Vec<Delivered> {
    let relay = app.relay();
    let mut all = vec![];
    for _ in 0..50 {
        let batch = relay.run_until_idle().await.unwrap();
        let retrying = batch
            .iter()
            .any(|d| matches!(d, Delivered::RetryLater { .. }));
        all.extend(batch);
        if !retrying {
            break;
        }
        sqlx::query("UPDATE outbox SET next_attempt_at = 0 WHERE status = 'pending'")
            .execute(app.db.writer())
            .await
            .unwrap();
    }
    all
}

async fn outbox_status(app: &TestApp) -> String {
    sqlx::query_scalar("SELECT status FROM outbox WHERE sink = 'fulfilment'")
        .fetch_one(app.db.reader())
        .await
        .unwrap()
}

async fn sink_that_times_out_after_succeeding_gets_the_same_key_again(kind: Kind) {
    let merchant = Merchant::start(vec![Reply::SucceedSlowly(Duration::from_millis(800))]).await;
    let app = app_with_merchant(kind, &merchant, |_| {}).await;
    pay(&app, 1).await;
    let outcomes = relay_until_settled(&app).await;
    assert!(outcomes.contains(&Delivered::Delivered), "{outcomes:?}");
    let keys = merchant.keys();
    assert_eq!(keys.len(), 2, "timed out once, sent again");
    assert_eq!(
        keys[0], keys[1],
        "the second delivery carries the same idempotency key"
    );
    // The merchant dedupes on the key: one effect on its side.
    let distinct: std::collections::BTreeSet<_> = keys.iter().collect();
    assert_eq!(distinct.len(), 1);
    // And can verify the Standard Webhooks signature.
    let r = &merchant.received()[1];
    let verifier = oncehook::provider::signature::Verifier::new(
        oncehook::provider::signature::SchemeKind::StandardWebhooks,
        &[SINK_SECRET.to_string()],
        300,
    )
    .unwrap();
    verifier
        .verify(&r.headers, None, r.body.as_bytes(), common::now_secs())
        .expect("signed for the merchant");
    assert_eq!(outbox_status(&app).await, "delivered");
    let attempts = app.count("SELECT COUNT(*) FROM outbox_attempts").await;
    let timeouts = app
        .count("SELECT COUNT(*) FROM outbox_attempts WHERE error LIKE '%HTTP request failed%'")
        .await;
    assert_eq!(
        (attempts, timeouts),
        (2, 1),
        "every attempt recorded, the timeout with its error"
    );
    app.shutdown().await;
}

async fn retry_after_on_429_is_honoured(kind: Kind) {
    let merchant = Merchant::start(vec![Reply::RetryAfter(429, "1")]).await;
    let app = app_with_merchant(kind, &merchant, |_| {}).await;
    pay(&app, 2).await;
    let relay = app.relay();
    assert_eq!(
        relay.run_once().await.unwrap(),
        vec![Delivered::RetryLater { delay_ms: 1_000 }]
    );
    // Not due before the second the merchant asked for.
    assert!(relay.run_once().await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        relay.run_once().await.unwrap().is_empty(),
        "still inside Retry-After"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(relay.run_once().await.unwrap(), vec![Delivered::Delivered]);
    let received = merchant.received();
    let gap = received[1].at.duration_since(received[0].at);
    assert!(
        gap >= Duration::from_millis(1_000),
        "second try {gap:?} after the first"
    );
    app.shutdown().await;
}

async fn relay_killed_between_send_and_mark_resends_with_the_same_key(kind: Kind) {
    // The merchant takes the request and answers only after the relay is gone.
    let merchant = Merchant::start(vec![Reply::SucceedSlowly(Duration::from_millis(400))]).await;
    let app = app_with_merchant(kind, &merchant, |s| {
        if let Some(SinkSettings {
            kind: SinkKind::Http { timeout_ms, .. },
            ..
        }) = s.sinks.get_mut("fulfilment")
        {
            *timeout_ms = 5_000;
        }
        s.outbox.relay.lease_secs = 1;
    })
    .await;
    pay(&app, 3).await;
    let relay = std::sync::Arc::new(app.relay());
    let running = {
        let relay = relay.clone();
        tokio::spawn(async move { relay.run_once().await })
    };
    for _ in 0..100 {
        if !merchant.received().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running.abort(); // killed after the send, before the mark
    let _ = running.await;
    assert_eq!(outbox_status(&app).await, "delivering", "not marked");
    // Until the lease runs out nobody else takes the row.
    assert!(relay.run_once().await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(
        app.relay().run_once().await.unwrap(),
        vec![Delivered::Delivered]
    );
    let keys = merchant.keys();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1], "resent with the SAME key");
    assert_eq!(outbox_status(&app).await, "delivered");
    app.shutdown().await;
}

async fn permanent_sink_failure_dead_letters_at_once_and_alerts(kind: Kind) {
    let merchant = Merchant::start(vec![Reply::Status(422)]).await;
    let alerts = Merchant::start(vec![]).await;
    let app = app_with_merchant(kind, &merchant, |_| {}).await;
    pay(&app, 4).await;
    let (alerter, task) =
        oncehook::pipeline::alerts::Alerter::start(oncehook::pipeline::alerts::AlertSettings {
            webhook_url: Some(alerts.url.clone()),
            min_interval_secs: 1,
        });
    let relay = oncehook::pipeline::relay::Relay::new(
        app.db.clone(),
        oncehook::pipeline::relay::sinks::Sinks::build(&app.settings.sinks).unwrap(),
        app.settings.outbox.relay.clone(),
        72,
        alerter,
        std::sync::Arc::new(tokio::sync::Notify::new()),
    );
    assert_eq!(
        relay.run_once().await.unwrap(),
        vec![Delivered::DeadLettered]
    );
    assert_eq!(
        merchant.received().len(),
        1,
        "no retry of a permanent failure"
    );
    assert_eq!(outbox_status(&app).await, "dead");
    let row: (String, String, String, Option<String>) =
        sqlx::query_as("SELECT stage, error_class, last_error, sink FROM dead_letters")
            .fetch_one(app.db.reader())
            .await
            .unwrap();
    assert_eq!(row.0, "outbox");
    assert_eq!(row.1, "permanent");
    assert!(row.2.contains("HTTP 422"), "{}", row.2);
    assert_eq!(row.3.as_deref(), Some("fulfilment"));
    drop(relay);
    task.await.unwrap();
    let posted = alerts.received();
    assert_eq!(posted.len(), 1);
    let body: serde_json::Value = serde_json::from_str(&posted[0].body).unwrap();
    let text = body["text"].as_str().unwrap();
    assert!(
        text.contains("permanent") && text.contains("order-r4"),
        "{text}"
    );
    app.shutdown().await;
}

async fn transient_sink_failure_retries_with_growing_delays_then_dead_letters(kind: Kind) {
    let merchant = Merchant::start(vec![Reply::Status(503); 10]).await;
    let app = app_with_merchant(kind, &merchant, |s| {
        s.outbox.relay.retry.base_ms = 100;
        s.outbox.relay.retry.cap_ms = 10_000;
        s.outbox.relay.retry.max_attempts = 4;
    })
    .await;
    pay(&app, 5).await;
    let outcomes = relay_until_settled(&app).await;
    let policy = app.settings.outbox.relay.retry;
    let delays: Vec<i64> = outcomes
        .iter()
        .filter_map(|d| match d {
            Delivered::RetryLater { delay_ms } => Some(*delay_ms),
            _ => None,
        })
        .collect();
    assert_eq!(delays.len(), 3, "{outcomes:?}");
    for (i, d) in delays.iter().enumerate() {
        // Full jitter: each delay is within its attempt's ceiling, and the ceilings double.
        assert!(
            *d >= 0 && *d <= policy.ceiling_ms(i as i64 + 1),
            "delay {d} after attempt {}",
            i + 1
        );
    }
    assert_eq!(policy.ceiling_ms(1) * 4, policy.ceiling_ms(3));
    assert_eq!(outcomes.last(), Some(&Delivered::DeadLettered));
    assert_eq!(merchant.received().len(), 4);
    let (class, error, attempts): (String, String, i64) =
        sqlx::query_as("SELECT error_class, last_error, attempts FROM dead_letters")
            .fetch_one(app.db.reader())
            .await
            .unwrap();
    assert_eq!(class, "transient");
    assert!(error.contains("gave up after 4 attempts"), "{error}");
    assert_eq!(attempts, 4);
    app.shutdown().await;
}

async fn redrive_after_the_sink_is_fixed_delivers_once(kind: Kind) {
    let merchant = Merchant::start(vec![Reply::Status(404)]).await;
    let app = app_with_merchant(kind, &merchant, |_| {}).await;
    pay(&app, 6).await;
    assert_eq!(
        app.relay().run_once().await.unwrap(),
        vec![Delivered::DeadLettered]
    );
    // The merchant fixes its endpoint (the script has run out: 200 from now on).
    let actor = oncehook::store::dead_letters::Actor {
        name: "oncall",
        reason: Some("endpoint fixed"),
        source: None,
    };
    let providers = oncehook::config::Providers::build(&app.settings.providers).unwrap();
    let filter = oncehook::store::dead_letters::DeadLetterFilter {
        stage: Some("outbox".into()),
        ..Default::default()
    };
    let dry =
        oncehook::pipeline::redrive::redrive(&app.db, &providers, &filter, true, &actor, |_, _| {})
            .await
            .unwrap();
    assert!(
        dry[0]
            .outcome
            .starts_with("resend through fulfilment with the same idempotency key"),
        "{dry:?}"
    );
    let done = oncehook::pipeline::redrive::redrive(
        &app.db,
        &providers,
        &filter,
        false,
        &actor,
        |_, _| {},
    )
    .await
    .unwrap();
    assert_eq!(done[0].outcome, "requeued");
    assert_eq!(
        app.relay().run_until_idle().await.unwrap(),
        vec![Delivered::Delivered]
    );
    // Redriving again does nothing: the dead letter is no longer open.
    let by_id = oncehook::store::dead_letters::DeadLetterFilter {
        ids: vec![done[0].dead_letter_id],
        ..Default::default()
    };
    let again =
        oncehook::pipeline::redrive::redrive(&app.db, &providers, &by_id, false, &actor, |_, _| {})
            .await
            .unwrap();
    assert!(again[0].outcome.starts_with("skipped"), "{again:?}");
    assert!(app.relay().run_until_idle().await.unwrap().is_empty());
    let keys = merchant.keys();
    assert_eq!(keys.len(), 2, "the 404, then one successful delivery");
    assert_eq!(keys[0], keys[1]);
    assert_eq!(
        app.count("SELECT COUNT(*) FROM redrives").await,
        2,
        "both redrives recorded"
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM audit_log WHERE actor = 'oncall'")
            .await,
        2
    );
    app.shutdown().await;
}

async fn email_sink_delivers_over_smtp_with_the_key_as_message_id(kind: Kind) {
    let smtp = SmtpReceiver::start().await;
    let port = smtp.port;
    let app = TestApp::spawn_with(kind, move |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.sinks.insert(
            "customer-email".into(),
            SinkSettings {
                kind: SinkKind::Email {
                    smtp_host: "127.0.0.1".into(),
                    smtp_port: port,
                    security: "none".into(),
                    username: None,
                    password: None,
                    from: "oncehook <noreply@shop.test>".into(),
                    to: "customer@shop.test".into(),
                    timeout_ms: 5_000,
                },
                concurrency: 1,
                rate_per_sec: Some(100.0),
            },
        );
        // Only the routed topic leaves: no default sinks for the money facts' topics.
        s.outbox.sinks = vec![];
        s.outbox.routes = vec![OutboxRoute {
            topics: vec!["order.paid".into()],
            sinks: vec!["customer-email".into()],
        }];
    })
    .await;
    pay(&app, 7).await;
    assert_eq!(
        app.relay().run_until_idle().await.unwrap(),
        vec![Delivered::Delivered]
    );
    let messages = smtp.messages();
    assert_eq!(messages.len(), 1);
    let key: String = sqlx::query_scalar("SELECT idempotency_key FROM outbox")
        .fetch_one(app.db.reader())
        .await
        .unwrap();
    assert!(
        messages[0].contains(&format!("Message-ID: <{key}@oncehook>")),
        "{}",
        messages[0]
    );
    assert!(messages[0].contains("order.paid for order order-r7"));
    let code: Option<i64> = sqlx::query_scalar("SELECT status_code FROM outbox_attempts")
        .fetch_one(app.db.reader())
        .await
        .unwrap();
    assert_eq!(code, Some(250));
    app.shutdown().await;
}

/// A 302 would turn the POST into a bodiless GET that "succeeds"; a 307 would send the
/// signed request to another host. Neither is followed: a 3xx is a permanent failure.
async fn redirects_are_never_followed_and_fail_permanently(kind: Kind) {
    for status in [302u16, 307] {
        let elsewhere = Merchant::start(vec![]).await;
        let merchant = Merchant::start(vec![Reply::Redirect(status, elsewhere.url.clone())]).await;
        let app = app_with_merchant(kind, &merchant, |_| {}).await;
        pay(&app, 20).await;
        let outcomes = relay_until_settled(&app).await;
        assert_eq!(outcomes, vec![Delivered::DeadLettered], "{status}");
        assert_eq!(merchant.received().len(), 1, "{status}: sent once");
        assert!(
            elsewhere.received().is_empty(),
            "{status}: the redirect was not followed"
        );
        assert_eq!(outbox_status(&app).await, "dead");
        let (class, error): (String, String) =
            sqlx::query_as("SELECT error_class, last_error FROM dead_letters")
                .fetch_one(app.db.reader())
                .await
                .unwrap();
        assert_eq!(class, "permanent", "{status}");
        assert!(
            error.contains(&format!("HTTP {status}")) && error.contains("redirect"),
            "{status}: {error}"
        );
        app.shutdown().await;
    }
}

async fn only_an_excerpt_of_a_sink_response_is_read(kind: Kind) {
    let merchant = Merchant::start(vec![Reply::EndlessBody(500)]).await;
    let app = app_with_merchant(kind, &merchant, |s| {
        s.outbox.relay.retry.max_attempts = 1;
    })
    .await;
    pay(&app, 21).await;
    let outcomes = app.relay().run_once().await.unwrap();
    assert_eq!(outcomes.len(), 1);
    let (code, excerpt): (Option<i64>, Option<String>) = sqlx::query_as(
        "SELECT status_code, response_excerpt FROM outbox_attempts ORDER BY id LIMIT 1",
    )
    .fetch_one(app.db.reader())
    .await
    .unwrap();
    assert_eq!(
        code,
        Some(500),
        "classified by its status, not timed out reading"
    );
    let excerpt = excerpt.expect("an excerpt is kept");
    assert!(
        !excerpt.is_empty() && excerpt.len() <= 512,
        "{}",
        excerpt.len()
    );
    app.shutdown().await;
}

/// The successful sends of one claim are marked delivered together (one transaction), each
/// still fenced on its own lease: a row another relay took over during the send is not
/// marked, the others are, and every attempt is logged.
async fn a_claim_is_marked_delivered_together_and_a_lost_lease_fails_only_its_row(kind: Kind) {
    const ORDERS: u32 = 6;
    let slow = Reply::SucceedSlowly(Duration::from_millis(300));
    let merchant = Merchant::start(vec![slow; ORDERS as usize]).await;
    let app = app_with_merchant(kind, &merchant, |s| {
        if let Some(SinkSettings {
            kind: SinkKind::Http { timeout_ms, .. },
            ..
        }) = s.sinks.get_mut("fulfilment")
        {
            *timeout_ms = 5_000;
        }
        s.outbox.relay.claim_batch = 16;
    })
    .await;
    for n in 0..ORDERS {
        pay(&app, 100 + n).await;
    }
    let taken_over: i64 =
        sqlx::query_scalar("SELECT MIN(id) FROM outbox WHERE sink = 'fulfilment'")
            .fetch_one(app.db.reader())
            .await
            .unwrap();
    let relay = std::sync::Arc::new(app.relay());
    let running = {
        let relay = relay.clone();
        tokio::spawn(async move { relay.run_once().await })
    };
    for _ in 0..200 {
        if !merchant.received().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Another relay claims one row while the sends are under way (its lease ran out).
    sqlx::query("UPDATE outbox SET attempts = attempts + 1 WHERE id = $1")
        .bind(taken_over)
        .execute(app.db.writer())
        .await
        .unwrap();
    let outcomes = running.await.unwrap().unwrap();
    let delivered = outcomes
        .iter()
        .filter(|d| **d == Delivered::Delivered)
        .count();
    assert_eq!(
        (delivered, outcomes.len()),
        (ORDERS as usize - 1, ORDERS as usize),
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes[0],
        Delivered::Fenced,
        "the row taken over is first"
    );
    let states: Vec<(i64, String, Option<i64>)> = sqlx::query_as(
        "SELECT id, status, delivered_at FROM outbox WHERE sink = 'fulfilment' ORDER BY id",
    )
    .fetch_all(app.db.reader())
    .await
    .unwrap();
    for (id, status, delivered_at) in &states {
        if *id == taken_over {
            assert_eq!(
                (status.as_str(), *delivered_at),
                ("delivering", None),
                "not marked"
            );
        } else {
            assert_eq!(status, "delivered");
            assert!(delivered_at.is_some());
        }
    }
    let logged = app
        .count(
            "SELECT COUNT(*) FROM outbox_attempts a JOIN outbox o ON o.id = a.outbox_id \
             WHERE o.sink = 'fulfilment' AND a.error IS NULL AND a.status_code = 200",
        )
        .await;
    assert_eq!(
        logged, ORDERS as i64,
        "every send logged, the fenced one too"
    );
    app.shutdown().await;
}
