//! The client against recorded Stripe answers (fixtures written after Stripe's documented
//! shapes) served by a scripted local server: what each request carried, how often it was
//! retried, and what came back.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use super::*;
use crate::provider::api::objects::{Charge, Expandable};

const KEY: &str = "sk_test_clientSECRETkey";

fn fixture(name: &str) -> &'static str {
    match name {
        "events_page" => include_str!("../fixtures/events_page.json"),
        "payment_intent_expanded" => include_str!("../fixtures/payment_intent_expanded.json"),
        "charge_with_refunds" => include_str!("../fixtures/charge_with_refunds.json"),
        "dispute" => include_str!("../fixtures/dispute.json"),
        "error_idempotency" => include_str!("../fixtures/error_idempotency.json"),
        "error_rate_limit" => include_str!("../fixtures/error_rate_limit.json"),
        "error_missing" => include_str!("../fixtures/error_missing.json"),
        other => panic!("no fixture {other}"),
    }
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
struct Seen {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: String,
}

type Script = Arc<dyn Fn(usize, &Seen) -> Response + Send + Sync>;

struct Server {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// A server answering request number `n` (0-based) with `script(n, request)`; an answer
/// with an `x-test-delay-ms` header is sent that much later (a slow provider).
async fn serve(script: impl Fn(usize, &Seen) -> Response + Send + Sync + 'static) -> Server {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let script: Script = Arc::new(script);
    let log = seen.clone();
    let app = axum::Router::new().fallback(
        move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let log = log.clone();
            let script = script.clone();
            async move {
                let request = Seen {
                    method,
                    uri,
                    headers,
                    body: String::from_utf8_lossy(&body).into_owned(),
                };
                let n = {
                    let mut log = log.lock().unwrap();
                    log.push(request.clone());
                    log.len() - 1
                };
                let response = script(n, &request);
                if let Some(ms) = response
                    .headers()
                    .get("x-test-delay-ms")
                    .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                response
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server { url, seen }
}

fn json(status: u16, body: &str) -> Response {
    (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn settings(url: &str) -> ProviderApiSettings {
    ProviderApiSettings {
        base: url.to_string(),
        key: Some(KEY.into()),
        timeout_ms: 2_000,
        rate_per_sec: 1_000.0,
        retry: RetryPolicy {
            base_ms: 10,
            cap_ms: 50,
            max_attempts: 4,
            max_retry_after_ms: 5_000,
        },
    }
}

fn client(url: &str) -> ApiClient {
    ApiClient::new(&settings(url)).unwrap()
}

#[test]
fn recorded_objects_decode_and_keep_every_field() {
    let page: List<Event> = serde_json::from_str(fixture("events_page")).unwrap();
    assert!(page.has_more);
    assert_eq!(page.data.len(), 2);
    let refund = &page.data[0];
    assert_eq!(refund.event_type, "refund.created");
    assert_eq!(refund.api_version.as_deref(), Some("2025-03-31.basil"));
    assert_eq!(refund.data.object["metadata"]["order_id"], "ord_1001");
    // Unknown fields survive: the event goes back into the inbox as Stripe wrote it.
    let original: serde_json::Value = serde_json::from_str(fixture("events_page")).unwrap();
    assert_eq!(refund.to_json(), original["data"][0]);
    assert_eq!(refund.to_json()["request"]["id"], "req_5t4zHqJ6xV2nQa");

    let pi: PaymentIntent = serde_json::from_str(fixture("payment_intent_expanded")).unwrap();
    let charge = pi.latest_charge.as_ref().unwrap();
    assert_eq!(charge.id(), "ch_3QxRfBLkdIwHu7ix0HmP7Lb1");
    assert_eq!(charge.object().unwrap().amount_refunded, 1500);
    assert_eq!(pi.metadata["order_id"], "ord_1001");

    let charge: Charge = serde_json::from_str(fixture("charge_with_refunds")).unwrap();
    let refunds = charge.refunds.unwrap();
    assert_eq!(
        refunds.data.iter().map(|r| r.amount).sum::<i64>(),
        charge.amount_refunded
    );
    assert_eq!(refunds.data[1].metadata["order_id"], "ord_1001");

    let dispute: Dispute = serde_json::from_str(fixture("dispute")).unwrap();
    assert_eq!(
        (dispute.status.as_str(), dispute.payment_intent.as_deref()),
        ("lost", Some("pi_3QxRfBLkdIwHu7ix0Gk2SxLd"))
    );

    // An unexpanded field reads as an id.
    let unexpanded: Expandable<Charge> = serde_json::from_str("\"ch_1\"").unwrap();
    assert_eq!(unexpanded.id(), "ch_1");
    assert!(unexpanded.object().is_none());
}

#[test]
fn recorded_errors_are_classified() {
    let idem = ApiError::from_answer(400, None, fixture("error_idempotency").as_bytes());
    assert_eq!(idem.kind(), Some("idempotency_error"));
    assert!(!idem.is_transient());
    let limited = ApiError::from_answer(429, None, fixture("error_rate_limit").as_bytes());
    assert!(limited.is_transient());
    assert!(limited.to_string().contains("rate_limit"), "{limited}");
    let missing = ApiError::from_answer(404, None, fixture("error_missing").as_bytes());
    assert!(!missing.is_transient());
    assert!(
        missing.to_string().contains("resource_missing"),
        "{missing}"
    );
    // Stripe-Should-Retry overrides the status.
    assert!(!ApiError::from_answer(500, Some(false), b"{}").is_transient());
    assert!(ApiError::from_answer(400, Some(true), b"{}").is_transient());
    let html = ApiError::from_answer(502, None, b"<html>Bad Gateway</html>");
    assert!(html.is_transient() && html.to_string().contains("Bad Gateway"));
}

/// 250 events, newest first, served the Stripe way.
fn paged_events(_: usize, seen: &Seen) -> Response {
    let query = url_decode_pairs(seen.uri.query().unwrap_or_default());
    let get = |k: &str| query.iter().find(|(q, _)| q == k).map(|(_, v)| v.clone());
    let limit: usize = get("limit").unwrap().parse().unwrap();
    let all: Vec<String> = (0..250).rev().map(|i| format!("evt_{i:04}")).collect();
    let start = match get("starting_after") {
        Some(after) => all.iter().position(|id| *id == after).unwrap() + 1,
        None => 0,
    };
    let page: Vec<serde_json::Value> = all[start..]
        .iter()
        .take(limit)
        .map(|id| {
            serde_json::json!({"id": id, "object": "event", "type": "charge.succeeded",
                "created": 1_741_000_000, "api_version": "2025-03-31.basil",
                "data": {"object": {"id": "ch_1", "object": "charge"}}})
        })
        .collect();
    let has_more = start + page.len() < all.len();
    json(
        200,
        &serde_json::json!({"object": "list", "data": page, "has_more": has_more, "url": "/v1/events"})
            .to_string(),
    )
}

/// Percent-decoding of a query string, as a server does.
fn url_decode_pairs(query: &str) -> Vec<(String, String)> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(
        &format!("/?{query}").parse::<Uri>().unwrap(),
    )
    .unwrap()
    .0
}

#[tokio::test]
async fn lists_are_paged_with_starting_after_until_has_more_is_false() {
    let server = serve(paged_events).await;
    let api = client(&server.url);
    let query = EventQuery {
        created_gte: Some(1_700_000_000),
        types: vec!["charge.succeeded".into(), "refund.created".into()],
        ..Default::default()
    };
    let events = api.event_pages(query).collect().await.unwrap();
    let expected: Vec<String> = (0..250).rev().map(|i| format!("evt_{i:04}")).collect();
    assert_eq!(
        events.iter().map(|e| e.id.clone()).collect::<Vec<_>>(),
        expected
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 3, "100 + 100 + 50");
    let second = url_decode_pairs(seen[1].uri.query().unwrap());
    for pair in [
        ("created[gte]", "1700000000"),
        ("types[]", "charge.succeeded"),
        ("types[]", "refund.created"),
        ("limit", "100"),
        ("starting_after", "evt_0150"),
    ] {
        assert!(
            second.contains(&(pair.0.to_string(), pair.1.to_string())),
            "{pair:?} in {second:?}"
        );
    }
    assert!(seen[0].uri.path() == "/v1/events");
    assert_eq!(
        seen[0].headers["authorization"],
        format!("Bearer {KEY}").as_str()
    );
}

#[tokio::test]
async fn a_429_waits_for_its_retry_after() {
    let server = serve(|n, _| {
        if n == 0 {
            let mut r = json(429, fixture("error_rate_limit"));
            r.headers_mut().insert("retry-after", "1".parse().unwrap());
            r
        } else {
            json(200, fixture("dispute"))
        }
    })
    .await;
    let started = Instant::now();
    let dispute = client(&server.url)
        .dispute("du_1QxSg2LkdIwHu7ixmS0c9dPq")
        .await
        .unwrap();
    assert_eq!(dispute.status, "lost");
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "waited {:?}, Retry-After said 1 s",
        started.elapsed()
    );
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn server_errors_retry_until_the_policy_gives_up() {
    let server =
        serve(|_, _| json(503, r#"{"error":{"type":"api_error","message":"down"}}"#)).await;
    let error = client(&server.url)
        .event("evt_1")
        .await
        .expect_err("always 503");
    assert_eq!(error.status(), Some(503));
    assert_eq!(server.seen().len(), 4, "max_attempts = 4");

    let flaky = serve(|n, _| {
        if n < 2 {
            json(500, "oops")
        } else {
            json(200, fixture("payment_intent_expanded"))
        }
    })
    .await;
    let pi = client(&flaky.url)
        .payment_intent("pi_3QxRfBLkdIwHu7ix0Gk2SxLd", true)
        .await
        .unwrap();
    assert_eq!(pi.amount_received, 4200);
    let seen = flaky.seen();
    assert_eq!(seen.len(), 3);
    assert_eq!(
        url_decode_pairs(seen[2].uri.query().unwrap()),
        vec![("expand[]".to_string(), "latest_charge".to_string())]
    );
}

#[tokio::test]
async fn a_timeout_is_retried() {
    let server = serve(|n, _| {
        let mut r = json(200, fixture("charge_with_refunds"));
        if n == 0 {
            r.headers_mut()
                .insert("x-test-delay-ms", "1500".parse().unwrap());
        }
        r
    })
    .await;
    let mut s = settings(&server.url);
    s.timeout_ms = 300;
    let charge = ApiClient::new(&s)
        .unwrap()
        .charge("ch_3QxRfBLkdIwHu7ix0HmP7Lb1", true)
        .await
        .unwrap();
    assert!(charge.refunded);
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn permanent_errors_are_not_retried_and_never_show_the_key() {
    let server = serve(|_, _| json(404, fixture("error_missing"))).await;
    let api = client(&server.url);
    let error = api.payment_intent("pi_missing", false).await.unwrap_err();
    assert_eq!(server.seen().len(), 1);
    assert!(!error.is_transient());
    let shown = format!("{error} {error:?} {api:?}");
    assert!(!shown.contains("clientSECRET"), "{shown}");
    // An id that would reach another path never leaves the client.
    assert!(matches!(
        api.event("../v1/refunds").await,
        Err(ApiError::Invalid(_))
    ));
    assert_eq!(server.seen().len(), 1);
    // Nothing listening: a transport error, without the key.
    let closed = client("http://127.0.0.1:9");
    let error = closed.event("evt_1").await.unwrap_err();
    assert!(matches!(error, ApiError::Transport(_)), "{error:?}");
    assert!(!format!("{error:?}").contains("clientSECRET"));
}

#[tokio::test]
async fn a_refund_is_posted_with_one_idempotency_key_across_retries() {
    let server = serve(|n, _| {
        if n == 0 {
            json(
                500,
                r#"{"error":{"type":"api_error","message":"try again"}}"#,
            )
        } else {
            json(
                200,
                &serde_json::json!({"id": "re_1", "object": "refund", "amount": 700,
                "currency": "brl", "status": "pending", "created": 1_741_000_000,
                "payment_intent": "pi_1", "charge": "ch_1", "metadata": {"order_id": "ord_9"}})
                .to_string(),
            )
        }
    })
    .await;
    let params = CreateRefund {
        payment_intent: "pi_1".into(),
        amount: Some(700),
        reason: Some("requested_by_customer".into()),
        metadata: [("order_id".to_string(), "ord_9".to_string())].into(),
    };
    let refund = client(&server.url)
        .create_refund(&params, "oncehook-cmd-42")
        .await
        .unwrap();
    assert_eq!((refund.id.as_str(), refund.amount), ("re_1", 700));
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    for request in &seen {
        assert_eq!(request.method, Method::POST);
        assert_eq!(request.headers["idempotency-key"], "oncehook-cmd-42");
        assert_eq!(
            url_decode_pairs(&request.body),
            vec![
                ("payment_intent".to_string(), "pi_1".to_string()),
                ("amount".into(), "700".into()),
                ("reason".into(), "requested_by_customer".into()),
                ("metadata[order_id]".into(), "ord_9".into()),
            ]
        );
    }
    let too_long = "k".repeat(256);
    assert!(matches!(
        client(&server.url).create_refund(&params, &too_long).await,
        Err(ApiError::Invalid(_))
    ));
    assert_eq!(server.seen().len(), 2, "refused before sending");
}

#[tokio::test]
async fn requests_are_paced_by_the_rate_limit() {
    let server = serve(|_, _| json(200, fixture("dispute"))).await;
    let mut s = settings(&server.url);
    s.rate_per_sec = 10.0;
    let api = ApiClient::new(&s).unwrap();
    let started = Instant::now();
    for _ in 0..20 {
        api.dispute("du_1").await.unwrap();
    }
    // A burst of 10, then one every 100 ms.
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(900),
        "20 requests at 10/s took {elapsed:?}"
    );
}

#[test]
fn a_client_needs_a_key() {
    let mut s = settings("http://127.0.0.1:1");
    s.key = None;
    assert!(ApiClient::new(&s)
        .unwrap_err()
        .to_string()
        .contains("api_key"));
}

#[tokio::test]
async fn redirects_are_not_followed_so_the_key_goes_nowhere_else() {
    // A provider answer (or a man in the middle) sending the client elsewhere: the client
    // stops at the 3xx, a permanent error, and the key is sent to the base alone.
    let server = serve(|n, _| match n {
        0 => (
            StatusCode::FOUND,
            [("location", "/elsewhere/v1/events/evt_1")],
            "",
        )
            .into_response(),
        _ => json(200, "{}"),
    })
    .await;
    let api = client(&server.url);
    let error = api.event("evt_1").await.unwrap_err();
    assert!(
        matches!(error, ApiError::Api { status: 302, .. }),
        "{error:?}"
    );
    assert!(!error.is_transient());
    assert!(error.to_string().contains("redirect"), "{error}");
    let seen = server.seen();
    assert_eq!(seen.len(), 1, "the Location was not followed");
    assert_eq!(seen[0].uri.path(), "/v1/events/evt_1");
}

#[tokio::test]
async fn an_answer_beyond_the_body_cap_is_refused_not_buffered() {
    let huge = format!(
        r#"{{"id":"evt_1","pad":"{}"}}"#,
        "x".repeat(MAX_ANSWER_BYTES)
    );
    let server = serve(move |_, _| json(200, &huge)).await;
    let api = client(&server.url);
    let error = api.event("evt_1").await.unwrap_err();
    assert!(matches!(error, ApiError::Decode(_)), "{error:?}");
    assert!(error.to_string().contains("MiB"), "{error}");
    assert_eq!(server.seen().len(), 1, "a refused answer is not retried");
}

/// A Mercado Pago payment as the search lists it, changed at `updated`.
fn mp_payment(id: u64, updated: &str) -> serde_json::Value {
    serde_json::json!({"id": id, "status": "approved", "external_reference": "o-1",
        "transaction_amount": 10.5, "currency_id": "BRL",
        "date_created": "2026-12-01T10:00:00.000-03:00", "date_last_updated": updated})
}

fn search_page(total: i64, offset: i64, results: &[serde_json::Value]) -> Response {
    json(
        200,
        &serde_json::json!({"paging": {"total": total, "limit": 2, "offset": offset},
            "results": results})
        .to_string(),
    )
}

fn query_of(seen: &Seen) -> std::collections::BTreeMap<String, String> {
    url::form_urlencoded::parse(seen.uri.query().unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

fn search(begin_ms: i64) -> PaymentSearch {
    PaymentSearch {
        begin_ms,
        end_ms: begin_ms + 86_400_000,
        limit: 2,
        external_reference: None,
    }
}

#[tokio::test]
async fn the_payment_search_pages_by_its_window_start_and_retries_a_5xx() {
    // Three payments, two changed at the same instant; the first answer is a 503.
    let t1 = "2026-12-02T10:00:00.000-03:00";
    let t2 = "2026-12-02T11:00:00.000-03:00";
    let (a, b, c) = (mp_payment(1, t1), mp_payment(2, t2), mp_payment(3, t2));
    let pages = [vec![a.clone(), b.clone()], vec![c.clone()]];
    let server = serve(move |n, seen| match n {
        0 => json(
            503,
            r#"{"message": "try later", "error": "internal_error", "status": 503, "cause": []}"#,
        ),
        1 => search_page(3, 0, &pages[0]),
        _ => {
            let q = query_of(seen);
            // The next page begins at the newest change read, past the one read there.
            assert_eq!(q["begin_date"], "2026-12-02T14:00:00.000+00:00", "{q:?}");
            assert_eq!(q["offset"], "1");
            search_page(2, 1, &pages[1])
        }
    })
    .await;
    let begin = chrono::DateTime::parse_from_rfc3339(t1)
        .unwrap()
        .timestamp_millis();
    let c = client(&server.url);
    let mut walk = c.mercadopago_payments(search(begin));
    let first = walk.next_page().await.unwrap().unwrap();
    assert_eq!(first, vec![a, b]);
    let second = walk.next_page().await.unwrap().unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(
        walk.next_page().await.unwrap(),
        None,
        "a short page is the last"
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 3, "the 503 was retried once");
    let q = query_of(&seen[0]);
    for (k, v) in [
        ("sort", "date_last_updated"),
        ("criteria", "asc"),
        ("range", "date_last_updated"),
        ("begin_date", "2026-12-02T13:00:00.000+00:00"),
        ("end_date", "2026-12-03T13:00:00.000+00:00"),
        ("offset", "0"),
        ("limit", "2"),
    ] {
        assert_eq!(q[k], v, "{k}: {q:?}");
    }
    assert_eq!(seen[0].uri.path(), SEARCH_PATH);
    assert_eq!(
        seen[0].headers["authorization"].to_str().unwrap(),
        format!("Bearer {KEY}")
    );
}

#[tokio::test]
async fn an_empty_search_window_is_one_call_and_a_refusal_is_permanent_and_clear() {
    let server = serve(|n, _| match n {
        0 => search_page(0, 0, &[]),
        _ => json(
            400,
            r#"{"message": "Date format must be yyyy-MM-dd'T'HH:mm:ss.SSSZ.", "error": "bad_request", "status": 400, "cause": [{"code": 1001, "description": "Date format must be yyyy-MM-dd'T'HH:mm:ss.SSSZ."}]}"#,
        ),
    })
    .await;
    let c = client(&server.url);
    let mut walk = c.mercadopago_payments(search(1_765_000_000_000));
    assert_eq!(walk.next_page().await.unwrap(), None);
    assert_eq!(walk.next_page().await.unwrap(), None, "and stays done");
    assert_eq!(server.seen().len(), 1);
    let mut walk = c.mercadopago_payments(search(1_765_000_000_000));
    let error = walk.next_page().await.unwrap_err();
    assert!(!error.is_transient());
    assert_eq!(
        error.to_string(),
        "400 bad_request (1001): Date format must be yyyy-MM-dd'T'HH:mm:ss.SSSZ."
    );
    assert_eq!(server.seen().len(), 2, "not retried");
}

#[tokio::test]
async fn a_search_answer_that_cannot_be_walked_is_an_error_not_a_skipped_page() {
    let late = "2026-12-02T11:00:00.000-03:00";
    let early = "2026-12-02T10:00:00.000-03:00";
    let server = serve(move |n, _| match n {
        0 => search_page(9, 0, &[mp_payment(1, late), mp_payment(2, early)]),
        1 => search_page(
            9,
            0,
            &[
                mp_payment(1, late),
                mp_payment(2, late),
                mp_payment(3, late),
            ],
        ),
        _ => search_page(9, 0, &[serde_json::json!({"id": 4})]),
    })
    .await;
    let c = client(&server.url);
    let begin = chrono::DateTime::parse_from_rfc3339(early)
        .unwrap()
        .timestamp_millis();
    for expected in [
        "not in date_last_updated order",
        "a page of 3 payments where 2",
        "no date_last_updated",
    ] {
        let error = c
            .mercadopago_payments(search(begin))
            .next_page()
            .await
            .unwrap_err();
        assert!(error.to_string().contains(expected), "{error}");
    }
}
