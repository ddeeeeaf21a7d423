//! The dashboard over made-up data, without a database or a provider:
//!
//! ```sh
//! scripts/build-frontend.sh          # optional: without it the pages render but don't hydrate
//! cargo run --example dashboard_preview -- [ADDR] [--fail]
//! ```
//!
//! `ADDR` defaults to 127.0.0.1:3000; `--fail` makes every backend call fail, to look at the
//! error page. The site root is `$ONCEHOOK_SITE_ROOT`, else this checkout's `target/site`.

use app::backend::fixed::FixedInbox;
use app::backend::{InboxEventView, Principal, Role};
use chrono::{Duration, SecondsFormat, Utc};
use oncehook::http::dashboard::dashboard_router;
use std::{path::PathBuf, sync::Arc};

fn sample_events() -> Vec<InboxEventView> {
    let now = Utc::now();
    let at = |minutes_ago: i64| {
        (now - Duration::minutes(minutes_ago)).to_rfc3339_opts(SecondsFormat::Micros, true)
    };
    let event = |id: i64,
                 provider: &str,
                 event_type: Option<&str>,
                 status: &str,
                 reason: Option<&str>,
                 order: Option<&str>,
                 deliveries: i64,
                 minutes_ago: i64| InboxEventView {
        id,
        provider: provider.into(),
        event_id: format!("evt_1Q{id:04}xKpZ8vB2mH3nR7tLd9Ya"),
        event_type: event_type.map(Into::into),
        status: status.into(),
        reason: reason.map(Into::into),
        order_id: order.map(Into::into),
        deliveries,
        received_at: at(minutes_ago),
    };

    // One line per event reads like the table it becomes.
    #[rustfmt::skip]
    let mut events = vec![
        event(108, "stripe", Some("payment_intent.succeeded"), "pending", None, Some("order-78460"), 1, 0),
        event(107, "stripe", Some("charge.refunded"), "processing", None, Some("order-78452"), 1, 1),
        event(106, "stripe", Some("payment_intent.succeeded"), "applied", None, Some("order-78459"), 1, 3),
        event(105, "stripe", Some("invoice.payment_succeeded"), "duplicate", Some("same payment already applied by payment_intent.succeeded"), Some("order-78459"), 1, 3),
        event(104, "stripe", Some("payment_intent.succeeded"), "applied", None, Some("order-78452"), 4, 12),
        event(103, "stripe", Some("payment_intent.processing"), "stale", Some("older than the last applied event for this order"), Some("order-78452"), 1, 13),
        event(102, "acme-pay", Some("payment.settled"), "refused", Some("transition refunded → pending is not allowed"), Some("order-78431"), 2, 30),
        event(101, "stripe", None, "failed", Some("body is not valid JSON: expected value at line 1 column 1"), None, 1, 41),
        event(100, "stripe", Some("customer.created"), "ignored", Some("no mapping for this event type"), None, 1, 55),
    ];
    // Routine traffic, so that there is more than one page to walk through.
    for i in 0..60 {
        let id = 99 - i;
        let order = format!("order-{}", 78400 - i);
        events.push(event(
            id,
            "stripe",
            Some("payment_intent.succeeded"),
            "applied",
            None,
            Some(&order),
            if i % 3 == 2 { 2 } else { 1 },
            60 + i * 7,
        ));
    }
    events
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let fail = args.iter().any(|a| a == "--fail");
    let addr = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map_or("127.0.0.1:3000", String::as_str);
    let site_root = std::env::var_os("ONCEHOOK_SITE_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/site"));

    let backend = Arc::new(FixedInbox {
        events: sample_events(),
        fail: fail.then(|| "error returned from database: database is locked".to_string()),
    });
    // No sign-in here: every request reads as one viewer.
    let viewer = Principal {
        user_id: 1,
        name: "preview".into(),
        role: Role::Viewer,
        must_change_password: false,
        source: None,
    };
    // Sample data, but not `serve --demo`'s: no "demo data" badge.
    let router = dashboard_router(backend, site_root.clone(), false).layer(axum::Extension(viewer));

    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!(
        "dashboard preview on http://{} (site root {})",
        listener.local_addr()?,
        site_root.display()
    );
    axum::serve(listener, router).await
}
