//! Dashboard access over real HTTP: sign-in, sessions, sign-out, CSRF, limits, the first
//! admin and password changes; each on SQLite and PostgreSQL.

mod common;

use app::backend::Role;
use common::{session_cookie, Kind, TestApp, TestDb};
use oncehook::http::auth::{admin, password::Passwords, SESSION_COOKIE};
use oncehook::store::users;
use oncehook::store::Db;
use reqwest::header::{HeaderMap, COOKIE, LOCATION, SET_COOKIE};
use reqwest::StatusCode;

const PASSWORD: &str = "a long passphrase 1";

both!(
    pages_need_a_signed_in_user,
    sign_in_cycles_the_session_with_a_strict_http_only_cookie,
    failed_sign_ins_are_refused_alike_and_audited,
    sign_out_ends_the_session,
    cross_site_posts_are_refused,
    sign_in_attempts_are_limited_per_user,
    first_start_admin_must_change_the_one_time_password,
    disabling_or_resetting_a_user_ends_their_sessions,
    secure_cookie_when_configured,
    cli_manages_users,
);

/// A client that shows redirects instead of following them.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn add_user(db: &Db, name: &str, role: Role) {
    let passwords = Passwords::new(1).await.unwrap();
    admin::add_user(db, &passwords, name, PASSWORD, role, "test")
        .await
        .unwrap();
}

fn set_cookie_header(headers: &HeaderMap) -> String {
    headers
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with(&format!("{SESSION_COOKIE}=")))
        .unwrap_or_default()
        .to_string()
}

fn location(response: &reqwest::Response) -> String {
    response
        .headers()
        .get(LOCATION)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

async fn post_sign_in(
    app: &TestApp,
    cookie: Option<&str>,
    user: &str,
    password: &str,
) -> reqwest::Response {
    let mut request = common::sign_in_request(&client(), &app.url, user, password);
    if let Some(cookie) = cookie {
        request = request.header(COOKIE, cookie);
    }
    request.send().await.unwrap()
}

/// Signs in and returns the session cookie.
async fn sign_in(app: &TestApp, user: &str) -> String {
    let response = post_sign_in(app, None, user, PASSWORD).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&response), "/");
    session_cookie(response.headers()).expect("a session cookie")
}

async fn get(app: &TestApp, path: &str, cookie: Option<&str>) -> reqwest::Response {
    let mut request = client().get(format!("{}{path}", app.url));
    if let Some(cookie) = cookie {
        request = request.header(COOKIE, cookie);
    }
    request.send().await.unwrap()
}

/// Whether the cookie opens the inbox as `user`.
async fn signed_in_as(app: &TestApp, cookie: &str, user: &str) -> bool {
    let response = get(app, "/events", Some(cookie)).await;
    if response.status() != StatusCode::OK {
        return false;
    }
    let html = response.text().await.unwrap();
    assert!(html.contains("id=\"inbox-table\"") || html.contains("No events yet"));
    // <span id="signed-in-user" …>NAME</span> in the top bar.
    html.split("id=\"signed-in-user\"")
        .nth(1)
        .and_then(|rest| rest.split_once('>'))
        .is_some_and(|(_, text)| text.starts_with(&format!("{user}<")))
}

async fn audit_actions(db: &Db, actor: &str) -> Vec<(String, Option<String>, Option<String>)> {
    let mut rows = users::audit_page(db, Some(actor), None, 100).await.unwrap();
    rows.reverse();
    rows.into_iter()
        .map(|r| (r.action, r.reason, r.source))
        .collect()
}

