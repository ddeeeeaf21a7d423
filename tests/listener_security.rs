//! The listeners against the requests an attacker writes, over HTTP against the real binary:
//! a body dribbled byte by byte meets a deadline for the whole body; one address cannot take
//! every connection slot; by default load is shed before every connection is taken; behind
//! a trusted proxy the client's own address (from `X-Forwarded-For` or `Forwarded`) feeds
//! the sign-in limits and the audit log, and nobody else can name their address; nothing
//! signed-in is cacheable; a flood of bad signatures logs a few lines, the metrics count
//! every one.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use common::binary::Binary;
use common::{Kind, TestApp, TestDb};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

both!(
    a_body_sent_a_byte_at_a_time_is_cut_off_at_the_body_deadline,
    one_address_cannot_take_every_connection_slot,
    a_trusted_proxy_is_not_held_to_the_per_address_cap,
    by_default_load_is_shed_before_every_connection_is_taken,
    behind_a_trusted_proxy_the_client_address_comes_from_x_forwarded_for,
    the_forwarded_header_names_the_client_for_sign_in_and_api_tokens,
    nothing_signed_in_is_stored_by_caches_but_the_bundle_is,
    a_flood_of_bad_signatures_logs_a_few_lines_and_counts_every_one,
);

/// An HTTP client whose connections leave from `ip` (another machine, as far as the server
/// can tell).
fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// A raw TCP connection to `addr` from `ip`.
async fn connect_from(ip: &str, addr: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(ip.parse().unwrap(), 0))
        .unwrap();
    socket.connect(addr).await.unwrap()
}

