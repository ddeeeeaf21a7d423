//! Dashboard access: who may see and change what.
//!
//! - Sessions: tower-sessions with its sqlx store in the same database (a small pool of its
//!   own, since the store needs a concrete `SqlitePool`/`PgPool`). The id is cycled at
//!   sign-in; the cookie is HttpOnly, SameSite=Strict, Secure when configured; a session
//!   ends after `dashboard.session_idle_minutes` without a request and at the latest
//!   `dashboard.session_lifetime_minutes` after its sign-in, and is saved at most once a
//!   minute, not on every request ([`lifetime`]).
//! - Passwords: argon2id ([`password`]); password attempts (sign-ins and password changes)
//!   limited per (user, address) and per address ([`limit`]); refusals audited as one row
//!   per window with the count ([`refusals`]). Form bodies are small ([`FORM_BODY_LIMIT`]),
//!   user names are checked before they reach a limiter or the audit log.
//! - Every request to the dashboard passes [`load_principal`] (session → user → the
//!   [`Principal`] in the request's extensions) and [`gate::require_sign_in`]; server
//!   functions turn the principal into the capability (`Viewer`, `Operator`, `Admin`) that
//!   the backend method they call takes.
//! - CSRF: tower-http's `CsrfLayer` (Sec-Fetch-Site / Origin against Host) on every
//!   dashboard route; no state changes through GET.

pub mod gate;
pub mod lifetime;
pub mod limit;
pub mod password;
pub mod refusals;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use app::backend::{Principal, Role};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::post;
use axum::{Form, Router};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower_http::csrf::CsrfLayer;
use tower_sessions::cookie::SameSite;
use tower_sessions::{ExpiredDeletion, Expiry, Session, SessionManagerLayer};
use tower_sessions_sqlx_store::{PostgresStore, SqliteStore};

use crate::store::users::{self, AuditEntry, NewUser};
use crate::store::{now_ms, Backend, Db};

use self::lifetime::SessionTimes;
use self::limit::{Refused, SignInLimits};
use self::password::Passwords;
use self::refusals::{Refusal, Refusals};

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DashboardSettings {
    /// A session ends after this long without a request.
    pub session_idle_minutes: i64,
    /// A session ends this long after its sign-in, however active it is.
    pub session_lifetime_minutes: i64,
    /// Mark the session cookie `Secure`: set it when the dashboard is served over HTTPS
    /// (oncehook itself speaks plain HTTP; TLS ends at the proxy in front).
    pub secure_cookie: bool,
    /// Password attempts (sign-ins and password changes) per minute for one user name from
    /// one client address, and from one client address for any name.
    pub sign_in_per_minute_per_user_and_address: u32,
    pub sign_in_per_minute_per_address: u32,
}

impl Default for DashboardSettings {
    fn default() -> Self {
        DashboardSettings {
            session_idle_minutes: 60,
            session_lifetime_minutes: 12 * 60,
            secure_cookie: false,
            sign_in_per_minute_per_user_and_address: 10,
            sign_in_per_minute_per_address: 30,
        }
    }
}

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "oncehook_session";
/// The session key holding who signed in.
const SESSION_KEY: &str = "auth";
/// The largest sign-in or password form accepted (a user name, two or three passwords and
/// a page to return to fit many times over; axum's default would be 2 MB).
pub const FORM_BODY_LIMIT: usize = 4 * 1024;
/// The largest body any dashboard request may send (server functions' forms and JSON
/// queries are a few hundred bytes): refused with 413 before it is read, whatever reads it.
pub const DASHBOARD_BODY_LIMIT: usize = 8 * 1024;

/// What a session remembers: the user, the password it was made with (a session made
/// before the password changed is no longer valid), when it signed in (its lifetime counts
/// from there) and when its expiry was last moved on (all Unix ms). A session saved before
/// these times existed reads 0 for them: it has lived its lifetime.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct SessionAuth {
    user_id: i64,
    password_set_at: i64,
    #[serde(default)]
    signed_in_at: i64,
    #[serde(default)]
    touched_at: i64,
}

