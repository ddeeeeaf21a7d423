//! Fresh databases for each step (a SQLite file in a temporary directory, or a PostgreSQL
//! database with a random name) and the settings the real server is started with.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use sqlx::{Connection, Executor};

use oncehook::config::{ProviderSettings, Settings};
use oncehook::provider::signature::SchemeKind;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Sqlite,
    Postgres,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Sqlite => "SQLite",
            Kind::Postgres => "PostgreSQL",
        }
    }
}

/// Creates fresh databases and removes every one of them at the end, also after errors.
pub struct Fixtures {
    postgres_admin_url: String,
    dir: PathBuf,
    pg_databases: Vec<String>,
}

/// A fresh, empty database (no schema yet).
#[derive(Clone, Debug)]
pub struct FreshDb {
    pub url: String,
    /// The SQLite file, for the bare-loop ceilings.
    pub sqlite_path: Option<PathBuf>,
}

fn random_suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_string()
}

/// `postgres://user@host:port/db?x` with the database name replaced.
pub fn with_database(url: &str, name: &str) -> anyhow::Result<String> {
    let scheme_end = url.find("://").context("a PostgreSQL URL has a scheme")? + 3;
    let (base, query) = match url.find('?') {
        Some(q) => (&url[..q], &url[q..]),
        None => (url, ""),
    };
    let authority_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    Ok(format!("{}/{name}{query}", &base[..authority_end]))
}

impl Fixtures {
    pub fn new(postgres_admin_url: &str, dir: Option<&Path>) -> anyhow::Result<Self> {
        let dir = dir
            .map(Path::to_path_buf)
            .unwrap_or_else(std::env::temp_dir)
            .join(format!("oncehook-bench-{}", random_suffix()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Fixtures {
            postgres_admin_url: postgres_admin_url.to_string(),
            dir,
            pg_databases: vec![],
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub async fn fresh(&mut self, kind: Kind, step: &str) -> anyhow::Result<FreshDb> {
        match kind {
            Kind::Sqlite => {
                let path = self.dir.join(format!("{step}-{}.db", random_suffix()));
                Ok(FreshDb {
                    url: format!("sqlite://{}", path.display()),
                    sqlite_path: Some(path),
                })
            }
            Kind::Postgres => {
                let name = format!("oncehook_bench_{}", random_suffix());
                let mut admin = sqlx::PgConnection::connect(&self.postgres_admin_url)
                    .await
                    .with_context(|| {
                        format!(
                            "connecting to PostgreSQL at {}",
                            oncehook::config::redact_url(&self.postgres_admin_url)
                        )
                    })?;
                admin
                    .execute(format!("CREATE DATABASE {name}").as_str())
                    .await
                    .with_context(|| format!("creating database {name}"))?;
                // Every step starts from a finished checkpoint, so one step's WAL (a probe
                // before it) does not make the next step pay for its sync; a checkpoint the
                // step's own writes call for still falls inside it. Needs a superuser or
                // pg_checkpoint; without that the step runs as before.
                if let Err(error) = admin.execute("CHECKPOINT").await {
                    tracing::warn!(%error, "CHECKPOINT before the step failed; continuing");
                }
                admin.close().await.ok();
                self.pg_databases.push(name.clone());
                Ok(FreshDb {
                    url: with_database(&self.postgres_admin_url, &name)?,
                    sqlite_path: None,
                })
            }
        }
    }

    pub async fn postgres_version(&self) -> String {
        let version = async {
            let mut admin = sqlx::PgConnection::connect(&self.postgres_admin_url).await?;
            let v: String = sqlx::query_scalar("SELECT version()")
                .fetch_one(&mut admin)
                .await?;
            admin.close().await.ok();
            anyhow::Ok(v)
        };
        version.await.unwrap_or_else(|e| format!("unknown ({e:#})"))
    }

    /// Drops every database this run created. Errors are reported, not fatal.
    pub async fn cleanup(&mut self) {
        if !self.pg_databases.is_empty() {
            match sqlx::PgConnection::connect(&self.postgres_admin_url).await {
                Ok(mut admin) => {
                    for name in self.pg_databases.drain(..) {
                        let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                        if let Err(error) = admin.execute(sql.as_str()).await {
                            eprintln!("warning: could not drop database {name}: {error}");
                        }
                    }
                    admin.close().await.ok();
                }
                Err(error) => eprintln!(
                    "warning: could not drop the benchmark databases {:?}: {error}",
                    self.pg_databases
                ),
            }
        }
        if let Err(error) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("warning: could not remove {}: {error}", self.dir.display());
        }
    }
}

pub const PROVIDER: &str = "stripe";

/// The server's settings for one step: the operator's configuration (defaults, `--config`
/// file, `ONCEHOOK_*` variables: batch sizes, writers, workers are theirs to tune), with
/// the benchmark's database, a loopback port, one Stripe provider with a known secret, and
/// the parts the step needs.
pub fn server_settings(
    base: &Settings,
    db: &FreshDb,
    data_dir: &Path,
    secret: &str,
    receiver: bool,
    processor: bool,
) -> Settings {
    let mut s = base.clone();
    s.database_url = db.url.clone();
    s.data_dir = data_dir.to_path_buf();
    s.listen = "127.0.0.1:0".parse().expect("valid loopback address");
    s.providers = vec![ProviderSettings {
        name: PROVIDER.into(),
        scheme: SchemeKind::Stripe,
        secrets: vec![secret.to_string()],
        tolerance_secs: 300,
        mapping: None,
        events: BTreeMap::new(),
        api: Default::default(),
        signature: None,
    }];
    s.receiver.enabled = receiver;
    s.processor.enabled = processor;
    // Issue 2's pipeline only: receipt → inbox → effect. The outbox relay and the pruner
    // would add their own load to every step and are not what these numbers are about.
    s.outbox.relay.enabled = false;
    s.retention.enabled = false;
    s
}

/// Posts `body` to the bench provider's webhook at `base`, signed now as Stripe would.
pub async fn send_signed(
    http: &reqwest::Client,
    base: &str,
    secret: &str,
    body: String,
) -> reqwest::Result<reqwest::Response> {
    let signature = oncehook::provider::signature::stripe::sign(
        secret,
        chrono::Utc::now().timestamp(),
        body.as_bytes(),
    );
    http.post(format!("{base}/webhooks/{PROVIDER}"))
        .header("stripe-signature", signature)
        .body(body)
        .send()
        .await
}

#[cfg(test)]
mod tests {
    #[test]
    fn database_name_is_replaced() {
        assert_eq!(
            super::with_database("postgres://postgres@127.0.0.1:5432/postgres", "b").unwrap(),
            "postgres://postgres@127.0.0.1:5432/b"
        );
        assert_eq!(
            super::with_database("postgres://u:p@h/db?sslmode=disable", "b").unwrap(),
            "postgres://u:p@h/b?sslmode=disable"
        );
        assert_eq!(
            super::with_database("postgres://h:5432", "b").unwrap(),
            "postgres://h:5432/b"
        );
    }
}
