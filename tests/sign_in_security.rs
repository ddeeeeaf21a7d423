//! The dashboard's sign-in and sessions under attack, over HTTP against the real server
//! (and the real binary for the first start), on SQLite and PostgreSQL: bounded input, no
//! lock-out by strangers, `next` kept on this site, absolute session lifetime without a
//! write per request, and the one-time admin password kept out of container logs.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use app::backend::Role;
use common::{Kind, TestApp, TestDb};
use oncehook::http::auth::{admin, password::Passwords};
use oncehook::store::{users, Backend, Db};
use reqwest::header::{COOKIE, LOCATION};
use sqlx::Row;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PASSWORD: &str = "a long passphrase 1";
/// "Another address": the whole of 127/8 is loopback on Linux.
const STRANGER: [u8; 4] = [127, 0, 0, 2];

both!(
    long_user_names_never_reach_the_limiter_or_the_audit_log,
    sign_in_and_password_forms_have_a_small_body_limit,
    refused_attempts_are_counted_in_one_audit_row_per_window,
    a_stranger_cannot_lock_the_real_user_out,
    password_changes_are_limited_like_sign_ins,
    the_page_after_sign_in_stays_on_this_site,
    sessions_end_at_their_absolute_lifetime_and_are_not_saved_on_every_request,
    the_one_time_admin_password_goes_to_a_private_file_not_to_a_pipe,
    the_one_time_admin_password_is_shown_on_a_terminal,
);

/// A client that shows redirects instead of following them; `from` binds its end.
fn client_from(from: Option<[u8; 4]>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    if let Some(ip) = from {
        builder = builder.local_address(IpAddr::from(ip));
    }
    builder.build().unwrap()
}

fn location(response: &reqwest::Response) -> String {
    response
        .headers()
        .get(LOCATION)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

fn session_cookie(response: &reqwest::Response) -> Option<String> {
    common::session_cookie(response.headers())
}

async fn add_user(db: &Db, name: &str) {
    let passwords = Passwords::new(1).await.unwrap();
    admin::add_user(db, &passwords, name, PASSWORD, Role::Viewer, "test")
        .await
        .unwrap();
}

/// Posts the sign-in form as a browser on this site does, from `from` (None: 127.0.0.1).
async fn post_sign_in(
    app: &TestApp,
    from: Option<[u8; 4]>,
    user: &str,
    password: &str,
) -> reqwest::Response {
    common::sign_in_request(&client_from(from), &app.url, user, password)
        .send()
        .await
        .unwrap()
}

async fn sign_in(app: &TestApp, from: Option<[u8; 4]>, user: &str) -> String {
    let response = post_sign_in(app, from, user, PASSWORD).await;
    assert_eq!(location(&response), "/", "sign-in of {user}");
    session_cookie(&response).expect("a session cookie")
}

async fn change_password(
    app: &TestApp,
    cookie: &str,
    current: &str,
    new: &str,
) -> reqwest::Response {
    client_from(None)
        .post(format!("{}/auth/password", app.url))
        .header(COOKIE, cookie)
        .header("Origin", &app.url)
        .form(&[("current", current), ("new", new), ("confirm", new)])
        .send()
        .await
        .unwrap()
}

/// Whether `cookie` opens a dashboard page (the inbox) rather than leading to sign-in.
async fn signed_in(app: &TestApp, cookie: &str) -> bool {
    let (status, _) = app.page("/events", cookie).await;
    status == 200
}

/// The audit log oldest first, without the test's own set-up (users it added).
async fn audit_rows(db: &Db) -> Vec<users::AuditRow> {
    let mut rows = users::audit_page(db, None, None, 1000).await.unwrap();
    rows.retain(|r| r.actor != "test");
    rows.reverse();
    rows
}

async fn long_user_names_never_reach_the_limiter_or_the_audit_log(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    // `oncehook user add` accepts at most 64 characters of [A-Za-z0-9._@-].
    for name in ["a".repeat(65), "b".repeat(3000), "ana <script>".into()] {
        let response = post_sign_in(&app, None, &name, "guess guess guess").await;
        assert_eq!(
            location(&response),
            "/sign-in?error=invalid",
            "{}",
            name.len()
        );
    }
    let rows = audit_rows(&app.db).await;
    assert!(rows.is_empty(), "audited: {rows:?}");
    // A valid name is still audited as before.
    let response = post_sign_in(&app, None, &"c".repeat(64), "guess guess guess").await;
    assert_eq!(location(&response), "/sign-in?error=invalid");
    let rows = audit_rows(&app.db).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].action, "sign_in.failed");
    app.shutdown().await;
}