#[derive(Clone)]
enum Store {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

/// Everything the dashboard's access control needs; cheap to clone.
#[derive(Clone)]
pub struct Access {
    db: Db,
    passwords: Arc<Passwords>,
    limits: Arc<SignInLimits>,
    refusals: Arc<Refusals>,
    times: SessionTimes,
    settings: DashboardSettings,
    store: Store,
}

impl Access {
    /// Opens the session store beside `db` (creating its table when missing) and starts
    /// the task that deletes expired sessions and writes the counts of refused attempts
    /// until `shutdown` (then it writes the counts still open).
    pub async fn start(
        db: &Db,
        settings: &DashboardSettings,
        shutdown: CancellationToken,
    ) -> anyhow::Result<(Access, JoinHandle<()>)> {
        let store = match db.backend {
            Backend::Sqlite => {
                let options = sqlx::sqlite::SqliteConnectOptions::from_str(db.url())
                    .context("session store URL")?
                    .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                    .synchronous(sqlx::sqlite::SqliteSynchronous::Full)
                    .busy_timeout(Duration::from_secs(5));
                let pool = crate::store::connections::discard_unfinished_transactions(
                    sqlx::sqlite::SqlitePoolOptions::new().max_connections(2),
                    true,
                )
                .connect_with(options)
                .await
                .context("opening the session store")?;
                let store = SqliteStore::new(pool);
                store.migrate().await.context("session table")?;
                Store::Sqlite(store)
            }
            Backend::Postgres => {
                let pool = crate::store::connections::discard_unfinished_transactions(
                    sqlx::postgres::PgPoolOptions::new()
                        .max_connections(4)
                        .acquire_timeout(Duration::from_secs(3)),
                    false,
                )
                .connect(db.url())
                .await
                .context("opening the session store")?;
                let store = PostgresStore::new(pool);
                store.migrate().await.context("session table")?;
                Store::Postgres(store)
            }
        };
        let refusals = Arc::new(Refusals::default());
        let sweeper = {
            let store = store.clone();
            let refusals = refusals.clone();
            let db = db.clone();
            tokio::spawn(async move {
                let mut sweep = tokio::time::interval(Duration::from_secs(600));
                let mut close = tokio::time::interval(Duration::from_secs(10));
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = sweep.tick() => {
                            let deleted = match &store {
                                Store::Sqlite(s) => s.delete_expired().await,
                                Store::Postgres(s) => s.delete_expired().await,
                            };
                            if let Err(e) = deleted {
                                tracing::warn!("deleting expired sessions: {e}");
                            }
                        }
                        _ = close.tick() => refusals.close(&db, false).await,
                    }
                }
                refusals.close(&db, true).await;
            })
        };
        let access = Access {
            db: db.clone(),
            passwords: Passwords::new(2).await?,
            limits: Arc::new(SignInLimits::new(
                settings.sign_in_per_minute_per_user_and_address,
                settings.sign_in_per_minute_per_address,
            )),
            refusals,
            times: SessionTimes::new(
                settings.session_idle_minutes,
                settings.session_lifetime_minutes,
            ),
            settings: settings.clone(),
            store,
        };
        Ok((access, sweeper))
    }

    pub fn passwords(&self) -> &Arc<Passwords> {
        &self.passwords
    }

    /// The dashboard router behind sign-in: adds the sign-in/out and password routes, and
    /// wraps everything in CSRF protection, the session and the sign-in gate.
    pub fn protect(&self, dashboard: Router, public: gate::PublicPaths) -> Router {
        let routes = Router::new()
            .route("/auth/sign-in", post(sign_in))
            .route("/auth/sign-out", post(sign_out))
            .route("/auth/password", post(change_password))
            .route("/auth/language", post(change_language))
            .layer(DefaultBodyLimit::max(FORM_BODY_LIMIT))
            .with_state(self.clone());
        let router = dashboard
            .merge(routes)
            .layer(middleware::from_fn_with_state(
                public,
                gate::require_sign_in,
            ))
            .layer(middleware::from_fn_with_state(self.clone(), load_principal));
        let router = match &self.store {
            Store::Sqlite(store) => router.layer(self.session_layer(store.clone())),
            Store::Postgres(store) => router.layer(self.session_layer(store.clone())),
        };
        router
            .layer(CsrfLayer::new())
            .layer(tower_http::limit::RequestBodyLimitLayer::new(
                DASHBOARD_BODY_LIMIT,
            ))
    }

    fn session_layer<S: tower_sessions::SessionStore + Clone>(
        &self,
        store: S,
    ) -> SessionManagerLayer<S> {
        // Saved only when changed: `load_principal` moves the expiry on at most once a
        // minute (never `with_always_save`, a write per page view).
        SessionManagerLayer::new(store)
            .with_name(SESSION_COOKIE)
            .with_http_only(true)
            .with_same_site(SameSite::Strict)
            .with_secure(self.settings.secure_cookie)
            .with_path("/")
            .with_expiry(Expiry::OnInactivity(self.times.idle()))
    }

    /// Stores who signed in, with the expiry their session has at `now`.
    async fn save_auth(
        &self,
        session: &Session,
        auth: &SessionAuth,
        now: i64,
    ) -> Result<(), tower_sessions::session::Error> {
        session.set_expiry(Some(self.times.expiry(auth.signed_in_at, now)));
        session.insert(SESSION_KEY, auth).await
    }

    /// Counts one password attempt by `username` from `address` (sign-in or password
    /// change); a refusal is audited under `action`, one row per window.
    async fn allow_attempt(
        &self,
        action: &'static str,
        username: &str,
        address: Option<&str>,
        now: i64,
    ) -> bool {
        let key_address = address.unwrap_or("unknown");
        let refused = match self.limits.check(username, key_address) {
            Ok(()) => return true,
            Err(refused) => refused,
        };
        let (actor, target, reason) = match refused {
            // One row for a whole IPv6 /64, as the limiter counts it.
            Refused::Address => (
                "anonymous",
                format!("address:{}", limit::address_key(key_address)),
                "too many attempts from this address",
            ),
            Refused::UserAtAddress => (
                username,
                format!("user:{username}"),
                "too many attempts for this user from this address",
            ),
        };
        self.refusals
            .record(
                &self.db,
                Refusal {
                    action,
                    actor,
                    target,
                    reason,
                    source: address,
                    now,
                },
            )
            .await;
        false
    }

    async fn audit(&self, entry: AuditEntry<'_>) {
        if let Err(e) = users::audit(&self.db, &entry).await {
            tracing::error!(
                action = entry.action,
                "could not write the audit log: {e:#}"
            );
        }
    }
}

