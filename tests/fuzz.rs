//! Property-based fuzzing of everything that reads untrusted or hand-written input: the
//! signature header parsers, the JSON-pointer extraction of every mapping field, and the
//! configuration loader. Each case must not panic, must finish quickly and must give a
//! clear error (400/401 for signatures, an error value elsewhere).
//!
//! The normal suite runs a modest number of cases; a soak runs many more:
//! `PROPTEST_CASES=20000 cargo test --release --test fuzz`.

use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use oncehook::config::{Overrides, Settings};
use oncehook::provider::mapping::{standard_webhooks_default, stripe_default};
use oncehook::provider::signature::{SchemeKind, Verifier};
use proptest::prelude::*;
use serde_json::{json, Value};

const NOW: i64 = 1_700_000_000;
const STRIPE_SECRET: &str = "whsec_fuzz_0123456789";
const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn config() -> ProptestConfig {
    // PROPTEST_CASES overrides this default, for the soak.
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(256),
        ..ProptestConfig::default()
    }
}

/// Header values as an attacker may send them: any bytes a header can carry.
fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Printable ASCII, the common case, up to well past the 4 KiB cap.
        proptest::collection::vec(0x20u8..0x7f, 0..6000),
        // Bytes HeaderValue accepts (visible ASCII, tab, obs-text).
        proptest::collection::vec(
            prop_oneof![Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff],
            0..300
        ),
    ]
}

/// Stripe-shaped headers built from fragments, so parsing gets past its first checks.
fn stripe_header() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        (any::<i64>()).prop_map(|t| format!("t={t}")),
        Just(format!("t={NOW}")),
        "[0-9a-f]{0,70}".prop_map(|h| format!("v1={h}")),
        "[ -~]{0,20}".prop_map(|v| format!("v0={v}")),
        "[ -~]{0,12}",
        Just("v1=".to_string()),
    ];
    proptest::collection::vec(part, 0..20).prop_map(|parts| parts.join(","))
}

fn sw_signature_header() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        "[A-Za-z0-9+/=]{0,60}".prop_map(|b| format!("v1,{b}")),
        Just("v1,".to_string()),
        "[ -~]{0,12}",
    ];
    proptest::collection::vec(part, 0..20).prop_map(|parts| parts.join(" "))
}

