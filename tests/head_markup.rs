//! Data in `<head>` is text, never markup: an order id a customer typed (it arrives in
//! `metadata.order_id`) and an event id reach the pages' titles, which leptos_meta writes
//! into `<head>` without escaping. Every page whose title or head carries data is rendered
//! with ids that try to close the title and add a `<meta http-equiv=refresh>`; the head
//! must hold exactly the shell's elements.

mod common;

use app::backend::{order_href, Role};
use common::fixtures::*;
use common::{Kind, TestApp};

both!(ids_in_titles_stay_text);

const ORDER_ID: &str = "x</title><meta http-equiv=refresh content=0;url=//evil.example>";
const EVENT_ID: &str = "evt_</title><meta name=planted-by-event><title>";
const PROVIDER: &str = "stripe";

/// The `<head>` of a page.
fn head(html: &str) -> &str {
    let start = html.find("<head>").expect("a <head>");
    let end = html.find("</head>").expect("a </head>");
    &html[start..end]
}

/// The elements that open in `head` (`<meta`, `<title`, …), by tag name.
fn opened_tags(head: &str) -> Vec<String> {
    head.split('<')
        .skip(1)
        .filter(|t| !t.starts_with('/') && !t.starts_with('!'))
        .map(|t| {
            t.split(|c: char| c.is_whitespace() || c == '>' || c == '/')
                .next()
                .unwrap_or_default()
                .to_ascii_lowercase()
        })
        .collect()
}

async fn ids_in_titles_stay_text(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let response = app
        .post_stripe(&payment_intent_succeeded(
            EVENT_ID, "pi_head", ORDER_ID, 1_000, T10_00,
        ))
        .await;
    assert_eq!(response.status(), 200);
    app.process().await;
    assert_eq!(app.event_status(EVENT_ID).await.0, "applied");
    assert_eq!(app.order_status(ORDER_ID).await.as_deref(), Some("paid"));
    let inbox_id: i64 = sqlx::query_scalar("SELECT id FROM inbox_events WHERE event_id = $1")
        .bind(EVENT_ID)
        .fetch_one(app.db.reader())
        .await
        .unwrap();
    let viewer = app.sign_in("vera", Role::Viewer).await;

    // What a page's head holds when no data is in it.
    let (_, overview) = app.page("/", &viewer).await;
    let shell = opened_tags(head(&overview));
    assert_eq!(
        shell.iter().filter(|t| *t == "title").count(),
        1,
        "{shell:?}"
    );

    let order_page = order_href(ORDER_ID);
    for path in [
        order_page.as_str(),
        &format!("/events/{inbox_id}"),
        &format!("/events?provider={PROVIDER}"),
        "/dlq",
    ] {
        let (status, html) = app.page(path, &viewer).await;
        assert_eq!(status, 200, "{path}: {html}");
        let head = head(&html);
        assert_eq!(
            opened_tags(head),
            shell,
            "{path}: the data made elements:\n{head}"
        );
        assert!(
            !html.contains("<meta http-equiv"),
            "{path}: a planted meta tag:\n{html}"
        );
        assert!(
            !html.contains("<meta name=planted"),
            "{path}: a planted meta tag"
        );
    }
    // The order and event pages did show the ids, as text.
    let (_, html) = app.page(&order_page, &viewer).await;
    assert!(
        head(&html).contains("Order x&lt;/title&gt;&lt;meta http-equiv=refresh"),
        "{}",
        head(&html)
    );
    let (_, html) = app.page(&format!("/events/{inbox_id}"), &viewer).await;
    assert!(
        head(&html).contains("Event evt_&lt;/title&gt;"),
        "{}",
        head(&html)
    );
    app.shutdown().await;
}