async fn pages_need_a_signed_in_user(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let response = get(&app, "/", None).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&response), "/sign-in");
    let response = get(&app, "/inbox?before=5", None).await;
    assert_eq!(location(&response), "/sign-in?next=/inbox%3Fbefore%3D5");
    // Server functions answer 401, not a page.
    let response = client()
        .post(format!("{}/api/current_user", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    // The sign-in page and the stylesheet are public.
    let response = get(&app, "/sign-in", None).await;
    assert_eq!(response.status(), StatusCode::OK);
    let html = response.text().await.unwrap();
    assert!(html.contains("action=\"/auth/sign-in\""), "{html}");
    assert_eq!(
        get(&app, "/pkg/oncehook.css", None).await.status(),
        StatusCode::OK
    );
    // The webhook receiver and health check are not behind sign-in.
    assert_eq!(get(&app, "/healthz", None).await.status(), StatusCode::OK);
}

async fn sign_in_cycles_the_session_with_a_strict_http_only_cookie(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    add_user(&app.db, "ana", Role::Viewer).await;

    let response = post_sign_in(&app, None, "ana", PASSWORD).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let header = set_cookie_header(response.headers());
    assert!(header.contains("HttpOnly"), "{header}");
    assert!(header.contains("SameSite=Strict"), "{header}");
    assert!(header.contains("Path=/"), "{header}");
    assert!(!header.contains("Secure"), "{header}");
    // Idle expiry: the cookie lasts the configured idle time (60 min by default).
    let max_age: i64 = header
        .split(';')
        .find_map(|p| p.trim().strip_prefix("Max-Age="))
        .map(|v| v.parse().unwrap())
        .or_else(|| header.contains("Expires=").then_some(3600))
        .expect("an expiring cookie");
    assert!((3500..=3600).contains(&max_age), "{header}");
    let first = session_cookie(response.headers()).unwrap();
    assert!(signed_in_as(&app, &first, "ana").await);

    // Signing in again with an existing session gets a new id; the old one is dead.
    let response = post_sign_in(&app, Some(&first), "ana", PASSWORD).await;
    let second = session_cookie(response.headers()).unwrap();
    assert_ne!(first, second);
    assert!(!signed_in_as(&app, &first, "ana").await);
    assert!(signed_in_as(&app, &second, "ana").await);

    let user = users::by_name(&app.db, "ana").await.unwrap().unwrap();
    assert!(user.last_sign_in_at.is_some());
    let actions = audit_actions(&app.db, "ana").await;
    assert_eq!(
        actions.iter().filter(|(a, _, _)| a == "sign_in").count(),
        2,
        "{actions:?}"
    );
    assert!(actions
        .iter()
        .all(|(_, _, source)| source.as_deref() == Some("127.0.0.1")));
}

async fn failed_sign_ins_are_refused_alike_and_audited(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    add_user(&app.db, "bruno", Role::Operator).await;
    add_user(&app.db, "carla", Role::Viewer).await;
    admin::set_disabled(&app.db, "carla", true, "test")
        .await
        .unwrap();

    for (user, password) in [
        ("bruno", "not the password"),
        ("nobody", PASSWORD),
        ("carla", PASSWORD),
    ] {
        let response = post_sign_in(&app, None, user, password).await;
        assert_eq!(response.status(), StatusCode::SEE_OTHER, "{user}");
        // One answer for every cause: the form does not confirm which names exist.
        assert_eq!(location(&response), "/sign-in?error=invalid", "{user}");
        assert_eq!(session_cookie(response.headers()), None, "{user}");
    }
    let reasons = |actor: &'static str| {
        let db = app.db.clone();
        async move {
            audit_actions(&db, actor)
                .await
                .into_iter()
                .filter(|(a, _, _)| a == "sign_in.failed")
                .map(|(_, reason, source)| (reason.unwrap(), source.unwrap()))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        reasons("bruno").await,
        [("wrong password".into(), "127.0.0.1".into())]
    );
    assert_eq!(
        reasons("nobody").await,
        [("unknown user".into(), "127.0.0.1".into())]
    );
    assert_eq!(
        reasons("carla").await,
        [("user disabled".into(), "127.0.0.1".into())]
    );
}

async fn sign_out_ends_the_session(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    add_user(&app.db, "ana", Role::Viewer).await;
    let cookie = sign_in(&app, "ana").await;
    assert!(signed_in_as(&app, &cookie, "ana").await);

    // Sign-out is a POST; a GET does nothing.
    let response = get(&app, "/auth/sign-out", Some(&cookie)).await;
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert!(signed_in_as(&app, &cookie, "ana").await);

    let response = client()
        .post(format!("{}/auth/sign-out", app.url))
        .header(COOKIE, &cookie)
        .header("Origin", &app.url)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&response), "/sign-in?signed_out=1");
    assert!(!signed_in_as(&app, &cookie, "ana").await);
    let actions = audit_actions(&app.db, "ana").await;
    assert_eq!(actions.last().unwrap().0, "sign_out");
}

async fn cross_site_posts_are_refused(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    add_user(&app.db, "ana", Role::Admin).await;
    let cookie = sign_in(&app, "ana").await;
    let form = [("username", "ana"), ("password", PASSWORD)];
    for (header, value) in [
        ("Sec-Fetch-Site", "cross-site"),
        ("Sec-Fetch-Site", "same-site"),
        ("Origin", "http://evil.example"),
    ] {
        let response = client()
            .post(format!("{}/auth/sign-in", app.url))
            .header(header, value)
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::FORBIDDEN,
            "{header}: {value}"
        );
        assert_eq!(session_cookie(response.headers()), None);
        // A forged sign-out does not end the session either.
        let response = client()
            .post(format!("{}/auth/sign-out", app.url))
            .header(COOKIE, &cookie)
            .header(header, value)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::FORBIDDEN,
            "{header}: {value}"
        );
        assert!(signed_in_as(&app, &cookie, "ana").await);
    }
    // Nothing reached the handler: the only sign-in in the audit log is the real one.
    let actions = audit_actions(&app.db, "ana").await;
    assert_eq!(actions.len(), 1, "{actions:?}");
    // The webhook receiver is outside the dashboard's CSRF check (providers send no Origin).
    let response = client()
        .post(format!("{}/webhooks/stripe", app.url))
        .header("Sec-Fetch-Site", "cross-site")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_ne!(response.status(), StatusCode::FORBIDDEN);
}

