//! The real binary at its edges: logs an attacker cannot forge, and a server that a slow or
//! flooding client cannot take down.

mod common;

use std::time::{Duration, Instant};

use common::binary::Binary;
use common::{Kind, TestApp, TestDb, WriteLock};

both!(
    json_logs_are_one_object_per_line_even_for_forged_provider_names,
    a_slow_header_client_is_cut_off,
    a_connection_flood_does_not_stop_webhooks_being_acknowledged,
    beyond_max_in_flight_requests_are_shed_with_503_and_retry_after,
    admin_listen_serves_the_dashboard_apart_from_webhooks,
    dashboard_reads_cannot_starve_ingest,
    every_page_carries_security_headers_and_scripts_carry_the_csp_nonce,
);

#[test]
fn the_dashboard_is_never_exposed_beyond_loopback_without_sign_in() {
    let mut s = oncehook::config::Settings {
        listen: "0.0.0.0:8080".parse().unwrap(),
        ..Default::default()
    };
    let err = oncehook::server::check_listeners(&s)
        .unwrap_err()
        .to_string();
    assert!(err.contains("admin_listen"), "{err}");
    s.admin_listen = Some("10.0.0.5:8081".parse().unwrap());
    assert!(oncehook::server::check_listeners(&s).is_err());
    s.admin_listen = Some("127.0.0.1:8081".parse().unwrap());
    oncehook::server::check_listeners(&s).unwrap();
    s.admin_listen = Some("[::1]:8081".parse().unwrap());
    oncehook::server::check_listeners(&s).unwrap();
    assert!(oncehook::server::dashboard_exposure_allowed(
        "0.0.0.0:8081".parse().unwrap(),
        true
    ));
}

async fn post_payment(http: &reqwest::Client, base: &str, i: usize) -> reqwest::Result<u16> {
    common::binary::post_payment(http, base, "edge", i).await
}

async fn json_logs_are_one_object_per_line_even_for_forged_provider_names(kind: Kind) {
    let db = TestDb::new(kind).await;
    let app = Binary::start(&db, "[log]\nformat = \"json\"\n").await;
    let http = reqwest::Client::new();
    let forged = "x%0A2025-01-01T00:00:00Z%20INFO%20accepted%1B%5B2J";
    let r = http
        .post(format!("{}/webhooks/{forged}", app.base))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(post_payment(&http, &app.base, 1).await.unwrap(), 200);
    let logged = app.stop();
    let mut lines = 0;
    for line in logged.lines().filter(|l| !l.trim().is_empty()) {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(value.get("level").is_some(), "{line}");
        assert!(!line.contains('\u{1b}'), "terminal escape logged: {line}");
        lines += 1;
    }
    assert!(lines >= 2, "logged:\n{logged}");
    assert!(
        logged.contains("unknown provider") && logged.contains(r"unknown:x\\n2025"),
        "the forged name is logged escaped:\n{logged}"
    );
}

async fn a_slow_header_client_is_cut_off(kind: Kind) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let db = TestDb::new(kind).await;
    let app = Binary::start(&db, "[server]\nheader_read_timeout_ms = 1000\n").await;
    let mut stream = tokio::net::TcpStream::connect(&app.addr).await.unwrap();
    stream
        .write_all(b"POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    // One header byte every 200 ms: never a complete header block.
    let mut cut_off = None;
    for _ in 0..50 {
        if stream.write_all(b"x").await.is_err() {
            cut_off = Some(started.elapsed());
            break;
        }
        let mut buf = [0u8; 256];
        match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                cut_off = Some(started.elapsed());
                break;
            }
            // An error answer (408) then close is fine too.
            Ok(Ok(_)) => {}
            Err(_) => {}
        }
    }
    let cut_off = cut_off.expect("the slow client was still connected after 10 s");
    eprintln!("slow-header client cut off after {cut_off:?}");
    assert!(cut_off < Duration::from_secs(5), "{cut_off:?}");
    app.stop();
}

async fn a_connection_flood_does_not_stop_webhooks_being_acknowledged(kind: Kind) {
    let db = TestDb::new(kind).await;
    // 256 file descriptors: without a connection limit and a header timer, 300 idle
    // connections would leave the server none to accept a provider's connection with.
    let app = Binary::start_limited(
        &db,
        "[server]\nheader_read_timeout_ms = 1000\nmax_connections = 64\nmax_in_flight = 32\n",
        Some(256),
    )
    .await;
    // 300 idle connections, more than the server may keep open at once.
    let mut flood = Vec::new();
    for _ in 0..300 {
        if let Ok(s) = tokio::net::TcpStream::connect(&app.addr).await {
            flood.push(s);
        }
    }
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let started = Instant::now();
    let mut acknowledged = 0;
    for i in 0..20 {
        // A provider retries a failed delivery; so does this one, for up to 15 s.
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match post_payment(&http, &app.base, i).await {
                Ok(200) => {
                    acknowledged += 1;
                    break;
                }
                _ if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                other => panic!("webhook {i} not acknowledged during the flood: {other:?}"),
            }
        }
    }
    eprintln!(
        "{acknowledged} webhooks acknowledged in {:?} beside {} idle connections",
        started.elapsed(),
        flood.len()
    );
    assert_eq!(acknowledged, 20);
    drop(flood);
    app.stop();
}

