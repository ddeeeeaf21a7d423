//! The order page and the search box, through the backend and over HTTP, on SQLite and
//! PostgreSQL: support finds an order by any id they hold (order, event, payment intent,
//! charge, refund) and reads why it is in its status, its money and its whole story.

mod common;

use app::backend::{AdminBackend, Role, SearchHit};
use app::error::AppError;
use common::fixtures::*;
use common::{Kind, TestApp};
use oncehook::http::admin::StoreBackend;
use reqwest::header::{ACCEPT, COOKIE, LOCATION};

both!(
    support_finds_a_refunded_order_by_any_id_and_reads_why,
    the_order_page_and_search_over_http,
    a_refund_filed_before_its_order_was_known_is_in_the_story_with_its_redrive,
);

async fn app(kind: Kind) -> TestApp {
    TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.processor.retry.max_attempts = 1;
    })
    .await
}

fn backend(app: &TestApp) -> StoreBackend {
    app.backend()
}

/// Order 78452: paid 50.00 EUR (delivered twice), refunded in two parts that arrive newest
/// first, and a payment failure older than the payment that changes nothing.
async fn refunded_order(app: &TestApp) {
    let pay = payment_intent_succeeded("evt_pay_78452", "pi_78452", "78452", 5_000, T10_00);
    for body in [
        pay.clone(),
        pay,
        refund_event(
            "evt_re_2",
            "refund.created",
            "pi_78452",
            "re_78452_2",
            3_000,
            "succeeded",
            None,
            T10_00 + 120,
        ),
        refund_event(
            "evt_re_1",
            "refund.created",
            "pi_78452",
            "re_78452_1",
            2_000,
            "succeeded",
            None,
            T10_00 + 60,
        ),
        payment_intent_failed("evt_fail_78452", "pi_78452", "78452", T10_00 - 30),
    ] {
        assert_eq!(app.post_stripe(&body).await.status(), 200);
        // One at a time, so the story's order is the arrival order.
        app.process().await;
    }
}

async fn support_finds_a_refunded_order_by_any_id_and_reads_why(kind: Kind) {
    let app = app(kind).await;
    refunded_order(&app).await;
    // A refund for a payment nobody announced: dead-lettered, and it belongs to no order.
    app.post_stripe(&refund_created(
        "evt_orphan",
        "pi_nobody",
        "re_orphan",
        100,
        T10_00,
    ))
    .await;
    app.process().await;
    let backend = backend(&app);
    let viewer: app::backend::Viewer = app.acting("vera", Role::Viewer).await;

    let order = SearchHit::Order("78452".into());
    for id in [
        "78452",
        "evt_pay_78452",
        "evt_re_1",
        "pi_78452",
        "ch_pi_78452",
        "re_78452_2",
        "  re_78452_1 ",
    ] {
        assert_eq!(backend.search(&viewer, id).await.unwrap(), order, "{id:?}");
    }
    let orphan: i64 =
        sqlx::query_scalar("SELECT id FROM inbox_events WHERE event_id = 'evt_orphan'")
            .fetch_one(app.db.reader())
            .await
            .unwrap();
    assert_eq!(
        backend.search(&viewer, "evt_orphan").await.unwrap(),
        SearchHit::Event(orphan)
    );
    for nothing in [
        "",
        "   ",
        "7845",
        "re_78452",
        "x\u{0}y",
        &"9".repeat(10_000),
    ] {
        assert_eq!(
            backend.search(&viewer, nothing).await.unwrap(),
            SearchHit::Nothing,
            "{:?}",
            nothing.get(..20)
        );
    }

    let detail = backend.order_detail(&viewer, "78452").await.unwrap();
    assert_eq!(detail.status, "refunded");
    assert_eq!(
        (
            detail.amount_paid,
            detail.amount_refunded,
            detail.amount_disputed,
            detail.net
        ),
        (5_000, 5_000, 0, 0)
    );
    assert_eq!(detail.currency.as_deref(), Some("EUR"));
    assert!(detail.why.contains("refund"), "{}", detail.why);
    assert!(detail.attention.is_empty(), "{:?}", detail.attention);
    let mut resources: Vec<(String, String)> = detail
        .resources
        .iter()
        .map(|r| (r.resource_id.clone(), r.state.clone()))
        .collect();
    resources.sort();
    assert_eq!(resources.len(), 3, "{resources:?}");
    assert_eq!(resources[0].0, "pi_78452");
    assert_eq!(
        (resources[1].0.as_str(), resources[2].0.as_str()),
        ("re_78452_1", "re_78452_2")
    );

    // The story: oldest first, each delivery, each processing, each fact counted once,
    // the stale failure, and the outbox messages.
    let at: Vec<&str> = detail.timeline.iter().map(|e| e.at.as_str()).collect();
    let mut sorted = at.clone();
    sorted.sort();
    assert_eq!(at, sorted, "the story is in time order");
    let count = |kind: &str| detail.timeline.iter().filter(|e| e.kind == kind).count();
    assert_eq!(count("delivery"), 4, "{:#?}", detail.timeline);
    assert_eq!(count("redelivery"), 1);
    assert_eq!(count("processed"), 4);
    let money: Vec<&str> = detail
        .timeline
        .iter()
        .filter(|e| e.kind == "money")
        .map(|e| e.title.as_str())
        .collect();
    assert_eq!(money.len(), 3, "{money:?}");
    assert!(
        money[0].starts_with("payment pi_78452 of 50.00 EUR counted: 50.00 EUR"),
        "{money:?}"
    );
    assert!(
        money[1].starts_with("refund re_78452_2 of 30.00 EUR counted"),
        "{money:?}"
    );
    assert!(
        money[2].starts_with("refund re_78452_1 of 20.00 EUR counted"),
        "{money:?}"
    );
    let stale: Vec<_> = detail
        .timeline
        .iter()
        .filter(|e| e.kind == "stale")
        .collect();
    assert_eq!(stale.len(), 1, "{:#?}", detail.timeline);
    assert!(stale[0].title.contains("evt_fail_78452"), "{:?}", stale[0]);
    let outbox_messages: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM outbox WHERE order_id = '78452'")
            .fetch_one(app.db.reader())
            .await
            .unwrap();
    assert_eq!(count("outbox") as i64, outbox_messages);
    assert!(outbox_messages >= 3, "one per fact at least");
    assert!(matches!(
        backend.order_detail(&viewer, "no-such-order").await,
        Err(AppError::NotFound)
    ));
    app.shutdown().await;
}

