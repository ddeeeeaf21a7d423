//! Roles and audit, over HTTP against the real server on both databases: an API token is
//! bounded by its maker as the maker is now, dead-letter actions are audited with their
//! source address, the reads a viewer can trigger are bounded (the redrive preview, the
//! inbox's indexed type and time filters), sink URLs on the settings page keep their secret
//! path to themselves, and the dead-letter error filter matches `%` and `_` literally.

mod common;

use std::sync::{Arc, Mutex, OnceLock};

use app::backend::Role;
use common::fixtures::*;
use common::{Kind, TestApp};
use oncehook::domain::failure::ErrorClass;
use oncehook::store::dead_letters::{self, NewDeadLetter};
use oncehook::store::{now_ms, tokens};
use serde_json::{json, Value};
use sqlx::Row;

both!(
    a_token_stops_working_when_its_maker_is_disabled,
    a_token_never_has_more_rights_than_its_maker_has_now,
    dead_letter_actions_are_audited_with_their_source_address,
    the_redrive_preview_reads_at_most_what_it_shows,
    the_inbox_type_and_time_filters_are_served_by_indexes,
    an_event_id_without_its_provider_is_found_by_the_unique_key,
    sink_urls_on_the_settings_page_show_scheme_and_host_only,
    percent_and_underscore_in_the_error_filter_match_literally,
    a_refused_request_naming_a_huge_target_leaves_a_short_audit_row,
);

const DAY_MS: i64 = 86_400_000;

/// A token made by `admin` (signed in) through the Settings → API tokens form, as a
/// person makes one; returns the token the page shows once.
async fn token_from_the_page(app: &TestApp, admin: &str, name: &str, role: &str) -> String {
    use app::api::CreateApiToken;
    use leptos::server_fn::ServerFn;
    let form = [("name", name), ("role", role), ("expires_in_days", "30")];
    let (status, _) = app
        .post_form(CreateApiToken::PATH, admin, Some("/admin/tokens"), &form)
        .await;
    assert!((300..400).contains(&status), "back to the page: {status}");
    let (_, html) = app.page("/admin/tokens", admin).await;
    let tag = html.find("id=\"new-token\"").expect("the new token, once");
    let start = html[tag..].find('>').unwrap() + tag + 1;
    let end = html[start..].find('<').unwrap() + start;
    html[start..end].to_string()
}

/// A refund naming a payment nobody told us about: dead-lettered at once.
async fn orphan_refund(app: &TestApp, n: u32) -> String {
    let id = format!("evt_roles_orphan_{n}");
    app.post_stripe(&refund_created(
        &id,
        &format!("pi_roles_{n}"),
        &format!("re_roles_{n}"),
        1000,
        T10_00 + 60,
    ))
    .await;
    app.process().await;
    assert_eq!(app.event_status(&id).await.0, "dead");
    id
}

async fn app(kind: Kind) -> TestApp {
    TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.processor.retry.max_attempts = 1;
    })
    .await
}

async fn a_token_stops_working_when_its_maker_is_disabled(kind: Kind) {
    let app = app(kind).await;
    let ada = app.sign_in("ada", Role::Admin).await;
    let grafana = token_from_the_page(&app, &ada, "grafana", "viewer").await;
    let (status, _) = app.api_get("/api/v1/overview", Some(&grafana)).await;
    assert_eq!(status, 200, "the token works while ada may sign in");

    oncehook::http::auth::admin::set_disabled(&app.db, "ada", true, "test")
        .await
        .unwrap();
    let (status, body) = app.api_get("/api/v1/overview", Some(&grafana)).await;
    assert_eq!(status, 401, "ada is disabled, so is her token");
    assert!(body["error"].is_string(), "{body}");

    oncehook::http::auth::admin::set_disabled(&app.db, "ada", false, "test")
        .await
        .unwrap();
    let (status, _) = app.api_get("/api/v1/overview", Some(&grafana)).await;
    assert_eq!(status, 200, "enabled again, the token works again");
    app.shutdown().await;
}

