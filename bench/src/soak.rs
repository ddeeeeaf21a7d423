//! A long run at a sustained rate: `oncehook serve` (receiver and processor, the operator's
//! settings) in its own process takes new events, every fifth delivery a redelivery,
//! `/metrics` scraped every 5 s, for `--soak-secs`. Per minute it records what was
//! acknowledged, what was applied, receipt → effect p50/p99 (as a reader sees it), the
//! backlog and the server's VmRSS, so a pipeline that slows as its finished rows pile up
//! (dead index entries, bloated queue tables) or a server that keeps memory shows as a
//! slope from the first minute to the last. On PostgreSQL the run can switch autovacuum
//! off or on for its duration (`--autovacuum`), as hand-run servers differ.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use oncehook::config::Settings;
use oncehook::store::Db;

use super::fixture::{send_signed, server_settings, FreshDb};
use super::load::EventFactory;
use super::{count, wait_drained};
use crate::child::ChildServer;

const SENDERS: u64 = 16;
/// Every this many deliveries, one is a redelivery of the event before it.
const REDELIVER_EVERY: u64 = 5;
const MINUTE_MS: i64 = 60_000;

/// One minute of the soak (the last one may be shorter).
#[derive(Clone, Debug, Default)]
pub struct Minute {
    /// Deliveries acknowledged in this minute.
    pub acked: u64,
    /// Events that became visible as applied in this minute.
    pub applied: u64,
    /// Receipt → effect of the events received in this minute, ms.
    pub p50_ms: u64,
    pub p99_ms: u64,
    /// The largest backlog seen in this minute.
    pub backlog_max: usize,
    /// Mean VmRSS of the server in this minute, KiB.
    pub rss_kb: u64,
}

pub struct Soak {
    pub secs: u64,
    pub rate: u64,
    /// `autovacuum` during the run (PostgreSQL: "on"/"off"; SQLite: "n/a").
    pub autovacuum: String,
    /// Deliveries acknowledged with 200, and the distinct events among them.
    pub acked: u64,
    pub distinct: u64,
    /// Effects recorded once the backlog drained; must equal `distinct`.
    pub effects: i64,
    pub minutes: Vec<Minute>,
    /// (seconds since the server was healthy, VmRSS KiB), one a second.
    pub samples: Vec<(f64, u64)>,
}

/// Least-squares slope of `points`, per unit of x.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let cov: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let var: f64 = points.iter().map(|(x, _)| (x - mx).powi(2)).sum();
    if var == 0.0 {
        0.0
    } else {
        cov / var
    }
}

impl Soak {
    pub fn first_kb(&self) -> u64 {
        self.samples.first().map_or(0, |s| s.1)
    }

    pub fn max_kb(&self) -> u64 {
        self.samples.iter().map(|s| s.1).max().unwrap_or(0)
    }

    /// Least-squares slope of VmRSS over the second half, KiB per minute.
    pub fn late_slope_kb_per_min(&self) -> f64 {
        let half = self.secs as f64 / 2.0;
        let points: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter(|(t, _)| *t >= half)
            .map(|(t, kb)| (*t, *kb as f64))
            .collect();
        slope(&points) * 60.0
    }

    /// The full minutes (the last, shorter one left out), after the first (warm-up).
    fn steady(&self) -> &[Minute] {
        let full = (self.secs / 60) as usize;
        let end = full.min(self.minutes.len());
        &self.minutes[1.min(end)..end]
    }

    /// Applied events per second: (first steady minute, last full minute).
    pub fn throughput_first_last(&self) -> (f64, f64) {
        let steady = self.steady();
        let per_sec = |m: Option<&Minute>| m.map_or(0.0, |m| m.applied as f64 / 60.0);
        (per_sec(steady.first()), per_sec(steady.last()))
    }

    /// p99 ms: (first steady minute, last full minute, worst minute).
    pub fn p99_first_last_max(&self) -> (u64, u64, u64) {
        let steady = self.steady();
        (
            steady.first().map_or(0, |m| m.p99_ms),
            steady.last().map_or(0, |m| m.p99_ms),
            steady.iter().map(|m| m.p99_ms).max().unwrap_or(0),
        )
    }

    /// Slope of the per-minute p99 over the steady minutes, ms per minute.
    pub fn p99_slope_ms_per_min(&self) -> f64 {
        let points: Vec<(f64, f64)> = self
            .steady()
            .iter()
            .enumerate()
            .map(|(i, m)| (i as f64, m.p99_ms as f64))
            .collect();
        slope(&points)
    }