async fn sign_in_attempts_are_limited_per_user(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.dashboard.sign_in_per_minute_per_user_and_address = 3;
    })
    .await;
    add_user(&app.db, "ana", Role::Viewer).await;
    add_user(&app.db, "bruno", Role::Viewer).await;
    for _ in 0..3 {
        let response = post_sign_in(&app, None, "ana", "guess guess guess").await;
        assert_eq!(location(&response), "/sign-in?error=invalid");
    }
    // The right password no longer helps within the minute.
    let response = post_sign_in(&app, None, "ana", PASSWORD).await;
    assert_eq!(location(&response), "/sign-in?error=limited");
    assert_eq!(response.headers().get("retry-after").unwrap(), "60");
    assert_eq!(session_cookie(response.headers()), None);
    let actions = audit_actions(&app.db, "ana").await;
    assert_eq!(actions.last().unwrap().0, "sign_in.limited");
    // Another user from the same address still signs in.
    sign_in(&app, "bruno").await;
}

async fn first_start_admin_must_change_the_one_time_password(kind: Kind) {
    let test_db = TestDb::new(kind).await;
    let db = test_db.connect().await;
    let passwords = Passwords::new(1).await.unwrap();
    let one_time = oncehook::http::auth::bootstrap_first_admin(&db, &passwords)
        .await
        .unwrap()
        .expect("a one-time password on a fresh database");
    assert_eq!(
        oncehook::http::auth::bootstrap_first_admin(&db, &passwords)
            .await
            .unwrap(),
        None,
        "only once"
    );
    let admin_user = users::by_name(&db, "admin").await.unwrap().unwrap();
    assert_eq!(admin_user.role, "admin");
    assert!(admin_user.must_change_password);
    assert!(!admin_user.password_hash.contains(&one_time));

    let mut settings = common::settings(&test_db);
    settings.processor.enabled = false;
    settings.outbox.relay.enabled = false;
    let server = oncehook::server::start(settings).await.unwrap();
    let app = TestApp {
        url: server.url(),
        db: server.db.clone(),
        server: Some(server),
        settings: common::settings(&test_db),
        http: reqwest::Client::new(),
        db_handle: test_db,
    };
    // Users exist: the server created no other.
    assert_eq!(users::count(&app.db).await.unwrap(), 1);

    let response = post_sign_in(&app, None, "admin", &one_time).await;
    assert_eq!(location(&response), "/change-password");
    let cookie = session_cookie(response.headers()).unwrap();
    // Every page leads to the password form until it is changed.
    assert_eq!(
        location(&get(&app, "/", Some(&cookie)).await),
        "/change-password"
    );
    assert_eq!(
        get(&app, "/change-password", Some(&cookie)).await.status(),
        StatusCode::OK
    );
    let change = |current: &str, new: &str, confirm: &str| {
        client()
            .post(format!("{}/auth/password", app.url))
            .header(COOKIE, &cookie)
            .header("Origin", &app.url)
            .form(&[("current", current), ("new", new), ("confirm", confirm)])
            .send()
    };
    let refused = [
        (one_time.as_str(), "too short", "too short", "weak"),
        (
            one_time.as_str(),
            PASSWORD,
            "something else entirely",
            "mismatch",
        ),
        ("not the one-time one", PASSWORD, PASSWORD, "current"),
        (
            one_time.as_str(),
            one_time.as_str(),
            one_time.as_str(),
            "same",
        ),
    ];
    for (current, new, confirm, error) in refused {
        let response = change(current, new, confirm).await.unwrap();
        assert_eq!(
            location(&response),
            format!("/change-password?error={error}")
        );
    }
    assert!(
        users::by_name(&app.db, "admin")
            .await
            .unwrap()
            .unwrap()
            .must_change_password
    );

    let response = change(&one_time, PASSWORD, PASSWORD).await.unwrap();
    assert_eq!(location(&response), "/");
    let cookie = session_cookie(response.headers()).expect("the session continues, cycled");
    assert!(signed_in_as(&app, &cookie, "admin").await);
    assert!(
        !users::by_name(&app.db, "admin")
            .await
            .unwrap()
            .unwrap()
            .must_change_password
    );
    // The one-time password is spent.
    let response = post_sign_in(&app, None, "admin", &one_time).await;
    assert_eq!(location(&response), "/sign-in?error=invalid");
    let actions: Vec<String> = audit_actions(&app.db, "admin")
        .await
        .into_iter()
        .map(|(a, _, _)| a)
        .collect();
    assert!(
        actions.contains(&"user.password_change".to_string()),
        "{actions:?}"
    );
    assert!(actions.contains(&"user.password_change.failed".to_string()));
}