async fn sign_in_and_password_forms_have_a_small_body_limit(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    add_user(&app.db, "ana").await;
    // 16 KiB: far under axum's 2 MB default, far over what a sign-in form needs.
    let big = "x".repeat(16 * 1024);
    let response = post_sign_in(&app, None, "ana", &big).await;
    assert_eq!(response.status(), 413);
    assert!(session_cookie(&response).is_none());
    assert!(audit_rows(&app.db).await.is_empty());

    let cookie = sign_in(&app, None, "ana").await;
    let response = change_password(&app, &cookie, PASSWORD, &big).await;
    assert_eq!(response.status(), 413);
    // Server functions too: a form or JSON body of 64 KiB is refused before it is read
    // into memory; a normal one is answered.
    use leptos::server_fn::ServerFn;
    let huge = "y".repeat(64 * 1024);
    for (path, form) in [
        (app::api::Search::PATH, vec![("text", huge.as_str())]),
        (
            app::api::LoadEvent::PATH,
            vec![("id", "1"), ("pad", huge.as_str())],
        ),
    ] {
        let (status, body) = app.post_form(path, &cookie, None, &form).await;
        assert_eq!(status, 413, "{path}: {body}");
    }
    let (status, body) = app
        .post_form(app::api::Search::PATH, &cookie, None, &[("text", "ord_1")])
        .await;
    assert_eq!(status, 200, "{body}");
    let user = users::by_name(&app.db, "ana").await.unwrap().unwrap();
    let passwords = Passwords::new(1).await.unwrap();
    assert!(
        passwords
            .verify(PASSWORD.into(), Some(user.password_hash))
            .await,
        "password unchanged"
    );
    // An ordinary form still fits.
    let response = change_password(&app, &cookie, PASSWORD, "another long one 2").await;
    assert_eq!(location(&response), "/");
    app.shutdown().await;
}

async fn refused_attempts_are_counted_in_one_audit_row_per_window(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.dashboard.sign_in_per_minute_per_address = 2;
    })
    .await;
    add_user(&app.db, "ana").await;
    for i in 0..12 {
        let response = post_sign_in(&app, None, "ana", "guess guess guess").await;
        let expected = if i < 2 { "invalid" } else { "limited" };
        assert_eq!(
            location(&response),
            format!("/sign-in?error={expected}"),
            "{i}"
        );
    }
    let rows = audit_rows(&app.db).await;
    let actions: Vec<&str> = rows.iter().map(|r| r.action.as_str()).collect();
    assert_eq!(
        actions,
        ["sign_in.failed", "sign_in.failed", "sign_in.limited"],
        "{rows:?}"
    );
    let limited = &rows[2];
    assert_eq!(limited.source.as_deref(), Some("127.0.0.1"));
    assert_eq!(limited.target, "address:127.0.0.1");
    // The count is written when the window closes, at the latest at shutdown.
    let handle_url = app.db_handle.url.clone();
    let TestApp {
        server, db_handle, ..
    } = app;
    server.unwrap().shutdown().await.unwrap();
    let db = Db::connect(&handle_url).await.unwrap();
    let rows = audit_rows(&db).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(
        rows[2].details.as_deref(),
        Some("10 refused attempts"),
        "{rows:?}"
    );
    db.close().await;
    drop(db_handle);
}

async fn a_stranger_cannot_lock_the_real_user_out(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.dashboard.sign_in_per_minute_per_user_and_address = 3;
        s.dashboard.sign_in_per_minute_per_address = 5;
    })
    .await;
    add_user(&app.db, "admin").await;
    add_user(&app.db, "bruno").await;
    // Someone elsewhere guesses admin's password until refused.
    for i in 0..6 {
        let response = post_sign_in(&app, Some(STRANGER), "admin", "guess guess guess").await;
        let expected = if i < 3 { "invalid" } else { "limited" };
        assert_eq!(
            location(&response),
            format!("/sign-in?error={expected}"),
            "{i}"
        );
    }
    // They slowed only themselves: even the right password is refused from there...
    let response = post_sign_in(&app, Some(STRANGER), "admin", PASSWORD).await;
    assert_eq!(location(&response), "/sign-in?error=limited");
    assert!(session_cookie(&response).is_none());
    // ...while the real admin, from an address with no failures, signs in.
    let cookie = sign_in(&app, None, "admin").await;
    assert!(signed_in(&app, &cookie).await);
    // Spraying other names from that address runs into the address's own allowance.
    let response = post_sign_in(&app, Some(STRANGER), "bruno", PASSWORD).await;
    assert_eq!(location(&response), "/sign-in?error=limited");
    sign_in(&app, None, "bruno").await;
    let sources: Vec<Option<String>> = audit_rows(&app.db)
        .await
        .into_iter()
        .filter(|r| r.action == "sign_in.failed")
        .map(|r| r.source)
        .collect();
    assert_eq!(sources, vec![Some("127.0.0.2".to_string()); 3]);
    app.shutdown().await;
}

