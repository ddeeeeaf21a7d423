//! The dashboard's dead-letter triage through its backend and over HTTP (server functions
//! as a browser posts them), on SQLite and PostgreSQL: role checks (a viewer's forged
//! redrive is refused and audited), one-click redrive, resolve/discard with a reason,
//! grouping, and bulk redrive after a dry run.

mod common;

use app::api::{CloseDeadLetter, RedriveDeadLetters};
use app::backend::{AdminBackend, DlqQuery, InboxQuery, Operator, Role, Viewer};
use app::error::AppError;
use common::fixtures::*;
use common::{snapshot, Kind, TestApp};
use leptos::server_fn::ServerFn;
use oncehook::http::admin::StoreBackend;
use oncehook::store::users;
use reqwest::header::COOKIE;
use reqwest::StatusCode;

both!(
    a_viewers_forged_redrive_is_refused_and_audited,
    an_operator_redrives_one_item_and_sees_what_became_of_it,
    resolve_and_discard_need_an_operator_and_a_reason,
    dead_letters_are_grouped_by_class_and_message_oldest_first,
    bulk_dry_run_changes_nothing_then_the_real_run_covers_every_match,
    event_page_shows_deliveries_the_effect_and_the_byte_exact_body,
    inbox_filters_live_in_the_url_and_pages_by_keyset,
    inbox_filters_by_event_correlation_time_and_payload_field,
    a_bulk_redrive_shows_its_progress_on_the_page_while_it_runs,
    a_bulk_redrive_finishes_when_its_request_is_abandoned,
    a_bulk_redrive_whose_instance_stopped_shows_as_interrupted,
    a_failure_of_ours_shows_a_reference_never_driver_text,
);

async fn app(kind: Kind) -> TestApp {
    TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.processor.retry.max_attempts = 3;
    })
    .await
}

fn backend(app: &TestApp) -> StoreBackend {
    app.backend()
}

/// A refund naming a payment nobody told us about: waits, then is dead-lettered
/// (`transient`, "order not known yet").
async fn orphan_refund(app: &TestApp, n: u32) -> String {
    let id = format!("evt_orphan_{n}");
    let response = app
        .post_stripe(&refund_created(
            &id,
            &format!("pi_orphan_{n}"),
            &format!("re_orphan_{n}"),
            100,
            T10_00 + 60,
        ))
        .await;
    assert_eq!(response.status(), 200);
    id
}