async fn the_order_page_and_search_over_http(kind: Kind) {
    let app = app(kind).await;
    refunded_order(&app).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    // Signed out: the page leads to sign-in and shows nothing of the order.
    let anonymous = http
        .get(format!("{}/orders/78452", app.url))
        .send()
        .await
        .unwrap();
    assert!(
        anonymous.status().is_redirection(),
        "{}",
        anonymous.status()
    );
    assert!(!anonymous.text().await.unwrap().contains("pi_78452"));

    let viewer = app.sign_in("vera", Role::Viewer).await;
    // The search box is a plain GET form: a hit answers a browser with a redirect.
    let found = http
        .get(format!("{}/search?q=ch_pi_78452", app.url))
        .header(COOKIE, &viewer)
        .header(ACCEPT, "text/html,application/xhtml+xml")
        .send()
        .await
        .unwrap();
    assert!(found.status().is_redirection(), "{}", found.status());
    assert_eq!(found.headers()[LOCATION], "/orders/78452");

    let page = http
        .get(format!("{}/orders/78452", app.url))
        .header(COOKIE, &viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    for needle in [
        "id=\"order-why\"",
        "50.00 EUR",
        "0.00 EUR",
        "re_78452_1",
        "evt_fail_78452",
        "data-kind=\"stale\"",
        "data-kind=\"redelivery\"",
        "id=\"search-box\"",
    ] {
        assert!(html.contains(needle), "{needle} missing");
    }

    let nothing = http
        .get(format!("{}/search?q=re_unknown", app.url))
        .header(COOKIE, &viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(nothing.status(), 200);
    assert!(nothing
        .text()
        .await
        .unwrap()
        .contains("id=\"search-nothing\""));

    let missing = http
        .get(format!("{}/orders/no-such-order", app.url))
        .header(COOKIE, &viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    app.shutdown().await;
}

async fn a_refund_filed_before_its_order_was_known_is_in_the_story_with_its_redrive(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.processor.retry.max_attempts = 1;
    })
    .await;
    // The refund names only its payment intent: its order is not known yet, so it is
    // dead-lettered without an order.
    app.post_stripe(&refund_created(
        "evt_early_re",
        "pi_early",
        "re_early",
        500,
        T10_00 + 60,
    ))
    .await;
    app.process().await;
    assert_eq!(app.event_status("evt_early_re").await.0, "dead");
    app.post_stripe(&payment_intent_succeeded(
        "evt_early_pay",
        "pi_early",
        "order-early",
        500,
        T10_00,
    ))
    .await;
    app.process().await;
    let backend = app.backend();
    let operator: app::backend::Operator = app.acting("otto", Role::Operator).await;
    let viewer: app::backend::Viewer = app.acting("otto", Role::Operator).await;
    let query = app::backend::DlqQuery::default();
    let done = backend
        .redrive(&operator, query, Some("payment arrived".into()))
        .await
        .unwrap();
    assert_eq!(done.len(), 1);
    app.process().await;
    let order = backend.order_detail(&viewer, "order-early").await.unwrap();
    assert_eq!(order.status, "refunded");
    let kinds: Vec<&str> = order.timeline.iter().map(|e| e.kind.as_str()).collect();
    assert!(kinds.contains(&"dead-letter"), "{kinds:?}");
    let redrive = order
        .timeline
        .iter()
        .find(|e| e.kind == "redrive")
        .unwrap_or_else(|| panic!("a redrive in {kinds:?}"));
    let text = format!(
        "{} {}",
        redrive.title,
        redrive.detail.clone().unwrap_or_default()
    );
    assert!(
        text.contains("otto") && text.contains("payment arrived"),
        "{text}"
    );
    app.shutdown().await;
}