    /// The medians of `value` over the first and the last third of the steady minutes (at
    /// least one minute each). A median of several minutes, not one minute: a single slow
    /// minute at the start (a disk stall, the load generator catching up) made a 15-minute
    /// run whose applied rate was level from minute 5 to 15 read as slowing down.
    fn thirds(&self, value: impl Fn(&Minute) -> f64) -> (f64, f64) {
        let steady = self.steady();
        let n = (steady.len() / 3).max(1).min(steady.len());
        let median = |minutes: &[Minute]| {
            let mut v: Vec<f64> = minutes.iter().map(&value).collect();
            v.sort_by(f64::total_cmp);
            match v.len() {
                0 => 0.0,
                len if len % 2 == 1 => v[len / 2],
                len => (v[len / 2 - 1] + v[len / 2]) / 2.0,
            }
        };
        (median(&steady[..n]), median(&steady[steady.len() - n..]))
    }

    /// The verdict with what it was read from.
    pub fn verdict(&self) -> String {
        let (first, last) = self.thirds(|m| m.applied as f64 / 60.0);
        let (p99_first, p99_last) = self.thirds(|m| m.p99_ms as f64);
        format!(
            "medians of the first and last thirds: applied {first:.0} → {last:.0}/s, p99 \
             {p99_first:.0} → {p99_last:.0} ms — {}",
            if self.flat() { "flat" } else { "NOT FLAT" }
        )
    }

    /// Flat: every event applied once; over the last third of the steady minutes, the
    /// median applied/s within 5 % of the first third's and the median p99 at most twice
    /// the first third's (+10 ms of poll noise); VmRSS growing by less than 1 MiB a minute
    /// over the second half.
    pub fn flat(&self) -> bool {
        let (first, last) = self.thirds(|m| m.applied as f64 / 60.0);
        let (p99_first, p99_last) = self.thirds(|m| m.p99_ms as f64);
        self.effects == self.distinct as i64
            && (last - first).abs() <= 0.05 * first.max(1.0)
            && p99_last <= 2.0 * p99_first + 10.0
            && self.late_slope_kb_per_min() < 1024.0
    }
}

/// PostgreSQL's `autovacuum` before the soak changed it, and whether that value came from
/// ALTER SYSTEM (`postgresql.auto.conf`) or from the server's own configuration files.
struct AutovacuumBefore {
    value: String,
    by_alter_system: bool,
}

/// Sets PostgreSQL's `autovacuum` for the server (ALTER SYSTEM + reload; needs a superuser),
/// returning what it was. `None` leaves it as it is.
async fn set_autovacuum(db: &Db, to: Option<bool>) -> anyhow::Result<AutovacuumBefore> {
    let (value, sourcefile): (String, Option<String>) =
        sqlx::query_as("SELECT setting, sourcefile FROM pg_settings WHERE name = 'autovacuum'")
            .fetch_one(db.reader())
            .await?;
    let before = AutovacuumBefore {
        value,
        by_alter_system: sourcefile.is_some_and(|f| f.ends_with("postgresql.auto.conf")),
    };
    if let Some(on) = to {
        let want = if on { "on" } else { "off" };
        sqlx::query(&format!("ALTER SYSTEM SET autovacuum = {want}"))
            .execute(db.writer())
            .await
            .context("ALTER SYSTEM SET autovacuum (the soak's --autovacuum needs a superuser)")?;
        if let Err(error) = reload_until(db, want).await {
            // Not left behind for the next user of the server.
            restore_autovacuum(db, &before)
                .await
                .context("restoring autovacuum after a failed reload")?;
            return Err(error);
        }
    }
    Ok(before)
}

/// Puts `autovacuum` back as the soak found it: the value ALTER SYSTEM had set, or, where
/// the server's files set it, no ALTER SYSTEM entry at all (a SET of the old value would
/// leave one behind in `postgresql.auto.conf`, overriding later edits of those files).
async fn restore_autovacuum(db: &Db, before: &AutovacuumBefore) -> anyhow::Result<()> {
    let statement = if before.by_alter_system {
        format!("ALTER SYSTEM SET autovacuum = {}", before.value)
    } else {
        "ALTER SYSTEM RESET autovacuum".to_string()
    };
    sqlx::query(&statement).execute(db.writer()).await?;
    reload_until(db, &before.value).await
}