/// An API version nobody supports: dead-lettered at once as `permanent`.
async fn unsupported_version(app: &TestApp, n: u32) -> String {
    let id = format!("evt_old_{n}");
    let mut body = payment_intent_succeeded(&id, &format!("pi_old_{n}"), "order-old", 100, T10_00);
    body["api_version"] = "2015-01-01".into();
    assert_eq!(app.post_stripe(&body).await.status(), 200);
    id
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

async fn dead_letter_id(app: &TestApp, event_id: &str) -> i64 {
    sqlx::query_scalar::<_, i64>("SELECT id FROM dead_letters WHERE event_id = $1")
        .bind(event_id)
        .fetch_one(app.db.reader())
        .await
        .unwrap()
}

async fn dead_letter_status(app: &TestApp, id: i64) -> String {
    sqlx::query_scalar::<_, String>("SELECT status FROM dead_letters WHERE id = $1")
        .bind(id)
        .fetch_one(app.db.reader())
        .await
        .unwrap()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Posts a server function the way a form does (urlencoded), as a script would (no
/// Referer, so no redirect: the answer is the function's own).
async fn post_server_fn(
    app: &TestApp,
    path: &str,
    cookie: &str,
    form: &[(&str, &str)],
) -> (StatusCode, String) {
    let (status, body) = app.post_form(path, cookie, None, form).await;
    (StatusCode::from_u16(status).unwrap(), body)
}

async fn refused_actions(app: &TestApp, actor: &str) -> Vec<(String, String, Option<String>)> {
    users::audit_page(&app.db, Some(actor), None, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.action.ends_with(".refused"))
        .map(|r| (r.action, r.target, r.source))
        .collect()
}

async fn a_viewers_forged_redrive_is_refused_and_audited(kind: Kind) {
    let app = app(kind).await;
    let event = orphan_refund(&app, 1).await;
    process_through_retries(&app).await;
    let id = dead_letter_id(&app, &event).await;
    let viewer = app.sign_in("vera", Role::Viewer).await;

    // The page shows no redrive button to a viewer…
    let html = app.page("/dlq", &viewer).await.1;
    assert!(html.contains(&format!("id=\"dead-letter-{id}\"")), "{html}");
    assert!(!html.contains("class=\"button redrive\""));

    // …and a hand-made POST is refused on the server, changes nothing, and is audited.
    let before = snapshot(&app.db).await;
    let id_text = id.to_string();
    let (status, body) = post_server_fn(
        &app,
        RedriveDeadLetters::PATH,
        &viewer,
        &[("id", &id_text), ("reason", "forged")],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _) = post_server_fn(
        &app,
        CloseDeadLetter::PATH,
        &viewer,
        &[
            ("id", &id_text),
            ("action", "discard"),
            ("reason", "forged"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(dead_letter_status(&app, id).await, "open");
    assert_eq!(snapshot(&app.db).await, before);
    assert_eq!(app.count("SELECT COUNT(*) FROM redrives").await, 0);
    assert_eq!(
        refused_actions(&app, "vera").await,
        [
            (
                "dead_letter.discard.refused".to_string(),
                format!("dead_letter:{id}"),
                Some("127.0.0.1".to_string())
            ),
            (
                "dead_letter.redrive.refused".to_string(),
                format!("dead_letter:{id}"),
                Some("127.0.0.1".to_string())
            ),
        ]
    );
    // Without a session, the same POST does not reach the backend at all.
    let (status, _) = post_server_fn(&app, RedriveDeadLetters::PATH, "", &[("id", &id_text)]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // A cross-site POST with the operator's cookie is refused before any of it.
    let operator = app.sign_in("otto", Role::Operator).await;
    let response = client()
        .post(format!("{}{}", app.url, RedriveDeadLetters::PATH))
        .header(COOKIE, &operator)
        .header("Sec-Fetch-Site", "cross-site")
        .form(&[("id", &id_text)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(dead_letter_status(&app, id).await, "open");
}

async fn an_operator_redrives_one_item_and_sees_what_became_of_it(kind: Kind) {
    let app = app(kind).await;
    let event = orphan_refund(&app, 2).await;
    let other = orphan_refund(&app, 3).await;
    process_through_retries(&app).await;
    let id = dead_letter_id(&app, &event).await;
    let other_id = dead_letter_id(&app, &other).await;
    // The cause is fixed: the payment the refund names arrives.
    app.post_stripe(&payment_intent_succeeded(
        "evt_pay_2",
        "pi_orphan_2",
        "order-2",
        100,
        T10_00,
    ))
    .await;
    app.process().await;

    let operator = app.sign_in("otto", Role::Operator).await;
    let (status, body) = post_server_fn(
        &app,
        RedriveDeadLetters::PATH,
        &operator,
        &[("id", &id.to_string()), ("reason", "payment arrived")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let outcomes: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(outcomes[0]["dead_letter_id"], id);
    assert_eq!(outcomes[0]["outcome"], "requeued");
    assert_eq!(dead_letter_status(&app, id).await, "redriven");
    assert_eq!(dead_letter_status(&app, other_id).await, "open");
    app.process().await;

    let page = backend(&app)
        .dead_letters(
            &app.acting("otto", Role::Operator).await,
            DlqQuery::default(),
        )
        .await
        .unwrap();
    let recent = &page.recent_redrives[0];
    assert_eq!(recent.dead_letter_id, id);
    assert_eq!(recent.actor, "otto");
    assert_eq!(recent.reason.as_deref(), Some("payment arrived"));
    assert_eq!(recent.current_status.as_deref(), Some("applied"));
    assert_eq!(page.open, 1);
    assert!(page.can_operate);
    assert_eq!(page.history, None, "no item asked for");
    // Deadlines are 72 h out by default: nothing is due within 24 h yet.
    assert_eq!(page.due_within_24h, 0);

    let audit = users::audit_page(&app.db, Some("otto"), None, 10)
        .await
        .unwrap();
    assert_eq!(audit[0].action, "dead_letter.redrive");
    assert_eq!(audit[0].target, format!("dead_letter:{id}"));
    assert_eq!(audit[0].reason.as_deref(), Some("payment arrived"));

    // One item's history: its three failed attempts and the redrive, not the dry runs.
    backend(&app)
        .preview_redrive(
            &app.acting("otto", Role::Operator).await,
            DlqQuery {
                id: Some(id),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let one = backend(&app)
        .dead_letters(
            &app.acting("vera", Role::Viewer).await,
            DlqQuery {
                id: Some(id),
                status: Some("redriven".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let history = one.history.expect("the item's history");
    assert_eq!(history.id, id);
    assert_eq!(history.attempts.len(), 3, "{:?}", history.attempts);
    assert!(
        history.attempts[0].contains("order not known yet"),
        "{:?}",
        history.attempts
    );
    assert_eq!(history.redrives.len(), 1);
    assert_eq!(history.redrives[0].actor, "otto");
    assert_eq!(
        history.redrives[0].reason.as_deref(),
        Some("payment arrived")
    );
    assert_eq!(history.redrives[0].outcome, "requeued");
    // A deadline that has come: an open item whose resolve_by is in the past is due.
    sqlx::query("UPDATE dead_letters SET resolve_by = 0 WHERE id = $1")
        .bind(other_id)
        .execute(app.db.writer())
        .await
        .unwrap();
    let due = backend(&app)
        .dead_letters(&app.acting("vera", Role::Viewer).await, DlqQuery::default())
        .await
        .unwrap();
    assert_eq!(due.due_within_24h, 1);
    // The page, rendered for the operator, shows the outcome and the item that is left.
    let html = app.page("/dlq", &operator).await.1;
    assert!(html.contains("id=\"recent-redrives\""));
    assert!(html.contains("payment arrived"));
    assert!(html.contains(&format!("id=\"dead-letter-{other_id}\"")));
    assert!(!html.contains(&format!("id=\"dead-letter-{id}\"")));
    assert!(html.contains("class=\"button redrive\""));
    assert!(html.contains("due within 24 h 1"));
    let html = app
        .page(&format!("/dlq?id={id}&status=redriven"), &operator)
        .await
        .1;
    assert!(html.contains("id=\"dlq-history\""));
    assert!(html.contains("Failed attempts (3)"));
}

async fn resolve_and_discard_need_an_operator_and_a_reason(kind: Kind) {
    let app = app(kind).await;
    let a = unsupported_version(&app, 1).await;
    let b = unsupported_version(&app, 2).await;
    process_through_retries(&app).await;
    let (a, b) = (
        dead_letter_id(&app, &a).await,
        dead_letter_id(&app, &b).await,
    );
    let backend = backend(&app);
    let operator: Operator = app.acting("otto", Role::Operator).await;

    // A viewer cannot even call it: the role check refuses (and audits) first.
    let refused = app
        .authorize::<Operator>(
            "vera",
            Role::Viewer,
            "dead_letter.resolve",
            &format!("dead_letter:{a}"),
        )
        .await;
    assert!(
        matches!(refused, Err(AppError::Forbidden(_))),
        "{refused:?}"
    );
    let no_reason = backend
        .close_dead_letter(&operator, a, true, "  ".into())
        .await;
    assert!(
        matches!(no_reason, Err(AppError::Invalid(_))),
        "{no_reason:?}"
    );
    assert_eq!(dead_letter_status(&app, a).await, "open");

    backend
        .close_dead_letter(&operator, a, true, "fixed by hand".into())
        .await
        .unwrap();
    backend
        .close_dead_letter(&operator, b, false, "test event".into())
        .await
        .unwrap();
    assert_eq!(dead_letter_status(&app, a).await, "resolved");
    assert_eq!(dead_letter_status(&app, b).await, "discarded");
    let again = backend
        .close_dead_letter(&operator, a, false, "twice".into())
        .await;
    // A state conflict (RFC 9110's 409), not a malformed request.
    assert!(matches!(again, Err(AppError::Conflict(_))), "{again:?}");
    let actions: Vec<(String, Option<String>)> = users::audit_page(&app.db, Some("otto"), None, 10)
        .await
        .unwrap()
        .into_iter()
        .rev()
        .map(|r| (r.action, r.reason))
        .collect();
    assert_eq!(
        actions,
        [
            ("dead_letter.resolve".into(), Some("fixed by hand".into())),
            ("dead_letter.discard".into(), Some("test event".into())),
        ]
    );
    assert_eq!(refused_actions(&app, "vera").await.len(), 1);
}

async fn dead_letters_are_grouped_by_class_and_message_oldest_first(kind: Kind) {
    let app = app(kind).await;
    let old_1 = unsupported_version(&app, 1).await;
    process_through_retries(&app).await;
    let orphans = [orphan_refund(&app, 1).await, orphan_refund(&app, 2).await];
    process_through_retries(&app).await;
    let old_2 = unsupported_version(&app, 2).await;
    process_through_retries(&app).await;

    let viewer: Viewer = app.acting("vera", Role::Viewer).await;
    let page = backend(&app)
        .dead_letters(&viewer, DlqQuery::default())
        .await
        .unwrap();
    assert_eq!(page.open, 4);
    assert!(!page.can_operate);
    let groups: Vec<(String, Vec<String>)> = page
        .groups
        .iter()
        .map(|g| {
            (
                g.class.clone(),
                g.items
                    .iter()
                    .map(|i| i.event_id.clone().unwrap())
                    .collect(),
            )
        })
        .collect();
    // Group of the oldest item first; within a group, oldest first.
    assert_eq!(groups.len(), 3, "{groups:?}");
    assert_eq!(groups[0].1, [old_1.clone(), old_2.clone()]);
    assert_eq!(groups[0].0, "permanent");
    let orphan_events: Vec<String> = groups[1..].iter().flat_map(|g| g.1.clone()).collect();
    assert_eq!(orphan_events, orphans);
    assert!(page
        .groups
        .iter()
        .all(|g| g.items.iter().all(|i| i.error == g.error)));

    // Filters narrow it; status defaults to open.
    let permanent = backend(&app)
        .dead_letters(
            &viewer,
            DlqQuery {
                class: Some("permanent".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(permanent.groups.len(), 1);
    assert_eq!(permanent.groups[0].items.len(), 2);
    let resolved = backend(&app)
        .dead_letters(
            &viewer,
            DlqQuery {
                status: Some("resolved".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(resolved.groups.is_empty());
}

async fn bulk_dry_run_changes_nothing_then_the_real_run_covers_every_match(kind: Kind) {
    let app = app(kind).await;
    let mut orphans = vec![];
    for n in 0..5 {
        orphans.push(orphan_refund(&app, n).await);
    }
    let permanent = unsupported_version(&app, 1).await;
    process_through_retries(&app).await;
    let backend = backend(&app);
    let filter = DlqQuery {
        error: Some("order".into()),
        ..Default::default()
    };
    let matching = backend
        .dead_letters(&app.acting("vera", Role::Viewer).await, filter.clone())
        .await
        .unwrap();
    let matched: usize = matching.groups.iter().map(|g| g.items.len()).sum();
    assert_eq!(matched, 5, "{:?}", matching.groups);

    let before = snapshot(&app.db).await;
    // Anyone signed in may preview; it changes nothing at all.
    let preview = backend
        .preview_redrive(&app.acting("vera", Role::Viewer).await, filter.clone())
        .await
        .unwrap();
    assert_eq!(preview.matching, 5);
    assert!(
        preview
            .outcomes
            .iter()
            .all(|o| o.outcome.starts_with("wait")),
        "{:?}",
        preview.outcomes
    );
    assert_eq!(snapshot(&app.db).await, before);
    assert_eq!(app.count("SELECT COUNT(*) FROM redrives").await, 0);
    assert_eq!(
        app.count("SELECT COUNT(*) FROM dead_letters WHERE status = 'open'")
            .await,
        6
    );

    let refused = app
        .authorize::<Operator>(
            "vera",
            Role::Viewer,
            "dead_letter.redrive",
            &filter.audit_target(),
        )
        .await;
    assert!(matches!(refused, Err(AppError::Forbidden(_))));
    let done = backend
        .redrive(
            &app.acting("otto", Role::Operator).await,
            filter.clone(),
            Some("bulk".into()),
        )
        .await
        .unwrap();
    assert_eq!(done.len(), 5);
    assert!(done.iter().all(|o| o.outcome == "requeued"));
    for event in &orphans {
        let id = dead_letter_id(&app, event).await;
        assert_eq!(dead_letter_status(&app, id).await, "redriven");
    }
    let id = dead_letter_id(&app, &permanent).await;
    assert_eq!(dead_letter_status(&app, id).await, "open");
    assert_eq!(
        app.count("SELECT COUNT(*) FROM redrives WHERE dry_run = 0")
            .await,
        5
    );
}

async fn inbox_id(app: &TestApp, event_id: &str) -> i64 {
    sqlx::query_scalar::<_, i64>("SELECT id FROM inbox_events WHERE event_id = $1")
        .bind(event_id)
        .fetch_one(app.db.reader())
        .await
        .unwrap()
}

async fn event_page_shows_deliveries_the_effect_and_the_byte_exact_body(kind: Kind) {
    let app = app(kind).await;
    let pay = payment_intent_succeeded("evt_pay", "pi_1", "order-1", 4200, T10_00);
    let raw = pay.to_string();
    // Delivered twice, and announced a second way (same payment, another event type).
    app.post_stripe(&pay).await;
    app.post_stripe(&pay).await;
    app.post_stripe(&invoice_paid_new("evt_inv", "pi_1", 4200, T10_00 + 5))
        .await;
    app.process().await;
    let backend = backend(&app);
    let viewer: Viewer = app.acting("vera", Role::Viewer).await;
    let (pay_id, inv_id) = (
        inbox_id(&app, "evt_pay").await,
        inbox_id(&app, "evt_inv").await,
    );

    let detail = backend.event_detail(&viewer, pay_id).await.unwrap();
    assert_eq!(detail.status, "applied");
    assert!(
        detail.outcome.starts_with("applied: pay"),
        "{}",
        detail.outcome
    );
    assert_eq!(detail.order_id.as_deref(), Some("order-1"));
    assert_eq!(detail.collapsed_onto, None);
    let kinds: Vec<bool> = detail.deliveries.iter().map(|d| d.duplicate).collect();
    assert_eq!(kinds, [false, true]);
    assert_eq!(detail.raw_size, raw.len());
    assert!(
        detail.payload_pretty.contains("\n  \"id\": \"evt_pay\""),
        "{}",
        detail.payload_pretty
    );
    let key = detail.effect_key.clone().unwrap();

    let collapsed = backend.event_detail(&viewer, inv_id).await.unwrap();
    assert_eq!(collapsed.status, "duplicate");
    assert_eq!(collapsed.effect_key.as_deref(), Some(key.as_str()));
    assert_eq!(collapsed.collapsed_onto.as_deref(), Some("evt_pay"));
    assert!(
        collapsed.outcome.contains("collapsed onto evt_pay"),
        "{}",
        collapsed.outcome
    );
    assert!(matches!(
        backend.event_detail(&viewer, 999_999).await,
        Err(AppError::NotFound)
    ));

    // Over HTTP: the page, and the original bytes as a download, for a signed-in viewer only.
    let viewer = app.sign_in("vera", Role::Viewer).await;
    let page = client()
        .get(format!("{}/events/{pay_id}", app.url))
        .header(COOKIE, &viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(html.contains(&key) && html.contains("href=\"/orders/order-1\""));
    let response = client()
        .get(format!("{}/events/{pay_id}/raw", app.url))
        .header(COOKIE, &viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .starts_with("attachment"));
    assert_eq!(response.bytes().await.unwrap(), raw.as_bytes());
    let anonymous = client()
        .get(format!("{}/events/{pay_id}/raw", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::SEE_OTHER);
    let missing = client()
        .get(format!("{}/events/999999", app.url))
        .header(COOKIE, &viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

async fn inbox_filters_live_in_the_url_and_pages_by_keyset(kind: Kind) {
    let app = app(kind).await;
    for n in 0..5 {
        app.post_stripe(&payment_intent_succeeded(
            &format!("evt_{n}"),
            &format!("pi_{n}"),
            if n < 3 { "order-a" } else { "order-b" },
            100,
            T10_00 + n as i64,
        ))
        .await;
    }
    unsupported_version(&app, 1).await;
    app.process().await;
    let backend = backend(&app);
    let viewer: Viewer = app.acting("vera", Role::Viewer).await;
    let ids = |page: &app::backend::InboxPage| -> Vec<String> {
        page.events.iter().map(|e| e.event_id.clone()).collect()
    };

    let order_a = InboxQuery {
        order_id: Some("order-a".into()),
        ..Default::default()
    };
    let first = backend.inbox(&viewer, order_a.clone(), 2).await.unwrap();
    assert_eq!(ids(&first), ["evt_2", "evt_1"]);
    let next = InboxQuery {
        before: first.next_before,
        ..order_a.clone()
    };
    assert_eq!(
        next.href(),
        format!(
            "/events?order=order-a&before={}",
            first.next_before.unwrap()
        )
    );
    let second = backend.inbox(&viewer, next, 2).await.unwrap();
    assert_eq!(ids(&second), ["evt_0"]);
    assert_eq!(second.next_before, None);

    let failed = backend
        .inbox(
            &viewer,
            InboxQuery {
                status: Some("dead".into()),
                ..Default::default()
            },
            50,
        )
        .await
        .unwrap();
    assert_eq!(ids(&failed), ["evt_old_1"]);
    // Empty form fields mean "any".
    let all = backend
        .inbox(
            &viewer,
            InboxQuery {
                provider: Some(" ".into()),
                status: Some(String::new()),
                ..Default::default()
            },
            50,
        )
        .await
        .unwrap();
    assert_eq!(all.events.len(), 6);

    // The page reads the same filters from its URL.
    let viewer = app.sign_in("vera", Role::Viewer).await;
    let html = app.page("/events?order=order-b", &viewer).await.1;
    assert!(html.contains("evt_3") && html.contains("evt_4"));
    assert!(!html.contains(">evt_1<"));
}

async fn inbox_filters_by_event_correlation_time_and_payload_field(kind: Kind) {
    let app = app(kind).await;
    // Five payments for customers cus_0..cus_4, each sent with its own correlation id.
    for n in 0..5 {
        let mut body = payment_intent_succeeded(
            &format!("evt_f{n}"),
            &format!("pi_f{n}"),
            "order-f",
            100 + n,
            T10_00,
        );
        body["data"]["object"]["customer"] = format!("cus_{n}").into();
        let raw = body.to_string();
        let signature = oncehook::provider::signature::stripe::sign(
            common::STRIPE_SECRET,
            common::now_secs(),
            raw.as_bytes(),
        );
        let r = app
            .http
            .post(format!("{}/webhooks/stripe", app.url))
            .header("stripe-signature", signature)
            .header("x-correlation-id", format!("corr-f{n}"))
            .body(raw)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // A redelivery of evt_f1 under another correlation id: found by either.
    let again = payment_intent_succeeded("evt_f1", "pi_f1", "order-f", 101, T10_00);
    let mut again = again;
    again["data"]["object"]["customer"] = "cus_1".into();
    let raw = again.to_string();
    let signature = oncehook::provider::signature::stripe::sign(
        common::STRIPE_SECRET,
        common::now_secs(),
        raw.as_bytes(),
    );
    app.http
        .post(format!("{}/webhooks/stripe", app.url))
        .header("stripe-signature", signature)
        .header("x-correlation-id", "corr-retry")
        .body(raw)
        .send()
        .await
        .unwrap();
    let backend = backend(&app);
    let viewer: Viewer = app.acting("vera", Role::Viewer).await;
    let ids = |page: app::backend::InboxPage| -> Vec<String> {
        page.events.into_iter().map(|e| e.event_id).collect()
    };
    let query = |q: InboxQuery| {
        let (backend, viewer) = (&backend, &viewer);
        async move { backend.inbox(viewer, q, 2).await }
    };
    assert_eq!(
        ids(query(InboxQuery {
            event_id: Some("evt_f3".into()),
            ..Default::default()
        })
        .await
        .unwrap()),
        ["evt_f3"]
    );
    for correlation in ["corr-f1", "corr-retry"] {
        assert_eq!(
            ids(query(InboxQuery {
                correlation_id: Some(correlation.into()),
                ..Default::default()
            })
            .await
            .unwrap()),
            ["evt_f1"],
            "{correlation}"
        );
    }
    // Time range: everything was received just now.
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let all = query(InboxQuery {
        since: Some(today.clone()),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(all.events.len(), 2, "a page of two");
    let none = query(InboxQuery {
        until: Some(today),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(none.events.is_empty());
    let bad = query(InboxQuery {
        since: Some("last tuesday".into()),
        ..Default::default()
    })
    .await;
    assert!(
        matches!(&bad, Err(AppError::Invalid(m)) if m.contains("is not a time")),
        "{bad:?}"
    );

    // A payload field: exact, over the stored JSON, paged by keyset like every filter.
    let cus_2 = query(InboxQuery {
        payload: Some("data.object.customer = cus_2".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(ids(cus_2), ["evt_f2"]);
    let amount = query(InboxQuery {
        payload: Some("data.object.amount = 104".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(ids(amount), ["evt_f4"]);
    let order_f = InboxQuery {
        payload: Some("data.object.metadata.order_id = order-f".into()),
        ..Default::default()
    };
    let first = query(order_f.clone()).await.unwrap();
    assert_eq!(ids(first.clone()), ["evt_f4", "evt_f3"]);
    let second = query(InboxQuery {
        before: first.next_before,
        ..order_f.clone()
    })
    .await
    .unwrap();
    assert_eq!(ids(second.clone()), ["evt_f2", "evt_f1"]);
    let third = query(InboxQuery {
        before: second.next_before,
        ..order_f
    })
    .await
    .unwrap();
    assert_eq!(ids(third.clone()), ["evt_f0"]);
    assert_eq!(third.next_before, None);
    let bad = query(InboxQuery {
        payload: Some("customer".into()),
        ..Default::default()
    })
    .await;
    assert!(
        matches!(&bad, Err(AppError::Invalid(m)) if m.contains("data.object.customer = cus_123")),
        "{bad:?}"
    );

    // Over HTTP: the filters come from the URL; a bad one is a clear 422-class error, not a 5xx.
    let viewer = app.sign_in("vera", Role::Viewer).await;
    let page = client()
        .get(format!(
            "{}/events?payload=data.object.customer+%3D+cus_3&correlation=corr-f3",
            app.url
        ))
        .header(COOKIE, &viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains(">evt_f3<") && !html.contains(">evt_f2<"));
    assert!(
        html.contains("value=\"data.object.customer = cus_3\""),
        "the form keeps the filter"
    );
    let bad = client()
        .get(format!("{}/events?since=soon", app.url))
        .header(COOKIE, &viewer)
        .send()
        .await
        .unwrap();
    assert!(bad.status().is_client_error(), "{}", bad.status());
    assert!(bad.text().await.unwrap().contains("is not a time"));
}

async fn a_bulk_redrive_shows_its_progress_on_the_page_while_it_runs(kind: Kind) {
    const N: usize = 400;
    let app = app(kind).await;
    for chunk in (0..N as u32).collect::<Vec<_>>().chunks(50) {
        futures::future::join_all(chunk.iter().map(|n| unsupported_version(&app, *n))).await;
    }
    process_through_retries(&app).await;
    assert_eq!(
        app.count("SELECT COUNT(*) FROM dead_letters WHERE status = 'open'")
            .await,
        N as i64
    );
    let operator = app.sign_in("otto", Role::Operator).await;
    let viewer = app.sign_in("vera", Role::Viewer).await;

    // The operator starts "redrive everything open"; meanwhile a viewer keeps opening /dlq.
    let run = {
        let url = app.url.clone();
        let operator = operator.clone();
        tokio::spawn(async move {
            client()
                .post(format!("{url}{}", RedriveDeadLetters::PATH))
                .header(COOKIE, operator)
                .header("Origin", &url)
                .form(&[("reason", "bulk after the fix")])
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    // Another instance on the same database (its own backend, its own memory) shows the
    // same job: progress lives in the database, not in the instance that runs it.
    let other = backend(&app);
    let mut running: Vec<usize> = vec![];
    let mut seen_elsewhere: Vec<usize> = vec![];
    while !run.is_finished() {
        if let Some(job) = other
            .redrive_jobs(&app.acting("vera", Role::Viewer).await)
            .await
            .unwrap()
            .first()
        {
            if job.finished_at.is_none() && job.total == N {
                seen_elsewhere.push(job.done);
            }
        }
        let (status, html) = app.page("/dlq", &viewer).await;
        assert_eq!(status, 200);
        if let Some(at) = html.find("data-running=\"true\"") {
            let line = &html[at..at + html[at..].find("</li>").unwrap()];
            // Before its first item the job is still selecting what it covers.
            let Some(of) = line.find(&format!(" of {N}")) else {
                assert!(line.contains("selecting the dead letters"), "{line}");
                continue;
            };
            let done: usize = line[..of]
                .rsplit(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap()
                .parse()
                .unwrap();
            running.push(done);
        }
    }
    assert_eq!(run.await.unwrap(), StatusCode::OK);
    assert!(
        running.iter().any(|done| *done < N),
        "progress seen while it ran: {running:?}"
    );
    assert!(running.windows(2).all(|w| w[0] <= w[1]), "{running:?}");
    assert!(
        seen_elsewhere.iter().any(|done| *done < N),
        "another instance saw it run: {seen_elsewhere:?}"
    );
    let elsewhere = other
        .redrive_jobs(&app.acting("vera", Role::Viewer).await)
        .await
        .unwrap();
    assert_eq!(elsewhere.len(), 1, "{elsewhere:?}");
    assert_eq!((elsewhere[0].done, elsewhere[0].total), (N, N));
    assert_eq!(
        elsewhere[0].summary.as_deref(),
        Some(format!("{N} requeued").as_str())
    );
    assert_eq!(elsewhere[0].actor, "otto");
    let (_, html) = app.page("/dlq", &viewer).await;
    assert!(html.contains("id=\"redrive-jobs\""));
    assert!(
        html.contains(&format!("by otto (everything open): {N} of {N}")),
        "finished"
    );
    assert!(html.contains(&format!("done: {N} requeued")));
    assert!(!html.contains("data-running"));
    assert_eq!(
        app.count("SELECT COUNT(*) FROM dead_letters WHERE status = 'open'")
            .await,
        0
    );
    app.shutdown().await;
}

async fn a_bulk_redrive_finishes_when_its_request_is_abandoned(kind: Kind) {
    const N: usize = 300;
    let app = app(kind).await;
    for chunk in (0..N as u32).collect::<Vec<_>>().chunks(50) {
        futures::future::join_all(chunk.iter().map(|n| unsupported_version(&app, *n))).await;
    }
    process_through_retries(&app).await;
    let operator = app.sign_in("otto", Role::Operator).await;
    // The client gives up as soon as the server has taken the job, long before 300
    // redrives are done (a fixed client timeout could fire before a loaded server had read
    // the request at all, and then nothing was abandoned).
    let request = tokio::spawn(
        reqwest::Client::new()
            .post(format!("{}{}", app.url, RedriveDeadLetters::PATH))
            .header(COOKIE, operator.clone())
            .header("Origin", app.url.clone())
            .form(&[("reason", "bulk")])
            .send(),
    );
    for _ in 0..400 {
        if app.count("SELECT COUNT(*) FROM redrive_jobs").await > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(app.count("SELECT COUNT(*) FROM redrive_jobs").await, 1);
    // Dropped mid-way: 300 redrives take far longer than the job's first report.
    request.abort();
    let _ = request.await;
    let open = "SELECT COUNT(*) FROM dead_letters WHERE status = 'open'";
    for _ in 0..200 {
        if app.count(open).await == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(app.count(open).await, 0, "every item redriven");
    let (_, html) = app.page("/dlq", &operator).await;
    assert!(
        html.contains(&format!("done: {N} requeued")),
        "the job has its summary"
    );
    app.shutdown().await;
}

async fn a_bulk_redrive_whose_instance_stopped_shows_as_interrupted(kind: Kind) {
    let app = app(kind).await;
    let now = oncehook::store::now_ms();
    // A job its instance stopped reporting on a minute ago (killed mid-run), and one that
    // is alive (reported just now).
    for (actor, updated_at) in [("dead-instance", now - 60_000), ("alive", now)] {
        sqlx::query(
            "INSERT INTO redrive_jobs (actor, selection, instance_id, started_at, total, done, \
             updated_at) VALUES ($1, 'class=transient', 'gone', $2, 50, 20, $3)",
        )
        .bind(actor)
        .bind(now - 120_000)
        .bind(updated_at)
        .execute(app.db.writer())
        .await
        .unwrap();
    }
    let jobs = backend(&app)
        .redrive_jobs(&app.acting("vera", Role::Viewer).await)
        .await
        .unwrap();
    let [alive, dead] = jobs.as_slice() else {
        panic!("{jobs:?}")
    };
    assert_eq!((alive.actor.as_str(), alive.interrupted), ("alive", false));
    assert_eq!(
        (dead.actor.as_str(), dead.interrupted),
        ("dead-instance", true)
    );
    assert_eq!(dead.finished_at, None);

    let viewer = app.sign_in("vera", Role::Viewer).await;
    let (_, html) = app.page("/dlq", &viewer).await;
    assert!(
        html.contains("by dead-instance (class=transient): interrupted at 20 of 50"),
        "{html}"
    );
    assert!(html.contains("by alive (class=transient): 20 of 50"));
    assert_eq!(
        html.matches("data-running=\"true\"").count(),
        1,
        "only the live job runs"
    );
    app.shutdown().await;
}

/// A refusal the person can act on says why; a failure on our side (here the audit table
/// is gone, so the change's transaction fails) shows a generic sentence and a reference,
/// never the driver's text, and changes nothing.
async fn a_failure_of_ours_shows_a_reference_never_driver_text(kind: Kind) {
    let app = app(kind).await;
    let event = unsupported_version(&app, 1).await;
    process_through_retries(&app).await;
    let id = dead_letter_id(&app, &event).await;
    let operator = app.sign_in("otto", Role::Operator).await;
    let admin = app.sign_in("ada", Role::Admin).await;
    let id_text = id.to_string();
    let close = [
        ("id", id_text.as_str()),
        ("action", "resolve"),
        ("reason", "fixed by hand"),
    ];

    // Refusals the person can act on: their text is the answer.
    let (status, body) = app
        .post_form(
            app::api::RevokeApiToken::PATH,
            &admin,
            None,
            &[("name", "no-such-token")],
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("no live token named no-such-token"), "{body}");

    sqlx::query("DROP TABLE audit_log")
        .execute(app.db.writer())
        .await
        .unwrap();
    for (path, form, who) in [
        (CloseDeadLetter::PATH, &close[..], &operator),
        (
            app::api::CreateApiToken::PATH,
            &[
                ("name", "bot"),
                ("role", "viewer"),
                ("expires_in_days", "1"),
            ][..],
            &admin,
        ),
    ] {
        let (status, body) = app.post_form(path, who, None, form).await;
        assert_eq!(status, 503, "{path}: {body}");
        assert!(body.contains("reference "), "{path}: {body}");
        let lower = body.to_lowercase();
        for driver_text in ["audit_log", "sqlite", "relation", "no such table", "syntax"] {
            assert!(
                !lower.contains(driver_text),
                "{path} shows {driver_text:?}: {body}"
            );
        }
    }
    assert_eq!(
        dead_letter_status(&app, id).await,
        "open",
        "nothing changed"
    );
}