/// A webhook's headers announcing a 1000-byte body, and its first bytes: a request the
/// server is now handling, waiting for the rest of its body.
async fn start_slow_body(stream: &mut TcpStream) {
    stream
        .write_all(
            b"POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
              stripe-signature: t=1,v1=00\r\ncontent-length: 1000\r\n\r\n{\"id\":",
        )
        .await
        .unwrap();
}

/// Whether the server closed `stream` (EOF or reset) within `wait`.
async fn closed_within(stream: &mut TcpStream, wait: Duration) -> bool {
    let mut buf = [0u8; 512];
    loop {
        match tokio::time::timeout(wait, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // An answer before the close (a 408 or 400): keep reading until the close.
            Ok(Ok(_)) => {}
        }
    }
}

/// How many of `streams` the server has not closed.
async fn still_open(streams: &mut [TcpStream]) -> usize {
    let mut open = 0;
    for stream in streams {
        if !closed_within(stream, Duration::from_millis(200)).await {
            open += 1;
        }
    }
    open
}

async fn signed_payment(http: &reqwest::Client, base: &str, i: usize) -> reqwest::Result<u16> {
    common::binary::post_payment(http, base, "listen", i).await
}

async fn a_body_sent_a_byte_at_a_time_is_cut_off_at_the_body_deadline(kind: Kind) {
    let db = TestDb::new(kind).await;
    let app = Binary::start(&db, "[server]\nbody_timeout_ms = 1500\n").await;
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    start_slow_body(&mut stream).await;
    let started = Instant::now();
    // One byte every 250 ms: never a pause as long as the body timeout, never a whole body.
    let mut answer = Vec::new();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(10) && !closed {
        if stream.write_all(b" ").await.is_err() {
            closed = true;
        }
        let mut buf = [0u8; 512];
        match tokio::time::timeout(Duration::from_millis(250), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => closed = true,
            Ok(Ok(n)) => answer.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
        if !answer.is_empty() {
            break;
        }
    }
    let elapsed = started.elapsed();
    let answer = String::from_utf8_lossy(&answer).to_string();
    eprintln!("dribbled body answered after {elapsed:?}: {answer:?}");
    assert!(
        !answer.is_empty() || closed,
        "the dribbling client was still being served after {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(4), "{elapsed:?}");
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "a body that misses its deadline gets 408: {answer:?}"
    );
    app.stop();
}

async fn one_address_cannot_take_every_connection_slot(kind: Kind) {
    let db = TestDb::new(kind).await;
    let app = Binary::start(
        &db,
        "[server]\nmax_connections = 16\nmax_in_flight = 8\nmax_connections_per_address = 4\n",
    )
    .await;
    // One address opens every slot there is, each a webhook whose body never comes.
    let mut flood = Vec::new();
    for _ in 0..16 {
        let mut stream = connect_from("127.0.0.1", app.addr).await;
        start_slow_body(&mut stream).await;
        flood.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A provider from another address is served at once.
    let provider = client_from("127.0.0.2");
    let started = Instant::now();
    let status = tokio::time::timeout(
        Duration::from_secs(5),
        signed_payment(&provider, &app.base, 1),
    )
    .await
    .expect("the provider was kept waiting")
    .unwrap();
    assert_eq!(status, 200);
    assert!(started.elapsed() < Duration::from_secs(2));
    let kept = still_open(&mut flood).await;
    eprintln!("the flooding address kept {kept} of 16 connections");
    assert!((1..=4).contains(&kept), "kept {kept}");
    drop(flood);
    app.stop();
}

/// A proxy carries everyone's connections: the cap per address would cut its users off.
async fn a_trusted_proxy_is_not_held_to_the_per_address_cap(kind: Kind) {
    let db = TestDb::new(kind).await;
    let app = Binary::start(
        &db,
        "[server]
max_connections = 16
max_in_flight = 12
max_connections_per_address = 2
\
         trusted_proxies = [\"127.0.0.3/32\"]\n",
    )
    .await;
    let mut proxied = Vec::new();
    let mut direct = Vec::new();
    for _ in 0..6 {
        let mut stream = connect_from("127.0.0.3", app.addr).await;
        start_slow_body(&mut stream).await;
        proxied.push(stream);
        let mut stream = connect_from("127.0.0.4", app.addr).await;
        start_slow_body(&mut stream).await;
        direct.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        still_open(&mut proxied).await,
        6,
        "the trusted proxy keeps every connection"
    );
    assert_eq!(
        still_open(&mut direct).await,
        2,
        "another address keeps its two"
    );
    app.stop();
}

async fn by_default_load_is_shed_before_every_connection_is_taken(kind: Kind) {
    let db = TestDb::new(kind).await;
    let app = Binary::start(&db, "").await;
    // Four addresses, each with as many slow requests as one address may keep open.
    let defaults = oncehook::config::Settings::default().server;
    // The documented default of server.max_connections_per_address.
    let per_address = 64;
    let mut flood = Vec::new();
    for host in 11..15 {
        for _ in 0..per_address {
            let mut stream = connect_from(&format!("127.0.0.{host}"), app.addr).await;
            start_slow_body(&mut stream).await;
            flood.push(stream);
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let r = client_from("127.0.0.15")
        .get(format!("{}/healthz", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        503,
        "{} requests in flight, max_in_flight {}, max_connections {}: shed while a \
         connection slot is still free",
        flood.len(),
        defaults.max_in_flight,
        defaults.max_connections
    );
    assert_eq!(r.headers()["retry-after"], "1");
    assert!(started.elapsed() < Duration::from_secs(1));
    drop(flood);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = client_from("127.0.0.15")
        .get(format!("{}/healthz", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "served again once the load is gone");
    app.stop();
}

/// A failed sign-in as `user` from `from`, with `headers` a proxy might add: where the form
/// sent the browser (`error=invalid` or `error=limited`).
async fn failed_sign_in(app: &Binary, from: &str, user: &str, headers: &[(&str, &str)]) -> String {
    let mut request = client_from(from)
        .post(format!("{}/auth/sign-in", app.base))
        .header("Origin", &app.base)
        .header("Sec-Fetch-Site", "same-origin")
        .form(&[("username", user), ("password", "wrong"), ("next", "/")]);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 303);
    response.headers()["location"].to_str().unwrap().to_string()
}

/// (action, source) of the audit rows `actor` caused, oldest first.
async fn audit_sources(db: &oncehook::store::Db, actor: &str) -> Vec<(String, String)> {
    let mut rows = oncehook::store::users::audit_page(db, Some(actor), None, 100)
        .await
        .unwrap();
    rows.reverse();
    rows.into_iter()
        .map(|r| (r.action, r.source.unwrap_or_default()))
        .collect()
}

async fn behind_a_trusted_proxy_the_client_address_comes_from_x_forwarded_for(kind: Kind) {
    let db = TestDb::new(kind).await;
    let app = Binary::start(
        &db,
        "[server]\ntrusted_proxies = [\"127.0.0.1/32\", \"127.0.0.3/32\"]\n\
         [dashboard]\nsign_in_per_minute_per_address = 2\nsign_in_per_minute_per_user_and_address = 100\n",
    )
    .await;
    let xff = |v: &'static str| [("X-Forwarded-For", v)];
    // Two people behind the proxy: each has the sign-in allowance of one address.
    for _ in 0..2 {
        let to = failed_sign_in(&app, "127.0.0.1", "mallory", &xff("203.0.113.7")).await;
        assert!(to.contains("error=invalid"), "{to}");
    }
    let to = failed_sign_in(&app, "127.0.0.1", "mallory", &xff("203.0.113.7")).await;
    assert!(
        to.contains("error=limited"),
        "203.0.113.7 used its allowance: {to}"
    );
    let to = failed_sign_in(&app, "127.0.0.1", "mallory", &xff("203.0.113.8")).await;
    assert!(
        to.contains("error=invalid"),
        "203.0.113.8 has its own: {to}"
    );
    // The client put an address in front; the proxy appended the one it saw. A chain of
    // two trusted proxies: the first untrusted address from the right is the client.
    failed_sign_in(
        &app,
        "127.0.0.1",
        "mallory",
        &xff("198.51.100.1, 203.0.113.10, 127.0.0.3"),
    )
    .await;
    // Someone who is not a proxy names any address they like: it is ignored.
    failed_sign_in(&app, "127.0.0.2", "mallory", &xff("203.0.113.99")).await;
    // A trusted proxy without the header: the proxy is the client.
    failed_sign_in(&app, "127.0.0.1", "mallory", &[]).await;
    app.stop();
    let db_handle = db.connect().await;
    let rows = audit_sources(&db_handle, "mallory").await;
    let failed: Vec<&str> = rows
        .iter()
        .filter(|(action, _)| action == "sign_in.failed")
        .map(|(_, s)| s.as_str())
        .collect();
    assert_eq!(
        failed,
        [
            "203.0.113.7",
            "203.0.113.7",
            "203.0.113.8",
            "203.0.113.10",
            "127.0.0.2",
            "127.0.0.1",
        ],
        "{rows:?}"
    );
    // An address out of attempts is audited once per window, without a user name (the
    // address may be trying many).
    let limited = audit_sources(&db_handle, "anonymous").await;
    assert_eq!(
        limited,
        [("sign_in.limited".to_string(), "203.0.113.7".to_string())]
    );
}

async fn the_forwarded_header_names_the_client_for_sign_in_and_api_tokens(kind: Kind) {
    let db = TestDb::new(kind).await;
    let app = Binary::start(
        &db,
        "[server]\ntrusted_proxies = [\"127.0.0.0/24\"]\nproxy_header = \"forwarded\"\n",
    )
    .await;
    let forwarded = "for=192.0.2.60;proto=https, for=\"[2001:db8:cafe::17]:4711\";proto=https";
    failed_sign_in(
        &app,
        "127.0.0.1",
        "eve",
        &[
            ("Forwarded", forwarded),
            ("X-Forwarded-For", "198.51.100.1"),
        ],
    )
    .await;
    // In this mode X-Forwarded-For is whatever the client sent: ignored.
    failed_sign_in(
        &app,
        "127.0.0.1",
        "eve",
        &[("X-Forwarded-For", "198.51.100.1")],
    )
    .await;
    let db_handle = db.connect().await;
    assert_eq!(
        audit_sources(&db_handle, "eve")
            .await
            .into_iter()
            .map(|(_, s)| s)
            .collect::<Vec<_>>(),
        ["2001:db8:cafe::17", "127.0.0.1"]
    );

    // An API token's refused action is audited with the client's address too.
    let now = oncehook::store::now_ms();
    let (_, token) = oncehook::store::tokens::create(
        &db_handle,
        &oncehook::store::tokens::NewToken {
            name: "viewer-bot",
            role: "viewer",
            created_by: "test",
            maker: oncehook::store::tokens::Maker::Shell,
            now,
            expires_at: now + 86_400_000,
        },
        None,
    )
    .await
    .unwrap();
    let r = client_from("127.0.0.1")
        .post(format!("{}/api/v1/dead-letters/1/discard", app.base))
        .bearer_auth(&token)
        .header("Forwarded", "for=192.0.2.61")
        .json(&serde_json::json!({ "reason": "forged" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(
        audit_sources(&db_handle, "token:viewer-bot").await,
        [(
            "dead_letter.discard.refused".to_string(),
            "192.0.2.61".to_string()
        )]
    );
    app.stop();
}

async fn nothing_signed_in_is_stored_by_caches_but_the_bundle_is(kind: Kind) {
    use app::api::{CurrentUser, LoadApiTokens};
    use leptos::server_fn::ServerFn;
    let app = TestApp::spawn(kind).await;
    let cookie = app.sign_in("ada", app::backend::Role::Admin).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let cache_control = |r: &reqwest::Response| {
        r.headers()
            .get(reqwest::header::CACHE_CONTROL)
            .map(|v| v.to_str().unwrap().to_string())
    };
    for path in ["/", "/events", "/admin/tokens", "/settings", "/sign-in"] {
        let r = http
            .get(format!("{}{path}", app.url))
            .header(reqwest::header::COOKIE, &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(cache_control(&r).as_deref(), Some("no-store"), "{path}");
    }
    for function in [LoadApiTokens::PATH, CurrentUser::PATH] {
        let r = http
            .post(format!("{}{function}", app.url))
            .header(reqwest::header::COOKIE, &cookie)
            .header("Origin", &app.url)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body("")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{function}");
        assert_eq!(cache_control(&r).as_deref(), Some("no-store"), "{function}");
    }
    let now = oncehook::store::now_ms();
    let (_, token) = oncehook::store::tokens::create(
        &app.db,
        &oncehook::store::tokens::NewToken {
            name: "reader",
            role: "viewer",
            created_by: "test",
            maker: oncehook::store::tokens::Maker::Shell,
            now,
            expires_at: now + 86_400_000,
        },
        None,
    )
    .await
    .unwrap();
    for path in ["/api/v1/events", "/api/v1/overview", "/api/v1/no-such-path"] {
        let r = http
            .get(format!("{}{path}", app.url))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(cache_control(&r).as_deref(), Some("no-store"), "{path}");
    }
    // The static bundle keeps its own caching (the stylesheet is revalidated, not banned).
    let r = http
        .get(format!("{}/pkg/oncehook.css", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(cache_control(&r).as_deref(), Some("no-cache"));
    app.shutdown().await;
}

async fn a_flood_of_bad_signatures_logs_a_few_lines_and_counts_every_one(kind: Kind) {
    let db = TestDb::new(kind).await;
    let app = Binary::start(&db, "").await;
    let http = client_from("127.0.0.1");
    let bad = |http: &reqwest::Client| {
        http.post(format!("{}/webhooks/stripe", app.base))
            .header("stripe-signature", "t=1,v1=00")
            .body("{}")
            .send()
    };
    const FLOOD: usize = 300;
    for _ in 0..FLOOD {
        assert!(bad(&http).await.unwrap().status().is_client_error());
    }
    let metrics = http
        .get(format!("{}/metrics", app.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(&format!(
            "oncehook_signature_failures_total{{provider=\"stripe\"}} {FLOOD}"
        )),
        "{metrics}"
    );
    // Once the allowance has recovered, the next warning says how many went unlogged.
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    assert!(bad(&http).await.unwrap().status().is_client_error());
    let logged = app.stop();
    let lines: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("signature check failed"))
        .collect();
    assert!(
        (2..=10).contains(&lines.len()),
        "{} warning lines for {} bad signatures:\n{}",
        lines.len(),
        FLOOD + 1,
        lines.join("\n")
    );
    let unlogged: usize = lines
        .iter()
        .filter_map(|l| l.split("suppressed=").nth(1))
        .map(|rest| {
            rest.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse::<usize>()
                .unwrap()
        })
        .sum();
    assert_eq!(
        lines.len() + unlogged,
        FLOOD + 1,
        "every bad signature is either logged or counted in a later line:\n{}",
        lines.join("\n")
    );
}
