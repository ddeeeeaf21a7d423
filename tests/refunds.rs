//! Refunds from oncehook (provider commands), on both databases: a request is stored with
//! its outbox row and audit row or refused with nothing stored; the relay sends it to the
//! simulator's Stripe-compatible API over real HTTP with `Idempotency-Key:
//! order:{id}:refund:{n}`, the same on every retry, restart and redrive, so the provider
//! makes one refund; the refund's webhook confirms the command.
//!
//! The provider is the simulator behind a small scripted proxy that can lose an answer
//! after the simulator made the refund (the connection is cut mid-answer) or answer 429
//! with `Retry-After`, and that records the key of every refund request it sees.

mod common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use app::backend::{AdminBackend, Operator, RefundRequest, Role, Viewer};
use app::error::AppError;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use common::fixtures::*;
use common::{Kind, TestApp, STRIPE_SECRET};
use oncehook::config::{ProviderApiSettings, Settings};
use oncehook::domain::retry::RetryPolicy;
use oncehook::provider::api::{ApiClient, CreateRefund};
use oncehook::provider::signature::SchemeKind;
use oncehook::simulator::run::{Options, Simulation};
use oncehook::simulator::scenario::Scenario;
use oncehook::simulator::sender::Target;
use oncehook::simulator::ApiFaults;
use sqlx::Row;

both!(
    the_order_page_refunds_in_two_steps_and_a_double_post_is_one_refund,
    a_refund_is_cancelled_before_any_send_and_never_after,
    a_request_is_stored_with_its_outbox_row_and_audit_row,
    refusals_store_nothing_and_a_viewer_is_audited,
    operators_asking_at_once_never_exceed_what_was_paid,
    a_lost_answer_is_retried_with_the_same_key_and_refunds_once,
    retry_after_of_a_429_is_waited_for,
    a_permanent_refusal_is_a_dead_letter_and_a_redrive_reuses_the_key,
    the_api_asks_for_a_refund_and_the_order_json_carries_it,
    a_failed_refund_that_can_be_redriven_holds_its_amount_until_discarded,
    a_redrive_rechecks_what_is_left_and_refuses_beyond_it,
    a_redrive_after_the_providers_key_memory_finds_the_refund_instead_of_making_another,
    a_disputed_amount_is_not_refundable_when_the_provider_says_so,
);

const SIM_KEY: &str = "sk_test_refundsKEY0123456789";

/// What the proxy does with the next `POST /v1/refunds` (then: pass it on).
#[derive(Clone, Debug)]
enum Mode {
    /// Pass it to the simulator, then cut the connection in the middle of the answer.
    Lose,
    /// Answer 429 with this `Retry-After` without passing it on.
    TooMany(u64),
    /// Answer 400 `invalid_request_error` (permanent) without passing it on.
    Refuse,
}

#[derive(Default)]
struct ProxyState {
    upstream: OnceLock<String>,
    script: Mutex<VecDeque<Mode>>,
    /// (when, Idempotency-Key) of every refund request.
    keys: Mutex<Vec<(Instant, String)>>,
}

async fn proxy(
    state: Arc<ProxyState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let refund = method == Method::POST && uri.path() == "/v1/refunds";
    let mut mode = None;
    if refund {
        let key = headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        state.keys.lock().unwrap().push((Instant::now(), key));
        mode = state.script.lock().unwrap().pop_front();
    }
    if let Some(Mode::TooMany(secs)) = mode {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", secs.to_string())],
            axum::Json(
                serde_json::json!({"error": {"type": "invalid_request_error",
                "code": "rate_limit", "message": "Request rate limit exceeded."}}),
            ),
        )
            .into_response();
    }
    if let Some(Mode::Refuse) = mode {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(
                serde_json::json!({"error": {"type": "invalid_request_error",
                "message": "Refused by the test proxy."}}),
            ),
        )
            .into_response();
    }
    let upstream = state.upstream.get().expect("the simulator is up");
    let mut request = reqwest::Client::new().request(
        method,
        format!(
            "{upstream}{}",
            uri.path_and_query().map(|p| p.as_str()).unwrap_or("/")
        ),
    );
    for name in ["authorization", "idempotency-key", "content-type"] {
        if let Some(v) = headers.get(name) {
            request = request.header(name, v.clone());
        }
    }
    let answer = request.body(body).send().await.unwrap();
    let status = answer.status().as_u16();
    let retry_after = answer.headers().get("retry-after").cloned();
    let bytes = answer.bytes().await.unwrap();
    if let Some(Mode::Lose) = mode {
        // The provider did the work; its answer never arrives whole.
        let broken = futures::stream::iter([
            Ok(Bytes::from_static(b"{\"id\":")),
            Err(std::io::Error::other("connection lost")),
        ]);
        return Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(Body::from_stream(broken))
            .unwrap();
    }
    let mut response = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if let Some(r) = retry_after {
        response = response.header("retry-after", r);
    }
    response.body(Body::from(bytes)).unwrap()
}

/// oncehook (processor and relay on) whose Stripe provider's API is the simulator behind
/// the proxy, and the simulator, whose payments' webhooks oncehook has processed.
struct World {
    app: TestApp,
    sim: Arc<Simulation>,
    proxy: Arc<ProxyState>,
    sim_url: String,
}

fn sim_client(url: &str) -> ApiClient {
    ApiClient::new(&ProviderApiSettings {
        base: url.into(),
        key: Some(SIM_KEY.into()),
        timeout_ms: 5_000,
        rate_per_sec: 1_000.0,
        retry: RetryPolicy {
            base_ms: 5,
            cap_ms: 50,
            max_attempts: 8,
            max_retry_after_ms: 2_000,
        },
    })
    .unwrap()
}

