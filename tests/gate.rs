//! The sign-in gate against the requests an attacker writes: the real binary, raw sockets,
//! and the path exactly as written (reqwest and browsers remove dot segments before a
//! request leaves; `curl --path-as-is` and a socket do not). For every page and every
//! server function, no variant of its path answers with page data without a session.

mod common;

use std::time::Duration;

use app::backend::Role;
use common::binary::Binary;
use common::fixtures::*;
use common::{Kind, TestDb, STRIPE_SECRET, TEST_PASSWORD};
use leptos::server_fn::ServerFn;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

both!(no_path_variant_reaches_page_data_without_a_session);

/// The one event's ids: what only a signed-in person may see.
const EVENT_ID: &str = "evt_gate_customer_data";
const ORDER_ID: &str = "ord_gate_customer_data";
const PAYMENT_ID: &str = "pi_gate_customer_data";

/// Every page of the dashboard, as a signed-in browser would ask for it.
fn pages() -> Vec<String> {
    [
        "/",
        "/events",
        "/inbox",
        "/events/1",
        "/events/1/raw",
        &format!("/orders/{ORDER_ID}"),
        &format!("/search?q={ORDER_ID}"),
        "/dlq",
        "/admin/audit",
        "/admin/users",
        "/admin/tokens",
        "/settings",
    ]
    .map(String::from)
    .to_vec()
}

