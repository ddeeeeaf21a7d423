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
    // The events were created on 2024-01-01: the provider's delay is over three days, for
    // the three events mapped on their first attempt (the redelivery is not one).
    assert_eq!(
        o.provider_delay,
        vec![app::backend::ProviderDelay {
            provider: "stripe".into(),
            events: 3,
            p50_ms: Some(i64::MAX),
            p95_ms: Some(i64::MAX),
        }]
    );
    assert_eq!(o.time_to_resolve, None, "nothing closed yet");
    assert_eq!(o.reconciliation, None, "never reconciled");
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
    // Closing the dead letter: the time from filed to closed counts in the range.
    let dead_letter = app.count("SELECT MIN(id) FROM dead_letters").await;
    let operator: app::backend::Operator = app.acting("otto", Role::Operator).await;
    backend
        .close_dead_letter(
            &operator,
            dead_letter,
            true,
            "refund of a test payment".into(),
        )
        .await
        .unwrap();
    let closed = backend.overview(&viewer, Range::Hour).await.unwrap();
    let t = closed.time_to_resolve.expect("one closed");
    assert_eq!(t.closed, 1);
    assert!(t.mean_secs >= 0 && t.p95_secs >= t.mean_secs.min(t.p95_secs));
    assert_eq!(closed.dlq_open, 0);
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
            "kpi-provider-delay",
            "kpi-time-to-resolve",
            "kpi-reconciliation",
        ] {
            assert!(html.contains(&format!("id=\"{id}\"")), "{query}: {id}");
        }
        assert!(html.matches("<svg").count() >= 3, "{query}");
        assert!(html.contains("<rect"), "{query}: bars drawn");
        assert!(html.contains("50.00 EUR"), "{query}: money moved");
        assert!(
            html.contains("stripe: &gt; 3 d / &gt; 3 d"),
            "{query}: provider delay"
        );
    }
    app.shutdown().await;
}