/// On a fresh start with no user at all, creates `admin` with a one-time password that
/// must be changed at the first sign-in, and returns that password (the caller prints it
/// once; it is never logged or stored in clear).
pub async fn bootstrap_first_admin(
    db: &Db,
    passwords: &Passwords,
) -> anyhow::Result<Option<String>> {
    if users::count(db).await? > 0 {
        return Ok(None);
    }
    let password = password::generate_password();
    let hash = passwords.hash(password.clone()).await?;
    let now = now_ms();
    let created = users::add_if_none(
        db,
        &NewUser {
            username: "admin",
            password_hash: &hash,
            role: Role::Admin.as_str(),
            must_change_password: true,
            now,
        },
    )
    .await?;
    if !created {
        return Ok(None);
    }
    users::audit(
        db,
        &AuditEntry {
            actor: "system",
            action: "user.add",
            target: "user:admin",
            reason: Some("first start: no user existed"),
            details: Some("role admin, one-time password"),
            source: None,
            now,
        },
    )
    .await?;
    Ok(Some(password))
}

/// The file in the data directory that holds the first admin's one-time password.
pub const ONE_TIME_PASSWORD_FILE: &str = "admin-one-time-password";

/// Keeps the one-time password where only this system user can read it: a 0600 file in
/// `data_dir` (written atomically), never the log, since container logs are kept and
/// shipped. Returns the file's path.
pub fn keep_one_time_password(
    data_dir: &std::path::Path,
    password: &str,
) -> anyhow::Result<std::path::PathBuf> {
    crate::support::files::create_private_dir(data_dir)?;
    let path = data_dir.join(ONE_TIME_PASSWORD_FILE);
    crate::support::files::write_private_file(&path, format!("{password}\n").as_bytes())?;
    Ok(path)
}