/// Every server function with a body that would return the event's data.
fn server_functions() -> Vec<(&'static str, &'static str, String)> {
    use app::api::*;
    let form = "application/x-www-form-urlencoded";
    let json = "application/json";
    vec![
        (LoadInbox::PATH, json, r#"{"query":{}}"#.to_string()),
        (LoadEvent::PATH, form, "id=1".to_string()),
        (LoadOrder::PATH, form, format!("order_id={ORDER_ID}")),
        (Search::PATH, form, format!("text={ORDER_ID}")),
        (LoadOverview::PATH, form, "range=Day".to_string()),
        (LoadAuditLog::PATH, json, r#"{"query":{}}"#.to_string()),
        (LoadUsers::PATH, form, String::new()),
        (LoadDeadLetters::PATH, json, r#"{"query":{}}"#.to_string()),
        (PreviewRedrive::PATH, json, r#"{"query":{}}"#.to_string()),
        (RedriveDeadLetters::PATH, form, "reason=x".to_string()),
        (
            CloseDeadLetter::PATH,
            form,
            "id=1&action=discard&reason=x".to_string(),
        ),
        (LoadSettings::PATH, form, String::new()),
        (LoadApiTokens::PATH, form, String::new()),
        (
            CreateApiToken::PATH,
            form,
            "name=x&role=admin&expires_in_days=1".to_string(),
        ),
        (RevokeApiToken::PATH, form, "name=x".to_string()),
        (LoadRedriveJobs::PATH, form, String::new()),
    ]
}

/// Ways to write `target` so that a prefix check sees a public path but a normalising
/// router serves `target`; and ways that hide dots or slashes in encodings.
fn disguises(target: &str) -> Vec<String> {
    let rest = target.trim_start_matches('/');
    let mut out = vec![];
    for prefix in [
        "/pkg/..",
        "/pkg/%2e%2e",
        "/pkg/%2E%2E",
        "/pkg/.%2e",
        "/pkg/%2e.",
        "/pkg/./..",
        "/pkg/x/../..",
        "/pkg%2f..",
        "/pkg%2F%2e%2e",
        "/pkg/..%2f..",
        "/pkg\\..",
        "/sign-in/..",
        "/sign-in/%2e%2e",
        "/auth/sign-in/../..",
        "/.",
        "/%2e",
        "/",
        "//pkg/..",
    ] {
        out.push(format!("{prefix}/{rest}"));
    }
    // The path ends in a dot segment after the target (before its query, if any).
    let (path, query) = match rest.split_once('?') {
        Some((path, query)) => (path, format!("?{query}")),
        None => (rest, String::new()),
    };
    out.push(format!("/{path}/.{query}"));
    out.push(format!("/{path}/..{query}"));
    out.push(format!("/{path}/%2e%2e/{path}{query}"));
    out.push(format!("/{path}/{query}"));
    out
}

/// One request over a fresh socket, bytes exactly as given; the status and the body.
async fn raw(addr: &str, request: String) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
        .await
        .expect("an answer within 30 s")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"));
    (status, answer)
}

fn get(addr: &str, path: &str, cookie: Option<&str>) -> String {
    let cookie = cookie
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{cookie}Connection: close\r\n\r\n")
}

/// A POST that passes the CSRF check (same-origin headers, as any script can send them).
fn post(addr: &str, path: &str, content_type: &str, body: &str, cookie: Option<&str>) -> String {
    let cookie = cookie
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://{addr}\r\n\
         Sec-Fetch-Site: same-origin\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\n{cookie}Connection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Whether the body of an answer shows the event: its id or its payment's, which the
/// requester did not send (an order id it wrote may come back in a redirect to sign-in).
fn leaks(answer: &str) -> bool {
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    [EVENT_ID, PAYMENT_ID]
        .iter()
        .any(|secret| body.contains(secret))
}

async fn no_path_variant_reaches_page_data_without_a_session(kind: Kind) {
    let db = TestDb::new(kind).await;
    let app = Binary::start(&db, "").await;
    let addr = app.addr.to_string();
    let http = reqwest::Client::new();
    let body = payment_intent_succeeded(EVENT_ID, PAYMENT_ID, ORDER_ID, 4_200, T10_00).to_string();
    let signature = oncehook::provider::signature::stripe::sign(
        STRIPE_SECRET,
        common::now_secs(),
        body.as_bytes(),
    );
    let response = http
        .post(format!("{}/webhooks/stripe", app.base))
        .header("stripe-signature", signature)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let store = db.connect().await;
    for _ in 0..200 {
        if common::count(
            &store,
            "SELECT COUNT(*) FROM inbox_events WHERE status = 'applied'",
        )
        .await
            == 1
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The control: signed in, the plain paths show the data these checks look for, so a
    // leak could not hide behind a page that shows nothing anyway.
    oncehook::http::auth::admin::add_user(
        &store,
        &oncehook::http::auth::password::Passwords::new(1)
            .await
            .unwrap(),
        "ana",
        TEST_PASSWORD,
        Role::Admin,
        "test",
    )
    .await
    .unwrap();
    let signed_in = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(format!("{}/auth/sign-in", app.base))
        .header("Origin", &app.base)
        .form(&[("username", "ana"), ("password", TEST_PASSWORD)])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), 303);
    let cookie = signed_in
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with(oncehook::http::auth::SESSION_COOKIE))
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_string();
    for page in ["/events", "/events/1", &format!("/orders/{ORDER_ID}")] {
        let (status, answer) = raw(&addr, get(&addr, page, Some(&cookie))).await;
        assert_eq!(status, 200, "{page} signed in: {answer}");
        assert!(leaks(&answer), "{page} signed in shows the event");
    }
    let (status, answer) = raw(
        &addr,
        post(
            &addr,
            app::api::LoadOrder::PATH,
            "application/x-www-form-urlencoded",
            &format!("order_id={ORDER_ID}"),
            Some(&cookie),
        ),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(leaks(&answer));

    let (mut tried, mut leaked, mut wrong) = (0, vec![], vec![]);
    for page in pages() {
        for path in std::iter::once(page.clone()).chain(disguises(&page)) {
            let (status, answer) = raw(&addr, get(&addr, &path, None)).await;
            tried += 1;
            if leaks(&answer) {
                leaked.push(format!("GET {path}"));
            }
            let disguised = path.contains("/.")
                || path.contains("%2")
                || path.contains('\\')
                || path.contains("//")
                || path
                    .split('?')
                    .next()
                    .is_some_and(|p| p.ends_with('/') && p != "/");
            if !matches!(status, 303 | 400 | 401 | 404) || (disguised && status != 400) {
                wrong.push(format!("GET {path}: {status}"));
            }
        }
    }
    for (function, content_type, body) in server_functions() {
        for path in std::iter::once(function.to_string()).chain(disguises(function)) {
            let (status, answer) = raw(&addr, post(&addr, &path, content_type, &body, None)).await;
            tried += 1;
            if leaks(&answer) {
                leaked.push(format!("POST {path}"));
            }
            let disguised = path.contains("/.")
                || path.contains("%2")
                || path.contains('\\')
                || path.contains("//")
                || path.ends_with('/');
            if !matches!(status, 400 | 401 | 404) || (disguised && status != 400) {
                wrong.push(format!("POST {path}: {status}"));
            }
        }
    }
    // A public path that only looks like one of the bundle's files is not public.
    for path in [
        "/pkg",
        "/pkg/no-such-file.js",
        "/pkg/oncehook.css/x",
        "/sign-in/x",
    ] {
        let (status, answer) = raw(&addr, get(&addr, path, None)).await;
        tried += 1;
        if !matches!(status, 303 | 401) || answer.contains("<main") {
            wrong.push(format!("GET {path}: {status}, not sent to sign in"));
        }
    }
    assert!(
        leaked.is_empty(),
        "{} leaked page data:\n{}",
        leaked.len(),
        leaked.join("\n")
    );
    assert!(
        wrong.is_empty(),
        "{} answered wrongly:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert!(tried > 600, "{tried} requests tried");
    store.close().await;
    app.stop();
}
