//! Test harness: a fresh database per test (a temporary SQLite file, or a PostgreSQL
//! database with a random name, dropped afterwards), the real server on port 0, signed
//! requests, and state snapshots to compare.
#![allow(dead_code)]

pub mod binary;
pub mod fixtures;
pub mod peers;
pub mod truth;

use std::sync::Arc;
use std::time::Duration;

use oncehook::config::{ProviderSettings, Providers, Settings};
use oncehook::pipeline::processor::{Processor, ProcessorParts};
use oncehook::provider::signature::SchemeKind;
use oncehook::server::RunningServer;
use oncehook::store::Db;
use serde_json::Value;
use sqlx::Row;

pub const STRIPE_SECRET: &str = "whsec_test_current";
pub const STRIPE_OLD_SECRET: &str = "whsec_test_previous";
pub const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// Runs a test body once per backend: `both!(name, ...)` makes `sqlite::name` and
/// `postgres::name` tests calling `name(Kind)`.
#[macro_export]
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() { super::$name($crate::common::Kind::Sqlite).await }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    if $crate::common::postgres_base_url().is_none() { return; }
                    super::$name($crate::common::Kind::Postgres).await
                }
            )*
        }
    };
}

/// The PostgreSQL server tests create their databases on. Unset: PostgreSQL tests are
/// skipped locally, but under CI that is a failure, never a silent skip.
pub fn postgres_base_url() -> Option<String> {
    match std::env::var("ONCEHOOK_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!(
                "CI is set but ONCEHOOK_TEST_POSTGRES_URL is not: PostgreSQL tests must run in CI"
            )
        }
        _ => {
            eprintln!("ONCEHOOK_TEST_POSTGRES_URL not set: skipping the PostgreSQL variant");
            None
        }
    }
}

pub struct TestDb {
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    pg: Option<(String, String)>,
}

fn random_name(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

impl TestDb {
    pub async fn new(kind: Kind) -> TestDb {
        match kind {
            Kind::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}", dir.path().join("oncehook.db").display());
                TestDb {
                    url,
                    _dir: Some(dir),
                    pg: None,
                }
            }
            Kind::Postgres => Self::postgres_with("").await,
        }
    }

    /// A new PostgreSQL database created with `clause` (`TABLESPACE small`).
    pub async fn postgres_with(clause: &str) -> TestDb {
        let base = postgres_base_url().expect("PostgreSQL URL");
        let name = random_name("oncehook_test");
        let admin = connect_admin(&base).await;
        sqlx::query(&format!("CREATE DATABASE {name} {clause}"))
            .execute(&admin)
            .await
            .unwrap_or_else(|e| {
                panic!("PostgreSQL at {base} unreachable or refusing CREATE DATABASE: {e}")
            });
        admin.close().await;
        let url = match base.rfind('/') {
            Some(i) if i > "postgres://".len() => format!("{}/{name}", &base[..i]),
            _ => format!("{base}/{name}"),
        };
        TestDb {
            url,
            _dir: None,
            pg: Some((base, name)),
        }
    }

    /// A SQLite database file at `path` (a directory the test owns, e.g. a small tmpfs).
    pub fn sqlite_at(path: &std::path::Path) -> TestDb {
        TestDb {
            url: format!("sqlite://{}", path.display()),
            _dir: None,
            pg: None,
        }
    }

    /// The PostgreSQL database's name, for statements about it (`pg_terminate_backend`).
    pub fn postgres_name(&self) -> Option<&str> {
        self.pg.as_ref().map(|(_, name)| name.as_str())
    }

    pub async fn connect(&self) -> Db {
        let db = Db::connect(&self.url).await.unwrap();
        db.migrate().await.unwrap();
        db
    }
}

pub async fn connect_admin(base: &str) -> sqlx::AnyPool {
    sqlx::any::install_default_drivers();
    sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(5))
        .connect(base)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {base} is unreachable: {e}"))
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some((base, name)) = self.pg.take() {
            // Drop runs outside async; a small runtime on its own thread does the cleanup.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let admin = connect_admin(&base).await;
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&admin)
                        .await;
                    admin.close().await;
                });
            })
            .join();
        }
    }
}

