//! The simulator's Stripe-compatible API, driven over HTTP by oncehook's own provider API
//! client (and by raw requests where the client would refuse to send what an attacker or a
//! buggy integration sends): paging, filters, expansion, the Idempotency-Key rules of
//! `POST /v1/refunds`, authentication, 429 and 5xx.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oncehook::config::ProviderApiSettings;
use oncehook::domain::retry::RetryPolicy;
use oncehook::provider::api::{ApiClient, CreateRefund, EventQuery};
use oncehook::provider::signature::{SchemeKind, Verifier};
use oncehook::simulator::run::{Options, Simulation};
use oncehook::simulator::scenario::Scenario;
use oncehook::simulator::sender::Target;
use oncehook::simulator::ApiFaults;

const KEY: &str = "sk_test_simulatorKEY0123456789";
const SECRET: &str = "whsec_simulator_test_secret_0123";

/// What a test receiver got: each request's headers and body.
type Received = Arc<Mutex<Vec<(axum::http::HeaderMap, Vec<u8>)>>>;

struct Running {
    sim: Arc<Simulation>,
    url: String,
}

async fn start(orders: usize, api: ApiFaults, target: Option<Target>) -> Running {
    let mut scenario = Scenario::builtin("steady").unwrap();
    scenario.api = api;
    // Faults of the webhook stream are not what these tests are about.
    scenario.faults = Default::default();
    let sim = Simulation::new(Options {
        seed: 7,
        orders,
        duration: Duration::ZERO,
        scenario_name: "steady".into(),
        scenario,
        start: None,
        database: "sqlite::memory:".into(),
        api_key: KEY.into(),
        target,
        provider: Default::default(),
    })
    .await
    .unwrap();
    sim.run(&|_, _| {}).await.unwrap();
    let sim = Arc::new(sim);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shared = sim.shared.clone();
    tokio::spawn(oncehook::simulator::serve_api(
        shared,
        listener,
        std::future::pending(),
    ));
    Running { sim, url }
}

fn client(url: &str) -> ApiClient {
    client_with_attempts(url, 8)
}