async fn password_changes_are_limited_like_sign_ins(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.dashboard.sign_in_per_minute_per_user_and_address = 4;
    })
    .await;
    add_user(&app.db, "ana").await;
    // A stolen session (the sign-in is one of the four attempts of ana from here).
    let cookie = sign_in(&app, None, "ana").await;
    for i in 0..3 {
        let response = change_password(&app, &cookie, "guess guess guess", "new long one 22").await;
        assert_eq!(location(&response), "/change-password?error=current", "{i}");
    }
    let response = change_password(&app, &cookie, PASSWORD, "new long one 22").await;
    assert_eq!(location(&response), "/change-password?error=limited");
    assert_eq!(response.headers().get("retry-after").unwrap(), "60");
    let user = users::by_name(&app.db, "ana").await.unwrap().unwrap();
    let passwords = Passwords::new(1).await.unwrap();
    assert!(
        passwords
            .verify(PASSWORD.into(), Some(user.password_hash))
            .await,
        "password unchanged"
    );
    // The real ana elsewhere is not affected.
    sign_in(&app, Some(STRANGER), "ana").await;
    let actions: Vec<String> = audit_rows(&app.db)
        .await
        .into_iter()
        .map(|r| r.action)
        .collect();
    assert_eq!(
        actions
            .iter()
            .filter(|a| *a == "user.password_change.failed")
            .count(),
        3,
        "{actions:?}"
    );
    assert!(
        actions.contains(&"user.password_change.limited".to_string()),
        "{actions:?}"
    );
    app.shutdown().await;
}

/// Sends `request` as written and returns the response's head (status line and headers).
async fn raw_request(app: &TestApp, request: String) -> String {
    let addr = app.url.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        let mut buf = [0u8; 4096];
        loop {
            let n = stream.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            response.extend_from_slice(&buf[..n]);
            if response.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no response to:\n{request}");
    let text = String::from_utf8_lossy(&response).into_owned();
    text.split("\r\n\r\n").next().unwrap().to_string()
}

fn header_of<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then_some(v.trim())
    })
}

/// A sign-in form posted byte for byte as written (`next` already percent-encoded).
async fn raw_sign_in(app: &TestApp, password: &str, next: &str) -> String {
    let host = app.url.trim_start_matches("http://");
    let body = format!(
        "username=ana&password={}&next={next}",
        password.replace(' ', "+")
    );
    raw_request(
        app,
        format!(
            "POST /auth/sign-in HTTP/1.1\r\nHost: {host}\r\nOrigin: {}\r\n\
             Sec-Fetch-Site: same-origin\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            app.url,
            body.len()
        ),
    )
    .await
}

