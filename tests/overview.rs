//! The overview page on SQLite and PostgreSQL: KPIs and chart series from the per-minute
//! rollups kept as events are received and processed, compared with what was sent; and the
//! page over HTTP with its SVG charts, for each time range.

mod common;

use app::backend::{AdminBackend, MoneyMoved, Range, Role};
use common::fixtures::*;
use common::{now_secs, Kind, TestApp};
use reqwest::header::COOKIE;

both!(the_overview_counts_what_was_received_processed_and_moved);

async fn the_overview_counts_what_was_received_processed_and_moved(kind: Kind) {
    let _turn = common::dashboard_turn().await;
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.processor.retry.max_attempts = 1;
    })
    .await;
    let pay = payment_intent_succeeded("evt_o_pay", "pi_o", "order-o", 5_000, T10_00);
    let refund = refund_created("evt_o_refund", "pi_o", "re_o", 2_000, T10_00 + 60);
    let orphan = refund_created("evt_o_orphan", "pi_nobody", "re_nobody", 100, T10_00);
    for body in [&pay, &pay, &refund, &orphan] {
        assert_eq!(app.post_stripe(body).await.status(), 200);
        app.process().await;
    }
    let forged = app
        .post_stripe_with(
            pay.to_string().as_bytes(),
            "whsec_not_the_secret_0123",
            now_secs(),
        )
        .await;
    assert_eq!(forged.status(), 401);

    // The server writes its counts behind every 5 s; the test does not wait for the tick.
    app.db.rollup().flush(&app.db).await.unwrap();
    let backend = app.backend();
    let viewer: app::backend::Viewer = app.acting("vera", app::backend::Role::Viewer).await;
    let o = backend.overview(&viewer, Range::Hour).await.unwrap();
    assert_eq!((o.received, o.duplicates, o.signature_failures), (3, 1, 1));
    assert_eq!((o.filed, o.dead, o.retries), (3, 1, 0), "{o:#?}");
    assert_eq!(o.duplicate_rate(), Some(25.0));
    assert!(o.latency_p50_ms.is_some() && o.latency_p99_ms >= o.latency_p50_ms);
    assert_eq!((o.backlog, o.dlq_open), (0, 1));
    assert!(o.dlq_oldest_age_secs.is_some());
    assert_eq!(
        o.money,
        vec![MoneyMoved {
            currency: "EUR".into(),
            paid: 5_000,
            refunded: 2_000,
            disputed: 0
        }]
    );
    assert_eq!(
        o.by_type,
        vec![
            ("refund.created".to_string(), 2),
            ("payment_intent.succeeded".to_string(), 1)
        ]
    );
    assert_eq!(o.by_provider, vec![("stripe".to_string(), 3)]);
    assert_eq!(o.series.len(), 60, "one bar per minute of the hour");
    let sent: i64 = o.series.iter().map(|p| p.received).sum();
    let failures: i64 = o.series.iter().map(|p| p.failures).sum();
    assert_eq!(
        (sent, failures),
        (3, 2),
        "the dead letter and the forged signature"
    );
    // Counting is idempotent to reading: a second read gives the same numbers.
    assert_eq!(
        backend
            .overview(&viewer, Range::Hour)
            .await
            .unwrap()
            .received,
        3
    );
    let week = backend.overview(&viewer, Range::Week).await.unwrap();
    assert_eq!((week.received, week.series.len()), (3, 84));
    assert_eq!(
        backend
            .overview(&viewer, Range::Day)
            .await
            .unwrap()
            .series
            .len(),
        96
    );

    // Over HTTP, signed in: KPIs and three SVG charts, for each range.
    let viewer = app.sign_in("vera", Role::Viewer).await;
    for (query, label) in [
        ("", "Last hour"),
        ("?range=24h", "Last 24 hours"),
        ("?range=7d", "Last 7 days"),
    ] {
        let page = app
            .http
            .get(format!("{}/{query}", app.url))
            .header(COOKIE, &viewer)
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200, "{query}");
        let html = page.text().await.unwrap();
        assert!(
            html.contains(&format!(
                "aria-current=\"page\" class=\"button selected\">{label}<"
            )),
            "{query}: the range shown is marked"
        );
        for id in [
            "chart-traffic",
            "chart-latency",
            "chart-failures",
            "kpi-received",
            "money-moved",
        ] {
            assert!(html.contains(&format!("id=\"{id}\"")), "{query}: {id}");
        }
        assert!(html.matches("<svg").count() >= 3, "{query}");
        assert!(html.contains("<rect"), "{query}: bars drawn");
        assert!(html.contains("50.00 EUR"), "{query}: money moved");
    }
    app.shutdown().await;
}