fn client_with_attempts(url: &str, max_attempts: i64) -> ApiClient {
    ApiClient::new(&ProviderApiSettings {
        base: url.into(),
        key: Some(KEY.into()),
        timeout_ms: 5_000,
        rate_per_sec: 10_000.0,
        retry: RetryPolicy {
            base_ms: 5,
            cap_ms: 50,
            max_attempts,
            max_retry_after_ms: 2_000,
        },
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_page_across_pages_with_filters() {
    let sim = start(200, ApiFaults::default(), None).await;
    let api = client(&sim.url);
    let all = api
        .event_pages(EventQuery::default())
        .collect()
        .await
        .unwrap();
    let generated = sim.sim.truth().await.unwrap().events.generated as usize;
    assert!(generated > 500, "200 orders make hundreds of events");
    assert_eq!(all.len(), generated, "every event, once");
    let ids: BTreeSet<&str> = all.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids.len(), all.len(), "no event on two pages");
    assert!(
        all.windows(2).all(|w| w[0].created >= w[1].created),
        "newest first"
    );
    assert!(all
        .iter()
        .all(|e| e.api_version.as_deref() == Some(oncehook::simulator::shapes::API_VERSION)));

    // A page of 100 says has_more; the next resumes after its last event.
    let first = api
        .events(&EventQuery {
            limit: Some(100),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(first.has_more);
    assert_eq!(first.data.len(), 100);
    let second = api
        .events(&EventQuery {
            limit: Some(100),
            starting_after: Some(first.data[99].id.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(second.data[0].id, all[100].id);
    // ending_before pages back towards newer events, still newest first.
    let back = api
        .events(&EventQuery {
            limit: Some(10),
            ending_before: Some(second.data[0].id.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    let expected: Vec<&str> = all[90..100].iter().map(|e| e.id.as_str()).collect();
    assert_eq!(
        back.data.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        expected
    );
    assert!(back.has_more, "90 newer events remain");

    // Reading forward from a checkpoint (what a reconciler does): every newer event once,
    // oldest first, in pages of 25, and the newest as the next checkpoint.
    let checkpoint = &all[120];
    let mut forward = api.events_after(
        &checkpoint.id,
        EventQuery {
            limit: Some(25),
            ..Default::default()
        },
    );
    let mut read = Vec::new();
    while let Some(page) = forward.next_page().await.unwrap() {
        assert!(page.len() <= 25);
        read.extend(page);
    }
    let newer: Vec<&str> = all[..120].iter().rev().map(|e| e.id.as_str()).collect();
    assert_eq!(
        read.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        newer
    );
    assert_eq!(forward.checkpoint(), all[0].id);
    let mut caught_up = api.events_after(&all[0].id, EventQuery::default());
    assert!(caught_up.next_page().await.unwrap().is_none());

    // types[] and created[gte] / created[gt].
    let types = vec!["refund.created".to_string(), "charge.dispute.closed".into()];
    let filtered = api
        .event_pages(EventQuery {
            types: types.clone(),
            limit: Some(7),
            ..Default::default()
        })
        .collect()
        .await
        .unwrap();
    let expected: Vec<&str> = all
        .iter()
        .filter(|e| types.contains(&e.event_type))
        .map(|e| e.id.as_str())
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(
        filtered.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        expected
    );
    let middle = all[all.len() / 2].created;
    let since = api
        .event_pages(EventQuery {
            created_gte: Some(middle),
            ..Default::default()
        })
        .collect()
        .await
        .unwrap();
    assert_eq!(
        since.len(),
        all.iter().filter(|e| e.created >= middle).count()
    );
    let after = api
        .event_pages(EventQuery {
            created_gt: Some(middle),
            ..Default::default()
        })
        .collect()
        .await
        .unwrap();
    assert_eq!(
        after.len(),
        all.iter().filter(|e| e.created > middle).count()
    );

    // One event by id, as listed.
    assert_eq!(api.event(&all[3].id).await.unwrap(), all[3]);
    // limit above 100 is refused, naming the parameter.
    let raw = reqwest::Client::new()
        .get(format!("{}/v1/events?limit=101", sim.url))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 400);
    let body: serde_json::Value = raw.json().await.unwrap();
    assert_eq!(body["error"]["param"], "limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_expand_and_list_as_stripe_does() {
    let sim = start(300, ApiFaults::default(), None).await;
    let api = client(&sim.url);
    let truth = sim.sim.truth().await.unwrap();
    let refunded = truth
        .orders
        .iter()
        .find(|o| o.refunds.len() == 2)
        .expect("an order with two refunds");
    let pi_id = &refunded.refunds[0].payment_intent;
    let pi = api.payment_intent(pi_id, true).await.unwrap();
    assert_eq!(pi.metadata["order_id"], refunded.order_id);
    let charge = pi
        .latest_charge
        .as_ref()
        .unwrap()
        .object()
        .expect("expanded");
    assert_eq!(charge.payment_intent.as_deref(), Some(pi_id.as_str()));
    let unexpanded = api.payment_intent(pi_id, false).await.unwrap();
    assert!(unexpanded.latest_charge.unwrap().object().is_none());

    let with_refunds = api.charge(&charge.id, true).await.unwrap();
    let listed = with_refunds.refunds.expect("expanded refunds");
    assert_eq!(listed.data.len(), 2);
    let refunds = api.refunds_of(pi_id).await.unwrap();
    let ids = |v: &[oncehook::provider::api::Refund]| {
        v.iter().map(|r| r.id.clone()).collect::<BTreeSet<_>>()
    };
    assert_eq!(ids(&refunds), ids(&listed.data));
    assert_eq!(
        ids(&refunds),
        refunded.refunds.iter().map(|r| r.id.clone()).collect()
    );
    // amount_refunded counts what has not failed.
    let holding: i64 = refunds
        .iter()
        .filter(|r| r.status.as_deref() != Some("failed"))
        .map(|r| r.amount)
        .sum();
    assert_eq!(with_refunds.amount_refunded, holding);

    let disputed = truth
        .orders
        .iter()
        .find(|o| !o.disputes.is_empty())
        .expect("a dispute in 300 orders");
    let d = api.dispute(&disputed.disputes[0].id).await.unwrap();
    assert_eq!(d.status, disputed.disputes[0].status);
    assert!(matches!(d.status.as_str(), "won" | "lost"));

    let missing = api.dispute("du_missing").await.unwrap_err();
    assert_eq!(missing.status(), Some(404));
    assert!(
        missing.to_string().contains("resource_missing"),
        "{missing}"
    );
}

fn paid_without_refunds(truth: &oncehook::simulator::truth::Truth) -> Vec<(String, i64)> {
    truth
        .orders
        .iter()
        .filter(|o| o.status == "paid" && o.refunds.is_empty() && o.payments.len() == 1)
        .map(|o| (o.payments[0].id.clone(), o.paid))
        .collect()
}

async fn post_refund(
    url: &str,
    key: &str,
    form: &[(&str, &str)],
) -> (u16, serde_json::Value, bool) {
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/refunds"))
        .bearer_auth(KEY)
        .header("Idempotency-Key", key)
        .form(form)
        .send()
        .await
        .unwrap();
    let replayed = r.headers().get("idempotent-replayed").is_some();
    (r.status().as_u16(), r.json().await.unwrap(), replayed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_follow_stripes_idempotency_rules() {
    let sim = start(
        100,
        ApiFaults {
            refund_latency_ms: 400,
            ..ApiFaults::default()
        },
        None,
    )
    .await;
    let api = client(&sim.url);
    let paid = paid_without_refunds(&sim.sim.truth().await.unwrap());
    let (pi, amount) = paid[0].clone();
    let params = CreateRefund {
        payment_intent: pi.clone(),
        amount: Some(amount / 2),
        reason: None,
        metadata: [("order_id".to_string(), "from-test".to_string())].into(),
    };
    let first = api.create_refund(&params, "key-one").await.unwrap();
    assert_eq!(
        (first.amount, first.status.as_deref()),
        (amount / 2, Some("succeeded"))
    );
    // Same key, same parameters: the first answer again, no second refund.
    let again = api.create_refund(&params, "key-one").await.unwrap();
    assert_eq!(again, first);
    assert_eq!(api.refunds_of(&pi).await.unwrap().len(), 1);
    let amount_text = (amount / 2).to_string();
    let (status, body, replayed) = post_refund(
        &sim.url,
        "key-one",
        &[
            ("payment_intent", pi.as_str()),
            ("amount", amount_text.as_str()),
            ("metadata[order_id]", "from-test"),
        ],
    )
    .await;
    assert_eq!(
        (status, body["id"].as_str(), replayed),
        (200, Some(first.id.as_str()), true)
    );

    // Same key, other parameters: idempotency_error, nothing refunded.
    let other = CreateRefund {
        amount: Some(1),
        ..params.clone()
    };
    let refused = api.create_refund(&other, "key-one").await.unwrap_err();
    assert_eq!(
        (refused.status(), refused.kind()),
        (Some(400), Some("idempotency_error"))
    );
    assert_eq!(api.refunds_of(&pi).await.unwrap().len(), 1);

    // An answer that was an error is replayed too (Stripe saves 4xx results).
    let too_much = CreateRefund {
        amount: Some(amount * 10),
        ..params.clone()
    };
    let e1 = api.create_refund(&too_much, "key-two").await.unwrap_err();
    let e2 = api.create_refund(&too_much, "key-two").await.unwrap_err();
    assert_eq!(e1, e2);
    assert_eq!(e1.status(), Some(400));

    // While the first request with a key runs, a second gets 409.
    let pi2 = paid[1].0.clone();
    let form = [("payment_intent", pi2.as_str())];
    let (a, b) = tokio::join!(post_refund(&sim.url, "key-three", &form), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        post_refund(&sim.url, "key-three", &form).await
    });
    assert_eq!(a.0, 200, "{:?}", a.1);
    assert_eq!(b.0, 409, "{:?}", b.1);
    assert_eq!(b.1["error"]["code"], "idempotency_key_in_use");
    // Once it finished, the same request is replayed.
    let c = post_refund(&sim.url, "key-three", &form).await;
    assert_eq!(
        (c.0, c.1["id"].clone(), c.2),
        (200, a.1["id"].clone(), true)
    );

    // Keys longer than 255 characters are refused.
    let long = "k".repeat(256);
    let (status, body, _) = post_refund(&sim.url, &long, &form).await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("255"),
        "{body}"
    );
    let ok_long = "k".repeat(255);
    let pi3 = paid[2].0.clone();
    let (status, _, _) = post_refund(&sim.url, &ok_long, &[("payment_intent", pi3.as_str())]).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_needs_its_key_bearer_or_basic() {
    let sim = start(5, ApiFaults::default(), None).await;
    let http = reqwest::Client::new();
    let url = format!("{}/v1/events", sim.url);
    assert_eq!(http.get(&url).send().await.unwrap().status(), 401);
    assert_eq!(
        http.get(&url)
            .bearer_auth("sk_test_wrong")
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        http.get(&url)
            .basic_auth(KEY, Some(""))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let wrong = ApiClient::new(&ProviderApiSettings {
        base: sim.url.clone(),
        key: Some("sk_test_wrong".into()),
        ..ProviderApiSettings::default()
    })
    .unwrap();
    let e = wrong.events(&EventQuery::default()).await.unwrap_err();
    assert_eq!(e.status(), Some(401));
    assert!(!e.is_transient(), "bad credentials are permanent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_and_server_errors_are_survived_by_the_client() {
    let always = start(
        5,
        ApiFaults {
            rate_429: 1.0,
            retry_after_secs: 7,
            ..ApiFaults::default()
        },
        None,
    )
    .await;
    let r = reqwest::Client::new()
        .get(format!("{}/v1/events", always.url))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "7");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limit");

    let flaky = start(
        150,
        ApiFaults {
            rate_429: 0.2,
            rate_5xx: 0.2,
            retry_after_secs: 0,
            ..ApiFaults::default()
        },
        None,
    )
    .await;
    // Pages of 10: dozens of requests, so both faults occur (0.8^60 < 1e-5 that one never
    // does), and every retried page still comes back whole. A page fails an attempt with
    // probability 0.4, so 8 attempts lost a page in about 4 % of runs (0.4^8 x 60+ pages);
    // 20 attempts make that 1e-8 x 60.
    let events = client_with_attempts(&flaky.url, 20)
        .event_pages(EventQuery {
            limit: Some(10),
            ..Default::default()
        })
        .collect()
        .await
        .unwrap();
    let truth = flaky.sim.truth().await.unwrap();
    assert!(truth.events.generated > 600, "{:?}", truth.events);
    assert_eq!(events.len() as u64, truth.events.generated);
    assert!(
        truth.api.answered_429 > 0 && truth.api.answered_5xx > 0,
        "{:?}",
        truth.api
    );
    assert!(truth.api.requests > (events.len() as u64).div_ceil(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_made_through_the_api_is_announced_by_a_signed_webhook() {
    // A receiver that records what it gets and answers at once.
    let got: Received = Default::default();
    let log = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let log = log.clone();
                async move {
                    log.lock().unwrap().push((headers, body.to_vec()));
                    "ok"
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let sim = start(
        20,
        ApiFaults::default(),
        Some(Target {
            url: hook,
            scheme: SchemeKind::Stripe,
            secret: SECRET.into(),
        }),
    )
    .await;
    let before = got.lock().unwrap().len();
    assert!(before > 20, "the run's own events were delivered");
    let (pi, _) = paid_without_refunds(&sim.sim.truth().await.unwrap())[0].clone();
    let refund = client(&sim.url)
        .create_refund(
            &CreateRefund {
                payment_intent: pi.clone(),
                amount: None,
                reason: Some("requested_by_customer".into()),
                metadata: Default::default(),
            },
            "announce-me",
        )
        .await
        .unwrap();
    sim.sim.sender.as_ref().unwrap().drain().await;
    for _ in 0..100 {
        if got.lock().unwrap().len() >= before + 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let verifier = Verifier::new(SchemeKind::Stripe, &[SECRET.to_string()], 300).unwrap();
    let received = got.lock().unwrap().clone();
    let mut types = Vec::new();
    for (headers, body) in &received[before..] {
        verifier
            .verify(headers, None, body, chrono::Utc::now().timestamp())
            .expect("signed with the secret");
        let event: serde_json::Value = serde_json::from_slice(body).unwrap();
        types.push(event["type"].as_str().unwrap().to_string());
        if event["type"] == "refund.created" {
            assert_eq!(event["data"]["object"]["id"], refund.id.as_str());
            assert_eq!(event["data"]["object"]["payment_intent"], pi.as_str());
        }
    }
    types.sort();
    assert_eq!(types, vec!["charge.refunded", "refund.created"]);
    // And the API's log has them too.
    let logged = client(&sim.url)
        .events(&EventQuery {
            types: vec!["refund.created".into()],
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(logged.data[0].data.object["id"], refund.id.as_str());
}