async fn a_token_never_has_more_rights_than_its_maker_has_now(kind: Kind) {
    let app = app(kind).await;
    let ada = app.sign_in("ada", Role::Admin).await;
    let ops = token_from_the_page(&app, &ada, "ops-bot", "operator").await;
    orphan_refund(&app, 1).await;

    // Ada is now a viewer (changed in the database, as no command changes a role yet).
    sqlx::query("UPDATE users SET role = 'viewer' WHERE username = 'ada'")
        .execute(app.db.writer())
        .await
        .unwrap();
    let (status, body) = app
        .api_post(
            "/api/v1/dead-letters/redrive",
            &ops,
            &json!({ "dry_run": false, "reason": "try" }),
        )
        .await;
    assert_eq!(
        status, 403,
        "an operator token of a viewer is a viewer: {body}"
    );
    assert!(body["error"].as_str().unwrap().contains("viewer"), "{body}");
    let (status, dry) = app
        .api_post("/api/v1/dead-letters/redrive", &ops, &json!({}))
        .await;
    assert_eq!(status, 200, "a viewer may still dry-run: {dry}");
    assert_eq!(
        app.count("SELECT COUNT(*) FROM dead_letters WHERE status = 'open'")
            .await,
        1,
        "nothing was redriven"
    );

    // Back to operator: the token has its own role again, never more.
    sqlx::query("UPDATE users SET role = 'operator' WHERE username = 'ada'")
        .execute(app.db.writer())
        .await
        .unwrap();
    let (status, body) = app
        .api_post(
            "/api/v1/dead-letters/redrive",
            &ops,
            &json!({ "dry_run": false, "reason": "try again" }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    app.shutdown().await;
}

async fn dead_letter_actions_are_audited_with_their_source_address(kind: Kind) {
    let app = app(kind).await;
    let now = now_ms();
    let ops = tokens::create(
        &app.db,
        &tokens::NewToken {
            name: "ops",
            role: "operator",
            created_by: "root@cli",
            maker: tokens::Maker::Shell,
            now,
            expires_at: now + DAY_MS,
        },
        None,
    )
    .await
    .unwrap()
    .1;
    for n in 1..=3 {
        orphan_refund(&app, n).await;
    }
    let ids: Vec<i64> = sqlx::query("SELECT id FROM dead_letters ORDER BY id")
        .fetch_all(app.db.reader())
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let (status, body) = app
        .api_post(
            "/api/v1/dead-letters/redrive",
            &ops,
            &json!({ "id": ids[0], "dry_run": false, "reason": "retry" }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    for (id, action) in [(ids[1], "resolve"), (ids[2], "discard")] {
        let (status, body) = app
            .api_post(
                &format!("/api/v1/dead-letters/{id}/{action}"),
                &ops,
                &json!({ "reason": "handled" }),
            )
            .await;
        assert_eq!(status, 200, "{action}: {body}");
    }
    for action in [
        "dead_letter.redrive",
        "dead_letter.resolve",
        "dead_letter.discard",
    ] {
        let rows: Vec<(String, Option<String>)> =
            sqlx::query("SELECT actor, source FROM audit_log WHERE action = $1")
                .bind(action)
                .fetch_all(app.db.reader())
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
        assert_eq!(
            rows,
            [("token:ops".to_string(), Some("127.0.0.1".to_string()))],
            "{action}"
        );
    }
    app.shutdown().await;
}

/// The most rows one statement over `dead_letters` returned, per database URL, as sqlx
/// reports them (`rows_returned`) to the process's tracing subscriber: the server runs in
/// this process, so its statements are seen here.
fn rows_seen() -> &'static Mutex<Vec<(String, u64)>> {
    static SEEN: OnceLock<Statements> = OnceLock::new();
    SEEN.get_or_init(|| {
        use tracing_subscriber::layer::SubscriberExt;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let layer = StatementRows(seen.clone());
        let subscriber = tracing_subscriber::registry().with(layer).with(
            tracing_subscriber::filter::Targets::new()
                .with_target("sqlx::query", tracing::Level::DEBUG),
        );
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other subscriber in this test binary");
        seen
    })
}

/// (statement, rows returned) of each statement over `dead_letters`.
type Statements = Arc<Mutex<Vec<(String, u64)>>>;

struct StatementRows(Statements);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for StatementRows {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        #[derive(Default)]
        struct Fields {
            statement: String,
            rows: u64,
        }
        impl tracing::field::Visit for Fields {
            fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
                if field.name() == "rows_returned" {
                    self.rows = value;
                }
            }
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "db.statement" {
                    self.statement = value.to_string();
                }
            }
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "db.statement" {
                    self.statement = format!("{value:?}");
                }
            }
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        if fields.statement.contains("FROM dead_letters") {
            self.0.lock().unwrap().push((fields.statement, fields.rows));
        }
    }
}

