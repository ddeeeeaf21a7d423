//! `oncehook serve --demo` (the real binary): within 60 s of a fresh start the database
//! behind the overview holds received events, duplicate deliveries, a dead letter and a
//! refunded order, a signed-in person gets the overview, and every page's top bar says
//! "demo data"; a server started without `--demo` says nothing of the kind.

mod common;

use std::time::{Duration, Instant};

use common::{Kind, TestDb};
use tokio::io::{AsyncBufReadExt, BufReader};

both!(
    serve_demo_fills_the_dashboard_within_a_minute,
    serve_demo_refuses_a_database_that_holds_real_events,
    serve_demo_refuses_configured_providers_and_sinks,
    serve_without_demo_shows_no_demo_badge,
);

/// The real binary, `serve` on a free port with its data directory in `data_dir`, plus
/// `--demo` when asked; returns it with the dashboard URL it printed and the lines it
/// printed up to the last one `serve` prints before running.
async fn serve(
    db: &TestDb,
    data_dir: &std::path::Path,
    demo: bool,
) -> (tokio::process::Child, String, Vec<String>) {
    let mut args = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        &db.url,
    ];
    if demo {
        args.push("--demo");
    }
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args(&args)
        .env("ONCEHOOK_DATA_DIR", data_dir)
        .env("ONCEHOOK_RETENTION__ENABLED", "false")
        .env_remove("ONCEHOOK_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    let mut url = None;
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(rest) = line.trim().strip_prefix("dashboard: ") {
            url = Some(rest.trim_end_matches('/').to_string());
        }
        // `database:` comes last without the demo, `demo:` last with it.
        let last = line.contains(if demo { "demo:" } else { "database:" });
        printed.push(line);
        if last {
            break;
        }
    }
    // Keep reading stdout so the server never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url.expect("the dashboard URL is printed"), printed)
}

