//! `/api/v1` over real HTTP: bearer tokens (live, revoked, expired, a session cookie is not
//! one), the reads against what the database holds, the operator's actions with their role
//! checks and audit rows, the generated OpenAPI document against the router, and
//! `oncehook token` from the shell.

mod common;

use std::process::Command;

use common::fixtures::*;
use common::{Kind, TestApp};
use oncehook::store::{now_ms, tokens};
use serde_json::{json, Value};

both!(
    a_token_reads_orders_events_and_the_overview,
    no_token_or_a_dead_one_is_refused_with_401,
    a_viewer_token_may_dry_run_but_not_redrive_and_the_refusal_is_audited,
    an_operator_token_redrives_resolves_and_discards_with_audit_rows,
    bad_parameters_get_clear_json_errors,
    the_openapi_document_matches_the_router,
    the_token_cli_prints_a_token_once_and_revokes_it,
);

const DAY_MS: i64 = 86_400_000;

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
            expires_at: now + DAY_MS,
        },
        None,
    )
    .await
    .unwrap()
    .1
}

/// An app whose "order not known yet" retries give up at the first attempt.
async fn app(kind: Kind) -> TestApp {
    TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.processor.retry.max_attempts = 1;
    })
    .await
}

/// A refund naming a payment nobody told us about: dead-lettered at once.
async fn orphan_refund(app: &TestApp, n: u32) -> String {
    let id = format!("evt_api_orphan_{n}");
    app.post_stripe(&refund_created(
        &id,
        &format!("pi_api_{n}"),
        &format!("re_api_{n}"),
        1000,
        T10_00 + 60,
    ))
    .await;
    app.process().await;
    assert_eq!(app.event_status(&id).await.0, "dead");
    id
}