async fn put_dead_letters(app: &TestApp, errors: &[&str]) {
    let mut conn = app.db.writer().acquire().await.unwrap();
    let now = now_ms();
    let base = now % 1_000_000_000;
    for (n, error) in errors.iter().enumerate() {
        let event_id = format!("evt_put_{n}");
        dead_letters::put(
            &mut conn,
            &NewDeadLetter {
                stage: dead_letters::STAGE_PROCESSOR,
                sink: None,
                // No inbox row behind it: a prediction says it was pruned.
                source_id: base + n as i64,
                provider: Some("stripe"),
                event_id: Some(&event_id),
                event_type: Some("refund.created"),
                order_id: None,
                payload: b"{}",
                class: ErrorClass::Business,
                error,
                earlier_errors: None,
                attempts: 1,
                first_attempt_at: now,
                correlation_id: "c",
                now,
                resolve_by: now + DAY_MS,
            },
        )
        .await
        .unwrap();
    }
}

async fn viewer_token(app: &TestApp) -> String {
    let now = now_ms();
    tokens::create(
        &app.db,
        &tokens::NewToken {
            name: "viewer-bot",
            role: "viewer",
            created_by: "root@cli",
            maker: tokens::Maker::Shell,
            now,
            expires_at: now + DAY_MS,
        },
        None,
    )
    .await
    .unwrap()
    .1
}