/// A viewer added to the database, signed in through the form; the session cookie.
async fn sign_in_viewer(db: &oncehook::store::Db, url: &str) -> String {
    let passwords = oncehook::http::auth::password::Passwords::new(1)
        .await
        .unwrap();
    oncehook::http::auth::admin::add_user(
        db,
        &passwords,
        "viewer",
        common::TEST_PASSWORD,
        app::backend::Role::Viewer,
        "test",
    )
    .await
    .unwrap();
    let signed_in = http()
        .post(format!("{url}/auth/sign-in"))
        .header("Origin", url)
        .header("Sec-Fetch-Site", "same-origin")
        .form(&[
            ("username", "viewer"),
            ("password", common::TEST_PASSWORD),
            ("next", "/"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), 303);
    signed_in
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with(&format!("{}=", oncehook::http::auth::SESSION_COOKIE)))
        .and_then(|c| c.split(';').next())
        .unwrap()
        .to_string()
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A page's status and its top bar (`<header class="topbar">…</header>`) as the server
/// rendered it.
async fn top_bar(url: &str, path: &str, cookie: Option<&str>) -> (u16, String) {
    let mut request = http().get(format!("{url}{path}"));
    if let Some(cookie) = cookie {
        request = request.header(reqwest::header::COOKIE, cookie);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let page = response.text().await.unwrap();
    let start = page
        .find("<header class=\"topbar\"")
        .unwrap_or_else(|| panic!("{path} has a top bar:\n{page}"));
    let end = start + page[start..].find("</header>").expect("the top bar ends");
    (status, page[start..end].to_string())
}

/// The badge as the top bar renders it: its element and its words.
fn shows_demo_badge(top_bar: &str) -> bool {
    top_bar.contains("id=\"demo-badge\"") && top_bar.contains(">demo data<")
}

async fn serve_demo_fills_the_dashboard_within_a_minute(kind: Kind) {
    let test_db = TestDb::new(kind).await;
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let started = Instant::now();
    let (mut child, url, printed) = serve(&test_db, &data_dir, true).await;
    let demo_line = printed
        .iter()
        .find(|l| l.contains("simulated Stripe traffic"));
    assert!(
        demo_line.is_some_and(|l| l.contains("/webhooks/stripe")),
        "{printed:?}"
    );

    let db = oncehook::store::Db::connect(&test_db.url).await.unwrap();
    let (mut events, mut duplicates, mut dead, mut refunded) = (0, 0, 0, 0);
    while started.elapsed() < Duration::from_secs(60) {
        events = common::count(&db, "SELECT COUNT(*) FROM inbox_events").await;
        let deliveries = common::count(&db, "SELECT COUNT(*) FROM deliveries").await;
        duplicates = deliveries - events;
        dead = common::count(&db, "SELECT COUNT(*) FROM dead_letters").await;
        refunded =
            common::count(&db, "SELECT COUNT(*) FROM orders WHERE status = 'refunded'").await;
        if events > 0 && duplicates > 0 && dead > 0 && refunded > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        events > 0 && duplicates > 0 && dead > 0 && refunded > 0,
        "after {:?}: {events} events, {duplicates} duplicates, {dead} dead letters, {refunded} refunded orders",
        started.elapsed()
    );

    // Before signing in, the sign-in page already says the data is made up.
    let (status, bar) = top_bar(&url, "/sign-in", None).await;
    assert_eq!(status, 200);
    assert!(shows_demo_badge(&bar), "sign-in top bar: {bar}");

    // The overview, as a signed-in viewer gets it, and every other page the top bar leads to.
    let cookie = sign_in_viewer(&db, &url).await;
    for path in ["/", "/events", "/dlq", "/settings"] {
        let (status, bar) = top_bar(&url, path, Some(&cookie)).await;
        assert_eq!(status, 200, "{path}");
        assert!(shows_demo_badge(&bar), "{path} top bar: {bar}");
    }

    // The demo's API key lives in the data directory, readable by the owner only.
    let key = data_dir.join("demo-api-key");
    assert!(std::fs::read_to_string(&key)
        .unwrap()
        .starts_with("sk_test_"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    child.kill().await.unwrap();
    child.wait().await.unwrap();
    // A restart of the demo goes on with the database it filled (the data directory says
    // so), though the database now holds events.
    let (mut again, _, printed) = serve(&test_db, &data_dir, true).await;
    assert!(
        printed
            .iter()
            .any(|l| l.contains("simulated Stripe traffic")),
        "{printed:?}"
    );
    again.kill().await.unwrap();
}

async fn serve_without_demo_shows_no_demo_badge(kind: Kind) {
    let test_db = TestDb::new(kind).await;
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url, printed) = serve(&test_db, &dir.path().join("data"), false).await;
    assert!(!printed.iter().any(|l| l.contains("demo:")), "{printed:?}");
    let (status, bar) = top_bar(&url, "/sign-in", None).await;
    assert_eq!(status, 200);
    assert!(bar.contains("oncehook"), "the top bar rendered: {bar}");
    assert!(!bar.contains("demo"), "sign-in top bar: {bar}");
    let db = oncehook::store::Db::connect(&test_db.url).await.unwrap();
    let cookie = sign_in_viewer(&db, &url).await;
    for path in ["/", "/events"] {
        let (status, bar) = top_bar(&url, path, Some(&cookie)).await;
        assert_eq!(status, 200, "{path}");
        assert!(
            bar.contains("signed-in-user"),
            "{path} top bar rendered: {bar}"
        );
        assert!(!bar.contains("demo"), "{path} top bar: {bar}");
    }
    child.kill().await.unwrap();
}

/// `oncehook serve --demo` with `extra` arguments that is expected to refuse: its exit
/// status and what it printed on stderr.
fn demo_refused(db: &TestDb, data_dir: &std::path::Path, extra: &[&str]) -> (bool, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args([
            "serve",
            "--demo",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            &db.url,
        ])
        .args(extra)
        .env("ONCEHOOK_DATA_DIR", data_dir)
        .env_remove("ONCEHOOK_CONFIG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("serve --demo neither refused nor stopped within 60 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.success(), stderr)
}

/// A real server took one signed payment; `serve --demo` pointed at its database (with a
/// data directory of its own, as someone trying the demo beside production would) refuses
/// and writes nothing: not one event, order or audit row more.
async fn serve_demo_refuses_a_database_that_holds_real_events(kind: Kind) {
    let test_db = TestDb::new(kind).await;
    let dir = tempfile::tempdir().unwrap();
    let real_data = dir.path().join("real");
    let (mut child, url, _) = serve(&test_db, &real_data, false).await;
    let secret = std::fs::read_to_string(real_data.join("dev-stripe-secret")).unwrap();
    let body = serde_json::to_vec(&common::fixtures::payment_intent_succeeded(
        "evt_real_1",
        "pi_real_1",
        "ord-real-1",
        4200,
        common::now_secs(),
    ))
    .unwrap();
    let answer = http()
        .post(format!("{url}/webhooks/stripe"))
        .header(
            "stripe-signature",
            oncehook::provider::signature::stripe::sign(secret.trim(), common::now_secs(), &body),
        )
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    child.kill().await.unwrap();
    child.wait().await.unwrap();

    let db = oncehook::store::Db::connect(&test_db.url).await.unwrap();
    let before = state(&db).await;
    assert_eq!(before.0, 1, "the real event is stored");
    let (ok, stderr) = demo_refused(&test_db, &dir.path().join("demo"), &[]);
    assert!(
        !ok,
        "serve --demo ran on a database with real events: {stderr}"
    );
    assert!(
        stderr.contains("--demo") && stderr.contains("1 event"),
        "{stderr}"
    );
    assert_eq!(state(&db).await, before, "the refused demo wrote nothing");
    db.close().await;
}

/// Events, orders, outbox messages and audit rows: what a demo would add to.
async fn state(db: &oncehook::store::Db) -> (i64, i64, i64, i64) {
    (
        common::count(db, "SELECT COUNT(*) FROM inbox_events").await,
        common::count(db, "SELECT COUNT(*) FROM orders").await,
        common::count(db, "SELECT COUNT(*) FROM outbox").await,
        common::count(db, "SELECT COUNT(*) FROM audit_log").await,
    )
}

/// A configured provider's secret is never the demo's (its traffic would be signed as the
/// real provider's), and a configured sink would deliver made-up orders to real systems.
async fn serve_demo_refuses_configured_providers_and_sinks(kind: Kind) {
    let test_db = TestDb::new(kind).await;
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[[providers]]\nname = \"stripe\"\nscheme = \"stripe\"\n\
             secrets = [\"whsec_real_0123456789abcdef0123456789\"]\n",
            "provider",
        ),
        (
            "[sinks.fulfilment]\nkind = \"http\"\nurl = \"https://shop.example/hooks\"\n",
            "sink",
        ),
    ];
    for (n, (toml, named)) in cases.iter().enumerate() {
        let config = dir.path().join(format!("oncehook-{n}.toml"));
        std::fs::write(&config, toml).unwrap();
        let (ok, stderr) = demo_refused(
            &test_db,
            &dir.path().join(format!("data-{n}")),
            &["--config", config.to_str().unwrap()],
        );
        assert!(!ok, "serve --demo ran with a configured {named}: {stderr}");
        assert!(stderr.contains(named), "{named}: {stderr}");
    }
    // Refused before the server started: not even the tables were made.
    let db = oncehook::store::Db::connect(&test_db.url).await.unwrap();
    let events: Result<i64, _> = sqlx::query_scalar("SELECT COUNT(*) FROM inbox_events")
        .fetch_one(db.reader())
        .await;
    assert!(events.is_err(), "{events:?}");
    db.close().await;
}
