//! `/api/v1` against its own document, over HTTP: what the document forbids is refused with
//! a status it declares and the JSON error body (a `limit` above its maximum, an id beyond
//! 64 bits, a POST without `Content-Type`, a filter outside its pattern, an unknown id), what
//! it allows is accepted (`1.0` where an integer goes, every documented time form), and
//! every operation declares the errors the server can answer. `scripts/api-contract.sh`
//! runs schemathesis against the real binary for the rest.

mod common;

use common::fixtures::*;
use common::{Kind, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};

both!(
    a_limit_outside_its_documented_bounds_is_a_422,
    an_id_beyond_64_bits_is_a_declared_400,
    a_post_without_json_content_type_is_a_415,
    an_unknown_id_of_an_action_is_a_404,
    filters_are_accepted_exactly_as_their_patterns_say,
    reasons_and_amounts_are_checked_as_documented,
    json_integers_may_be_written_with_a_zero_fraction,
    an_ambiguous_api_path_is_a_json_400,
    every_operation_declares_the_errors_it_can_answer,
);

async fn app(kind: Kind) -> TestApp {
    TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.processor.retry.max_attempts = 1;
    })
    .await
}

/// A refused request: its status, and the JSON error body's message.
async fn refused(response: reqwest::Response) -> (StatusCode, String) {
    let status = response.status();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let text = response.text().await.unwrap();
    assert_eq!(content_type, "application/json", "{status}: {text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    let error = body["error"].as_str().unwrap_or_else(|| panic!("{body}"));
    (status, error.to_string())
}

/// A POST of `body` with `content_type` (none: no header).
async fn post_raw(
    app: &TestApp,
    path: &str,
    token: &str,
    content_type: Option<&str>,
    body: &str,
) -> reqwest::Response {
    let mut request = app
        .http
        .post(format!("{}{path}", app.url))
        .bearer_auth(token)
        .body(body.to_string());
    if let Some(c) = content_type {
        request = request.header(reqwest::header::CONTENT_TYPE, c);
    }
    request.send().await.unwrap()
}

async fn get(app: &TestApp, path: &str, token: &str) -> reqwest::Response {
    app.http
        .get(format!("{}{path}", app.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

async fn a_limit_outside_its_documented_bounds_is_a_422(kind: Kind) {
    let app = app(kind).await;
    let viewer = app.token("viewer", "viewer").await;
    for (path, max) in [
        ("/api/v1/events", 200_i64),
        ("/api/v1/reconciliation/runs", 500),
        ("/api/v1/reconciliation/diffs", 500),
    ] {
        for limit in [0, max + 1, 4_000_000_000] {
            let (status, error) =
                refused(get(&app, &format!("{path}?limit={limit}"), &viewer).await).await;
            assert_eq!(status, 422, "{path}?limit={limit}: {error}");
            assert!(error.contains(&format!("use 1 to {max}")), "{error}");
        }
        for limit in [1, max] {
            let (status, body) = app
                .api_get(&format!("{path}?limit={limit}"), Some(&viewer))
                .await;
            assert_eq!(status, 200, "{path}?limit={limit}: {body}");
        }
    }
    app.shutdown().await;
}

async fn an_id_beyond_64_bits_is_a_declared_400(kind: Kind) {
    let app = app(kind).await;
    let ops = app.token("operator", "operator").await;
    let big = "9223372036854775808";
    for path in [
        format!("/api/v1/events/{big}"),
        format!("/api/v1/events?before={big}"),
        format!("/api/v1/dead-letters?id={big}"),
        format!("/api/v1/reconciliation/runs?before={big}"),
        format!("/api/v1/reconciliation/diffs?run_id={big}"),
    ] {
        let (status, error) = refused(get(&app, &path, &ops).await).await;
        assert_eq!(status, 400, "{path}: {error}");
    }
    for path in [
        format!("/api/v1/dead-letters/{big}/resolve"),
        format!("/api/v1/dead-letters/{big}/discard"),
        format!("/api/v1/reconciliation/diffs/{big}/resolve"),
    ] {
        let response = post_raw(
            &app,
            &path,
            &ops,
            Some("application/json"),
            r#"{"reason":"x"}"#,
        );
        let (status, error) = refused(response.await).await;
        assert_eq!(status, 400, "{path}: {error}");
    }
    // The smallest id is an id like any other: there is no such dead letter.
    let (status, _) = refused(
        post_raw(
            &app,
            "/api/v1/dead-letters/-9223372036854775808/resolve",
            &ops,
            Some("application/json"),
            r#"{"reason":"x"}"#,
        )
        .await,
    )
    .await;
    assert_eq!(status, 404);
    app.shutdown().await;
}

async fn a_post_without_json_content_type_is_a_415(kind: Kind) {
    let app = app(kind).await;
    let ops = app.token("operator", "operator").await;
    for path in [
        "/api/v1/dead-letters/redrive",
        "/api/v1/dead-letters/1/resolve",
        "/api/v1/dead-letters/1/discard",
        "/api/v1/reconciliation/diffs/1/resolve",
        "/api/v1/orders/order-1/refunds",
    ] {
        for content_type in [None, Some("text/plain")] {
            let response = post_raw(&app, path, &ops, content_type, r#"{"reason":"x"}"#).await;
            let (status, error) = refused(response).await;
            assert_eq!(status, 415, "{path} {content_type:?}: {error}");
            assert!(error.contains("application/json"), "{error}");
        }
        // Not JSON, and JSON that is not the documented object: 400.
        for body in ["{not json", r#"{"reason": 7}"#] {
            let response = post_raw(&app, path, &ops, Some("application/json"), body).await;
            let (status, error) = refused(response).await;
            assert_eq!(status, 400, "{path} {body}: {error}");
        }
    }
    app.shutdown().await;
}

async fn an_unknown_id_of_an_action_is_a_404(kind: Kind) {
    let app = app(kind).await;
    let ops = app.token("operator", "operator").await;
    for path in [
        "/api/v1/dead-letters/999/resolve",
        "/api/v1/dead-letters/999/discard",
        "/api/v1/reconciliation/diffs/999/resolve",
        "/api/v1/orders/no-such-order/refunds",
    ] {
        let (status, body) = app.api_post(path, &ops, &json!({"reason": "x"})).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert!(body["error"].is_string(), "{body}");
    }
    // A viewer is refused first, whether or not the thing exists (and it is audited).
    let viewer = app.token("viewer", "viewer").await;
    let (status, _) = app
        .api_post(
            "/api/v1/dead-letters/999/resolve",
            &viewer,
            &json!({"reason": "x"}),
        )
        .await;
    assert_eq!(status, 403);
    app.shutdown().await;
}

async fn filters_are_accepted_exactly_as_their_patterns_say(kind: Kind) {
    let app = app(kind).await;
    let viewer = app.token("viewer", "viewer").await;
    let encode = |s: &str| {
        s.replace('%', "%25")
            .replace('+', "%2B")
            .replace(' ', "%20")
            .replace('=', "%3D")
            .replace(':', "%3A")
    };
    for time in [
        "2026-12-01",
        "2026-12-01T10:30",
        "2026-12-01 10:30",
        "2026-12-01T10:30:15",
        "2026-12-01 10:30:15",
        "2026-12-01T10:30:15Z",
        "2026-12-01T10:30:15.250+01:00",
        "2026-12-01T23:59:59.123456789-23:59",
        "2024-02-29",
        "2000-02-29T00:00",
        "0000-02-29",
        "9999-12-31T23:59:59-23:59",
    ] {
        for name in ["since", "until"] {
            let path = format!("/api/v1/events?{name}={}", encode(time));
            let (status, body) = app.api_get(&path, Some(&viewer)).await;
            assert_eq!(status, 200, "{path}: {body}");
        }
    }
    for time in [
        "",
        "last week",
        "2026-02-30",
        "2025-02-29",
        "1900-02-29",
        "2026-12-1",
        "2026-12-01T24:00",
        "2026-12-01T10:30:60",
        "2026-12-01T10:30:15.5",
        "2026-12-01 10:30:15Z",
        "2026-12-01t10:30:15z",
        "2026-12-01T10:30:15.1234567890Z",
        "2026-12-01T10:30:15+24:00",
    ] {
        let path = format!("/api/v1/events?since={}", encode(time));
        let (status, error) = refused(get(&app, &path, &viewer).await).await;
        assert_eq!(status, 422, "{path}: {error}");
        assert!(error.contains("since"), "{error}");
    }
    for payload in [
        "data.object.customer = cus_123",
        "a=b",
        "  a.b  =  c d ",
        "x=\"\"",
        "ключ.ü = ж",
    ] {
        let path = format!("/api/v1/events?payload={}", encode(payload));
        let (status, body) = app.api_get(&path, Some(&viewer)).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    for payload in [
        "",
        "a",
        "=b",
        "a=",
        "a= \u{3000}",
        "a..b=c",
        ".a=c",
        "a b=c",
        "a\t=c",
    ] {
        let path = format!(
            "/api/v1/events?payload={}",
            encode(payload).replace('\t', "%09")
        );
        let (status, error) = refused(get(&app, &path, &viewer).await).await;
        assert_eq!(status, 422, "{path}: {error}");
        assert!(error.contains("payload"), "{error}");
    }
    for range in ["1h", "24h", "7d"] {
        let path = format!("/api/v1/overview?range={range}");
        assert_eq!(app.api_get(&path, Some(&viewer)).await.0, 200, "{range}");
    }
    for range in ["", "1y", "1H"] {
        let path = format!("/api/v1/overview?range={range}");
        let (status, error) = refused(get(&app, &path, &viewer).await).await;
        assert_eq!(status, 422, "{range:?}: {error}");
        assert!(error.contains("1h, 24h or 7d"), "{error}");
    }
    app.shutdown().await;
}

/// A paid order (`order-c-1`, 42.00 EUR) and one dead letter; its id.
async fn seed(app: &TestApp) -> i64 {
    app.post_stripe(&payment_intent_succeeded(
        "evt_c_pay",
        "pi_c_1",
        "order-c-1",
        4200,
        T10_00,
    ))
    .await;
    app.post_stripe(&refund_created(
        "evt_c_orphan",
        "pi_c_9",
        "re_c_9",
        100,
        T10_00,
    ))
    .await;
    app.process().await;
    sqlx::query_scalar("SELECT id FROM dead_letters")
        .fetch_one(app.db.reader())
        .await
        .unwrap()
}

async fn reasons_and_amounts_are_checked_as_documented(kind: Kind) {
    let app = app(kind).await;
    let dead = seed(&app).await;
    let ops = app.token("operator", "operator").await;
    let long = "r".repeat(501);
    for reason in [
        "",
        " \t",
        "\u{1}\u{7f}",
        "\u{a0}\u{3000}\u{2028}",
        long.as_str(),
    ] {
        for path in [
            format!("/api/v1/dead-letters/{dead}/resolve"),
            format!("/api/v1/dead-letters/{dead}/discard"),
            "/api/v1/orders/order-c-1/refunds".to_string(),
        ] {
            let (status, body) = app
                .api_post(&path, &ops, &json!({ "reason": reason }))
                .await;
            assert_eq!(status, 422, "{path} {reason:?}: {body}");
        }
    }
    for amount in [0, -1] {
        let (status, body) = app
            .api_post(
                "/api/v1/orders/order-c-1/refunds",
                &ops,
                &json!({ "amount": amount, "reason": "damaged" }),
            )
            .await;
        assert_eq!(status, 422, "{amount}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains("positive"),
            "{body}"
        );
    }
    // Nothing was stored or closed on the way.
    assert_eq!(app.count("SELECT COUNT(*) FROM provider_commands").await, 0);
    let (status, body) = app
        .api_post(
            &format!("/api/v1/dead-letters/{dead}/resolve"),
            &ops,
            &json!({ "reason": "r".repeat(500) }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    app.shutdown().await;
}

async fn json_integers_may_be_written_with_a_zero_fraction(kind: Kind) {
    let app = app(kind).await;
    let dead = seed(&app).await;
    let ops = app.token("operator", "operator").await;
    let (status, body) = app
        .api_post(
            "/api/v1/dead-letters/redrive",
            &ops,
            &json!({ "id": dead as f64 }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["matching"], 1, "{body}");
    let (status, body) = app
        .api_post(
            "/api/v1/orders/order-c-1/refunds",
            &ops,
            &json!({ "amount": 100.0, "reason": "damaged" }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["amount"], 100);
    for (path, body) in [
        ("/api/v1/dead-letters/redrive", r#"{"id": 1.5}"#),
        (
            "/api/v1/dead-letters/redrive",
            r#"{"id": 9223372036854775808}"#,
        ),
        (
            "/api/v1/orders/order-c-1/refunds",
            r#"{"amount": 0.5, "reason": "x"}"#,
        ),
    ] {
        let response = post_raw(&app, path, &ops, Some("application/json"), body).await;
        let (status, error) = refused(response).await;
        assert_eq!(status, 400, "{path} {body}: {error}");
    }
    app.shutdown().await;
}

async fn an_ambiguous_api_path_is_a_json_400(kind: Kind) {
    let app = app(kind).await;
    let viewer = app.token("viewer", "viewer").await;
    for path in [
        "/api/v1/orders/a%2Fb",
        "/api/v1/orders/a%5Cb",
        "/api/v1/orders/",
        "/api/v1/dead-letters//resolve",
    ] {
        let (status, error) = refused(get(&app, path, &viewer).await).await;
        assert_eq!(status, 400, "{path}: {error}");
    }
    app.shutdown().await;
}

async fn every_operation_declares_the_errors_it_can_answer(kind: Kind) {
    let app = app(kind).await;
    let (status, doc) = app.api_get("/api/v1/openapi.json", None).await;
    assert_eq!(status, 200);
    let error = &doc["components"]["schemas"]["ApiError"];
    assert_eq!(error["type"], "object", "{error}");
    assert_eq!(error["required"], json!(["error"]));
    assert_eq!(error["properties"]["error"]["type"], "string");
    let mut operations = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            operations += 1;
            let name = format!("{method} {path}");
            let responses = op["responses"].as_object().unwrap();
            let params = op["parameters"].as_array().cloned().unwrap_or_default();
            let has = |location: &str| params.iter().any(|p| p["in"] == location);
            let mut needed = vec!["401", "503"];
            if has("query") || has("path") || op["requestBody"].is_object() {
                needed.push("400");
            }
            if path.contains('{') {
                needed.push("404");
            }
            if method == "post" {
                needed.extend(["409", "413", "422"]);
                if op["requestBody"].is_object() {
                    needed.push("415");
                }
                assert!(
                    params
                        .iter()
                        .any(|p| p["in"] == "header" && p["name"] == "Idempotency-Key"),
                    "{name}: Idempotency-Key"
                );
            }
            // A query parameter with bounds, an enum or a pattern can be outside them.
            let constrained = params.iter().any(|p| {
                let s = &p["schema"];
                p["in"] == "query"
                    && (s["maximum"].is_number()
                        || s["enum"].is_array()
                        || s["pattern"].is_string())
            });
            if constrained {
                needed.push("422");
            }
            for status in needed {
                assert!(responses.contains_key(status), "{name} declares {status}");
            }
            for (status, response) in responses {
                if status.starts_with('4') || status.starts_with('5') {
                    assert_eq!(
                        response["content"]["application/json"]["schema"]["$ref"],
                        "#/components/schemas/ApiError",
                        "{name} {status}"
                    );
                }
            }
            assert!(
                responses["401"]["headers"]["WWW-Authenticate"].is_object(),
                "{name}: 401 names its WWW-Authenticate header"
            );
            // Every bound the handlers check is in the document.
            for p in &params {
                let s = &p["schema"];
                match (p["in"].as_str().unwrap(), p["name"].as_str().unwrap()) {
                    ("query", "limit") => {
                        assert_eq!(s["minimum"], 1, "{name} limit");
                        assert!(s["maximum"].is_number(), "{name} limit");
                    }
                    ("query", "since" | "until" | "payload")
                    | ("path", "order_id")
                    | ("header", "Idempotency-Key") => {
                        assert!(s["pattern"].is_string(), "{name} {}", p["name"])
                    }
                    ("query", "range") => assert_eq!(s["enum"], json!(["1h", "24h", "7d"])),
                    _ => {}
                }
            }
        }
    }
    assert_eq!(operations, 13);
    let schemas = &doc["components"]["schemas"];
    for body in ["CloseRequest", "ResolveDiff", "RefundRequest"] {
        let reason = &schemas[body]["properties"]["reason"];
        assert_eq!(
            (reason["minLength"].clone(), reason["maxLength"].clone()),
            (json!(1), json!(500)),
            "{body}"
        );
        assert!(reason["pattern"].is_string(), "{body}");
    }
    assert_eq!(
        schemas["RefundRequest"]["properties"]["amount"]["minimum"],
        1
    );
    app.shutdown().await;
}