fn check_signature_outcome(
    result: Result<
        oncehook::provider::signature::Verified,
        oncehook::provider::signature::SignatureError,
    >,
    started: Instant,
) {
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "verification took {:?}",
        started.elapsed()
    );
    if let Err(e) = result {
        assert!(
            matches!(
                e.status(),
                StatusCode::BAD_REQUEST | StatusCode::UNAUTHORIZED
            ),
            "{e}"
        );
        assert!(!e.to_string().is_empty());
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn stripe_signature_headers_never_panic(
        raw in header_value(),
        structured in stripe_header(),
        body in proptest::collection::vec(any::<u8>(), 0..2048),
    ) {
        let verifier = Verifier::new(SchemeKind::Stripe, &[STRIPE_SECRET.into()], 300).unwrap();
        for value in [raw, structured.into_bytes()] {
            let Ok(value) = HeaderValue::from_bytes(&value) else { continue };
            let mut headers = HeaderMap::new();
            headers.insert("stripe-signature", value);
            let started = Instant::now();
            let result = verifier.verify(&headers, None, &body, NOW);
            check_signature_outcome(result, started);
        }
    }

    #[test]
    fn standard_webhooks_headers_never_panic(
        id in header_value(),
        timestamp in prop_oneof![Just(NOW.to_string()), "[ -~]{0,24}"],
        signature in prop_oneof![sw_signature_header(), "[ -~]{0,200}"],
        body in proptest::collection::vec(any::<u8>(), 0..2048),
    ) {
        let verifier =
            Verifier::new(SchemeKind::StandardWebhooks, &[SW_SECRET.into()], 300).unwrap();
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("webhook-id", id),
            ("webhook-timestamp", timestamp.into_bytes()),
            ("webhook-signature", signature.into_bytes()),
        ] {
            if let Ok(value) = HeaderValue::from_bytes(&value) {
                headers.insert(name, value);
            }
        }
        let started = Instant::now();
        let result = verifier.verify(&headers, None, &body, NOW);
        check_signature_outcome(result, started);
    }

    /// Every preset of the generic scheme, with arbitrary signature headers, extra
    /// headers and query strings: an error or a pass, never a panic.
    #[test]
    fn generic_scheme_presets_never_panic(
        signature in prop_oneof![
            "[ -~]{0,200}",
            "ts=[0-9]{1,14},v1=[0-9a-f]{0,70}",
            "(ts=[0-9]{0,3},?|v1=[ -+\\--~]{0,8},?){0,12}",
        ],
        request_id in "[ -~]{0,60}",
        query in "[ -~]{0,120}",
        body in proptest::collection::vec(any::<u8>(), 0..1024),
    ) {
        for (scheme, header) in [
            (SchemeKind::MercadoPago, "x-signature"),
            (SchemeKind::PagBank, "x-authenticity-token"),
            (SchemeKind::Asaas, "asaas-access-token"),
            (SchemeKind::EfiPix, "x-unused"),
        ] {
            let verifier = Verifier::new(scheme, &["a-secret-of-16-bytes".into()], 300).unwrap();
            let mut headers = HeaderMap::new();
            for (name, value) in [(header, signature.as_bytes()), ("x-request-id", request_id.as_bytes())] {
                if let Ok(value) = HeaderValue::from_bytes(value) {
                    headers.insert(name, value);
                }
            }
            let started = Instant::now();
            let result = verifier.verify(&headers, Some(&query), &body, NOW);
            check_signature_outcome(result, started);
        }
    }
}

/// Arbitrary JSON values, nested a few levels.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "[ -~]{0,20}".prop_map(Value::from),
        Just(Value::from("2024-06-20")),
        Just(Value::from("2024-01-02T03:04:05Z")),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z_]{1,12}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A realistic Stripe event with one field replaced by an arbitrary value: every JSON