fn client_address(req: &Request) -> Option<String> {
    req.extensions()
        .get::<crate::http::client_addr::ClientAddr>()
        .map(|client| client.0.to_string())
}

/// Session → user → `Principal` in the request's extensions. A session whose user is gone,
/// disabled, or changed password since is emptied (signed out).
pub async fn load_principal(
    State(access): State<Access>,
    mut req: Request,
    next: Next,
) -> Response {
    let Some(session) = req.extensions().get::<Session>().cloned() else {
        return next.run(req).await;
    };
    let auth: Option<SessionAuth> = match session.get(SESSION_KEY).await {
        Ok(auth) => auth,
        Err(e) => {
            tracing::error!("reading the session: {e}");
            return (StatusCode::SERVICE_UNAVAILABLE, "session store unavailable").into_response();
        }
    };
    let now = now_ms();
    if let Some(auth) = auth
        .as_ref()
        .filter(|a| access.times.ended(a.signed_in_at, now))
    {
        // Past its lifetime: gone, however active it was.
        tracing::debug!(user_id = auth.user_id, "session lifetime ended");
        if let Err(e) = session.flush().await {
            tracing::error!("ending a session: {e}");
        }
        return next.run(req).await;
    }
    if let Some(auth) = auth {
        match users::by_id(&access.db, auth.user_id).await {
            Ok(Some(user)) if !user.disabled && user.password_set_at == auth.password_set_at => {
                if access.times.touch_due(auth.touched_at, now) {
                    let touched = SessionAuth {
                        touched_at: now,
                        ..auth
                    };
                    if let Err(e) = access.save_auth(&session, &touched, now).await {
                        tracing::error!("moving the session's expiry on: {e}");
                    }
                }
                req.extensions_mut()
                    .insert(app::locale::UserLocaleSetting(user.locale.clone()));
                if let Some(role) = Role::parse(&user.role) {
                    let source = client_address(&req);
                    req.extensions_mut().insert(Principal {
                        user_id: user.id,
                        name: user.username,
                        role,
                        must_change_password: user.must_change_password,
                        source,
                    });
                }
            }
            Ok(_) => {
                session.clear().await;
            }
            Err(e) => {
                tracing::error!("loading the signed-in user: {e:#}");
                return (StatusCode::SERVICE_UNAVAILABLE, "user store unavailable").into_response();
            }
        }
    }
    next.run(req).await
}

/// Percent-encodes everything but unreserved characters (RFC 3986) and `/`.
fn urlencode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Where to go after sign-in. `next` is resolved the way a browser resolves a link (tabs
/// and newlines dropped, `\` read as `/`, `//host` and schemes honoured) against an origin
/// standing for this site; it is kept only when the origin is unchanged, and only its path
/// and query are sent (percent-encoded, so always a valid `Location`).
fn safe_next(next: Option<&str>) -> String {
    static SITE: std::sync::LazyLock<url::Url> = std::sync::LazyLock::new(|| {
        url::Url::parse("http://oncehook.invalid/").expect("a valid URL")
    });
    let Some(url) = next.and_then(|n| SITE.join(n).ok()) else {
        return "/".into();
    };
    if url.origin() != SITE.origin() {
        return "/".into();
    }
    match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_string(),
    }
}