async fn the_page_after_sign_in_stays_on_this_site(kind: Kind) {
    // Two dozen sign-ins of ana from one address within the minute: room for all of them
    // (every attempt counts, a successful one too).
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.dashboard.sign_in_per_minute_per_user_and_address = 100;
        s.dashboard.sign_in_per_minute_per_address = 100;
    })
    .await;
    add_user(&app.db, "ana").await;
    // What browsers make of these: tabs and newlines dropped, `\` read as `/`.
    for next in [
        "%2F%09%2Fevil.example",
        "%2F%0A%2Fevil.example",
        "%2F%5Cevil.example",
        "%2F%2F%2Fevil.example",
        "https%3A%2F%2Fevil.example%2F",
        "%09https%3A%2F%2Fevil.example%2F",
        "javascript%3Aalert(1)",
    ] {
        let head = raw_sign_in(&app, PASSWORD, next).await;
        assert!(head.starts_with("HTTP/1.1 303"), "{next}: {head}");
        assert_eq!(header_of(&head, "location"), Some("/"), "{next}: {head}");
        // A failed sign-in sends the form back without the foreign target.
        let head = raw_sign_in(&app, "guess guess guess", next).await;
        assert_eq!(
            header_of(&head, "location"),
            Some("/sign-in?error=invalid"),
            "{next}: {head}"
        );
    }
    // CR LF cannot start a header of their own: dropped, as a browser drops them.
    let head = raw_sign_in(&app, PASSWORD, "%2F%0D%0ASet-Cookie:x=1").await;
    assert_eq!(
        header_of(&head, "location"),
        Some("/Set-Cookie:x=1"),
        "{head}"
    );
    assert!(
        !head
            .lines()
            .any(|l| l.to_ascii_lowercase().starts_with("set-cookie: x=")),
        "{head}"
    );
    // A page of this site keeps its path and query, not its fragment.
    let head = raw_sign_in(&app, PASSWORD, "%2Fdlq%3Fclass%3Dpermanent%23top").await;
    assert_eq!(
        header_of(&head, "location"),
        Some("/dlq?class=permanent"),
        "{head}"
    );
    let head = raw_sign_in(&app, "guess guess guess", "%2Fdlq%3Fclass%3Dpermanent").await;
    assert_eq!(
        header_of(&head, "location"),
        Some("/sign-in?error=invalid&next=/dlq%3Fclass%3Dpermanent"),
        "{head}"
    );

    // The same through the sign-in page's query, as a link someone was sent would carry it:
    // the page copies it into its form, the browser posts it.
    let (status, html) = app.page("/sign-in?next=%2F%09%2Fevil.example", "").await;
    assert_eq!(status, 200);
    let value = html
        .split("name=\"next\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the hidden next field")
        .to_string();
    let response = client_from(None)
        .post(format!("{}/auth/sign-in", app.url))
        .header("Origin", &app.url)
        .form(&[
            ("username", "ana"),
            ("password", PASSWORD),
            ("next", &decode_html(&value)),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(location(&response), "/", "{value:?}");
    app.shutdown().await;
}

/// Undoes the HTML escaping of an attribute value (what the browser posts).
fn decode_html(value: &str) -> String {
    value
        .replace("&#9;", "\t")
        .replace("&#x9;", "\t")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The stored expiry of every session row, as text (the store's own tables).
async fn session_expiries(db: &Db) -> Vec<String> {
    let sql = match db.backend {
        Backend::Sqlite => "SELECT CAST(expiry_date AS TEXT) FROM tower_sessions ORDER BY id",
        Backend::Postgres => {
            "SELECT CAST(expiry_date AS TEXT) FROM tower_sessions.session ORDER BY id"
        }
    };
    sqlx::query(sql)
        .fetch_all(db.reader())
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<String, _>(0))
        .collect()
}

async fn sessions_end_at_their_absolute_lifetime_and_are_not_saved_on_every_request(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.dashboard.session_idle_minutes = 1;
        s.dashboard.session_lifetime_minutes = 1;
    })
    .await;
    add_user(&app.db, "ana").await;
    let started = std::time::Instant::now();
    let cookie = sign_in(&app, None, "ana").await;
    let saved = session_expiries(&app.db).await;
    assert_eq!(saved.len(), 1);

    // Page views right after sign-in neither rewrite the session nor re-send the cookie.
    for _ in 0..3 {
        let response = client_from(None)
            .get(format!("{}/events", app.url))
            .header(COOKIE, &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(
            session_cookie(&response),
            None,
            "the session was saved again"
        );
    }
    assert_eq!(session_expiries(&app.db).await, saved);

    // Half the idle time later, a request moves the idle expiry on (once).
    tokio::time::sleep(Duration::from_secs(35).saturating_sub(started.elapsed())).await;
    let response = client_from(None)
        .get(format!("{}/events", app.url))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        session_cookie(&response).is_some(),
        "the expiry was touched"
    );
    let touched = session_expiries(&app.db).await;
    assert_ne!(touched, saved);
    assert!(signed_in(&app, &cookie).await);
    assert_eq!(session_expiries(&app.db).await, touched);

    // The idle timeout would allow another minute; the absolute lifetime does not.
    tokio::time::sleep(Duration::from_secs(62).saturating_sub(started.elapsed())).await;
    assert!(
        !signed_in(&app, &cookie).await,
        "signed in past the lifetime"
    );
    let (status, _) = app.page("/events", &cookie).await;
    assert_eq!(status, 303);
    app.shutdown().await;
}