/// Reloads the server's configuration and waits until new sessions see `autovacuum` at
/// `want` (the reload is asynchronous).
async fn reload_until(db: &Db, want: &str) -> anyhow::Result<()> {
    sqlx::query("SELECT pg_reload_conf()")
        .execute(db.writer())
        .await?;
    let mut seen = String::new();
    for _ in 0..100 {
        let mut conn = db.writer().acquire().await?;
        seen = sqlx::query_scalar("SELECT current_setting('autovacuum')")
            .fetch_one(&mut *conn)
            .await?;
        if seen == want {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A soak measured under the wrong setting, or a server left with it, must not pass
    // unnoticed.
    anyhow::bail!(
        "PostgreSQL still reports autovacuum = {seen} 2 s after the reload that sets it to \
         {want}; check postgresql.auto.conf and the server's log"
    )
}

pub async fn run(
    base: &Settings,
    db: &FreshDb,
    dir: &std::path::Path,
    secret: &str,
    secs: u64,
    rate: u64,
    autovacuum: Option<bool>,
) -> anyhow::Result<Soak> {
    // PostgreSQL's autovacuum is set before the server starts: `serve` reads it once, at
    // start-up, to decide whether it vacuums the hot tables itself. (Until 2026-12-04 it was
    // set after, so in the soaks "with autovacuum on" serve vacuumed the tables as well.)
    let admin = match db.sqlite_path {
        None => Some(Db::connect(&db.url).await?),
        Some(_) => None,
    };
    let autovacuum_before = match &admin {
        Some(admin) => Some(set_autovacuum(admin, autovacuum).await?),
        None => None,
    };
    // One server at `rate` for `secs`, drained: deliveries acknowledged, events, effects,
    // the minutes and the RSS samples. The setting is restored whatever its outcome.
    let soaked = async {
        let settings = server_settings(base, db, dir, secret, true, true);
        let server = ChildServer::start(&settings, dir, "soak").await?;
        // `measure` returns once the backlog has drained, or fails.
        let (minutes, samples, acked) = measure(&server, secret, secs, rate).await?;
        let effects = count(&server.db, "SELECT COUNT(*) FROM processed_effects").await?;
        let distinct = count(&server.db, "SELECT COUNT(*) FROM inbox_events").await?;
        server.shutdown().await?;
        anyhow::Ok((acked, distinct as u64, effects, minutes, samples))
    }
    .await;
    if let (Some(admin), Some(before)) = (&admin, &autovacuum_before) {
        if autovacuum.is_some() {
            restore_autovacuum(admin, before).await?;
        }
        admin.close().await;
    }
    let (acked, distinct, effects, minutes, samples) = soaked?;
    let during = match (autovacuum_before, autovacuum) {
        (None, _) => "n/a".to_string(),
        (Some(_), Some(on)) => (if on { "on" } else { "off" }).to_string(),
        (Some(before), None) => before.value,
    };
    Ok(Soak {
        secs,
        rate,
        autovacuum: during,
        acked,
        distinct,
        effects,
        minutes,
        samples,
    })
}

type Measured = (Vec<Minute>, Vec<(f64, u64)>, u64);

async fn measure(
    server: &ChildServer,
    secret: &str,
    secs: u64,
    rate: u64,
) -> anyhow::Result<Measured> {
    let base = server.url();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let pid = server.pid().to_string();
    let stop_watching = tokio_util::sync::CancellationToken::new();
    let watcher = super::watch::spawn(server.db.clone(), 0, stop_watching.clone());
    let started = Instant::now();
    let started_ms = oncehook::store::now_ms();
    let minutes = (secs as usize).div_ceil(60).max(1);
    let until = started + Duration::from_secs(secs);
    let next = Arc::new(AtomicU64::new(0));
    let acked_per_minute = Arc::new(Mutex::new(vec![0u64; minutes]));
    let factory = EventFactory::new();
    let senders: Vec<_> = (0..SENDERS)
        .map(|_| {
            let (http, base, next, acked, factory, secret) = (
                http.clone(),
                base.clone(),
                next.clone(),
                acked_per_minute.clone(),
                factory.clone(),
                secret.to_string(),
            );
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    // Paced: delivery n is due n / rate seconds after the start.
                    let due = started + Duration::from_secs_f64(n as f64 / rate as f64);
                    if due >= until {
                        return;
                    }
                    tokio::time::sleep_until(due.into()).await;
                    let event = if n % REDELIVER_EVERY == REDELIVER_EVERY - 1 {
                        n - 1
                    } else {
                        n
                    };
                    let sent = send_signed(&http, &base, &secret, factory.body(event)).await;
                    if matches!(&sent, Ok(r) if r.status().is_success()) {
                        let minute = (started.elapsed().as_secs() / 60) as usize;
                        let mut acked = acked.lock().expect("not poisoned");
                        if let Some(m) = acked.get_mut(minute) {
                            *m += 1;
                        }
                    }
                }
            })
        })
        .collect();
    let mut samples = vec![];
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while Instant::now() < until {
        tick.tick().await;
        let at = started.elapsed().as_secs_f64();
        samples.push((at, super::sys::memory_of(&pid).rss_kb));
        if samples.len() % 5 == 0 {
            let _ = http.get(format!("{base}/metrics")).send().await;
        }
    }
    for sender in senders {
        let _ = sender.await;
    }
    // What was received in the window, seen through to its effect.
    anyhow::ensure!(
        wait_drained(&server.db, Duration::from_secs(120)).await?,
        "the backlog did not drain within 120 s of the soak"
    );
    stop_watching.cancel();
    let watched = watcher.await.context("the effect watcher panicked")??;
    let acked_per_minute = acked_per_minute.lock().expect("not poisoned").clone();
    let mut out: Vec<Minute> = acked_per_minute
        .iter()
        .map(|acked| Minute {
            acked: *acked,
            ..Minute::default()
        })
        .collect();
    let mut per_minute_latency = vec![Vec::new(); minutes];
    for (received_at, ms) in &watched.latencies {
        let received = ((received_at - started_ms).max(0) / MINUTE_MS) as usize;
        if let Some(l) = per_minute_latency.get_mut(received) {
            l.push((*ms).max(0) as u64);
        }
        let applied = ((received_at + ms - started_ms).max(0) / MINUTE_MS) as usize;
        if let Some(m) = out.get_mut(applied) {
            m.applied += 1;
        }
    }
    for (m, mut l) in out.iter_mut().zip(per_minute_latency) {
        l.sort_unstable();
        let at = |q: f64| {
            l.get(((l.len() as f64 * q).ceil() as usize).clamp(1, l.len().max(1)) - 1)
                .copied()
                .unwrap_or(0)
        };
        m.p50_ms = at(0.5);
        m.p99_ms = at(0.99);
    }
    // The watcher's clock starts with it, a moment before `started`.
    for (at_ms, backlog) in &watched.backlog {
        if let Some(m) = out.get_mut((*at_ms / MINUTE_MS) as usize) {
            m.backlog_max = m.backlog_max.max(*backlog);
        }
    }
    for (i, m) in out.iter_mut().enumerate() {
        let in_minute: Vec<u64> = samples
            .iter()
            .filter(|(t, _)| (*t / 60.0) as usize == i)
            .map(|(_, kb)| *kb)
            .collect();
        m.rss_kb = in_minute.iter().sum::<u64>() / in_minute.len().max(1) as u64;
    }
    let acked = acked_per_minute.iter().sum();
    Ok((out, samples, acked))
}