pub fn providers() -> Vec<ProviderSettings> {
    vec![
        ProviderSettings {
            name: "stripe".into(),
            scheme: SchemeKind::Stripe,
            secrets: vec![STRIPE_SECRET.into(), STRIPE_OLD_SECRET.into()],
            tolerance_secs: 300,
            mapping: None,
            events: Default::default(),
            api: Default::default(),
            signature: None,
        },
        ProviderSettings {
            name: "acme".into(),
            scheme: SchemeKind::StandardWebhooks,
            secrets: vec![SW_SECRET.into()],
            tolerance_secs: 300,
            mapping: None,
            events: Default::default(),
            api: Default::default(),
            signature: None,
        },
    ]
}

pub fn settings(db: &TestDb) -> Settings {
    let mut s = Settings {
        database_url: db.url.clone(),
        listen: "127.0.0.1:0".parse().unwrap(),
        providers: providers(),
        ..Settings::default()
    };
    s.data_dir = std::env::temp_dir();
    s.processor.poll_interval_ms = 50;
    // Retries wait long enough that a test sees them waiting; `make_due` skips the wait.
    s.processor.retry.base_ms = 60_000;
    s.retention.enabled = false;
    // The consistency check writes its result at start; tests that want it turn it on.
    s.verify.interval_minutes = 0;
    s
}

pub struct TestApp {
    pub db_handle: TestDb,
    pub server: Option<RunningServer>,
    pub db: Db,
    pub url: String,
    pub settings: Settings,
    pub http: reqwest::Client,
}

/// The password `TestApp::sign_in` gives the users it creates.
pub const TEST_PASSWORD: &str = "a long passphrase 1";

/// The sign-in form as a browser on `base`'s own pages posts it.
pub fn sign_in_request(
    http: &reqwest::Client,
    base: &str,
    user: &str,
    password: &str,
) -> reqwest::RequestBuilder {
    http.post(format!("{base}/auth/sign-in"))
        .header("Origin", base)
        .header("Sec-Fetch-Site", "same-origin")
        .form(&[("username", user), ("password", password), ("next", "/")])
}

/// The session cookie's `name=value` from a response's headers, if it set one.
pub fn session_cookie(headers: &reqwest::header::HeaderMap) -> Option<String> {
    let prefix = format!("{}=", oncehook::http::auth::SESSION_COOKIE);
    headers
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with(&prefix))
        .and_then(|c| c.split(';').next())
        .map(str::to_owned)
}

async fn json_answer(path: &str, request: reqwest::RequestBuilder) -> (reqwest::StatusCode, Value) {
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{path}: not JSON: {text}"));
    (status, body)
}

impl TestApp {
    /// Creates a user with `role` and signs it in over HTTP as a browser's form does;
    /// returns the session cookie (`name=value`) to send with later requests.
    pub async fn sign_in(&self, name: &str, role: app::backend::Role) -> String {
        self.sign_in_at(&self.url.clone(), name, role).await
    }