/// What one hostile request costs the audit log: a viewer's refund of an order whose id is
/// 6,000 characters of the URL is refused and audited, with the target cut to 200 + "…".
async fn a_refused_request_naming_a_huge_target_leaves_a_short_audit_row(kind: Kind) {
    let app = app(kind).await;
    let viewer = viewer_token(&app).await;
    let order = "o".repeat(6_000);
    let r = app
        .http
        .post(format!("{}/api/v1/orders/{order}/refunds", app.url))
        .bearer_auth(&viewer)
        .json(&serde_json::json!({"amount": 100, "reason": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let (target,): (String,) = sqlx::query_as(
        "SELECT target FROM audit_log WHERE action = 'order.refund.refused' ORDER BY id DESC",
    )
    .fetch_one(app.db.reader())
    .await
    .unwrap();
    assert_eq!(target.chars().count(), 201, "{target}");
    assert!(target.starts_with("order:ooo") && target.ends_with('…'));
    app.shutdown().await;
}

async fn the_redrive_preview_reads_at_most_what_it_shows(kind: Kind) {
    let seen = rows_seen();
    let app = app(kind).await;
    let viewer = viewer_token(&app).await;
    let errors = vec!["card declined"; 450];
    put_dead_letters(&app, &errors).await;
    seen.lock().unwrap().clear();

    let (status, dry) = app
        .api_post("/api/v1/dead-letters/redrive", &viewer, &json!({}))
        .await;
    assert_eq!(status, 200, "{dry}");
    assert_eq!(dry["matching"], 450, "it still counts every match");
    assert_eq!(dry["outcomes"].as_array().unwrap().len(), 200);

    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty(), "the statements were observed");
    let most = seen.iter().map(|(_, rows)| *rows).max().unwrap();
    assert!(
        most <= 200,
        "a statement returned {most} dead letters for a preview of 200: {:?}",
        seen.iter().find(|(_, rows)| *rows == most)
    );
    app.shutdown().await;
}

/// The plan the database picks for the inbox's query with `filter`. On PostgreSQL with
/// sequential scans, bitmap scans and sorts discouraged, so a tiny test table does not hide
/// which index would serve it at a million rows (a discouraged step is still taken when
/// nothing else can answer, so a Sort in the plan means no index gives the order).
async fn plan(app: &TestApp, filter: &oncehook::store::read::EventFilter) -> String {
    plan_without(
        app,
        filter,
        &["enable_seqscan", "enable_bitmapscan", "enable_sort"],
    )
    .await
}

/// The plan with the given PostgreSQL planner steps discouraged (see `plan`).
async fn plan_without(
    app: &TestApp,
    filter: &oncehook::store::read::EventFilter,
    discouraged: &[&str],
) -> String {
    let mut conn = app.db.reader().acquire().await.unwrap();
    common::planner_steps(&mut conn, discouraged, true).await;
    let plan = oncehook::store::read::plan_of_events(&app.db, &mut conn, filter)
        .await
        .unwrap();
    common::planner_steps(&mut conn, discouraged, false).await;
    plan
}

async fn the_inbox_type_and_time_filters_are_served_by_indexes(kind: Kind) {
    use oncehook::store::read::EventFilter;
    let app = app(kind).await;
    let by_type = EventFilter {
        event_type: Some("charge.refunded".into()),
        before: Some(1_000),
        limit: 51,
        ..Default::default()
    };
    let plan_type = plan(&app, &by_type).await;
    assert!(plan_type.contains("inbox_events_type"), "{plan_type}");
    for filter in [
        EventFilter {
            since: Some(1_700_000_000_000),
            limit: 51,
            ..Default::default()
        },
        EventFilter {
            since: Some(1_700_000_000_000),
            until: Some(1_800_000_000_000),
            before: Some(1_000),
            limit: 51,
            ..Default::default()
        },
    ] {
        let plan_time = plan(&app, &filter).await;
        assert!(plan_time.contains("inbox_events_received"), "{plan_time}");
        // The index gives the page's order: no sort of every row in the window.
        assert!(!plan_time.contains("TEMP B-TREE"), "{plan_time}");
        assert!(!plan_time.contains("Sort"), "{plan_time}");
    }

    // And the pages are right: newest first, the cursor goes on where the page stopped.
    for n in 0..5 {
        app.post_stripe(&payment_intent_succeeded(
            &format!("evt_time_{n}"),
            &format!("pi_time_{n}"),
            &format!("order-time-{n}"),
            1000,
            T10_00 + n,
        ))
        .await;
    }
    let viewer = viewer_token(&app).await;
    let (status, first) = app
        .api_get("/api/v1/events?since=2020-01-01&limit=3", Some(&viewer))
        .await;
    assert_eq!(status, 200, "{first}");
    let ids = |page: &Value| -> Vec<String> {
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event_id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&first), ["evt_time_4", "evt_time_3", "evt_time_2"]);
    let before = first["next_before"].as_i64().expect("a next page");
    let (_, second) = app
        .api_get(
            &format!("/api/v1/events?since=2020-01-01&limit=3&before={before}"),
            Some(&viewer),
        )
        .await;
    assert_eq!(ids(&second), ["evt_time_1", "evt_time_0"]);
    app.shutdown().await;
}

/// The inbox keeps no index on event_id alone (it cost every receipt a random page write):
/// a lookup without the provider walks the distinct providers and probes the UNIQUE
/// (provider, event_id) key once per provider, and still finds the event under each one.
async fn an_event_id_without_its_provider_is_found_by_the_unique_key(kind: Kind) {
    use oncehook::store::read::{list_events, EventFilter};
    let app = app(kind).await;
    let body = payment_intent_succeeded("evt_both", "pi_both", "order-both", 1000, T10_00);
    assert_eq!(app.post_stripe(&body).await.status(), 200);
    assert_eq!(app.post_standard("evt_both", &body).await.status(), 200);
    let other = payment_intent_succeeded("evt_other", "pi_other", "order-o", 1000, T10_00);
    assert_eq!(app.post_stripe(&other).await.status(), 200);

    let by_id = |provider: Option<&str>| EventFilter {
        event_id: Some("evt_both".into()),
        provider: provider.map(str::to_owned),
        limit: 51,
        ..Default::default()
    };
    let mut found: Vec<(String, String)> = list_events(&app.db, &by_id(None))
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.provider, e.event_id))
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            ("acme".to_string(), "evt_both".to_string()),
            ("stripe".to_string(), "evt_both".to_string())
        ]
    );
    let stripe_only = list_events(&app.db, &by_id(Some("stripe"))).await.unwrap();
    assert_eq!(stripe_only.len(), 1);
    assert_eq!(stripe_only[0].provider, "stripe");
    let missing = EventFilter {
        event_id: Some("evt_nowhere".into()),
        limit: 51,
        ..Default::default()
    };
    assert!(list_events(&app.db, &missing).await.unwrap().is_empty());

    // Sorting stays allowed: the lookup finds one row per provider at most, and sorting
    // those is the point (the pkey's order would mean reading the inbox until a match).
    let plan = plan_without(&app, &by_id(None), &["enable_seqscan", "enable_bitmapscan"]).await;
    // The unique key is probed with both of its columns, and the page then fetches the
    // rows by id: never a walk of the table or of a whole index.
    let (probe, page) = plan
        .split_once("-- the page:")
        .unwrap_or_else(|| panic!("a probe and a page: {plan}"));
    assert!(probe.contains("-- the event id's probe:"), "{plan}");
    let cond_after = |text: &str, scan: &str| -> String {
        text.lines()
            .skip_while(|l| !l.contains(scan))
            .nth(1)
            .unwrap_or_default()
            .to_string()
    };
    match kind {
        Kind::Sqlite => {
            assert!(
                probe.contains(
                    "SEARCH e USING COVERING INDEX sqlite_autoindex_inbox_events_1 \
                     (provider=? AND event_id=?)"
                ),
                "{plan}"
            );
            assert!(
                page.contains("SEARCH i USING INTEGER PRIMARY KEY (rowid"),
                "{plan}"
            );
            assert!(!page.contains("SCAN i"), "{plan}");
        }
        Kind::Postgres => {
            let probed = cond_after(
                probe,
                "using inbox_events_provider_event_id_key on inbox_events e",
            );
            assert!(
                probed.contains("Index Cond: ((provider = ") && probed.contains("AND (event_id = "),
                "{plan}"
            );
            let fetched = cond_after(page, "using inbox_events_pkey on inbox_events i");
            assert!(fetched.contains("Index Cond: ((id = ANY ("), "{plan}");
            assert!(!plan.contains("Seq Scan on inbox_events"), "{plan}");
        }
    }
    app.shutdown().await;
}