async fn world(kind: Kind, tweak: impl FnOnce(&mut Settings)) -> World {
    let state = Arc::new(ProxyState::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_url = format!("http://{}", listener.local_addr().unwrap());
    let handler_state = state.clone();
    let router = axum::Router::new().fallback(
        move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            proxy(handler_state.clone(), method, uri, headers, body)
        },
    );
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let app = TestApp::spawn_with(kind, move |s| {
        s.processor.poll_interval_ms = 20;
        s.processor.retry.base_ms = 20;
        s.processor.retry.cap_ms = 200;
        s.outbox.relay.poll_interval_ms = 50;
        s.outbox.relay.retry = RetryPolicy {
            base_ms: 50,
            cap_ms: 200,
            max_attempts: 8,
            max_retry_after_ms: 10_000,
        };
        s.providers[0].api = ProviderApiSettings {
            base: proxy_url,
            key: Some(SIM_KEY.into()),
            timeout_ms: 2_000,
            rate_per_sec: 1_000.0,
            retry: s.providers[0].api.retry,
        };
        tweak(s);
    })
    .await;

    let mut scenario = Scenario::builtin("steady").unwrap();
    scenario.faults = Default::default();
    scenario.api = ApiFaults::default();
    let sim = Simulation::new(Options {
        seed: 17,
        orders: 6,
        duration: Duration::ZERO,
        scenario_name: "steady".into(),
        scenario,
        start: None,
        database: "sqlite::memory:".into(),
        api_key: SIM_KEY.into(),
        target: Some(Target {
            url: format!("{}/webhooks/stripe", app.url),
            scheme: SchemeKind::Stripe,
            secret: STRIPE_SECRET.into(),
        }),
        provider: Default::default(),
    })
    .await
    .unwrap();
    sim.run(&|_, _| {}).await.unwrap();
    let sim = Arc::new(sim);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sim_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(oncehook::simulator::serve_api(
        sim.shared.clone(),
        listener,
        std::future::pending(),
    ));
    state.upstream.set(sim_url.clone()).unwrap();
    app.wait_until_processed().await;
    World {
        app,
        sim,
        proxy: state,
        sim_url,
    }
}

impl World {
    /// An order paid once and never refunded, as the simulator knows it and oncehook
    /// counted it: (order id, payment intent, amount paid).
    async fn paid_order(&self) -> (String, String, i64) {
        let truth = self.sim.truth().await.unwrap();
        for o in truth.orders {
            if o.status == "paid" && o.refunds.is_empty() && o.payments.len() == 1 {
                let counted: i64 =
                    sqlx::query_scalar("SELECT amount_paid FROM orders WHERE order_id = $1")
                        .bind(&o.order_id)
                        .fetch_one(self.app.db.reader())
                        .await
                        .unwrap();
                assert_eq!(counted, o.paid, "oncehook counted the simulator's payment");
                return (o.order_id, o.payments[0].id.clone(), o.paid);
            }
        }
        panic!("the simulation has a paid order without refunds");
    }

    /// The refunds the provider holds for a payment.
    async fn provider_refunds(&self, pi: &str) -> Vec<oncehook::provider::api::Refund> {
        sim_client(&self.sim_url).refunds_of(pi).await.unwrap()
    }

    fn keys(&self) -> Vec<String> {
        self.proxy
            .keys
            .lock()
            .unwrap()
            .iter()
            .map(|(_, k)| k.clone())
            .collect()
    }
}

async fn operator(app: &TestApp) -> Operator {
    app.acting::<Operator>("olga", Role::Operator).await
}

async fn ask(
    app: &TestApp,
    order_id: &str,
    amount: Option<i64>,
) -> Result<app::backend::CommandView, AppError> {
    app.backend()
        .request_refund(
            &operator(app).await,
            order_id,
            RefundRequest {
                amount,
                reason: "damaged in transit".into(),
            },
        )
        .await
}