/// pointer of the mapping meets wrong types, missing keys and odd nesting.
fn mutated_stripe_event() -> impl Strategy<Value = Value> {
    let types = prop_oneof![
        Just("payment_intent.succeeded"),
        Just("payment_intent.amount_capturable_updated"),
        Just("invoice.paid"),
        Just("invoice.payment_succeeded"),
        Just("charge.refunded"),
        Just("refund.created"),
        Just("charge.dispute.created"),
        Just("payment_intent.payment_failed"),
        Just("payment_intent.canceled"),
    ];
    let paths = prop_oneof![
        Just(vec!["id"]),
        Just(vec!["created"]),
        Just(vec!["api_version"]),
        Just(vec!["type"]),
        Just(vec!["data"]),
        Just(vec!["data", "object"]),
        Just(vec!["data", "object", "id"]),
        Just(vec!["data", "object", "amount"]),
        Just(vec!["data", "object", "amount_received"]),
        Just(vec!["data", "object", "currency"]),
        Just(vec!["data", "object", "metadata"]),
        Just(vec!["data", "object", "metadata", "order_id"]),
        Just(vec!["data", "object", "payment_intent"]),
        Just(vec!["data", "object", "payments"]),
        Just(vec!["data", "object", "refunds"]),
        Just(vec!["data", "object", "charge"]),
    ];
    (types, paths, json_value()).prop_map(|(event_type, path, value)| {
        let mut event = json!({
            "id": "evt_fuzz",
            "object": "event",
            "api_version": "2024-06-20",
            "created": 1_700_000_000,
            "type": event_type,
            "data": {"object": {
                "id": "pi_fuzz",
                "object": "payment_intent",
                "amount": 4200,
                "amount_received": 4200,
                "currency": "eur",
                "payment_intent": "pi_fuzz",
                "charge": "ch_fuzz",
                "metadata": {"order_id": "order-fuzz"},
                "payments": {"data": [{"payment": {"payment_intent": "pi_fuzz"}}]},
                "refunds": {"data": [{"id": "re_fuzz", "amount": 100, "created": 1_700_000_001}]}
            }}
        });
        let mut slot = &mut event;
        for key in &path[..path.len() - 1] {
            slot = &mut slot[*key];
        }
        slot[path[path.len() - 1]] = value;
        event
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mapping_arbitrary_bodies_never_panics(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
        value in json_value(),
    ) {
        for mapping in [stripe_default(), standard_webhooks_default()] {
            let _ = mapping.map(&bytes);
            let _ = mapping.map(value.to_string().as_bytes());
            let doc = serde_json::from_slice::<Value>(&bytes).ok();
            let _ = mapping.envelope(doc.as_ref(), None);
        }
    }

    #[test]
    fn mapping_mutated_stripe_events_gives_an_event_or_an_error(event in mutated_stripe_event()) {
        let started = Instant::now();
        let body = event.to_string();
        match stripe_default().map(body.as_bytes()) {
            Ok(mapped) => {
                // Whatever it read, what it returns is usable: a non-empty reference.
                prop_assert!(!mapped.external_ref.is_empty());
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        prop_assert!(started.elapsed() < Duration::from_millis(100));
    }

    #[test]
    fn mapping_standard_webhooks_events_gives_an_event_or_an_error(
        event_type in prop_oneof![
            Just("payment.succeeded".to_string()), Just("payment.authorized".to_string()),
            Just("refund.succeeded".to_string()),
            Just("dispute.created".to_string()), Just("payment.canceled".to_string()),
            "[a-z.]{0,20}"
        ],
        data in json_value(),
        timestamp in json_value(),
    ) {
        let body = json!({"type": event_type, "timestamp": timestamp, "data": data}).to_string();
        if let Err(e) = standard_webhooks_default().map(body.as_bytes()) {
            prop_assert!(!e.to_string().is_empty());
        }
    }
}

/// TOML-ish text: real keys and sections with arbitrary values, and plain noise.
fn config_text() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("database_url".to_string()),
        Just("listen".to_string()),
        Just("admin_listen".to_string()),
        Just("data_dir".to_string()),
        Just("[receiver]\nmax_body_bytes".to_string()),
        Just("[processor]\nworkers".to_string()),
        Just("[server]\nmax_connections".to_string()),
        Just("[log]\nformat".to_string()),
        Just("[sinks.x]\nkind".to_string()),
        Just("[[providers]]\nname".to_string()),
        Just("[retention]\ninbox_days".to_string()),
        "[a-z_]{1,10}",
    ];
    let value = prop_oneof![
        "\"[ -~&&[^\"\\\\]]{0,30}\"",
        any::<i64>().prop_map(|n| n.to_string()),
        Just("true".to_string()),
        Just("[1, \"a\"]".to_string()),
        Just("{ a = 1 }".to_string()),
        "[ -~]{0,20}",
    ];
    prop_oneof![
        proptest::collection::vec((key, value), 0..6).prop_map(|kv| {
            kv.iter()
                .map(|(k, v)| format!("{k} = {v}\n"))
                .collect::<String>()
        }),
        "[ -~\n]{0,300}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: config().cases.min(512), ..config() })]

    #[test]
    fn the_config_loader_gives_settings_or_a_clear_error(text in config_text()) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("oncehook.toml");
        std::fs::write(&file, &text).unwrap();
        let started = Instant::now();
        match Settings::load(Some(&file), &Overrides::default()) {
            Ok(settings) => {
                let _ = settings.check();
                let _ = settings.to_redacted_toml();
            }
            Err(e) => {
                let text = format!("{e:#}");
                prop_assert!(!text.is_empty());
            }
        }
        prop_assert!(started.elapsed() < Duration::from_millis(500));
    }
}
