//! The Brazilian presets and the generic scheme through the path a user takes: a TOML
//! config file loaded by the real binary, webhooks posted over HTTP as the providers send
//! them. Each accepted one is stored once; a tampered one is refused and stores nothing.

mod common;

use common::binary::Binary;
use common::{Kind, TestDb};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

const CONFIG: &str = r#"
[[providers]]
name = "mercadopago"
scheme = "mercadopago"
secrets = ["mp-webhook-secret-0123"]

[[providers]]
name = "pagbank"
scheme = "pagbank"
secrets = ["pagbank-account-token-0123"]

[[providers]]
name = "asaas"
scheme = "asaas"
secrets = ["asaas-access-token-0123"]

[[providers]]
name = "acme"
scheme = "generic"
secrets = ["acme-signing-key-0123"]
[providers.signature]
source = "header:x-acme-signature"
algorithm = "hmac-sha256"
encoding = "base64"
signature_field = "sig"
timestamp_field = "t"
signed = "{ts}:{header:x-acme-delivery}:{body}"
"#;

fn hmac_hex(key: &str, content: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(content.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

async fn stored(db: &TestDb, provider: &str) -> Vec<String> {
    let db = db.connect().await;
    let ids = sqlx::query_scalar(
        "SELECT event_id FROM inbox_events WHERE provider = $1 ORDER BY event_id",
    )
    .bind(provider)
    .fetch_all(db.reader())
    .await
    .unwrap();
    db.close().await;
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_preset_and_a_generic_scheme_accept_their_providers_signatures_and_refuse_tampering() {
    let db = TestDb::new(Kind::Sqlite).await;
    let server = Binary::start(&db, CONFIG).await;
    let http = reqwest::Client::new();
    let now = chrono::Utc::now().timestamp();

    // Mercado Pago: a thin notification; the manifest covers data.id from the query string.
    let mp_body = r#"{"id":12345678901,"live_mode":false,"type":"payment","date_created":"2026-12-06T10:00:00.000-03:00","user_id":44444,"api_version":"v1","action":"payment.updated","data":{"id":"987654321"}}"#;
    let mp = |data_id: &str, body: &'static str, tamper: bool| {
        let request_id = "8f0c6c6e-1f54-4a41-a4b6-54c5b1a4e3c2";
        let mut tag = hmac_hex(
            "mp-webhook-secret-0123",
            &format!("id:987654321;request-id:{request_id};ts:{now};"),
        );
        if tamper {
            tag.replace_range(0..1, if tag.starts_with('0') { "1" } else { "0" });
        }
        http.post(format!(
            "{}/webhooks/mercadopago?data.id={data_id}&type=payment",
            server.base
        ))
        .header("x-signature", format!("ts={now},v1={tag}"))
        .header("x-request-id", request_id)
        .header("content-type", "application/json")
        .body(body)
        .send()
    };
    assert_eq!(mp("987654321", mp_body, false).await.unwrap().status(), 200);
    assert_eq!(
        mp("987654321", mp_body, false).await.unwrap().status(),
        200,
        "a redelivery"
    );
    assert_eq!(mp("987654321", mp_body, true).await.unwrap().status(), 401);
    assert_eq!(
        mp("987654322", mp_body, false).await.unwrap().status(),
        401,
        "another payment's id"
    );
    assert_eq!(stored(&db, "mercadopago").await, ["12345678901"]);

    // PagBank: SHA-256 of "<token>-<raw body>".
    let pb_body = r#"{"id":"ORDE_5F4E1B2C","reference_id":"order-77","charges":[{"id":"CHAR_1","status":"PAID","amount":{"value":1500,"currency":"BRL"}}]}"#;
    let pb_token = hex::encode(Sha256::digest(format!(
        "pagbank-account-token-0123-{pb_body}"
    )));
    let post_pb = |body: String, token: String| {
        http.post(format!("{}/webhooks/pagbank", server.base))
            .header("x-authenticity-token", token)
            .body(body)
            .send()
    };
    assert_eq!(
        post_pb(pb_body.into(), pb_token.clone())
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        post_pb(pb_body.replace("1500", "15000"), pb_token)
            .await
            .unwrap()
            .status(),
        401,
        "the amount was changed"
    );
    // A PagBank notification is the order itself, without an id of its own: its hash is.
    let pagbank = stored(&db, "pagbank").await;
    assert_eq!(pagbank.len(), 1);
    assert!(pagbank[0].starts_with("sha256:"), "{pagbank:?}");

    // Asaas: the access token chosen when the webhook was created.
    let asaas_body = r#"{"id":"evt_05b708f961d739ea7eba7e4db318f621&368604920","event":"PAYMENT_RECEIVED","dateCreated":"2026-12-06 10:00:00","payment":{"object":"payment","id":"pay_080225913252","value":100.0,"externalReference":"order-78","billingType":"PIX","status":"RECEIVED"}}"#;
    for (token, status) in [
        ("asaas-access-token-0123", 200),
        ("asaas-access-token-0124", 401),
        ("", 401),
    ] {
        let r = http
            .post(format!("{}/webhooks/asaas", server.base))
            .header("asaas-access-token", token)
            .body(asaas_body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status, "token {token:?}");
    }
    assert_eq!(
        stored(&db, "asaas").await,
        ["evt_05b708f961d739ea7eba7e4db318f621&368604920"]
    );

    // A provider described only in the config file.
    use base64::Engine;
    let acme_body = r#"{"id":"acme_1","type":"charge.paid"}"#;
    let mut mac = Hmac::<Sha256>::new_from_slice(b"acme-signing-key-0123").unwrap();
    mac.update(format!("{now}:dlv_9:{acme_body}").as_bytes());
    let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    for (delivery, status) in [("dlv_9", 200), ("dlv_8", 401)] {
        let r = http
            .post(format!("{}/webhooks/acme", server.base))
            .header("x-acme-signature", format!("t={now},sig={sig}"))
            .header("x-acme-delivery", delivery)
            .body(acme_body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status, "delivery {delivery}");
    }
    let missing = http
        .post(format!("{}/webhooks/acme", server.base))
        .body(acme_body)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 400);
    assert!(missing
        .text()
        .await
        .unwrap()
        .contains("missing x-acme-signature"));
    assert_eq!(stored(&db, "acme").await, ["acme_1"]);
    server.stop();
}

/// A config whose generic scheme checks nothing, or that gives a preset a signature
/// table, is refused at start with a message naming the provider.
#[test]
fn a_scheme_that_would_check_nothing_does_not_start() {
    for (config, expected) in [
        (
            "[[providers]]\nname = \"weak\"\nscheme = \"generic\"\nsecrets = [\"0123456789abcdef\"]\n[providers.signature]\nsource = \"x-sig\"\nalgorithm = \"sha256\"\nsigned = \"{body}\"\n",
            "{secret}",
        ),
        (
            "[[providers]]\nname = \"mp\"\nscheme = \"mercadopago\"\nsecrets = [\"0123456789abcdef\"]\n[providers.signature]\nsource = \"x-sig\"\nalgorithm = \"token\"\n",
            "is for scheme \"generic\"",
        ),
        (
            "[[providers]]\nname = \"bare\"\nscheme = \"generic\"\nsecrets = [\"0123456789abcdef\"]\n",
            "needs a [providers.signature] table",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("oncehook.toml");
        std::fs::write(&path, config).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
            .args(["config", "check", "--config"])
            .arg(&path)
            .env_remove("ONCEHOOK_CONFIG")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{config}");
        assert!(stderr.contains(expected), "{stderr}");
    }
}

fn trigger(config: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .arg("trigger")
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("ONCEHOOK_CONFIG")
        .env_remove("ONCEHOOK_TRIGGER_SECRET")
        .output()
        .unwrap()
}

/// `oncehook trigger` signs as each configured provider does: the server accepts each
/// event once; Stripe's Pix payment becomes a paid order of R$ 5,00; a wrong secret is
/// refused and the command says so with a non-zero exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trigger_command_sends_what_each_provider_would() {
    let db = TestDb::new(Kind::Sqlite).await;
    let server = Binary::start(
        &db,
        &("[processor]\npoll_interval_ms = 50\n".to_owned() + CONFIG),
    )
    .await;
    let config = server.dir.path().join("oncehook.toml");
    for (provider, event) in [
        ("mercadopago", "pix.paid"),
        ("pagbank", "pix.paid"),
        ("asaas", "boleto.paid"),
        ("asaas", "pix.expired"),
        ("stripe", "pix.paid"),
    ] {
        let url = format!("{}/webhooks/{provider}", server.base);
        let order = format!("order-{provider}-{event}");
        let out = trigger(
            &config,
            &[
                event,
                "--provider",
                provider,
                "--url",
                &url,
                "--order",
                &order,
            ],
        );
        assert!(
            out.status.success(),
            "{provider} {event}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("200 OK"));
    }
    for provider in ["mercadopago", "pagbank", "stripe"] {
        assert_eq!(stored(&db, provider).await.len(), 1, "{provider}");
    }
    assert_eq!(stored(&db, "asaas").await.len(), 2);

    // Each provider's built-in mapping turns its payment into the order's money: R$ 5,00.
    let store = db.connect().await;
    let order = |id: &'static str| {
        let store = store.clone();
        async move {
            for _ in 0..100 {
                let row = sqlx::query_as::<_, (String, i64, String)>(
                    "SELECT status, amount_paid, currency FROM orders WHERE order_id = $1",
                )
                .bind(id)
                .fetch_optional(store.reader())
                .await
                .unwrap();
                if row.is_some() {
                    return row;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            None
        }
    };
    for id in [
        "order-stripe-pix.paid",
        "order-asaas-boleto.paid",
        "order-pagbank-pix.paid",
    ] {
        assert_eq!(
            order(id).await,
            Some(("paid".into(), 500, "BRL".into())),
            "{id}"
        );
    }
    assert_eq!(
        order("order-asaas-pix.expired").await.map(|o| o.0),
        Some("failed".into()),
        "a Pix QR that expired unpaid"
    );
    // Mercado Pago's notification is thin: stored, not yet an order (issue 45).
    assert_eq!(order("order-mercadopago-pix.paid").await, None);
    store.close().await;

    let url = format!("{}/webhooks/asaas", server.base);
    let out = trigger(
        &config,
        &[
            "pix.paid",
            "--provider",
            "asaas",
            "--scheme",
            "asaas",
            "--secret",
            "not-the-asaas-token",
            "--url",
            &url,
        ],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("401"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("answered 401"));
    server.stop();
}

/// A Mercado Pago API in the test: `GET /v1/payments/{id}` answers the payment the test
/// set for that id (500 while `down`), and counts the calls.
#[derive(Clone, Default)]
struct FakeMercadoPago {
    payments:
        std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, serde_json::Value>>>,
    down: std::sync::Arc<std::sync::atomic::AtomicBool>,
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl FakeMercadoPago {
    async fn serve(&self) -> String {
        use axum::extract::{Path, State};
        use axum::http::{HeaderMap, StatusCode};
        async fn payment(
            State(api): State<FakeMercadoPago>,
            Path(id): Path<String>,
            headers: HeaderMap,
        ) -> (StatusCode, String) {
            api.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if headers.get("authorization").and_then(|v| v.to_str().ok())
                != Some("Bearer APP_USR-test-access-token")
            {
                return (StatusCode::UNAUTHORIZED, "{}".into());
            }
            if api.down.load(std::sync::atomic::Ordering::SeqCst) {
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "{\"message\":\"down\"}".into(),
                );
            }
            match api.payments.lock().unwrap().get(&id) {
                Some(p) => (StatusCode::OK, p.to_string()),
                None => (StatusCode::NOT_FOUND, "{\"message\":\"not found\"}".into()),
            }
        }
        let app = axum::Router::new()
            .route("/v1/payments/{id}", axum::routing::get(payment))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        base
    }

    fn set(&self, id: &str, status: &str, refunded: f64) {
        self.payments.lock().unwrap().insert(
            id.into(),
            serde_json::json!({
                "id": id.parse::<u64>().unwrap(), "status": status,
                "status_detail": "accredited", "payment_method_id": "pix",
                "payment_type_id": "bank_transfer", "currency_id": "BRL",
                "transaction_amount": 5.5, "transaction_amount_refunded": refunded,
                "external_reference": format!("order-mp-{id}"),
                "date_created": "2026-12-06T10:00:00.000-03:00",
                "date_last_updated": format!("2026-12-06T10:0{}:00.000-03:00", if status == "approved" { 1 } else { 2 }),
            }),
        );
    }
}

/// Signs and posts a Mercado Pago notification of payment `data_id` (notification `id`).
async fn post_mp(base: &str, id: u64, data_id: &str, topic: &str) -> reqwest::Response {
    let now = chrono::Utc::now().timestamp();
    let request_id = uuid::Uuid::new_v4().to_string();
    let tag = hmac_hex(
        "mp-webhook-secret-0123",
        &format!("id:{data_id};request-id:{request_id};ts:{now};"),
    );
    let body = serde_json::json!({
        "id": id, "live_mode": false, "type": topic, "action": format!("{topic}.updated"),
        "api_version": "v1", "date_created": "2026-12-06T10:00:00.000-03:00",
        "data": { "id": data_id },
    });
    reqwest::Client::new()
        .post(format!(
            "{base}/webhooks/mercadopago?data.id={data_id}&type={topic}"
        ))
        .header("x-signature", format!("ts={now},v1={tag}"))
        .header("x-request-id", request_id)
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

async fn order_state(db: &TestDb, order: &str) -> Option<(String, i64, i64)> {
    let store = db.connect().await;
    let mut row = None;
    for _ in 0..100 {
        row = sqlx::query_as(
            "SELECT status, amount_paid, amount_refunded FROM orders WHERE order_id = $1",
        )
        .bind(order)
        .fetch_optional(store.reader())
        .await
        .unwrap();
        if row.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    store.close().await;
    row
}

/// Mercado Pago's thin notifications: the receiver fetches the payment each names, the
/// processor maps it: a Pix payment of R$ 5,50 becomes a paid order, its refund a refunded
/// one; while the API fails the notification is refused with 503 and nothing is stored,
/// and its retry lands once; a notification of another topic is kept without a fetch.
async fn mercado_pago_notifications_are_completed_from_its_api(kind: Kind) {
    let api = FakeMercadoPago::default();
    let api_base = api.serve().await;
    let db = TestDb::new(kind).await;
    let config = format!(
        "[processor]\npoll_interval_ms = 50\n[[providers]]\nname = \"mercadopago\"\nscheme = \"mercadopago\"\nsecrets = [\"mp-webhook-secret-0123\"]\napi_key = \"APP_USR-test-access-token\"\napi_base = \"{api_base}\"\napi_retry = {{ base_ms = 20, cap_ms = 50, max_attempts = 2, max_retry_after_ms = 100 }}\n"
    );
    let server = Binary::start(&db, &config).await;

    api.set("1001", "approved", 0.0);
    assert_eq!(
        post_mp(&server.base, 1, "1001", "payment").await.status(),
        200
    );
    assert_eq!(
        post_mp(&server.base, 1, "1001", "payment").await.status(),
        200,
        "redelivered"
    );
    assert_eq!(
        order_state(&db, "order-mp-1001").await,
        Some(("paid".into(), 550, 0))
    );

    api.set("1002", "approved", 0.0);
    api.down.store(true, std::sync::atomic::Ordering::SeqCst);
    let refused = post_mp(&server.base, 2, "1002", "payment").await;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "30");
    assert_eq!(
        stored(&db, "mercadopago").await,
        ["1"],
        "nothing stored while refused"
    );
    api.down.store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        post_mp(&server.base, 2, "1002", "payment").await.status(),
        200
    );
    assert_eq!(
        order_state(&db, "order-mp-1002").await,
        Some(("paid".into(), 550, 0))
    );

    // The same payment refunded: a new notification, the fetched payment's new status.
    api.set("1001", "refunded", 5.5);
    assert_eq!(
        post_mp(&server.base, 3, "1001", "payment").await.status(),
        200
    );
    let mut refunded = None;
    for _ in 0..100 {
        refunded = order_state(&db, "order-mp-1001").await;
        if refunded.as_ref().is_some_and(|o| o.0 == "refunded") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(refunded, Some(("refunded".into(), 550, 550)));

    let calls = api.calls.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        post_mp(&server.base, 4, "777", "merchant_order")
            .await
            .status(),
        200
    );
    assert_eq!(
        api.calls.load(std::sync::atomic::Ordering::SeqCst),
        calls,
        "no fetch"
    );
    assert_eq!(stored(&db, "mercadopago").await, ["1", "2", "3", "4"]);
    server.stop();
}

/// One notification is one delivery, however many facts its payment holds: a payment paid
/// and then partly refunded, announced twice, is stored as the notification and its
/// derived facts, but the delivery log (what the order page lists and the duplicate rate
/// counts) holds the provider's two requests, the second a duplicate, and nothing more.
async fn a_notification_is_one_delivery_however_many_facts_its_payment_holds(kind: Kind) {
    let api = FakeMercadoPago::default();
    let api_base = api.serve().await;
    api.payments.lock().unwrap().insert(
        "3001".into(),
        serde_json::json!({
            "id": 3001u64, "status": "approved", "status_detail": "partially_refunded",
            "payment_method_id": "pix", "payment_type_id": "bank_transfer",
            "currency_id": "BRL", "transaction_amount": 20.0,
            "transaction_amount_refunded": 5.0, "external_reference": "order-mp-3001",
            "date_created": "2026-12-06T10:00:00.000-03:00",
            "date_approved": "2026-12-06T10:01:00.000-03:00",
            "date_last_updated": "2026-12-06T10:05:00.000-03:00",
            "refunds": [{ "id": 91, "amount": 5.0, "status": "approved",
                          "date_created": "2026-12-06T10:05:00.000-03:00" }],
        }),
    );
    let db = TestDb::new(kind).await;
    let config = format!(
        "[processor]\npoll_interval_ms = 50\n[[providers]]\nname = \"mercadopago\"\nscheme = \"mercadopago\"\nsecrets = [\"mp-webhook-secret-0123\"]\napi_key = \"APP_USR-test-access-token\"\napi_base = \"{api_base}\"\n"
    );
    let server = Binary::start(&db, &config).await;
    for _ in 0..2 {
        assert_eq!(
            post_mp(&server.base, 7, "3001", "payment").await.status(),
            200
        );
    }
    let mut state = None;
    for _ in 0..100 {
        state = order_state(&db, "order-mp-3001").await;
        if state.as_ref().is_some_and(|o| o.1 == 2000 && o.2 == 500) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(state, Some(("partially_refunded".into(), 2000, 500)));
    let events = stored(&db, "mercadopago").await;
    assert!(
        events.len() > 1,
        "the facts are stored as events: {events:?}"
    );
    let store = db.connect().await;
    let deliveries: Vec<(String, i64)> = sqlx::query_as(
        "SELECT event_id, duplicate FROM deliveries WHERE provider = 'mercadopago' ORDER BY id",
    )
    .fetch_all(store.reader())
    .await
    .unwrap();
    store.close().await;
    assert_eq!(deliveries, [("7".to_string(), 0), ("7".to_string(), 1)]);
    server.stop();
}

both!(
    mercado_pago_notifications_are_completed_from_its_api,
    a_notification_is_one_delivery_however_many_facts_its_payment_holds
);
