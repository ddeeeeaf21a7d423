//! Crash recovery: the real binary in a child process takes a burst, is killed with
//! SIGKILL mid-burst, and is started again; measured is the time from the restart until
//! every acknowledged event is applied (the rows the dead process had claimed must not wait
//! out their lease), and checked is that each was applied exactly once.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::fixture::{send_signed, FreshDb, PROVIDER};
use super::load::EventFactory;
use super::{count, ANY_PENDING, PENDING};
use crate::child::{free_port, wait_healthy};
use oncehook::store::Db;

pub struct Recovery {
    /// Events acknowledged before the kill.
    pub acked: usize,
    /// Inbox rows still claimed by the killed process.
    pub claimed_at_kill: i64,
    /// Rows waiting (pending or claimed) at the kill.
    pub waiting_at_kill: i64,
    /// From the restart until `/healthz` answers.
    pub healthy_secs: f64,
    /// From the restart until nothing waits: every acknowledged event applied.
    pub applied_secs: f64,
    /// Peak resident memory of the server process that was killed (VmHWM), KiB: the
    /// server alone, in its own process, under the burst.
    pub killed_server_hwm_kb: u64,
    /// Every acknowledged event applied, one effect per applied event.
    pub ok: bool,
    pub check: String,
}

const SENDERS: usize = 8;

/// A configuration for a child server in its own folder under `dir`: the bench provider,
/// the relay off.
fn write_config(dir: &Path, step: &str, secret: &str) -> anyhow::Result<PathBuf> {
    let data_dir = dir.join(format!("{step}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&data_dir)?;
    let config = data_dir.join("oncehook.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = {:?}\n[outbox.relay]\nenabled = false\n\
             [[providers]]\nname = \"{PROVIDER}\"\nscheme = \"stripe\"\nsecrets = [\"{secret}\"]\n",
            data_dir.display().to_string()
        ),
    )?;
    Ok(config)
}

fn spawn(config: &Path, db: &FreshDb, port: u16) -> anyhow::Result<Child> {
    crate::child::command()
        .args(["serve", "--config"])
        .arg(config)
        .args(["--database-url", &db.url, "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .env_remove("ONCEHOOK_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting oncehook serve")
}

/// Sends `burst` distinct events from 8 senders, kills the server after `kill_after`
/// acknowledgements, restarts it and times the recovery.
pub async fn crash_and_restart(
    db: &FreshDb,
    dir: &Path,
    secret: &str,
    burst: u64,
    kill_after: usize,
) -> anyhow::Result<Recovery> {
    let config = write_config(dir, "recovery", secret)?;
    let port = free_port()?;
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let mut child = spawn(&config, db, port)?;
    wait_healthy(&http, &base).await?;

    let factory = EventFactory::new();
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let next = Arc::new(AtomicU64::new(0));
    let senders: Vec<_> = (0..SENDERS)
        .map(|_| {
            let (http, base, acked, next, factory, secret) = (
                http.clone(),
                base.clone(),
                acked.clone(),
                next.clone(),
                factory.clone(),
                secret.to_string(),
            );
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= burst {
                        return;
                    }
                    let sent = send_signed(&http, &base, &secret, factory.body(n)).await;
                    match sent {
                        Ok(r) if r.status().is_success() => {
                            acked.lock().expect("acked set").insert(factory.event_id(n));
                        }
                        Ok(_) => {}
                        // The server is gone: this sender is done.
                        Err(_) => return,
                    }
                }
            })
        })
        .collect();
    let waited = Instant::now();
    while acked.lock().expect("acked set").len() < kill_after
        && waited.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let killed_server_hwm_kb = super::sys::memory_of(&child.id().to_string()).hwm_kb;
    child.kill().context("SIGKILL")?;
    child.wait()?;
    for sender in senders {
        let _ = sender.await;
    }
    let acked: BTreeSet<String> = acked.lock().expect("acked set").clone();

    let store = Db::connect(&db.url).await?;
    let claimed_at_kill = count(
        &store,
        "SELECT COUNT(*) FROM inbox_events WHERE status = 'processing'",
    )
    .await?;
    let waiting_at_kill = count(&store, PENDING).await?;

    let restarted = Instant::now();
    let mut child = spawn(&config, db, port)?;
    let measured = async {
        wait_healthy(&http, &base).await?;
        let healthy_secs = restarted.elapsed().as_secs_f64();
        loop {
            if count(&store, ANY_PENDING).await? == 0 {
                break;
            }
            if restarted.elapsed() > Duration::from_secs(120) {
                anyhow::bail!("events still waiting 120 s after the restart");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        anyhow::Ok((healthy_secs, restarted.elapsed().as_secs_f64()))
    }
    .await;
    // Stop the server whatever happened, so a failed step leaves no process behind.
    let _ = child.kill();
    let _ = child.wait();
    let (healthy_secs, applied_secs) = measured?;

    let rows: Vec<(String, String)> = sqlx::query_as("SELECT event_id, status FROM inbox_events")
        .fetch_all(store.reader())
        .await?;
    let status: std::collections::HashMap<String, String> = rows.into_iter().collect();
    let unapplied = acked
        .iter()
        .filter(|id| status.get(*id).map(String::as_str) != Some("applied"))
        .count();
    let applied = status.values().filter(|s| *s == "applied").count() as i64;
    let effects = count(&store, "SELECT COUNT(*) FROM processed_effects").await?;
    store.close().await;
    let ok = unapplied == 0 && effects == applied;
    Ok(Recovery {
        acked: acked.len(),
        claimed_at_kill,
        waiting_at_kill,
        healthy_secs,
        applied_secs,
        killed_server_hwm_kb,
        ok,
        check: format!(
            "{} acknowledged, {unapplied} not applied; {applied} applied rows, {effects} effects",
            acked.len()
        ),
    })
}
