//! `oncehook serve --demo` (the real binary): within 60 s of a fresh start the database
//! behind the overview holds received events, duplicate deliveries, a dead letter and a
//! refunded order, and a signed-in person gets the overview.

mod common;

use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_demo_fills_the_dashboard_within_a_minute() {
    let _turn = common::dashboard_turn().await;
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}", dir.path().join("oncehook.db").display());
    let data_dir = dir.path().join("data");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args([
            "serve",
            "--demo",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            &db_url,
        ])
        .env("ONCEHOOK_DATA_DIR", &data_dir)
        .env("ONCEHOOK_RETENTION__ENABLED", "false")
        .env_remove("ONCEHOOK_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut url = None;
    let mut demo_line = None;
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(rest) = line.trim().strip_prefix("dashboard: ") {
            url = Some(rest.trim_end_matches('/').to_string());
        }
        if line.contains("simulated Stripe traffic") {
            demo_line = Some(line.clone());
            break;
        }
    }
    let url = url.expect("the dashboard URL is printed");
    assert!(demo_line.unwrap().contains("/webhooks/stripe"));
    // Keep reading stdout so the server never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let db = oncehook::store::Db::connect(&db_url).await.unwrap();
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

    // The overview, as a signed-in viewer gets it.
    let passwords = oncehook::auth::password::Passwords::new(1).await.unwrap();
    oncehook::auth::admin::add_user(
        &db,
        &passwords,
        "viewer",
        common::TEST_PASSWORD,
        app::backend::Role::Viewer,
        "test",
    )
    .await
    .unwrap();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let signed_in = http
        .post(format!("{url}/auth/sign-in"))
        .header("Origin", &url)
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
    let cookie = signed_in
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with(&format!("{}=", oncehook::auth::SESSION_COOKIE)))
        .and_then(|c| c.split(';').next())
        .unwrap()
        .to_string();
    let overview = http
        .get(format!("{url}/"))
        .header(reqwest::header::COOKIE, cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(overview.status(), 200);

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
}