async fn disabling_or_resetting_a_user_ends_their_sessions(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    add_user(&app.db, "ana", Role::Viewer).await;
    add_user(&app.db, "bruno", Role::Viewer).await;
    let ana = sign_in(&app, "ana").await;
    let bruno = sign_in(&app, "bruno").await;

    admin::set_disabled(&app.db, "ana", true, "root")
        .await
        .unwrap();
    assert!(!signed_in_as(&app, &ana, "ana").await);
    admin::set_disabled(&app.db, "ana", false, "root")
        .await
        .unwrap();
    // Enabled again, but that session was ended; a new sign-in works.
    assert!(!signed_in_as(&app, &ana, "ana").await);
    sign_in(&app, "ana").await;

    let passwords = Passwords::new(1).await.unwrap();
    admin::reset_password(&app.db, &passwords, "bruno", "temporary password 9", "root")
        .await
        .unwrap();
    assert!(!signed_in_as(&app, &bruno, "bruno").await);
    let response = post_sign_in(&app, None, "bruno", "temporary password 9").await;
    assert_eq!(location(&response), "/change-password");

    let actions: Vec<String> = audit_actions(&app.db, "root")
        .await
        .into_iter()
        .map(|(a, _, _)| a)
        .collect();
    assert_eq!(
        actions,
        ["user.disable", "user.enable", "user.reset_password"]
    );
}

async fn secure_cookie_when_configured(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.dashboard.secure_cookie = true;
        s.dashboard.session_idle_minutes = 15;
    })
    .await;
    add_user(&app.db, "ana", Role::Viewer).await;
    let response = post_sign_in(&app, None, "ana", PASSWORD).await;
    let header = set_cookie_header(response.headers());
    assert!(header.contains("Secure"), "{header}");
    assert!(header.contains("Max-Age=900"), "{header}");
}

/// Runs `oncehook ARGS` against the test database, feeding `stdin`.
fn oncehook_cli(db_url: &str, args: &[&str], stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .arg("--database-url")
        .arg(db_url)
        .args(args)
        .env_remove("ONCEHOOK_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

async fn cli_manages_users(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let url = app.db_handle.url.clone();
    let out = oncehook_cli(
        &url,
        &["user", "add", "ana", "--role", "operator"],
        &format!("{PASSWORD}\n"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ana = users::by_name(&app.db, "ana").await.unwrap().unwrap();
    assert_eq!(
        (ana.role.as_str(), ana.disabled, ana.must_change_password),
        ("operator", false, false)
    );
    sign_in(&app, "ana").await;

    // Refused: a taken name, a short password, an unknown role.
    let out = oncehook_cli(&url, &["user", "add", "ana"], &format!("{PASSWORD}\n"));
    assert!(!out.status.success());
    let out = oncehook_cli(&url, &["user", "add", "bruno"], "short\n");
    assert!(!out.status.success());
    let out = oncehook_cli(
        &url,
        &["user", "add", "bruno", "--role", "root"],
        &format!("{PASSWORD}\n"),
    );
    assert!(!out.status.success());
    assert!(users::by_name(&app.db, "bruno").await.unwrap().is_none());

    let out = oncehook_cli(&url, &["user", "list", "--json"], "");
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["username"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ana"]);
    assert_eq!(list[0]["role"], "operator");
    assert!(
        list[0].get("password_hash").is_none(),
        "hashes never leave the database"
    );

    let out = oncehook_cli(&url, &["user", "disable", "ana"], "");
    assert!(out.status.success());
    assert!(
        users::by_name(&app.db, "ana")
            .await
            .unwrap()
            .unwrap()
            .disabled
    );
    let out = oncehook_cli(&url, &["user", "enable", "ana"], "");
    assert!(out.status.success());
    let out = oncehook_cli(
        &url,
        &["user", "reset-password", "ana"],
        "another long one 2\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let response = post_sign_in(&app, None, "ana", "another long one 2").await;
    assert_eq!(location(&response), "/change-password");
    let actions: Vec<String> = users::audit_page(&app.db, None, None, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.actor.ends_with("@cli"))
        .map(|r| r.action)
        .rev()
        .collect();
    assert_eq!(
        actions,
        [
            "user.add",
            "user.disable",
            "user.enable",
            "user.reset_password"
        ]
    );
}
