//! The server under test in its own process: `oncehook serve` started from the settings a
//! step wants (written as the TOML file an operator would write), on a free loopback port,
//! stopped with SIGTERM as a service manager stops it. Its memory and CPU are its own, read
//! from /proc by pid, so nothing of the load generator is counted as the server's and no
//! state (pools, metrics, runtimes) carries over from one step to the next.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::Context;
use oncehook::config::Settings;
use oncehook::store::Db;

use crate::sys;

/// The highest VmHWM of the servers stopped since `reset_peak_kb`, KiB.
static PEAK_KB: AtomicU64 = AtomicU64::new(0);

pub fn reset_peak_kb() {
    PEAK_KB.store(0, Ordering::Relaxed);
}

pub fn peak_kb() -> u64 {
    PEAK_KB.load(Ordering::Relaxed)
}

/// The `oncehook` binary every step starts (set once from `--oncehook-bin`).
static BINARY: OnceLock<PathBuf> = OnceLock::new();

/// Where `oncehook` is: the given path, else next to this binary (one target directory
/// builds both).
pub fn set_binary(given: Option<PathBuf>) -> anyhow::Result<()> {
    let path = match given {
        Some(path) => path,
        None => std::env::current_exe()
            .context("locating oncehook-bench")?
            .with_file_name("oncehook"),
    };
    anyhow::ensure!(
        path.is_file(),
        "the oncehook binary is not at {} (build it, or pass --oncehook-bin)",
        path.display()
    );
    let _ = BINARY.set(path);
    Ok(())
}

pub fn binary() -> &'static Path {
    BINARY
        .get()
        .map(PathBuf::as_path)
        .unwrap_or(Path::new("oncehook"))
}

/// `std::process::Command` for the oncehook binary, logging at warn unless RUST_LOG says
/// otherwise (at info the server writes a line per event, which would be measured too).
pub fn command() -> std::process::Command {
    let mut command = std::process::Command::new(binary());
    if std::env::var_os("RUST_LOG").is_none() {
        command.env("RUST_LOG", "warn");
    }
    command
}

pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

pub async fn wait_healthy(http: &reqwest::Client, base: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        if let Ok(r) = http.get(format!("{base}/healthz")).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    anyhow::bail!("the server at {base} did not become healthy within 30 s")
}

/// A running `oncehook serve` child.
pub struct ChildServer {
    child: std::process::Child,
    pub addr: SocketAddr,
    /// The bench's own connection to the server's database (counting, seeding).
    pub db: Db,
    log: PathBuf,
}

impl ChildServer {
    /// Writes `settings` (with a free port) to a config file under `dir`, starts the binary
    /// on it and waits until `/healthz` answers and the schema is there.
    pub async fn start(settings: &Settings, dir: &Path, step: &str) -> anyhow::Result<Self> {
        let mut settings = settings.clone();
        let port = free_port()?;
        settings.listen = SocketAddr::from(([127, 0, 0, 1], port));
        let stem = format!("{step}-{}", uuid::Uuid::new_v4().simple());
        let config = dir.join(format!("{stem}.toml"));
        let log = dir.join(format!("{stem}.log"));
        std::fs::write(
            &config,
            toml::to_string(&settings).context("writing the server's settings as TOML")?,
        )?;
        let mut child = command()
            .args(["serve", "--config"])
            .arg(&config)
            // The file is the whole configuration; the operator's was already read into it.
            .env_remove("ONCEHOOK_CONFIG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {} serve", binary().display()))?;
        let addr = settings.listen;
        let http = reqwest::Client::new();
        let healthy = wait_healthy(&http, &format!("http://{addr}")).await;
        let db = match healthy {
            Ok(()) => Db::connect(&settings.database_url).await,
            Err(error) => Err(error),
        };
        let db = match db {
            Ok(db) => db,
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(error.context(format!("the server's log ends with:\n{}", tail(&log))));
            }
        };
        let server = ChildServer {
            child,
            addr,
            db,
            log,
        };
        sys::set_server_pid(Some(server.pid()));
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Peak resident memory of the server so far, KiB.
    pub fn hwm_kb(&self) -> u64 {
        sys::memory_of(&self.pid().to_string()).hwm_kb
    }

    fn log_tail(&self) -> String {
        tail(&self.log)
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        sys::set_server_pid(None);
    }

    /// SIGTERM, then waits (30 s at most) for a clean exit; returns the server's peak
    /// resident memory (KiB).
    pub async fn shutdown(mut self) -> anyhow::Result<u64> {
        let hwm = self.hwm_kb();
        PEAK_KB.fetch_max(hwm, Ordering::Relaxed);
        self.db.close().await;
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)
            .context("sending SIGTERM to the server")?;
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break status;
            }
            if started.elapsed() > Duration::from_secs(30) {
                let log = self.log_tail();
                self.kill();
                anyhow::bail!("the server did not stop within 30 s of SIGTERM; its log:\n{log}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        sys::set_server_pid(None);
        anyhow::ensure!(
            status.success(),
            "the server exited with {status}; its log:\n{}",
            self.log_tail()
        );
        Ok(hwm)
    }
}

impl Drop for ChildServer {
    /// A failed step leaves no process behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// The last 20 lines of a server's log.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