/// Waits (bounded) until command `id` is in `state`; returns how long it took.
async fn wait_for_state(app: &TestApp, id: i64, state: &str, within: Duration) -> Duration {
    let began = Instant::now();
    loop {
        let now: String = sqlx::query_scalar("SELECT state FROM provider_commands WHERE id = $1")
            .bind(id)
            .fetch_one(app.db.reader())
            .await
            .unwrap();
        if now == state {
            return began.elapsed();
        }
        assert!(
            began.elapsed() < within,
            "command {id} still {now}, not {state}, after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A paid order in oncehook from one signed webhook (no provider API involved).
async fn paid_app(kind: Kind, amount: i64) -> TestApp {
    let app = TestApp::spawn(kind).await;
    let r = app
        .post_stripe(&payment_intent_succeeded(
            "evt_pay_1",
            "pi_1",
            "ord-1",
            amount,
            T10_00,
        ))
        .await;
    assert_eq!(r.status(), 200);
    app.process().await;
    app
}

/// The order page's refund form as a browser without JavaScript uses it: the amount in the
/// currency's units, a confirmation that says it in the currency, one refund however often
/// the confirmation is posted; what the page refuses it shows, with nothing stored; a
/// viewer sees no form and a forged post is refused and audited.
async fn the_order_page_refunds_in_two_steps_and_a_double_post_is_one_refund(kind: Kind) {
    use app::api::RefundOrder;
    use leptos::server_fn::ServerFn;
    let app = paid_app(kind, 4200).await;
    let operator = app.sign_in("otto", Role::Operator).await;
    let viewer = app.sign_in("vera", Role::Viewer).await;

    let (status, html) = app.page("/orders/ord-1", &operator).await;
    assert_eq!(status, 200);
    assert!(html.contains("id=\"refund-form\""), "{html}");
    assert!(html.contains("42.00 EUR left to refund"));
    let (_, seen_by_viewer) = app.page("/orders/ord-1", &viewer).await;
    assert!(!seen_by_viewer.contains("id=\"refund-panel\""));

    // The review step refuses, with nothing stored, what the server would refuse.
    for (query, says) in [
        ("refund=12.345&reason=x", "EUR has 2 decimals"),
        ("refund=50&reason=x", "only 42.00 EUR is left to refund"),
        ("refund=abc&reason=x", "is not an amount"),
        ("refund=5&reason=", "a reason is required"),
    ] {
        let (status, html) = app.page(&format!("/orders/ord-1?{query}"), &operator).await;
        assert_eq!(status, 200);
        assert!(html.contains("id=\"refund-error\""), "{query}");
        assert!(html.contains(says), "{query}: {says}");
        assert!(!html.contains("id=\"refund-confirm\""), "{query}");
    }
    assert_eq!(stored(&app).await, (0, 0, 0));

    // The confirmation names the amount in the currency and carries the form's key.
    let (_, html) = app
        .page("/orders/ord-1?refund=12.50&reason=parcel+lost", &operator)
        .await;
    assert!(html.contains("Confirm refund of 12.50 EUR"), "{html}");
    let key = html
        .split("name=\"form_key\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the form's key")
        .to_string();
    let form = [
        ("order_id", "ord-1"),
        ("amount", "1250"),
        ("reason", "parcel lost"),
        ("form_key", key.as_str()),
    ];
    // A viewer's forged confirmation: refused and audited, nothing stored.
    let (status, _) = app.post_form(RefundOrder::PATH, &viewer, None, &form).await;
    assert_eq!(status, 403);
    assert_eq!(
        app.count("SELECT COUNT(*) FROM audit_log WHERE action = 'order.refund.refused'")
            .await,
        1
    );
    // Posted twice (a double click; the no-JS form's redirect goes to the order page).
    let (first, _) = app
        .post_form(RefundOrder::PATH, &operator, Some("/orders/ord-1"), &form)
        .await;
    let (second, _) = app
        .post_form(RefundOrder::PATH, &operator, Some("/orders/ord-1"), &form)
        .await;
    assert!(
        (300..400).contains(&first) && (300..400).contains(&second),
        "{first} {second}"
    );
    assert_eq!(
        stored(&app).await,
        (1, 1, 1),
        "one refund, one message, one audit row"
    );
    let amount: i64 = app.count("SELECT amount FROM provider_commands").await;
    assert_eq!(amount, 1250);
    // The same key with another amount is refused; the page then shows the command in flight.
    let other = [
        ("order_id", "ord-1"),
        ("amount", "100"),
        ("reason", "parcel lost"),
        ("form_key", key.as_str()),
    ];
    let (status, body) = app
        .post_form(RefundOrder::PATH, &operator, None, &other)
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(stored(&app).await.0, 1);
    let (_, html) = app.page("/orders/ord-1", &operator).await;
    assert!(html.contains("id=\"order-pending\""));
    assert!(html.contains("Refund of 12.50 EUR asked for by otto"));
    assert!(
        html.contains("29.50 EUR left to refund"),
        "in flight counts"
    );
    // The overview and /metrics count it in flight; not unconfirmed: it was never sent.
    let who: Viewer = app.acting("vera", Role::Viewer).await;
    let o = app
        .backend()
        .overview(&who, app::backend::Range::Hour)
        .await
        .unwrap();
    let c = o.commands.expect("commands on the overview");
    assert_eq!(
        (c.in_flight, c.unconfirmed, c.confirmed, c.failed),
        (1, 0, 0, 0)
    );
    assert!(c.oldest_in_flight_age_secs.is_some());
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("oncehook_provider_commands{state=\"requested\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("oncehook_provider_commands_unconfirmed 0"));
    // Answered two hours ago and still no webhook: past `commands.confirm_within_secs`
    // (1 h by default), it is flagged.
    sqlx::query("UPDATE provider_commands SET state = 'sent', sent_at = $1")
        .bind(oncehook::store::now_ms() - 7_200_000)
        .execute(app.db.writer())
        .await
        .unwrap();
    let o = app
        .backend()
        .overview(&who, app::backend::Range::Hour)
        .await
        .unwrap();
    assert_eq!(o.commands.unwrap().unconfirmed, 1);
    app.shutdown().await;
}

/// Cancelling a refund before the relay sends it, from the API, the page's form and the
/// CLI: the command is `cancelled`, its outbox row leaves the queue, what is left to refund
/// comes back, the cancellation is audited; a viewer is refused and audited; a command
/// being sent (or over) is refused, with nothing changed.
async fn a_refund_is_cancelled_before_any_send_and_never_after(kind: Kind) {
    use app::api::CancelRefund;
    use leptos::server_fn::ServerFn;
    let app = paid_app(kind, 4200).await;
    let first = ask(&app, "ord-1", Some(1500)).await.unwrap();
    let operator = app.token("ops", "operator").await;
    let viewer = app.token("looker", "viewer").await;
    let cancel = |id: i64, order: &str| format!("/api/v1/orders/{order}/refunds/{id}/cancel");
    let none = serde_json::json!({});

    let (status, _) = app
        .api_post(&cancel(first.id, "ord-1"), &viewer, &none)
        .await;
    assert_eq!(status, 403);
    let (status, _) = app
        .api_post(&cancel(first.id, "ord-2"), &operator, &none)
        .await;
    assert_eq!(status, 404, "not a command of that order");
    let (status, body) = app
        .api_post(&cancel(first.id, "ord-1"), &operator, &none)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "cancelled");
    let (status, body) = app
        .api_post(&cancel(first.id, "ord-1"), &operator, &none)
        .await;
    assert_eq!(status, 409, "no longer cancellable: {body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("cancelled"),
        "{body}"
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM outbox WHERE topic = 'provider_command.refund' AND status = 'cancelled'")
            .await,
        1
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM audit_log WHERE action = 'command.cancel'")
            .await,
        1
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM audit_log WHERE action = 'command.cancel.refused'")
            .await,
        1
    );
    // What was asked for is free again: all of it can be asked for now.
    let all = ask(&app, "ord-1", None).await.unwrap();
    assert_eq!(all.amount, 4200);

    // The page's form (no JavaScript: a redirect back to the order).
    let cookie = app.sign_in("otto", Role::Operator).await;
    let (_, html) = app.page("/orders/ord-1", &cookie).await;
    assert!(html.contains("Cancel this refund"), "{html}");
    let id = all.id.to_string();
    let (status, _) = app
        .post_form(
            CancelRefund::PATH,
            &cookie,
            Some("/orders/ord-1"),
            &[("order_id", "ord-1"), ("command_id", &id)],
        )
        .await;
    assert!((300..400).contains(&status), "{status}");
    let (_, html) = app.page("/orders/ord-1", &cookie).await;
    assert!(!html.contains("id=\"order-pending\""), "nothing in flight");

    // The CLI, and a command the relay is sending: refused, nothing changes.
    let third = ask(&app, "ord-1", Some(100)).await.unwrap();
    sqlx::query("UPDATE outbox SET status = 'processing', attempts = 1 WHERE id = (SELECT outbox_id FROM provider_commands WHERE id = $1)")
        .bind(third.id)
        .execute(app.db.writer())
        .await
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args(["order", "cancel-refund", "ord-1", &third.id.to_string()])
        .args(["--database-url", &app.db_handle.url])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("can no longer be cancelled"), "{stderr}");
    let state: String = sqlx::query_scalar("SELECT state FROM provider_commands WHERE id = $1")
        .bind(third.id)
        .fetch_one(app.db.reader())
        .await
        .unwrap();
    assert_eq!(state, "requested");
    // One the relay has not touched: cancelled by the CLI.
    let fourth = ask(&app, "ord-1", Some(200)).await.unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args([
            "order",
            "cancel-refund",
            "ord-1",
            &fourth.id.to_string(),
            "--json",
        ])
        .args(["--database-url", &app.db_handle.url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cancelled: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cancelled["state"], "cancelled");
    app.shutdown().await;
}

async fn a_request_is_stored_with_its_outbox_row_and_audit_row(kind: Kind) {
    let app = paid_app(kind, 4200).await;
    let command = ask(&app, "ord-1", Some(1500)).await.unwrap();
    assert_eq!(
        (
            command.state.as_str(),
            command.amount,
            command.currency.as_str()
        ),
        ("requested", 1500, "EUR")
    );
    assert_eq!(command.idempotency_key, "order:ord-1:refund:1");
    assert_eq!(command.payment_ref, "pi_1");
    let outbox = sqlx::query(
        "SELECT idempotency_key, sink, topic, status, payload FROM outbox WHERE topic = 'provider_command.refund'",
    )
    .fetch_all(app.db.reader())
    .await
    .unwrap();
    assert_eq!(outbox.len(), 1);
    let o = &outbox[0];
    assert_eq!(o.get::<String, _>(0), "order:ord-1:refund:1");
    assert_eq!(o.get::<String, _>(1), "provider:stripe");
    assert_eq!(o.get::<String, _>(3), "pending");
    let payload: serde_json::Value = serde_json::from_str(&o.get::<String, _>(4)).unwrap();
    assert_eq!(payload["payment_intent"], "pi_1");
    assert_eq!(payload["amount"], 1500);
    assert_eq!(payload["metadata"]["order_id"], "ord-1");
    assert_eq!(payload["metadata"]["command_id"], command.id.to_string());
    let audit = sqlx::query(
        "SELECT actor, target, reason, source FROM audit_log WHERE action = 'order.refund'",
    )
    .fetch_all(app.db.reader())
    .await
    .unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].get::<String, _>(0), "olga");
    assert_eq!(audit[0].get::<String, _>(1), "order:ord-1");
    assert_eq!(
        audit[0].get::<Option<String>, _>(2).as_deref(),
        Some("damaged in transit")
    );
    assert_eq!(
        audit[0].get::<Option<String>, _>(3).as_deref(),
        Some("192.0.2.7")
    );

    // The second refund of the order is number 2; all that is left when no amount is given.
    let second = ask(&app, "ord-1", None).await.unwrap();
    assert_eq!(second.idempotency_key, "order:ord-1:refund:2");
    assert_eq!(second.amount, 4200 - 1500);
    // The order's JSON carries both, beside the ledger.
    let who: Viewer = app.acting("vera", Role::Viewer).await;
    let detail = app.backend().order_detail(&who, "ord-1").await.unwrap();
    let states: Vec<_> = detail
        .commands
        .iter()
        .map(|c| (c.idempotency_key.as_str(), c.state.as_str(), c.amount))
        .collect();
    assert_eq!(
        states,
        vec![
            ("order:ord-1:refund:1", "requested", 1500),
            ("order:ord-1:refund:2", "requested", 2700)
        ]
    );
    assert!(detail
        .timeline
        .iter()
        .any(|e| e.kind == "command" && e.title.contains("15.00 EUR")));
    // The order page shows both in its pending strip.
    let cookie = app.sign_in("vera", Role::Viewer).await;
    let (status, page) = app.page("/orders/ord-1", &cookie).await;
    assert_eq!(status, 200);
    let strip = page
        .split("id=\"order-pending\"")
        .nth(1)
        .expect("a pending strip")
        .split("</section>")
        .next()
        .unwrap();
    assert!(strip.contains("order:ord-1:refund:1"), "{strip}");
    assert!(strip.contains("order:ord-1:refund:2"), "{strip}");
    assert!(
        strip.contains("15.00 EUR") && strip.contains("olga"),
        "{strip}"
    );
    app.shutdown().await;
}

async fn stored(app: &TestApp) -> (i64, i64, i64) {
    (
        app.count("SELECT COUNT(*) FROM provider_commands").await,
        app.count("SELECT COUNT(*) FROM outbox WHERE topic = 'provider_command.refund'")
            .await,
        app.count("SELECT COUNT(*) FROM audit_log WHERE action = 'order.refund'")
            .await,
    )
}

async fn refusals_store_nothing_and_a_viewer_is_audited(kind: Kind) {
    let app = paid_app(kind, 4200).await;
    // A failed payment only: no refundable payment.
    app.post_stripe(&payment_intent_failed(
        "evt_fail_2",
        "pi_2",
        "ord-2",
        T10_00,
    ))
    .await;
    app.process().await;

    let over = ask(&app, "ord-1", Some(4201)).await.unwrap_err();
    assert!(
        matches!(&over, AppError::Conflict(m) if m.contains("more than what is left")),
        "{over:?}"
    );
    assert_eq!(
        ask(&app, "no-such-order", Some(1)).await.unwrap_err(),
        AppError::NotFound
    );
    let none = ask(&app, "ord-2", None).await.unwrap_err();
    assert!(
        matches!(&none, AppError::Invalid(m) if m.contains("no refundable payment")),
        "{none:?}"
    );
    let zero = ask(&app, "ord-1", Some(0)).await.unwrap_err();
    assert!(matches!(zero, AppError::Invalid(_)), "{zero:?}");
    let no_reason = app
        .backend()
        .request_refund(
            &operator(&app).await,
            "ord-1",
            RefundRequest {
                amount: Some(1),
                reason: "  ".into(),
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(no_reason, AppError::Invalid(_)), "{no_reason:?}");

    // A viewer never gets the capability: 403, and the refusal is in the audit log.
    let refused = app
        .authorize::<Operator>("vera", Role::Viewer, "order.refund", "order:ord-1")
        .await
        .unwrap_err();
    assert!(matches!(refused, AppError::Forbidden(_)), "{refused:?}");
    assert_eq!(
        app.count(
            "SELECT COUNT(*) FROM audit_log WHERE action = 'order.refund.refused' \
             AND actor = 'vera' AND target = 'order:ord-1'"
        )
        .await,
        1
    );
    assert_eq!(stored(&app).await, (0, 0, 0), "nothing stored");
    app.shutdown().await;
}

async fn operators_asking_at_once_never_exceed_what_was_paid(kind: Kind) {
    let app = paid_app(kind, 100).await;
    // Eight operators each ask for 30 of the 100 paid at the same moment: three fit.
    let backend = Arc::new(app.backend());
    let mut asks = Vec::new();
    for i in 0..8 {
        let backend = backend.clone();
        let who: Operator = app.acting(&format!("op{i}"), Role::Operator).await;
        asks.push(tokio::spawn(async move {
            backend
                .request_refund(
                    &who,
                    "ord-1",
                    RefundRequest {
                        amount: Some(30),
                        reason: "at once".into(),
                    },
                )
                .await
        }));
    }
    let mut granted = 0;
    for a in asks {
        match a.await.unwrap() {
            Ok(_) => granted += 1,
            Err(AppError::Conflict(m)) => assert!(m.contains("more than what is left"), "{m}"),
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(granted, 3);
    assert_eq!(stored(&app).await, (3, 3, 3));
    let keys: Vec<String> =
        sqlx::query_scalar("SELECT idempotency_key FROM provider_commands ORDER BY seq")
            .fetch_all(app.db.reader())
            .await
            .unwrap();
    assert_eq!(
        keys,
        vec![
            "order:ord-1:refund:1",
            "order:ord-1:refund:2",
            "order:ord-1:refund:3"
        ]
    );
    // The 10 left is still refundable; 11 is not.
    assert!(ask(&app, "ord-1", Some(11)).await.is_err());
    assert_eq!(ask(&app, "ord-1", None).await.unwrap().amount, 10);
    app.shutdown().await;
}

async fn a_lost_answer_is_retried_with_the_same_key_and_refunds_once(kind: Kind) {
    let w = world(kind, |_| {}).await;
    let (order, pi, paid) = w.paid_order().await;
    w.proxy.script.lock().unwrap().push_back(Mode::Lose);
    let command = ask(&w.app, &order, Some(paid / 2)).await.unwrap();
    wait_for_state(&w.app, command.id, "confirmed", Duration::from_secs(20)).await;

    let refunds = w.provider_refunds(&pi).await;
    assert_eq!(refunds.len(), 1, "exactly one refund at the provider");
    assert_eq!(refunds[0].amount, paid / 2);
    assert_eq!(refunds[0].metadata["command_id"], command.id.to_string());
    let keys = w.keys();
    assert!(keys.len() >= 2, "the lost answer was retried: {keys:?}");
    assert!(
        keys.iter().all(|k| *k == format!("order:{order}:refund:1")),
        "{keys:?}"
    );
    let row = sqlx::query(
        "SELECT provider_object_id, confirmed_event_id, amount_refunded FROM provider_commands c \
         JOIN orders o ON o.order_id = c.order_id WHERE c.id = $1",
    )
    .bind(command.id)
    .fetch_one(w.app.db.reader())
    .await
    .unwrap();
    assert_eq!(
        row.get::<Option<String>, _>(0).as_deref(),
        Some(refunds[0].id.as_str())
    );
    assert!(row.get::<Option<String>, _>(1).is_some());
    assert_eq!(row.get::<i64, _>(2), paid / 2, "its money counted once");
    // The order page's story tells the attempts and links the confirming event.
    let who: Viewer = w.app.acting("vera", Role::Viewer).await;
    let detail = w.app.backend().order_detail(&who, &order).await.unwrap();
    let c = &detail.commands[0];
    // The "why" names the command, and money reads like the totals.
    assert!(
        detail.why.contains(&format!(
            "refund {} came from command #{}, asked for by olga",
            refunds[0].id, command.id
        )),
        "{}",
        detail.why
    );
    let currency = detail.currency.clone().unwrap();
    assert!(
        detail
            .why
            .contains(&app::format::money(paid / 2, Some(&currency))),
        "{}",
        detail.why
    );
    assert!(c.attempts.len() >= 2, "{:?}", c.attempts);
    assert!(c.attempts[0].error.is_some(), "{:?}", c.attempts[0]);
    assert!(c
        .confirmed_href
        .as_deref()
        .is_some_and(|h| h.starts_with("/events/")));
    w.app.shutdown().await;
}

async fn retry_after_of_a_429_is_waited_for(kind: Kind) {
    let w = world(kind, |_| {}).await;
    let (order, pi, paid) = w.paid_order().await;
    w.proxy.script.lock().unwrap().push_back(Mode::TooMany(3));
    let command = ask(&w.app, &order, Some(paid)).await.unwrap();
    wait_for_state(&w.app, command.id, "confirmed", Duration::from_secs(20)).await;
    let seen = w.proxy.keys.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let waited = seen[1].0 - seen[0].0;
    assert!(waited >= Duration::from_secs(3), "waited only {waited:?}");
    assert_eq!(seen[0].1, seen[1].1);
    assert_eq!(w.provider_refunds(&pi).await.len(), 1);
    let first: (Option<i64>, Option<String>) = sqlx::query_as(
        "SELECT status_code, error FROM outbox_attempts WHERE outbox_id = \
         (SELECT outbox_id FROM provider_commands WHERE id = $1) ORDER BY id LIMIT 1",
    )
    .bind(command.id)
    .fetch_one(w.app.db.reader())
    .await
    .unwrap();
    assert_eq!(first.0, Some(429));
    assert!(first.1.unwrap().contains("rate_limit"));
    w.app.shutdown().await;
}

async fn a_permanent_refusal_is_a_dead_letter_and_a_redrive_reuses_the_key(kind: Kind) {
    let w = world(kind, |_| {}).await;
    let (order, pi, paid) = w.paid_order().await;
    // Someone used the key oncehook will use, with other parameters: Stripe refuses the
    // request with idempotency_error, which no retry can fix.
    let key = format!("order:{order}:refund:1");
    sim_client(&w.sim_url)
        .create_refund(
            &CreateRefund {
                payment_intent: pi.clone(),
                amount: Some(1),
                reason: None,
                metadata: Default::default(),
            },
            &key,
        )
        .await
        .unwrap();
    w.app.wait_until_processed().await;
    let command = ask(&w.app, &order, Some(paid / 4)).await.unwrap();
    assert_eq!(command.idempotency_key, key);
    wait_for_state(&w.app, command.id, "failed", Duration::from_secs(20)).await;
    let error: String = sqlx::query_scalar("SELECT error FROM provider_commands WHERE id = $1")
        .bind(command.id)
        .fetch_one(w.app.db.reader())
        .await
        .unwrap();
    assert!(error.contains("idempotency_error"), "{error}");
    let dead = sqlx::query(
        "SELECT id, error_class, last_error, status FROM dead_letters WHERE stage = 'outbox' AND order_id = $1",
    )
    .bind(&order)
    .fetch_all(w.app.db.reader())
    .await
    .unwrap();
    assert_eq!(dead.len(), 1);
    let dead_id: i64 = dead[0].get(0);
    assert_eq!(dead[0].get::<String, _>(1), "permanent");
    assert!(dead[0].get::<String, _>(2).contains("idempotency_error"));
    // Not retried: one attempt.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(w.keys(), vec![key.clone()]);

    // A redrive sends it again under the same key (and the provider refuses it again).
    let who = operator(&w.app).await;
    let outcomes = w
        .app
        .backend()
        .redrive(
            &who,
            app::backend::DlqQuery {
                id: Some(dead_id),
                ..Default::default()
            },
            Some("retry".into()),
        )
        .await
        .unwrap();
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    let began = Instant::now();
    while w.keys().len() < 2 {
        assert!(began.elapsed() < Duration::from_secs(10), "not resent");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    wait_for_state(&w.app, command.id, "failed", Duration::from_secs(10)).await;
    assert_eq!(w.keys(), vec![key.clone(), key.clone()]);
    // Only the stranger's refund of 1 exists at the provider.
    let refunds = w.provider_refunds(&pi).await;
    assert_eq!(
        refunds.iter().map(|r| r.amount).collect::<Vec<_>>(),
        vec![1]
    );
    w.app.shutdown().await;
}

async fn the_api_asks_for_a_refund_and_the_order_json_carries_it(kind: Kind) {
    let w = world(kind, |_| {}).await;
    let (order, pi, paid) = w.paid_order().await;
    let operator = w.app.token("ops", "operator").await;
    let viewer = w.app.token("support", "viewer").await;
    let url = format!("{}/api/v1/orders/{order}/refunds", w.app.url);
    let post = |token: String, body: serde_json::Value| {
        let request = w.app.http.post(&url).bearer_auth(token).json(&body);
        async move {
            let r = request.send().await.unwrap();
            (
                r.status().as_u16(),
                r.json::<serde_json::Value>().await.unwrap(),
            )
        }
    };
    let (status, body) = post(viewer, serde_json::json!({"amount": 1, "reason": "x"})).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        w.app
            .count("SELECT COUNT(*) FROM audit_log WHERE action = 'order.refund.refused' AND actor = 'token:support'")
            .await,
        1
    );
    let (status, body) = post(
        operator.clone(),
        serde_json::json!({"amount": paid + 1, "reason": "too much"}),
    )
    .await;
    assert_eq!(status, 409, "more than is left: a state conflict: {body}");
    assert_eq!(stored(&w.app).await, (0, 0, 0));
    let missing = w
        .app
        .http
        .post(format!("{}/api/v1/orders/nope/refunds", w.app.url))
        .bearer_auth(&operator)
        .json(&serde_json::json!({"reason": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    let (status, body) = post(
        operator.clone(),
        serde_json::json!({"amount": paid - 1, "reason": "customer asked"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["state"], "requested");
    assert_eq!(body["idempotency_key"], format!("order:{order}:refund:1"));
    let id = body["id"].as_i64().unwrap();
    wait_for_state(&w.app, id, "confirmed", Duration::from_secs(20)).await;
    assert_eq!(w.provider_refunds(&pi).await.len(), 1);

    let read = w
        .app
        .http
        .get(format!("{}/api/v1/orders/{order}", w.app.url))
        .bearer_auth(&operator)
        .send()
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap();
    let commands = read["commands"].as_array().unwrap();
    assert_eq!(commands.len(), 1);
    assert_eq!(commands[0]["state"], "confirmed");
    assert_eq!(commands[0]["amount"], paid - 1);
    assert_eq!(read["amount_refunded"], paid - 1);
    assert!(commands[0]["confirmed_event_id"].is_string());
    w.app.shutdown().await;
}

impl World {
    /// A stranger takes the key oncehook's first refund of `order` will use, for a refund
    /// of 1 with other parameters (counted by oncehook once its webhook arrives): that
    /// command then fails for good with `idempotency_error`.
    async fn spoil_first_key(&self, order: &str, pi: &str) {
        sim_client(&self.sim_url)
            .create_refund(
                &CreateRefund {
                    payment_intent: pi.into(),
                    amount: Some(1),
                    reason: None,
                    metadata: Default::default(),
                },
                &format!("order:{order}:refund:1"),
            )
            .await
            .unwrap();
        self.wait_refunded(order, 1).await;
    }

    /// Waits (bounded) until oncehook counted `amount` refunded on `order`.
    async fn wait_refunded(&self, order: &str, amount: i64) {
        let began = Instant::now();
        loop {
            let now: i64 =
                sqlx::query_scalar("SELECT amount_refunded FROM orders WHERE order_id = $1")
                    .bind(order)
                    .fetch_one(self.app.db.reader())
                    .await
                    .unwrap();
            if now == amount {
                return;
            }
            assert!(
                began.elapsed() < Duration::from_secs(20),
                "{order}: {now} refunded, not {amount}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The dead letter of command `id`'s outbox row: (id, status).
    async fn dead_letter_of(&self, id: i64) -> (i64, String) {
        let row = sqlx::query(
            "SELECT d.id, d.status FROM dead_letters d JOIN provider_commands c \
             ON d.stage = 'outbox' AND d.source_id = c.outbox_id WHERE c.id = $1",
        )
        .bind(id)
        .fetch_one(self.app.db.reader())
        .await
        .unwrap();
        (row.get(0), row.get(1))
    }

    async fn redrive(&self, dead_letter: i64) -> String {
        let who = operator(&self.app).await;
        let outcomes = self
            .app
            .backend()
            .redrive(
                &who,
                app::backend::DlqQuery {
                    id: Some(dead_letter),
                    ..Default::default()
                },
                Some("try again".into()),
            )
            .await
            .unwrap();
        assert_eq!(outcomes.len(), 1, "{outcomes:?}");
        outcomes[0].outcome.clone()
    }

    /// (commands, their amounts summed) of `order`.
    async fn commands_of(&self, order: &str) -> (i64, i64) {
        let row = sqlx::query(
            "SELECT CAST(COUNT(*) AS BIGINT), CAST(COALESCE(SUM(amount), 0) AS BIGINT) \
             FROM provider_commands WHERE order_id = $1",
        )
        .bind(order)
        .fetch_one(self.app.db.reader())
        .await
        .unwrap();
        (row.get(0), row.get(1))
    }
}

/// Issue 44, 1: a command the relay dead-lettered can still be redriven, and a redrive
/// sends it: until its dead letter is closed for good its amount stays asked for, so a
/// second request cannot take the same money and let the redrive refund it twice.
async fn a_failed_refund_that_can_be_redriven_holds_its_amount_until_discarded(kind: Kind) {
    let w = world(kind, |_| {}).await;
    let (order, pi, paid) = w.paid_order().await;
    w.spoil_first_key(&order, &pi).await;
    let first = ask(&w.app, &order, Some(paid / 2)).await.unwrap();
    wait_for_state(&w.app, first.id, "failed", Duration::from_secs(20)).await;
    let (dead, status) = w.dead_letter_of(first.id).await;
    assert_eq!(status, "open");

    // Paid, minus the stranger's 1, minus the failed command's half, is what is left.
    let left = paid - 1 - paid / 2;
    let over = ask(&w.app, &order, Some(left + 1)).await.unwrap_err();
    assert!(
        matches!(&over, AppError::Conflict(m) if m.contains("more than what is left")),
        "{over:?}"
    );
    assert_eq!(
        w.commands_of(&order).await,
        (1, paid / 2),
        "nothing stored beside the failed command"
    );
    let detail = w
        .app
        .backend()
        .order_detail(&w.app.acting::<Viewer>("vera", Role::Viewer).await, &order)
        .await
        .unwrap();
    assert_eq!(detail.refundable, left, "the page offers what is left");

    // Discarded for good: the money is free again, and a new refund of it is one refund.
    w.app
        .backend()
        .close_dead_letter(
            &operator(&w.app).await,
            dead,
            false,
            "will not retry".into(),
        )
        .await
        .unwrap();
    let second = ask(&w.app, &order, Some(paid - 1)).await.unwrap();
    wait_for_state(&w.app, second.id, "confirmed", Duration::from_secs(20)).await;
    let refunds = w.provider_refunds(&pi).await;
    assert_eq!(
        refunds.iter().map(|r| r.amount).sum::<i64>(),
        paid,
        "{refunds:?}"
    );
    w.wait_refunded(&order, paid).await;
    w.app.shutdown().await;
}

/// Issue 44, 2: what is left to refund can shrink while a command waits in the dead-letter
/// queue (a refund made elsewhere); its redrive checks again under the order's lock and
/// refuses, with the dead letter left open and nothing sent.
async fn a_redrive_rechecks_what_is_left_and_refuses_beyond_it(kind: Kind) {
    let w = world(kind, |_| {}).await;
    let (order, pi, paid) = w.paid_order().await;
    w.spoil_first_key(&order, &pi).await;
    let first = ask(&w.app, &order, Some(paid / 2)).await.unwrap();
    wait_for_state(&w.app, first.id, "failed", Duration::from_secs(20)).await;
    let (dead, _) = w.dead_letter_of(first.id).await;
    // Someone refunds most of the rest in the provider's dashboard.
    let elsewhere = paid - paid / 2;
    sim_client(&w.sim_url)
        .create_refund(
            &CreateRefund {
                payment_intent: pi.clone(),
                amount: Some(elsewhere),
                reason: None,
                metadata: Default::default(),
            },
            "dashboard-refund",
        )
        .await
        .unwrap();
    w.wait_refunded(&order, 1 + elsewhere).await;
    let sends = w.keys().len();

    let outcome = w.redrive(dead).await;
    assert!(
        outcome.starts_with("refused") && outcome.contains("left to refund"),
        "{outcome}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(w.keys().len(), sends, "nothing sent again");
    assert_eq!(w.dead_letter_of(first.id).await.1, "open");
    let state: String = sqlx::query_scalar("SELECT state FROM provider_commands WHERE id = $1")
        .bind(first.id)
        .fetch_one(w.app.db.reader())
        .await
        .unwrap();
    assert_eq!(state, "failed");
    let outbox: String = sqlx::query_scalar(
        "SELECT status FROM outbox WHERE id = (SELECT outbox_id FROM provider_commands WHERE id = $1)",
    )
    .bind(first.id)
    .fetch_one(w.app.db.reader())
    .await
    .unwrap();
    assert_eq!(outbox, "dead");
    let refunds = w.provider_refunds(&pi).await;
    assert_eq!(
        refunds.iter().map(|r| r.amount).sum::<i64>(),
        1 + elsewhere,
        "{refunds:?}"
    );
    let recorded: String = sqlx::query_scalar(
        "SELECT outcome FROM redrives WHERE dead_letter_id = $1 ORDER BY id DESC LIMIT 1",
    )
    .bind(dead)
    .fetch_one(w.app.db.reader())
    .await
    .unwrap();
    assert_eq!(recorded, outcome);
    w.app.shutdown().await;
}

/// Issue 44, 3: the provider remembers an idempotency key for 24 hours. A refund it made
/// whose answer was lost, dead-lettered and redriven after that, is looked up by the
/// command named in its metadata and recorded instead of being made a second time.
async fn a_redrive_after_the_providers_key_memory_finds_the_refund_instead_of_making_another(
    kind: Kind,
) {
    let w = world(kind, |_| {}).await;
    let (order, pi, paid) = w.paid_order().await;
    // The provider makes the refund and the answer is lost; the retry is refused for good.
    w.proxy
        .script
        .lock()
        .unwrap()
        .extend([Mode::Lose, Mode::Refuse]);
    let amount = paid / 3;
    let command = ask(&w.app, &order, Some(amount)).await.unwrap();
    wait_for_state(&w.app, command.id, "failed", Duration::from_secs(20)).await;
    w.wait_refunded(&order, amount).await;
    let made = w.provider_refunds(&pi).await;
    assert_eq!(made.len(), 1, "{made:?}");

    // A day and an hour later, for both sides.
    let day = 25 * 3_600_000;
    sqlx::query(
        "UPDATE outbox SET created_at = created_at - $1 WHERE id = \
         (SELECT outbox_id FROM provider_commands WHERE id = $2)",
    )
    .bind(day)
    .bind(command.id)
    .execute(w.app.db.writer())
    .await
    .unwrap();
    sqlx::query("UPDATE provider_commands SET requested_at = requested_at - $1 WHERE id = $2")
        .bind(day)
        .bind(command.id)
        .execute(w.app.db.writer())
        .await
        .unwrap();
    w.sim.shared.db.age_keys(day).await.unwrap();
    let posts = w.keys().len();

    let (dead, _) = w.dead_letter_of(command.id).await;
    assert_eq!(w.redrive(dead).await, "requeued");
    wait_for_state(&w.app, command.id, "confirmed", Duration::from_secs(20)).await;
    let refunds = w.provider_refunds(&pi).await;
    assert_eq!(refunds.len(), 1, "one refund at the provider: {refunds:?}");
    assert_eq!(w.keys().len(), posts, "no second POST /v1/refunds");
    let found: Option<String> =
        sqlx::query_scalar("SELECT provider_object_id FROM provider_commands WHERE id = $1")
            .bind(command.id)
            .fetch_one(w.app.db.reader())
            .await
            .unwrap();
    assert_eq!(found.as_deref(), Some(made[0].id.as_str()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    w.wait_refunded(&order, amount).await;
    w.app.shutdown().await;
}

#[allow(clippy::too_many_arguments)]
fn dispute_object(
    id: &str,
    kind: &str,
    pi: &str,
    dp: &str,
    amount: i64,
    status: &str,
    refundable: bool,
    created: i64,
) -> serde_json::Value {
    serde_json::json!({
        "id": id, "object": "event", "api_version": "2024-06-20", "created": created,
        "livemode": false, "pending_webhooks": 1, "type": kind,
        "request": {"id": null, "idempotency_key": null},
        "data": {"object": {
            "id": dp, "object": "dispute", "amount": amount, "currency": "eur",
            "charge": format!("ch_{pi}"), "payment_intent": pi, "reason": "fraudulent",
            "status": status, "is_charge_refundable": refundable, "metadata": {},
        }},
    })
}

/// Issue 44, 4: the provider does not refund a disputed charge while the dispute says
/// `is_charge_refundable: false` (open, or lost: the money already went back). The
/// disputed amount is not offered, the request path refuses it, and the page says why.
async fn a_disputed_amount_is_not_refundable_when_the_provider_says_so(kind: Kind) {
    let app = paid_app(kind, 21200).await;
    for (id, pi, order, amount) in [
        ("evt_pay_2", "pi_2", "ord-2", 10000),
        ("evt_pay_3", "pi_3", "ord-3", 10000),
    ] {
        app.post_stripe(&payment_intent_succeeded(id, pi, order, amount, T10_00))
            .await;
    }
    let events = [
        // ord-1: all of it disputed, then lost.
        dispute_object(
            "evt_dp_1",
            "charge.dispute.created",
            "pi_1",
            "dp_1",
            21200,
            "needs_response",
            false,
            T10_00 + 60,
        ),
        dispute_object(
            "evt_dp_1_lost",
            "charge.dispute.closed",
            "pi_1",
            "dp_1",
            21200,
            "lost",
            false,
            T10_00 + 120,
        ),
        // ord-2: 40.00 of 100.00 disputed and open.
        dispute_object(
            "evt_dp_2",
            "charge.dispute.created",
            "pi_2",
            "dp_2",
            4000,
            "needs_response",
            false,
            T10_00 + 60,
        ),
        // ord-3: an inquiry the provider still lets the merchant refund.
        dispute_object(
            "evt_dp_3",
            "charge.dispute.created",
            "pi_3",
            "dp_3",
            4000,
            "warning_needs_response",
            true,
            T10_00 + 60,
        ),
    ];
    for e in &events {
        assert_eq!(app.post_stripe(e).await.status(), 200);
    }
    app.process().await;
    let disputed: i64 =
        sqlx::query_scalar("SELECT amount_disputed FROM orders WHERE order_id = 'ord-1'")
            .fetch_one(app.db.reader())
            .await
            .unwrap();
    assert_eq!(disputed, 21200);

    let all = ask(&app, "ord-1", None).await.unwrap_err();
    assert!(
        matches!(&all, AppError::Conflict(m) if m.contains("disputed")),
        "{all:?}"
    );
    let one = ask(&app, "ord-1", Some(1)).await.unwrap_err();
    assert!(
        matches!(&one, AppError::Conflict(m) if m.contains("disputed")),
        "{one:?}"
    );
    let over = ask(&app, "ord-2", Some(6001)).await.unwrap_err();
    assert!(
        matches!(&over, AppError::Conflict(m) if m.contains("disputed")),
        "{over:?}"
    );
    assert_eq!(stored(&app).await, (0, 0, 0), "nothing stored");
    assert_eq!(ask(&app, "ord-2", None).await.unwrap().amount, 6000);
    assert_eq!(ask(&app, "ord-3", None).await.unwrap().amount, 10000);
    assert_eq!(
        app.count("SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) FROM provider_commands")
            .await,
        16000
    );

    let operator = app.sign_in("otto", Role::Operator).await;
    let (status, html) = app.page("/orders/ord-1", &operator).await;
    assert_eq!(status, 200);
    assert!(!html.contains("212.00 EUR left to refund"), "{html}");
    assert!(!html.contains("id=\"refund-form\""));
    assert!(
        html.contains("disputed: the provider does not allow a refund of a disputed charge"),
        "{html}"
    );
    app.shutdown().await;
}