#[derive(Deserialize)]
pub struct SignInForm {
    username: String,
    password: String,
    next: Option<String>,
}

async fn sign_in(
    State(access): State<Access>,
    session: Session,
    ConnectInfoOpt(address): ConnectInfoOpt,
    Form(form): Form<SignInForm>,
) -> Response {
    let now = now_ms();
    let username = form.username.trim().to_string();
    let source = address.as_deref();
    let next = safe_next(form.next.as_deref());
    let back_with = |error: &str| {
        let mut target = format!("/sign-in?error={error}");
        if next != "/" {
            target.push_str(&format!("&next={}", urlencode(&next)));
        }
        Redirect::to(&target).into_response()
    };
    // A name `user add` would refuse cannot sign in: refused before it becomes a limiter
    // key or an audit row (the same answer as a wrong password).
    if !users::valid_username(&username) {
        return back_with("invalid");
    }
    if !access
        .allow_attempt("sign_in.limited", &username, source, now)
        .await
    {
        let mut response = back_with("limited");
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("60"));
        return response;
    }
    let user = match users::by_name(&access.db, &username).await {
        Ok(user) => user,
        Err(e) => {
            tracing::error!("sign-in: {e:#}");
            return back_with("unavailable");
        }
    };
    let verified = access
        .passwords
        .verify(
            form.password,
            user.as_ref().map(|u| u.password_hash.clone()),
        )
        .await;
    let user = match user {
        Some(user) if verified && !user.disabled => user,
        other => {
            let why = match other {
                None => "unknown user",
                Some(u) if u.disabled && verified => "user disabled",
                Some(_) => "wrong password",
            };
            access
                .audit(AuditEntry {
                    actor: &username,
                    action: "sign_in.failed",
                    target: &format!("user:{username}"),
                    reason: Some(why),
                    details: None,
                    source,
                    now,
                })
                .await;
            // The same answer whatever the cause: the form does not confirm user names.
            return back_with("invalid");
        }
    };
    // A new id for the signed-in session: an id planted before sign-in is worthless.
    let stored = async {
        session.cycle_id().await?;
        let auth = SessionAuth {
            user_id: user.id,
            password_set_at: user.password_set_at,
            signed_in_at: now,
            touched_at: now,
        };
        access.save_auth(&session, &auth, now).await
    }
    .await;
    if let Err(e) = stored {
        tracing::error!("sign-in: saving the session: {e}");
        return back_with("unavailable");
    }
    let _ = users::record_sign_in(&access.db, user.id, now).await;
    access
        .audit(AuditEntry {
            actor: &user.username,
            action: "sign_in",
            target: &format!("user:{}", user.username),
            reason: None,
            details: None,
            source,
            now,
        })
        .await;
    if user.must_change_password {
        Redirect::to("/change-password").into_response()
    } else {
        Redirect::to(&next).into_response()
    }
}

/// The client's address (`web::client_addr`: the peer, or the client a trusted proxy
/// names) when the server set it (always in `oncehook serve`); tests that serve a bare
/// router get `None` instead of a 500.
pub struct ConnectInfoOpt(pub Option<String>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for ConnectInfoOpt {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(ConnectInfoOpt(
            parts
                .extensions
                .get::<crate::http::client_addr::ClientAddr>()
                .map(|client| client.0.to_string()),
        ))
    }
}

async fn sign_out(
    State(access): State<Access>,
    session: Session,
    principal: Option<axum::Extension<Principal>>,
) -> Response {
    if let Some(axum::Extension(p)) = principal {
        access
            .audit(AuditEntry {
                actor: &p.name,
                action: "sign_out",
                target: &format!("user:{}", p.name),
                reason: None,
                details: None,
                source: p.source.as_deref(),
                now: now_ms(),
            })
            .await;
    }
    if let Err(e) = session.flush().await {
        tracing::error!("sign-out: {e}");
    }
    Redirect::to("/sign-in?signed_out=1").into_response()
}