/// Starts `oncehook serve` in `dir` with stdout and stderr piped (as in a container) and
/// returns both, read until the log names the one-time password's file.
async fn serve_piped(db_url: &str, dir: &std::path::Path) -> (String, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args(["serve", "--listen", "127.0.0.1:0", "--database-url", db_url])
        .env_remove("ONCEHOOK_CONFIG")
        .env("RUST_LOG", "info")
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let log = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.unwrap();
            let done = line.contains("one-time password");
            lines.push(line);
            if done {
                break;
            }
        }
        lines.join("\n")
    });
    let log = match tokio::time::timeout(Duration::from_secs(60), log).await {
        Ok(log) => log.unwrap(),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve did not log the one-time password's file within 60 s");
        }
    };
    // Give stdout its start-up lines, then stop the server and read all of it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    child.kill().unwrap();
    child.wait().unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut std::io::BufReader::new(stdout), &mut out).unwrap();
    (out, log)
}

async fn the_one_time_admin_password_goes_to_a_private_file_not_to_a_pipe(kind: Kind) {
    use std::os::unix::fs::PermissionsExt;
    let test_db = TestDb::new(kind).await;
    let dir = tempfile::tempdir().unwrap();
    let (stdout, log) = serve_piped(&test_db.url, dir.path()).await;

    let file = dir.path().join("data").join("admin-one-time-password");
    let password = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}\nstdout:\n{stdout}\nlog:\n{log}", file.display()))
        .trim()
        .to_string();
    assert_eq!(password.len(), 20);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");
    // The log says where; neither the log nor the piped stdout holds the password.
    assert!(log.contains("admin-one-time-password"), "{log}");
    assert!(!log.contains(&password), "{log}");
    assert!(!stdout.contains(&password), "{stdout}");
    assert!(stdout.contains("oncehook is running"), "{stdout}");
    // Nor the generated development signing secret: the pipe names its file.
    let secret_file = dir.path().join("data").join("dev-stripe-secret");
    let secret = std::fs::read_to_string(&secret_file).unwrap();
    assert!(secret.trim().starts_with("whsec_dev_"));
    assert!(!stdout.contains(secret.trim()), "{stdout}");
    assert!(!log.contains(secret.trim()), "{log}");
    assert!(stdout.contains("dev-stripe-secret"), "{stdout}");

    let db = test_db.connect().await;
    let admin_user = users::by_name(&db, "admin").await.unwrap().unwrap();
    assert!(admin_user.must_change_password);
    let passwords = Passwords::new(1).await.unwrap();
    assert!(
        passwords
            .verify(password.clone(), Some(admin_user.password_hash))
            .await
    );
    let audit = users::audit_page(&db, None, None, 10).await.unwrap();
    assert!(!format!("{audit:?}").contains(&password));
    db.close().await;
}

/// Starts `oncehook serve` in `dir` with its standard output on a pseudo-terminal (as when
/// someone runs it by hand) and returns what that terminal showed up to the sign-in hint.
async fn serve_on_a_terminal(db_url: &str, dir: &std::path::Path) -> String {
    use std::io::BufRead;
    let pty = nix::pty::openpty(None, None).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args(["serve", "--listen", "127.0.0.1:0", "--database-url", db_url])
        .env_remove("ONCEHOOK_CONFIG")
        .env("RUST_LOG", "warn")
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(pty.slave))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let terminal = std::fs::File::from(pty.master);
    let shown = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        // Ends at the hint, or with an error once the child is gone (EIO on Linux).
        for line in std::io::BufReader::new(terminal).lines() {
            let Ok(line) = line else { break };
            let done = line.contains("choose a new password");
            lines.push(line.trim_end().to_string());
            if done {
                break;
            }
        }
        lines.join("\n")
    });
    let shown = tokio::time::timeout(Duration::from_secs(60), shown).await;
    let _ = child.kill();
    let _ = child.wait();
    shown
        .expect("serve showed no sign-in hint on its terminal within 60 s")
        .unwrap()
}

async fn the_one_time_admin_password_is_shown_on_a_terminal(kind: Kind) {
    let test_db = TestDb::new(kind).await;
    let dir = tempfile::tempdir().unwrap();
    let shown = serve_on_a_terminal(&test_db.url, dir.path()).await;
    let file = dir.path().join("data").join("admin-one-time-password");
    let password = std::fs::read_to_string(&file).unwrap().trim().to_string();
    assert_eq!(password.len(), 20);
    // The same password on the terminal as in the file, once; and the generated
    // development signing secret, as someone running it by hand needs it.
    assert_eq!(shown.matches(password.as_str()).count(), 1, "{shown}");
    let secret =
        std::fs::read_to_string(dir.path().join("data").join("dev-stripe-secret")).unwrap();
    assert_eq!(shown.matches(secret.trim()).count(), 1, "{shown}");
}
