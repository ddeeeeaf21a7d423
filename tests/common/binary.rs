//! The real `oncehook` binary in its own process, on a free port, with a config file.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{TestDb, STRIPE_SECRET};

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct Binary {
    pub child: Child,
    pub base: String,
    pub addr: SocketAddr,
    /// The config file and `stderr.log` (what the server logged).
    pub dir: tempfile::TempDir,
}

impl Binary {
    /// Starts `oncehook serve` on a free port with `extra` appended to its config file.
    pub async fn start(db: &TestDb, extra: &str) -> Binary {
        Self::start_limited(db, extra, None).await
    }

    /// As `start`, with at most `nofile` open file descriptors in the server process.
    pub async fn start_limited(db: &TestDb, extra: &str, nofile: Option<u64>) -> Binary {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("oncehook.toml");
        std::fs::write(
            &config,
            format!(
                "data_dir = \"{}\"\n{extra}\n[[providers]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n",
                dir.path().display()
            ),
        )
        .unwrap();
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_oncehook"));
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: only an async-signal-safe system call between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, n, n)
                        .map_err(std::io::Error::from)
                });
            }
        }
        let mut child = command
            .args(["serve", "--config"])
            .arg(&config)
            .args(["--database-url", &db.url, "--listen", &addr.to_string()])
            .env("RUST_LOG", "info")
            .env_remove("ONCEHOOK_CONFIG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap())
            .spawn()
            .expect("start oncehook");
        let base = format!("http://{addr}");
        // From an address no test floods, so its pooled connection counts against nobody.
        let http = reqwest::Client::builder()
            .local_address("127.0.0.254".parse::<std::net::IpAddr>().unwrap())
            .build()
            .unwrap();
        for _ in 0..200 {
            if let Ok(r) = http.get(format!("{base}/healthz")).send().await {
                if r.status() == 200 {
                    return Binary {
                        child,
                        base,
                        addr,
                        dir,
                    };
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "server did not become healthy:\n{}",
            std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default()
        );
    }

    /// Stops it (SIGTERM) and returns what it logged.
    pub fn stop(mut self) -> String {
        let log = self.dir.path().join("stderr.log");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        self.child.wait().unwrap();
        std::fs::read_to_string(log).unwrap()
    }
}

impl Drop for Binary {
    /// A failing test never leaves the server running.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A new payment (`evt_{tag}_{i}` for order `order-{tag}-{i}`), signed with the test
/// secret and posted to `base`'s Stripe webhook: the answer's status.
pub async fn post_payment(
    http: &reqwest::Client,
    base: &str,
    tag: &str,
    i: usize,
) -> reqwest::Result<u16> {
    let body = super::fixtures::payment_intent_succeeded(
        &format!("evt_{tag}_{i}"),
        &format!("pi_{tag}_{i}"),
        &format!("order-{tag}-{i}"),
        100,
        super::fixtures::T10_00,
    )
    .to_string();
    let sig = oncehook::provider::signature::stripe::sign(
        STRIPE_SECRET,
        super::now_secs(),
        body.as_bytes(),
    );
    let r = http
        .post(format!("{base}/webhooks/stripe"))
        .header("stripe-signature", sig)
        .body(body)
        .send()
        .await?;
    Ok(r.status().as_u16())
}