    /// A page as a signed-in browser gets it (redirects not followed): status and body.
    /// A page not answered within 20 s is a hang (the last one: leptos#4773, see
    /// `web::dashboard::route_list`): every thread's stack is printed then, once, for
    /// finding its cause; the request goes on waiting, so the test fails as it would have.
    pub async fn page(&self, path: &str, cookie: &str) -> (u16, String) {
        let request = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
            .get(format!("{}{path}", self.url))
            .header(reqwest::header::COOKIE, cookie)
            .send();
        tokio::pin!(request);
        let response = match tokio::time::timeout(Duration::from_secs(20), &mut request).await {
            Ok(response) => response,
            Err(_) => {
                eprintln!("{path}: no answer within 20 s; the stacks of every thread:");
                eprintln!("{}", stack_dump());
                request.await
            }
        }
        .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    /// Posts a server function the way a form does (urlencoded), signed in with `cookie`,
    /// from this origin. With `referer`, as a browser without JavaScript does: the answer
    /// is then a redirect back to it; without, as a script: the function's own answer.
    pub async fn post_form(
        &self,
        path: &str,
        cookie: &str,
        referer: Option<&str>,
        form: &[(&str, &str)],
    ) -> (u16, String) {
        let mut request = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
            .post(format!("{}{path}", self.url))
            .header(reqwest::header::COOKIE, cookie)
            .header("Origin", &self.url)
            .form(form);
        if let Some(referer) = referer {
            request = request
                .header(reqwest::header::REFERER, format!("{}{referer}", self.url))
                .header(reqwest::header::ACCEPT, "text/html");
        }
        let response = request.send().await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    /// The same at another address of this server (the admin listener).
    pub async fn sign_in_at(&self, base: &str, name: &str, role: app::backend::Role) -> String {
        let passwords = oncehook::http::auth::password::Passwords::new(1)
            .await
            .unwrap();
        oncehook::http::auth::admin::add_user(
            &self.db,
            &passwords,
            name,
            TEST_PASSWORD,
            role,
            "test",
        )
        .await
        .unwrap();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let response = sign_in_request(&http, base, name, TEST_PASSWORD)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 303, "sign-in of {name}");
        session_cookie(response.headers()).expect("a session cookie")
    }

    /// An API token with `role`, made as `oncehook token add` makes one (valid a day).
    pub async fn token(&self, name: &str, role: &str) -> String {
        let now = oncehook::store::now_ms();
        oncehook::store::tokens::create(
            &self.db,
            &oncehook::store::tokens::NewToken {
                name,
                role,
                created_by: "test",
                maker: oncehook::store::tokens::Maker::Shell,
                now,
                expires_at: now + 86_400_000,
            },
            None,
        )
        .await
        .unwrap()
        .1
    }

    /// `/metrics` as a scraper reads it.
    pub async fn metrics(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// An API GET with an optional bearer token: status and JSON body.
    pub async fn api_get(&self, path: &str, token: Option<&str>) -> (reqwest::StatusCode, Value) {
        let mut request = self.http.get(format!("{}{path}", self.url));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        json_answer(path, request).await
    }

    /// An API POST of `body` as JSON with a bearer token: status and JSON body.
    pub async fn api_post(
        &self,
        path: &str,
        token: &str,
        body: &Value,
    ) -> (reqwest::StatusCode, Value) {
        let request = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(token)
            .json(body);
        json_answer(path, request).await
    }

    /// The server with its processor and relay OFF: tests drive them step by step.
    pub async fn spawn(kind: Kind) -> TestApp {
        Self::spawn_with(kind, |s| {
            s.processor.enabled = false;
            s.outbox.relay.enabled = false;
        })
        .await
    }

    pub async fn spawn_with(kind: Kind, tweak: impl FnOnce(&mut Settings)) -> TestApp {
        let db_handle = TestDb::new(kind).await;
        let mut settings = settings(&db_handle);
        tweak(&mut settings);
        let server = oncehook::server::start(settings.clone()).await.unwrap();
        let url = server.url();
        let db = server.db.clone();
        TestApp {
            db_handle,
            server: Some(server),
            db,
            url,
            settings,
            http: reqwest::Client::new(),
        }
    }

    /// The capability `C` for a person called `name` with `role` (from 192.0.2.7), made
    /// the one way the server makes it; panics when the role does not allow `C`.
    pub async fn acting<C: app::backend::Capability>(
        &self,
        name: &str,
        role: app::backend::Role,
    ) -> C {
        self.authorize(name, role, "test", "test")
            .await
            .unwrap_or_else(|e| panic!("{name} as {role}: {e}"))
    }

    /// The role check a server function or API handler makes for `action` on `target`:
    /// a refusal is audited and is `Forbidden`.
    pub async fn authorize<C: app::backend::Capability>(
        &self,
        name: &str,
        role: app::backend::Role,
        action: &str,
        target: &str,
    ) -> Result<C, app::error::AppError> {
        let principal = app::backend::Principal {
            user_id: 1,
            name: name.into(),
            role,
            must_change_password: false,
            source: Some("192.0.2.7".into()),
        };
        app::backend::authorize::<C>(&self.backend(), principal, action, target).await
    }

    /// The dashboard's backend over this app's database, as the server builds it.
    pub fn backend(&self) -> oncehook::http::admin::StoreBackend {
        let providers = Arc::new(Providers::build(&self.settings.providers).unwrap());
        let view = oncehook::config::view::settings_view(&self.settings, &providers).unwrap();
        oncehook::http::admin::StoreBackend::new(self.db.clone(), providers).with_settings(
            view,
            self.settings.commands.confirm_within_secs as i64 * 1000,
        )
    }

    pub fn processor(&self) -> Processor {
        processor(&self.db, &self.settings)
    }

    pub fn relay(&self) -> oncehook::pipeline::relay::Relay {
        oncehook::pipeline::relay::Relay::new(
            self.db.clone(),
            oncehook::pipeline::relay::sinks::Sinks::build(&self.settings.sinks).unwrap(),
            self.settings.outbox.relay.clone(),
            self.settings.dead_letters.resolve_within_hours,
            oncehook::pipeline::alerts::Alerter::log_only(),
            Arc::new(tokio::sync::Notify::new()),
        )
    }

    pub async fn process(&self) -> usize {
        self.processor().run_until_idle().await.unwrap()
    }

    pub async fn post_raw(
        &self,
        provider: &str,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> reqwest::Response {
        let mut req = self
            .http
            .post(format!("{}/webhooks/{provider}", self.url))
            .body(body);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        req.send().await.unwrap()
    }

    /// Posts a body signed like Stripe with `secret` at `t` (Unix seconds).
    pub async fn post_stripe_with(&self, body: &[u8], secret: &str, t: i64) -> reqwest::Response {
        let sig = oncehook::provider::signature::stripe::sign(secret, t, body);
        self.post_raw(
            "stripe",
            vec![("stripe-signature".into(), sig)],
            body.to_vec(),
        )
        .await
    }

    pub async fn post_stripe(&self, body: &serde_json::Value) -> reqwest::Response {
        self.post_stripe_with(body.to_string().as_bytes(), STRIPE_SECRET, now_secs())
            .await
    }

    pub async fn post_standard(&self, id: &str, body: &serde_json::Value) -> reqwest::Response {
        let t = now_secs();
        let raw = body.to_string().into_bytes();
        let sig =
            oncehook::provider::signature::standard_webhooks::sign(SW_SECRET, id, t, &raw).unwrap();
        self.post_raw(
            "acme",
            vec![
                ("webhook-id".into(), id.into()),
                ("webhook-timestamp".into(), t.to_string()),
                ("webhook-signature".into(), sig),
            ],
            raw,
        )
        .await
    }

    /// Makes every waiting retry due now.
    pub async fn make_due(&self) {
        sqlx::query("UPDATE inbox_events SET next_attempt_at = 0 WHERE status = 'pending'")
            .execute(self.db.writer())
            .await
            .unwrap();
    }

    pub async fn count(&self, sql: &str) -> i64 {
        count(&self.db, sql).await
    }

    pub async fn order_status(&self, order_id: &str) -> Option<String> {
        sqlx::query("SELECT status FROM orders WHERE order_id = $1")
            .bind(order_id)
            .fetch_optional(self.db.reader())
            .await
            .unwrap()
            .map(|r| r.try_get(0).unwrap())
    }

    pub async fn event_status(&self, event_id: &str) -> (String, Option<String>) {
        let row = sqlx::query("SELECT status, reason FROM inbox_events WHERE event_id = $1")
            .bind(event_id)
            .fetch_one(self.db.reader())
            .await
            .unwrap();
        (row.try_get(0).unwrap(), row.try_get(1).unwrap())
    }

    /// Waits (bounded) until no event is pending or being processed.
    pub async fn wait_until_processed(&self) {
        for _ in 0..400 {
            if self
                .count(
                    "SELECT COUNT(*) FROM inbox_events WHERE status IN ('pending', 'processing')",
                )
                .await
                == 0
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("events still pending after 10 s");
    }

    pub async fn shutdown(mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown().await.unwrap();
        }
    }
}

pub fn processor(db: &Db, settings: &Settings) -> Processor {
    Processor::new(
        db.clone(),
        ProcessorParts {
            providers: Arc::new(Providers::build(&settings.providers).unwrap()),
            settings: settings.processor.clone(),
            outbox: settings.outbox.clone(),
            resolve_within_hours: settings.dead_letters.resolve_within_hours,
            alerter: oncehook::pipeline::alerts::Alerter::log_only(),
            wake: Arc::new(tokio::sync::Notify::new()),
            outbox_wake: Arc::new(tokio::sync::Notify::new()),
        },
    )
}

pub async fn count(db: &Db, sql: &str) -> i64 {
    sqlx::query(sql)
        .fetch_one(db.reader())
        .await
        .unwrap()
        .try_get(0)
        .unwrap()
}

pub fn now_secs() -> i64 {
    chrono::Utc::now().timestamp()
}

/// The business state, without receipt times and the delivery log: what must be equal
/// after one delivery and after N.
#[derive(Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub orders: Vec<(String, String, Option<i64>, Option<String>)>,
    pub effects: Vec<(String, String, String, String)>,
    /// (entry key, entry kind, counted, status after)
    pub ledger: Vec<(String, String, i64, String)>,
    /// (order, paid, refunded, disputed, attention)
    pub money: Vec<(String, i64, i64, i64, Option<String>)>,
    /// (order, kind, resource, state, money seen)
    pub facts: Vec<(String, String, String, String, i64)>,
    pub stale: Vec<(String, String, String)>,
    pub outbox: Vec<(String, String, String)>,
    pub inbox: Vec<(String, String, Option<String>)>,
}

pub async fn snapshot(db: &Db) -> Snapshot {
    let pool = db.reader();
    let rows = |sql: &'static str| async move { sqlx::query(sql).fetch_all(pool).await.unwrap() };
    Snapshot {
        orders: rows("SELECT order_id, status, last_event_at, last_event_id FROM orders ORDER BY order_id")
            .await
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect(),
        effects: rows("SELECT effect_key, transition, event_id, outcome FROM processed_effects ORDER BY effect_key")
            .await
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect(),
        ledger: rows("SELECT effect_key, entry, counted, status_after FROM order_ledger ORDER BY effect_key")
            .await
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect(),
        money: rows("SELECT order_id, amount_paid, amount_refunded, amount_disputed, attention FROM orders ORDER BY order_id")
            .await
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
            .collect(),
        facts: rows("SELECT order_id, kind, resource_id, state, money_seen FROM order_facts ORDER BY order_id, kind, resource_id")
            .await
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
            .collect(),
        stale: rows("SELECT event_id, kind, order_status FROM stale_events ORDER BY event_id")
            .await
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect(),
        outbox: rows("SELECT idempotency_key, topic, sink FROM outbox ORDER BY idempotency_key")
            .await
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect(),
        inbox: rows("SELECT event_id, status, order_id FROM inbox_events ORDER BY event_id")
            .await
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect(),
    }
}

/// A write lock held from a connection of its own, so the server cannot commit: SQLite's
/// whole database (`BEGIN EXCLUSIVE`), or one PostgreSQL table.
pub struct WriteLock {
    db: Db,
    conn: sqlx::pool::PoolConnection<sqlx::Any>,
}

impl WriteLock {
    pub async fn take(app: &TestApp, postgres_table: &str) -> WriteLock {
        let db = Db::connect(&app.db_handle.url).await.unwrap();
        let mut conn = db.writer().acquire().await.unwrap();
        let lock = match app.db.backend {
            oncehook::store::Backend::Sqlite => "BEGIN EXCLUSIVE".to_string(),
            oncehook::store::Backend::Postgres => {
                format!("BEGIN; LOCK TABLE {postgres_table} IN ACCESS EXCLUSIVE MODE")
            }
        };
        sqlx::raw_sql(&lock).execute(&mut *conn).await.unwrap();
        WriteLock { db, conn }
    }

    pub async fn release(mut self) {
        sqlx::raw_sql("ROLLBACK")
            .execute(&mut *self.conn)
            .await
            .unwrap();
        drop(self.conn);
        self.db.close().await;
    }
}

/// Every thread's stack of this test process, by gdb (on every machine of this kind), or
/// why there is none.
pub fn stack_dump() -> String {
    match std::process::Command::new("gdb")
        .args(["-p", &std::process::id().to_string(), "-batch", "-nx"])
        .args(["-ex", "thread apply all bt"])
        .output()
    {
        Ok(out) => format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => format!("gdb could not run: {e}"),
    }
}

/// Discourages (`off`) or restores (RESET) PostgreSQL planner steps on `conn`, so a tiny
/// test table does not hide which index would serve a statement at a million rows (a
/// discouraged step is still taken when nothing else can answer). Nothing on SQLite.
pub async fn planner_steps(conn: &mut sqlx::AnyConnection, steps: &[&str], discouraged: bool) {
    if oncehook::store::Backend::of(conn) != oncehook::store::Backend::Postgres {
        return;
    }
    for step in steps {
        // Each one by name: RESET ALL would also undo the pool's read-only session.
        let sql = if discouraged {
            format!("SET {step} = off")
        } else {
            format!("RESET {step}")
        };
        sqlx::query(&sql).execute(&mut *conn).await.unwrap();
    }
}