#[derive(Deserialize)]
pub struct LanguageForm {
    /// `en`, `pt-BR`, or empty: follow the browser's Accept-Language.
    #[serde(default)]
    locale: String,
}

/// The signed-in person's dashboard language (Settings → Language). Audited like every
/// change; the page they come back to is already in the new language.
async fn change_language(
    State(access): State<Access>,
    axum::Extension(principal): axum::Extension<Principal>,
    Form(form): Form<LanguageForm>,
) -> Response {
    let chosen = match form.locale.trim() {
        "" => None,
        tag => match app::locale::parse(tag) {
            Some(locale) => Some(app::locale::tag(locale)),
            None => return Redirect::to("/settings?language=unknown").into_response(),
        },
    };
    let now = now_ms();
    if let Err(e) = users::set_locale(&access.db, principal.user_id, chosen, now).await {
        tracing::error!("saving the dashboard language: {e:#}");
        return Redirect::to("/settings?language=unavailable").into_response();
    }
    access
        .audit(AuditEntry {
            actor: &principal.name,
            action: "user.locale",
            target: &format!("user:{}", principal.name),
            reason: None,
            details: Some(chosen.unwrap_or("automatic")),
            source: principal.source.as_deref(),
            now,
        })
        .await;
    Redirect::to("/settings?language=saved#language").into_response()
}

#[derive(Deserialize)]
pub struct PasswordForm {
    current: String,
    new: String,
    confirm: String,
}

async fn change_password(
    State(access): State<Access>,
    session: Session,
    axum::Extension(principal): axum::Extension<Principal>,
    Form(form): Form<PasswordForm>,
) -> Response {
    let back_with = |error: &str| Redirect::to(&format!("/change-password?error={error}"));
    let user = match users::by_id(&access.db, principal.user_id).await {
        Ok(Some(user)) => user,
        _ => return back_with("unavailable").into_response(),
    };
    if form.new != form.confirm {
        return back_with("mismatch").into_response();
    }
    if password::check_new_password(&form.new, &user.username).is_err() {
        return back_with("weak").into_response();
    }
    if form.new == form.current {
        return back_with("same").into_response();
    }
    // Guessing the current password through a stolen session costs what a sign-in costs.
    if !access
        .allow_attempt(
            "user.password_change.limited",
            &user.username,
            principal.source.as_deref(),
            now_ms(),
        )
        .await
    {
        let mut response = back_with("limited").into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("60"));
        return response;
    }
    if !access
        .passwords
        .verify(form.current, Some(user.password_hash.clone()))
        .await
    {
        access
            .audit(AuditEntry {
                actor: &user.username,
                action: "user.password_change.failed",
                target: &format!("user:{}", user.username),
                reason: Some("wrong current password"),
                details: None,
                source: principal.source.as_deref(),
                now: now_ms(),
            })
            .await;
        return back_with("current").into_response();
    }
    let now = now_ms();
    let stored = async {
        // The session's lifetime still counts from its sign-in.
        let signed_in_at = session
            .get::<SessionAuth>(SESSION_KEY)
            .await?
            .map_or(now, |auth| auth.signed_in_at);
        let hash = access.passwords.hash(form.new).await?;
        users::set_password(&access.db, user.id, &hash, false, now).await?;
        // This session stays valid with the new password; every other one ends.
        session.cycle_id().await?;
        let auth = SessionAuth {
            user_id: user.id,
            password_set_at: now,
            signed_in_at,
            touched_at: now,
        };
        access.save_auth(&session, &auth, now).await?;
        anyhow::Ok(())
    }
    .await;
    if let Err(e) = stored {
        tracing::error!("password change: {e:#}");
        return back_with("unavailable").into_response();
    }
    access
        .audit(AuditEntry {
            actor: &user.username,
            action: "user.password_change",
            target: &format!("user:{}", user.username),
            reason: None,
            details: None,
            source: principal.source.as_deref(),
            now,
        })
        .await;
    Redirect::to("/").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pages_of_this_site_are_followed_after_sign_in() {
        assert_eq!(
            safe_next(Some("/dlq?class=permanent#top")),
            "/dlq?class=permanent"
        );
        // Relative to the site's root, as a browser would read them: still this site.
        assert_eq!(safe_next(Some("events")), "/events");
        assert_eq!(safe_next(Some("/a b")), "/a%20b");
        assert_eq!(safe_next(Some("http://oncehook.invalid/x")), "/x");
        for bad in [
            "//evil.example/x",
            "///evil.example",
            "https://evil.example",
            "/\\evil.example",
            "/\t/evil.example",
            "\t//evil.example",
            "/\n/evil.example",
            "javascript:alert(1)",
            "http://oncehook.invalid:8080/x",
        ] {
            assert_eq!(safe_next(Some(bad)), "/", "{bad:?}");
        }
        assert_eq!(safe_next(None), "/");
        assert_eq!(safe_next(Some("")), "/");
    }

    #[test]
    fn redirect_targets_are_encoded() {
        assert_eq!(
            urlencode("/dlq?class=a b&x=1"),
            "/dlq%3Fclass%3Da%20b%26x%3D1"
        );
    }
}