async fn sink_urls_on_the_settings_page_show_scheme_and_host_only(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.sinks.insert(
            "slack".into(),
            oncehook::config::SinkSettings {
                kind: oncehook::config::SinkKind::Http {
                    url: "https://hooks.slack.com/services/T0AAA/B0BBB/sinkpathsecret?x=1".into(),
                    secret: None,
                    timeout_ms: 1000,
                },
                concurrency: 1,
                rate_per_sec: None,
            },
        );
    })
    .await;
    let viewer = app.sign_in("vera", Role::Viewer).await;
    let (status, html) = app.page("/settings", &viewer).await;
    assert_eq!(status, 200);
    assert!(html.contains("sinks: slack"), "the sink is listed");
    assert!(html.contains("https://hooks.slack.com/"), "scheme and host");
    for secret in ["sinkpathsecret", "T0AAA", "B0BBB", "/services/"] {
        assert!(!html.contains(secret), "{secret} must not be on the page");
    }
    app.shutdown().await;
}

async fn percent_and_underscore_in_the_error_filter_match_literally(kind: Kind) {
    let app = app(kind).await;
    let viewer = viewer_token(&app).await;
    put_dead_letters(
        &app,
        &[
            "discount 100% refused",
            "discount 1000 refused",
            "field a_b missing",
            "field axb missing",
        ],
    )
    .await;
    let errors_for = |filter: &'static str| {
        let app = &app;
        let viewer = &viewer;
        async move {
            let path = format!("/api/v1/dead-letters?error={}", url_escape(filter));
            let (status, page) = app.api_get(&path, Some(viewer)).await;
            assert_eq!(status, 200, "{page}");
            let mut errors: Vec<String> = page["groups"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g["error"].as_str().unwrap().to_string())
                .collect();
            errors.sort();
            errors
        }
    };
    assert_eq!(errors_for("100%").await, ["discount 100% refused"]);
    assert_eq!(errors_for("a_b").await, ["field a_b missing"]);
    assert_eq!(errors_for("%").await, ["discount 100% refused"]);
    assert_eq!(errors_for("_").await, ["field a_b missing"]);
    assert_eq!(errors_for("\\").await, Vec::<String>::new());
    assert_eq!(
        errors_for("refused").await.len(),
        2,
        "plain text still matches"
    );
    app.shutdown().await;
}

/// Percent-encodes a query value (the filter text holds `%`, `_` and `\`).
fn url_escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