async fn audit_rows(app: &TestApp, action: &str) -> Vec<(String, String)> {
    use sqlx::Row;
    sqlx::query("SELECT actor, target FROM audit_log WHERE action = $1 ORDER BY id")
        .bind(action)
        .fetch_all(app.db.reader())
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

async fn a_token_reads_orders_events_and_the_overview(kind: Kind) {
    let app = app(kind).await;
    let viewer = token(&app, "support-bot", "viewer").await;
    let pay = payment_intent_succeeded("evt_api_pay", "pi_api", "order-api", 4200, T10_00);
    app.post_stripe(&pay).await;
    app.post_stripe(&pay).await;
    app.post_stripe(&charge_refunded(
        "evt_api_refund",
        "pi_api",
        "re_api",
        "order-api",
        1200,
        T10_00 + 60,
    ))
    .await;
    app.process().await;
    app.db.rollup().flush(&app.db).await.unwrap();

    let (status, order) = app.api_get("/api/v1/orders/order-api", Some(&viewer)).await;
    assert_eq!(status, 200, "{order}");
    assert_eq!(order["status"], "partially_refunded");
    assert_eq!(
        (
            &order["amount_paid"],
            &order["amount_refunded"],
            &order["net"]
        ),
        (&json!(4200), &json!(1200), &json!(3000))
    );
    assert!(order["why"]
        .as_str()
        .unwrap()
        .starts_with("partially refunded"));
    assert!(!order["timeline"].as_array().unwrap().is_empty());

    let (status, page) = app
        .api_get("/api/v1/events?order=order-api", Some(&viewer))
        .await;
    assert_eq!(status, 200);
    let events = page["events"].as_array().unwrap();
    let ids: Vec<&str> = events
        .iter()
        .map(|e| e["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["evt_api_refund", "evt_api_pay"], "newest first");
    assert_eq!(events[1]["deliveries"], 2);
    // Keyset paging: one per page walks both.
    let (_, first) = app
        .api_get("/api/v1/events?order=order-api&limit=1", Some(&viewer))
        .await;
    let before = first["next_before"].as_i64().expect("a next page");
    let (_, second) = app
        .api_get(
            &format!("/api/v1/events?order=order-api&limit=1&before={before}"),
            Some(&viewer),
        )
        .await;
    assert_eq!(second["events"][0]["event_id"], "evt_api_pay");
    assert_eq!(second["next_before"], Value::Null);

    let id = events[1]["id"].as_i64().unwrap();
    let (status, event) = app
        .api_get(&format!("/api/v1/events/{id}"), Some(&viewer))
        .await;
    assert_eq!(status, 200);
    assert_eq!(event["event_id"], "evt_api_pay");
    assert_eq!(event["deliveries"].as_array().unwrap().len(), 2);
    assert!(event["outcome"].as_str().unwrap().starts_with("applied"));

    let (status, overview) = app
        .api_get("/api/v1/overview?range=24h", Some(&viewer))
        .await;
    assert_eq!(status, 200, "{overview}");
    assert_eq!(overview["range"], "Day");
    assert_eq!(
        (&overview["received"], &overview["duplicates"]),
        (&json!(2), &json!(1))
    );
    let eur = overview["money"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["currency"] == "EUR")
        .expect("EUR moved");
    assert_eq!(
        (&eur["paid"], &eur["refunded"]),
        (&json!(4200), &json!(1200))
    );

    let (status, missing) = app
        .api_get("/api/v1/orders/no-such-order", Some(&viewer))
        .await;
    assert_eq!(status, 404);
    assert_eq!(missing["error"], "Not found");
    for odd in ["%00", "a%00b", "%1F"] {
        let (status, _) = app
            .api_get(&format!("/api/v1/orders/{odd}"), Some(&viewer))
            .await;
        assert_eq!(status, 404, "{odd}: a control character names no order");
    }

    // Using a token is remembered (for the token list), never its value.
    let list = tokens::list(&app.db).await.unwrap();
    assert!(list[0].last_used_at.is_some());
    app.shutdown().await;
}

async fn no_token_or_a_dead_one_is_refused_with_401(kind: Kind) {
    let app = app(kind).await;
    let live = token(&app, "live", "admin").await;
    let revoked = token(&app, "to-revoke", "admin").await;
    tokens::revoke(&app.db, "to-revoke", "test", None, now_ms())
        .await
        .unwrap();
    let now = now_ms();
    let (_, expired) = tokens::create(
        &app.db,
        &tokens::NewToken {
            name: "expired",
            role: "admin",
            created_by: "test",
            maker: tokens::Maker::Shell,
            now: now - 2 * DAY_MS,
            expires_at: now - DAY_MS,
        },
        None,
    )
    .await
    .unwrap();
    let cookie = app.sign_in("alice", app::backend::Role::Admin).await;

    let (status, _) = app.api_get("/api/v1/overview", Some(&live)).await;
    assert_eq!(status, 200);
    let long = "x".repeat(10_000);
    let last = if live.ends_with('A') { 'B' } else { 'A' };
    let tampered = format!("{}{last}", &live[..live.len() - 1]);
    assert_ne!(tampered, live);
    for (what, token) in [
        ("none", None),
        ("revoked", Some(revoked.as_str())),
        ("expired", Some(expired.as_str())),
        ("unknown", Some("oh_not_a_token")),
        ("one character changed", Some(tampered.as_str())),
        ("10,000 characters", Some(long.as_str())),
    ] {
        let response = app
            .http
            .get(format!("{}/api/v1/overview", app.url))
            .header(reqwest::header::COOKIE, &cookie)
            .header(
                reqwest::header::AUTHORIZATION,
                token.map(|t| format!("Bearer {t}")).unwrap_or_default(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            401,
            "{what}: a session cookie does not open the API"
        );
        assert_eq!(
            response.headers()["www-authenticate"],
            "Bearer realm=\"oncehook\"",
            "{what}"
        );
        let body: Value = response.json().await.unwrap();
        assert!(
            body["error"].as_str().unwrap().contains("token"),
            "{what}: {body}"
        );
    }
    // The scheme name is case-insensitive (RFC 9110 §11.1) and may be followed by more than
    // one space; another scheme, or none, is refused.
    for (header, want) in [
        (format!("bearer {live}"), 200),
        (format!("BEARER {live}"), 200),
        (format!("Bearer   {live}"), 200),
        (format!("Basic {live}"), 401),
        (format!("Bearer{live}"), 401),
        (live.clone(), 401),
    ] {
        let status = app
            .http
            .get(format!("{}/api/v1/overview", app.url))
            .header(reqwest::header::AUTHORIZATION, &header)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, want, "Authorization: {header}");
    }
    // An unknown API path is a JSON 404 behind the token, not the dashboard's sign-in page.
    let (status, body) = app.api_get("/api/v1/nothing/here", Some(&live)).await;
    assert_eq!(status, 404);
    assert!(body["error"].as_str().unwrap().contains("openapi.json"));
    let (status, _) = app.api_get("/api/v1/nothing/here", None).await;
    assert_eq!(status, 401);
    app.shutdown().await;
}

async fn a_viewer_token_may_dry_run_but_not_redrive_and_the_refusal_is_audited(kind: Kind) {
    let app = app(kind).await;
    let viewer = token(&app, "viewer-bot", "viewer").await;
    let orphan = orphan_refund(&app, 1).await;
    let before = common::snapshot(&app.db).await;

    let (status, dry) = app
        .api_post("/api/v1/dead-letters/redrive", &viewer, &json!({}))
        .await;
    assert_eq!(status, 200, "{dry}");
    assert_eq!(dry["dry_run"], true, "a dry run unless told otherwise");
    assert_eq!(dry["matching"], 1);
    assert_eq!(dry["outcomes"][0]["event_id"], orphan.as_str());

    let (status, refused) = app
        .api_post(
            "/api/v1/dead-letters/redrive",
            &viewer,
            &json!({ "dry_run": false, "reason": "forged" }),
        )
        .await;
    assert_eq!(status, 403, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("operator"));
    let (status, _) = app
        .api_post(
            "/api/v1/dead-letters/1/discard",
            &viewer,
            &json!({ "reason": "forged" }),
        )
        .await;
    assert_eq!(status, 403);

    let after = common::snapshot(&app.db).await;
    assert_eq!(before, after, "nothing changed");
    assert_eq!(
        app.count("SELECT COUNT(*) FROM dead_letters WHERE status = 'open'")
            .await,
        1
    );
    assert_eq!(
        audit_rows(&app, "dead_letter.redrive.refused").await,
        [("token:viewer-bot".to_string(), "dead_letters:".to_string())]
    );
    assert_eq!(
        audit_rows(&app, "dead_letter.discard.refused").await.len(),
        1
    );
    app.shutdown().await;
}

async fn an_operator_token_redrives_resolves_and_discards_with_audit_rows(kind: Kind) {
    let app = app(kind).await;
    let ops = token(&app, "ops", "operator").await;
    let first = orphan_refund(&app, 1).await;
    orphan_refund(&app, 2).await;
    orphan_refund(&app, 3).await;
    // The payment the first refund named arrives: a redrive can now apply it.
    app.post_stripe(&payment_intent_succeeded(
        "evt_api_pay_1",
        "pi_api_1",
        "order-api-1",
        1000,
        T10_00,
    ))
    .await;
    app.process().await;

    let (status, page) = app.api_get("/api/v1/dead-letters", Some(&ops)).await;
    assert_eq!(status, 200);
    assert_eq!(page["open"], 3);
    let items: Vec<Value> = page["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["items"].as_array().unwrap().clone())
        .collect();
    let id_of = |event: &str| {
        items.iter().find(|i| i["event_id"] == event).unwrap()["id"]
            .as_i64()
            .unwrap()
    };
    let (one, two, three) = (
        id_of(&first),
        id_of("evt_api_orphan_2"),
        id_of("evt_api_orphan_3"),
    );

    let (status, done) = app
        .api_post(
            "/api/v1/dead-letters/redrive",
            &ops,
            &json!({ "id": one, "dry_run": false, "reason": "payment arrived" }),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["dry_run"], false);
    assert_eq!(done["outcomes"][0]["dead_letter_id"], one);
    app.process().await;
    assert_eq!(app.event_status(&first).await.0, "applied");
    let (_, order) = app.api_get("/api/v1/orders/order-api-1", Some(&ops)).await;
    assert_eq!(order["status"], "refunded");

    let (status, missing_reason) = app
        .api_post(
            &format!("/api/v1/dead-letters/{two}/resolve"),
            &ops,
            &json!({ "reason": "  " }),
        )
        .await;
    assert_eq!(status, 422, "{missing_reason}");
    let (status, resolved) = app
        .api_post(
            &format!("/api/v1/dead-letters/{two}/resolve"),
            &ops,
            &json!({ "reason": "refunded by hand" }),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(resolved, json!({ "id": two, "status": "resolved" }));
    let (status, _) = app
        .api_post(
            &format!("/api/v1/dead-letters/{three}/discard"),
            &ops,
            &json!({ "reason": "test data" }),
        )
        .await;
    assert_eq!(status, 200);
    let (status, again) = app
        .api_post(
            &format!("/api/v1/dead-letters/{three}/discard"),
            &ops,
            &json!({ "reason": "twice" }),
        )
        .await;
    assert_eq!(status, 409, "a closed dead letter stays closed: {again}");

    let (_, page) = app.api_get("/api/v1/dead-letters", Some(&ops)).await;
    assert_eq!(page["open"], 0);
    for action in [
        "dead_letter.redrive",
        "dead_letter.resolve",
        "dead_letter.discard",
    ] {
        let rows = audit_rows(&app, action).await;
        assert_eq!(rows.len(), 1, "{action}: {rows:?}");
        assert_eq!(rows[0].0, "token:ops", "{action}");
    }
    app.shutdown().await;
}

async fn bad_parameters_get_clear_json_errors(kind: Kind) {
    let app = app(kind).await;
    let viewer = token(&app, "viewer", "viewer").await;
    for (path, status, says) in [
        ("/api/v1/events?before=yesterday", 400, "before"),
        ("/api/v1/events?limit=-1", 400, "limit"),
        ("/api/v1/events?since=last%20week", 422, "since"),
        ("/api/v1/events?payload=no-equals-sign", 422, "payload"),
        ("/api/v1/events/abc", 400, "abc"),
        ("/api/v1/overview?range=1y", 422, "1h, 24h or 7d"),
        ("/api/v1/dead-letters?id=x", 400, "id"),
    ] {
        let (got, body) = app.api_get(path, Some(&viewer)).await;
        assert_eq!(got, status, "{path}: {body}");
        let error = body["error"].as_str().unwrap();
        assert!(error.contains(says), "{path}: {error}");
    }
    let response = app
        .http
        .post(format!("{}/api/v1/dead-letters/redrive", app.url))
        .bearer_auth(&viewer)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("JSON"), "{body}");
    app.shutdown().await;
}

async fn the_openapi_document_matches_the_router(kind: Kind) {
    let app = app(kind).await;
    let (status, doc) = app.api_get("/api/v1/openapi.json", None).await;
    assert_eq!(status, 200, "the document needs no token");
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let expected = [
        ("get", "/api/v1/orders/{order_id}", "OrderDetail"),
        ("get", "/api/v1/events", "InboxPage"),
        ("get", "/api/v1/events/{id}", "EventDetail"),
        ("get", "/api/v1/dead-letters", "DlqPage"),
        ("get", "/api/v1/overview", "Overview"),
        ("post", "/api/v1/dead-letters/redrive", "RedriveResponse"),
        ("post", "/api/v1/dead-letters/{id}/resolve", "CloseResponse"),
        ("post", "/api/v1/dead-letters/{id}/discard", "CloseResponse"),
        ("get", "/api/v1/reconciliation/runs", "RunsPage"),
        ("get", "/api/v1/reconciliation/diffs", "DiffPage"),
        (
            "post",
            "/api/v1/reconciliation/diffs/{id}/resolve",
            "Resolved",
        ),
        ("post", "/api/v1/orders/{order_id}/refunds", "CommandView"),
        (
            "post",
            "/api/v1/orders/{order_id}/refunds/{command_id}/cancel",
            "CommandView",
        ),
    ];
    let paths = doc["paths"].as_object().unwrap();
    let operations: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
    assert_eq!(operations, expected.len(), "{:?}", paths.keys());
    for (method, path, schema) in expected {
        let op = &doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} documented");
        // The success answer: 200, or 201 for what a POST creates.
        let success = if op["responses"]["201"].is_object() {
            "201"
        } else {
            "200"
        };
        let ok = op["responses"][success]["content"]["application/json"]["schema"]["$ref"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(
            ok,
            format!("#/components/schemas/{schema}"),
            "{method} {path}"
        );
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema}");
        // Every documented operation exists in the router: without a token it is 401
        // (an undocumented path would be the same 401, so also check it is not 405).
        let url = format!(
            "{}{}",
            app.url,
            path.replace("{order_id}", "x").replace("{id}", "1")
        );
        let response = match method {
            "get" => app.http.get(url),
            _ => app.http.post(url).json(&json!({})),
        }
        .send()
        .await
        .unwrap();
        assert_eq!(response.status(), 401, "{method} {path}");
    }
    // The schemas carry the fields the handlers return.
    let order = &doc["components"]["schemas"]["OrderDetail"]["properties"];
    for field in ["why", "amount_paid", "amount_refunded", "net", "timeline"] {
        assert!(order[field].is_object(), "OrderDetail.{field}");
    }
    app.shutdown().await;
}

fn oncehook(app: &TestApp, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args(args)
        .args(["--database-url", &app.db_handle.url])
        .output()
        .unwrap()
}

async fn the_token_cli_prints_a_token_once_and_revokes_it(kind: Kind) {
    let app = app(kind).await;
    let out = oncehook(&app, &["token", "add", "ci", "--role", "operator"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(token.starts_with("oh_"), "{token}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("shown only now"));
    let (status, _) = app.api_get("/api/v1/dead-letters", Some(&token)).await;
    assert_eq!(status, 200);

    let taken = oncehook(&app, &["token", "add", "ci"]);
    assert!(!taken.status.success());
    assert!(String::from_utf8_lossy(&taken.stderr).contains("revoke it first"));

    let out = oncehook(&app, &["token", "list", "--json"]);
    assert!(out.status.success());
    let listed = String::from_utf8(out.stdout).unwrap();
    assert!(!listed.contains(&token), "the token is never shown again");
    let list: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(list[0]["name"], "ci");
    assert_eq!(list[0]["role"], "operator");
    assert_eq!(list[0]["prefix"].as_str().unwrap(), &token[..10]);

    let out = oncehook(&app, &["token", "revoke", "ci"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, _) = app.api_get("/api/v1/dead-letters", Some(&token)).await;
    assert_eq!(status, 401, "revoked at once");
    let rows = audit_rows(&app, "api_token.add").await;
    assert_eq!(rows.len(), 1);
    assert!(rows[0].0.ends_with("@cli"), "{rows:?}");
    assert_eq!(audit_rows(&app, "api_token.revoke").await.len(), 1);

    let bad = oncehook(&app, &["token", "add", "x", "--role", "root"]);
    assert!(!bad.status.success());
    let bad = oncehook(&app, &["token", "add", "has space"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("token names"));
    app.shutdown().await;
}