#[cfg(test)]
mod tests {
    use super::{slope, Minute, Soak};

    fn soak(applied: &[u64], p99: &[u64], rss: &[(f64, u64)]) -> Soak {
        Soak {
            secs: 60 * applied.len() as u64,
            rate: 100,
            autovacuum: "off".into(),
            acked: 0,
            distinct: 10,
            effects: 10,
            minutes: applied
                .iter()
                .zip(p99)
                .map(|(a, p)| Minute {
                    applied: *a,
                    p99_ms: *p,
                    ..Minute::default()
                })
                .collect(),
            samples: rss.to_vec(),
        }
    }

    #[test]
    fn slope_of_a_line() {
        assert!((slope(&[(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]) - 2.0).abs() < 1e-9);
        assert_eq!(slope(&[(0.0, 1.0)]), 0.0);
    }

    #[test]
    fn flat_run_is_flat_and_a_slowing_one_is_not() {
        let rss = [(0.0, 50_000), (150.0, 50_100), (299.0, 50_050)];
        let flat = soak(&[3000, 6000, 6000, 6000, 6000], &[40, 30, 32, 31, 33], &rss);
        assert_eq!(flat.throughput_first_last(), (100.0, 100.0));
        assert!(flat.flat());
        let slowing = soak(&[3000, 6000, 6000, 6000, 5000], &[40, 30, 40, 60, 90], &rss);
        assert!(!slowing.flat());
        // One slow minute at the start is not a trend (the first steady minute alone
        // used to be the baseline).
        let one_slow_minute = soak(
            &[3000, 5160, 6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000],
            &[40, 150, 60, 62, 58, 61, 60, 59, 63, 60],
            &rss,
        );
        assert!(one_slow_minute.flat());
        let slowing_late = soak(
            &[3000, 6000, 6000, 6000, 6000, 6000, 6000, 5500, 5400, 5300],
            &[40, 30, 30, 30, 30, 30, 30, 30, 30, 30],
            &rss,
        );
        assert!(!slowing_late.flat());
        let tail_rising = soak(
            &[3000, 6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000],
            &[40, 30, 30, 30, 40, 50, 60, 70, 80, 90],
            &rss,
        );
        assert!(!tail_rising.flat());
        let growing = soak(
            &[6000; 5],
            &[30; 5],
            &[(0.0, 50_000), (150.0, 60_000), (299.0, 80_000)],
        );
        assert!(!growing.flat(), "{}", growing.late_slope_kb_per_min());
    }
}
