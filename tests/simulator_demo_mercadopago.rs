//! `oncehook serve --demo --provider mercadopago` (the real binary): the demo with Mercado
//! Pago traffic. Within a minute of a fresh start its `mercadopago` webhook holds signed
//! thin notifications each completed with the payment it names (fetched from the demo's
//! own simulator), and orders in BRL paid and refunded from them (chargebacks come days later
//! in the demo's simulated time, after the first minute).

mod common;

use std::time::{Duration, Instant};

use common::{Kind, TestDb};
use tokio::io::{AsyncBufReadExt, BufReader};

both!(serve_demo_with_mercado_pago_traffic);

async fn serve_demo_with_mercado_pago_traffic(kind: Kind) {
    let test_db = TestDb::new(kind).await;
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_oncehook"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            &test_db.url,
        ])
        .args(["--demo", "--provider", "mercadopago"])
        .env("ONCEHOOK_DATA_DIR", dir.path().join("data"))
        .env("ONCEHOOK_RETENTION__ENABLED", "false")
        .env_remove("ONCEHOOK_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        let last = line.contains("demo:");
        printed.push(line);
        if last {
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    assert!(
        printed
            .iter()
            .any(|l| l.contains("simulated Mercado Pago traffic")
                && l.contains("/webhooks/mercadopago")),
        "{printed:?}"
    );

    let db = oncehook::store::Db::connect(&test_db.url).await.unwrap();
    let (mut fetched, mut paid, mut refunded, mut disputed) = (0, 0, 0, 0);
    while started.elapsed() < Duration::from_secs(60) {
        fetched = common::count(
            &db,
            "SELECT COUNT(*) FROM inbox_events WHERE provider = 'mercadopago' AND fetched_body IS NOT NULL",
        )
        .await;
        paid = common::count(
            &db,
            "SELECT COUNT(*) FROM orders WHERE status = 'paid' AND currency = 'BRL'",
        )
        .await;
        refunded = common::count(
            &db,
            "SELECT COUNT(*) FROM orders WHERE status IN ('refunded', 'partially_refunded')",
        )
        .await;
        disputed =
            common::count(&db, "SELECT COUNT(*) FROM orders WHERE status = 'disputed'").await;
        if fetched > 0 && paid > 0 && refunded > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        fetched > 0 && paid > 0 && refunded > 0,
        "after {:?}: {fetched} fetched notifications, {paid} paid, {refunded} refunded, {disputed} disputed orders",
        started.elapsed()
    );
    let other = common::count(
        &db,
        "SELECT COUNT(*) FROM inbox_events WHERE provider <> 'mercadopago'",
    )
    .await;
    assert_eq!(other, 0, "only Mercado Pago traffic");
    eprintln!(
        "{kind:?} after {:?}: {fetched} fetched notifications, {paid} paid, {refunded} refunded, {disputed} disputed orders",
        started.elapsed()
    );
    child.kill().await.unwrap();
    child.wait().await.unwrap();
    db.close().await;
}