/// User administration shared by `oncehook user …` and the dashboard's users page; every
/// change is audited with `actor`.
pub mod admin {
    use super::*;

    pub async fn add_user(
        db: &Db,
        passwords: &Passwords,
        username: &str,
        password: &str,
        role: Role,
        actor: &str,
    ) -> anyhow::Result<i64> {
        password::check_new_password(password, username).map_err(anyhow::Error::msg)?;
        let now = now_ms();
        let hash = passwords.hash(password.to_string()).await?;
        let id = users::add(
            db,
            &NewUser {
                username,
                password_hash: &hash,
                role: role.as_str(),
                must_change_password: false,
                now,
            },
        )
        .await?;
        users::audit(
            db,
            &AuditEntry {
                actor,
                action: "user.add",
                target: &format!("user:{username}"),
                reason: None,
                details: Some(&format!("role {role}")),
                source: None,
                now,
            },
        )
        .await?;
        Ok(id)
    }

    pub async fn set_disabled(
        db: &Db,
        username: &str,
        disabled: bool,
        actor: &str,
    ) -> anyhow::Result<()> {
        let now = now_ms();
        anyhow::ensure!(
            users::set_disabled(db, username, disabled, now).await?,
            "no user named {username}"
        );
        users::audit(
            db,
            &AuditEntry {
                actor,
                action: if disabled {
                    "user.disable"
                } else {
                    "user.enable"
                },
                target: &format!("user:{username}"),
                reason: None,
                details: None,
                source: None,
                now,
            },
        )
        .await
    }

    /// Sets a new password chosen by someone else: the user must change it at the next
    /// sign-in, and every session they had ends.
    pub async fn reset_password(
        db: &Db,
        passwords: &Passwords,
        username: &str,
        password: &str,
        actor: &str,
    ) -> anyhow::Result<()> {
        password::check_new_password(password, username).map_err(anyhow::Error::msg)?;
        let user = users::by_name(db, username)
            .await?
            .with_context(|| format!("no user named {username}"))?;
        let now = now_ms();
        let hash = passwords.hash(password.to_string()).await?;
        users::set_password(db, user.id, &hash, true, now).await?;
        users::audit(
            db,
            &AuditEntry {
                actor,
                action: "user.reset_password",
                target: &format!("user:{username}"),
                reason: None,
                details: None,
                source: None,
                now,
            },
        )
        .await
    }
}