async fn beyond_max_in_flight_requests_are_shed_with_503_and_retry_after(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.receiver.commit_timeout_ms = 3_000;
        s.server.max_in_flight = 2;
    })
    .await;
    // The database cannot commit: two webhooks wait for it and fill the server.
    let lock = WriteLock::take(&app, "inbox_events").await;
    let waiting: Vec<_> = (0..2)
        .map(|i| {
            let (http, base) = (app.http.clone(), app.url.clone());
            tokio::spawn(async move { post_payment(&http, &base, i).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let r = app
        .http
        .get(format!("{}/healthz", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503, "a third request is shed");
    assert_eq!(r.headers()["retry-after"], "1");
    assert!(started.elapsed() < Duration::from_secs(1), "shed at once");
    lock.release().await;
    for w in waiting {
        let status = w.await.unwrap().unwrap();
        assert!(status == 200 || status == 503, "{status}");
    }
    let r = app
        .http
        .get(format!("{}/healthz", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "served again once the load is gone");
    app.shutdown().await;
}

async fn admin_listen_serves_the_dashboard_apart_from_webhooks(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.admin_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let admin = app.server.as_ref().unwrap().admin_url();
    assert_ne!(admin, app.url);
    // Webhooks on `listen`, not on the admin address.
    assert_eq!(post_payment(&app.http, &app.url, 1).await.unwrap(), 200);
    // The admin address knows no webhook route (and wants a session before anything).
    let refused = post_payment(&app.http, &admin, 2).await.unwrap();
    assert!(refused == 404 || refused == 401, "{refused}");
    assert_eq!(
        app.count("SELECT COUNT(*) FROM inbox_events").await,
        1,
        "nothing stored through the admin address"
    );
    // The dashboard on the admin address, not on `listen`.
    let cookie = app
        .sign_in_at(&admin, "vera", app::backend::Role::Viewer)
        .await;
    let page = app
        .http
        .get(format!("{admin}/events"))
        .header(reqwest::header::COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("evt_edge_1"));
    let page = app.http.get(format!("{}/", app.url)).send().await.unwrap();
    assert_eq!(page.status(), 404);
    app.shutdown().await;
}

/// Every dashboard read connection held (a flood of slow page reads): webhooks are still
/// acknowledged, because ingest has its own connections. Reads cannot write.
async fn dashboard_reads_cannot_starve_ingest(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.receiver.commit_timeout_ms = 2_000;
    })
    .await;
    let readers = app.db.reader().options().get_max_connections();
    let mut held = Vec::new();
    for _ in 0..readers {
        let mut conn = app.db.reader().acquire().await.unwrap();
        sqlx::query("SELECT COUNT(*) FROM inbox_events")
            .execute(&mut *conn)
            .await
            .unwrap();
        held.push(conn);
    }
    for i in 0..5 {
        assert_eq!(post_payment(&app.http, &app.url, i).await.unwrap(), 200);
    }
    let write = sqlx::query("DELETE FROM inbox_events")
        .execute(&mut *held[0])
        .await;
    assert!(write.is_err(), "a read connection refuses writes");
    drop(held);
    assert_eq!(app.count("SELECT COUNT(*) FROM inbox_events").await, 5);
    app.shutdown().await;
}

async fn every_page_carries_security_headers_and_scripts_carry_the_csp_nonce(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    assert_eq!(post_payment(&app.http, &app.url, 1).await.unwrap(), 200);
    let cookie = app.sign_in("vera", app::backend::Role::Viewer).await;
    let mut nonces = Vec::new();
    for path in [
        "/events",
        "/",
        "/no-such-page",
        "/webhooks/stripe",
        "/healthz",
    ] {
        let r = app
            .http
            .get(format!("{}{path}", app.url))
            .header(reqwest::header::COOKIE, &cookie)
            .send()
            .await
            .unwrap();
        let h = r.headers().clone();
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(h["referrer-policy"], "same-origin", "{path}");
        assert_eq!(h["x-frame-options"], "DENY", "{path}");
        let csp = h["content-security-policy"].to_str().unwrap().to_string();
        for part in [
            "default-src 'self'",
            "frame-ancestors 'none'",
            "object-src 'none'",
            "base-uri 'none'",
            "'wasm-unsafe-eval'",
        ] {
            assert!(csp.contains(part), "{path}: {csp}");
        }
        assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
        let nonce = csp
            .split("'nonce-")
            .nth(1)
            .and_then(|rest| rest.split('\'').next())
            .unwrap_or_else(|| panic!("{path}: no nonce in {csp}"))
            .to_string();
        let body = r.text().await.unwrap();
        if path == "/events" {
            assert!(body.contains("evt_edge_1"), "{body}");
            let scripts = body.matches("<script").count();
            assert!(scripts >= 1, "the hydration script is rendered: {body}");
            assert_eq!(
                body.matches(&format!("nonce=\"{nonce}\"")).count(),
                scripts,
                "every inline script carries this response's nonce: {body}"
            );
        }
        nonces.push(nonce);
    }
    nonces.sort();
    nonces.dedup();
    assert_eq!(nonces.len(), 5, "a fresh nonce per response");
    app.shutdown().await;
}
