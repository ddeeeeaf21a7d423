//! The admin pages (audit log, users) through the backend and over HTTP, on SQLite and
//! PostgreSQL: only admins read them, a refused read is itself audited, the log pages by
//! keyset and filters by actor. Settings (read-only, no secret on the page) and API tokens
//! made and revoked through the page's forms as a browser without JavaScript posts them.

mod common;

use app::backend::{Admin, AdminBackend, AuditQuery, Role};
use app::error::AppError;
use common::{Kind, TestApp};
use oncehook::http::admin::StoreBackend;
use oncehook::store::{now_ms, users};

both!(
    only_admins_read_the_audit_log_and_users,
    the_admin_pages_over_http,
    settings_show_every_section_and_no_secret,
    admins_make_and_revoke_api_tokens_with_the_page_forms,
);

fn backend(app: &TestApp) -> StoreBackend {
    app.backend()
}

async fn only_admins_read_the_audit_log_and_users(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let backend = backend(&app);
    for n in 0..105 {
        users::audit(
            &app.db,
            &users::AuditEntry {
                actor: if n % 2 == 0 { "alice" } else { "bob" },
                action: "dead_letter.redrive",
                target: &format!("dead_letter:{n}"),
                reason: Some("test"),
                details: None,
                source: Some("192.0.2.1"),
                now: now_ms(),
            },
        )
        .await
        .unwrap();
    }
    // Below admin, the role check (as the server functions and the API make it) refuses
    // and audits before any read.
    for role in [Role::Viewer, Role::Operator] {
        assert!(matches!(
            app.authorize::<Admin>("vera", role, "audit_log.read", "audit_log")
                .await,
            Err(AppError::Forbidden(_))
        ));
        assert!(matches!(
            app.authorize::<Admin>("vera", role, "users.read", "users")
                .await,
            Err(AppError::Forbidden(_))
        ));
    }
    let admin: Admin = app.acting("ada", Role::Admin).await;
    let first = backend
        .audit_log(&admin, AuditQuery::default())
        .await
        .unwrap();
    assert_eq!(first.entries.len(), 100);
    // Newest first: the four refused reads are the newest rows, audited with who and where.
    let refused: Vec<&str> = first.entries[..4]
        .iter()
        .map(|e| e.action.as_str())
        .collect();
    assert_eq!(
        refused,
        [
            "users.read.refused",
            "audit_log.read.refused",
            "users.read.refused",
            "audit_log.read.refused"
        ]
    );
    assert!(first.entries[..4]
        .iter()
        .all(|e| e.actor == "vera" && e.source.as_deref() == Some("192.0.2.7")));
    let ids: Vec<i64> = first.entries.iter().map(|e| e.id).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first");
    let second = backend
        .audit_log(
            &admin,
            AuditQuery {
                before: first.next_before,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(second.entries.len(), 9, "109 rows: 100 + 9");
    assert_eq!(second.next_before, None);
    assert!(second.entries[0].id < *ids.last().unwrap());
    let bob = backend
        .audit_log(
            &admin,
            AuditQuery {
                actor: Some(" bob ".into()),
                before: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(bob.entries.len(), 52);
    assert!(bob.entries.iter().all(|e| e.actor == "bob"));

    app.sign_in("otto", Role::Operator).await;
    let listed = backend.users(&admin).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].name.as_str(), listed[0].role.as_str()),
        ("otto", "operator")
    );
    assert!(listed[0].last_sign_in_at.is_some());
    app.shutdown().await;
}

async fn the_admin_pages_over_http(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let admin = app.sign_in("ada", Role::Admin).await;
    let viewer = app.sign_in("vera", Role::Viewer).await;
    let (status, html) = app.page("/admin/audit", &admin).await;
    assert_eq!(status, 200);
    assert!(html.contains("id=\"audit-table\""));
    assert!(html.contains(">sign_in<"), "sign-ins are in the log");
    let (status, html) = app.page("/admin/users", &admin).await;
    assert_eq!(status, 200);
    assert!(html.contains("id=\"users-table\"") && html.contains("vera"));
    assert!(!html.contains("$argon2"), "no password hash on the page");
    let (_, home) = app.page("/", &admin).await;
    assert!(home.contains("id=\"admin-audit\""), "admins get the links");
    for path in ["/admin/audit", "/admin/users"] {
        let (status, html) = app.page(path, &viewer).await;
        assert_eq!(status, 403, "{path}");
        assert!(!html.contains("audit-table") && !html.contains("users-table"));
    }
    let (_, home) = app.page("/", &viewer).await;
    assert!(!home.contains("id=\"admin-audit\""));
    app.shutdown().await;
}

async fn settings_show_every_section_and_no_secret(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
        s.sinks.insert(
            "merchant".into(),
            oncehook::config::SinkSettings {
                kind: oncehook::config::SinkKind::Http {
                    url: "https://shop:sinkpass99@merchant.example/hooks".into(),
                    secret: Some("whsec_c2lua3NlY3JldHNpbmtzZWNyZXRzaW5r".into()),
                    timeout_ms: 1000,
                },
                concurrency: 2,
                rate_per_sec: None,
            },
        );
        s.alerts.webhook_url = Some("https://hooks.example/services/T0/B0/alertpathsecret".into());
    })
    .await;
    let viewer = app.sign_in("vera", Role::Viewer).await;
    let (status, html) = app.page("/settings", &viewer).await;
    assert_eq!(status, 200, "anyone signed in reads the settings");
    for shown in [
        "providers: stripe",
        "sinks: merchant",
        "merchant.example",
        "processor",
        "retry.max_attempts",
        "retention",
        "Mapping: stripe",
        "payment_intent.succeeded",
        "charge.refunded",
        "&lt;redacted&gt;",
    ] {
        assert!(html.contains(shown), "{shown} on the settings page");
    }
    for secret in [
        common::STRIPE_SECRET,
        common::STRIPE_OLD_SECRET,
        "sinkpass99",
        "whsec_c2lua3NlY3JldHNpbmtzZWNyZXRzaW5r",
        "alertpathsecret",
    ] {
        assert!(!html.contains(secret), "{secret} must not be on the page");
    }
    let (_, home) = app.page("/", &viewer).await;
    assert!(
        home.contains("href=\"/settings\""),
        "in the main navigation"
    );
    let (status, _) = app.page("/settings", "").await;
    assert_eq!(status, 303, "sign-in first");
    app.shutdown().await;
}

/// The token shown once on the page, if any.
fn revealed_token(html: &str) -> Option<String> {
    let tag = html.find("id=\"new-token\"")?;
    let start = html[tag..].find('>')? + tag + 1;
    let end = html[start..].find('<')? + start;
    Some(html[start..end].to_string())
}

async fn api_status(app: &TestApp, token: &str) -> u16 {
    app.http
        .get(format!("{}/api/v1/overview", app.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn admins_make_and_revoke_api_tokens_with_the_page_forms(kind: Kind) {
    use app::api::{CreateApiToken, RevokeApiToken};
    use leptos::server_fn::ServerFn;
    let app = TestApp::spawn(kind).await;
    let admin = app.sign_in("ada", Role::Admin).await;
    let other_admin = app.sign_in("grace", Role::Admin).await;
    let operator = app.sign_in("otto", Role::Operator).await;

    let form = [
        ("name", "grafana"),
        ("role", "viewer"),
        ("expires_in_days", "30"),
    ];
    let (status, _) = app
        .post_form(CreateApiToken::PATH, &admin, Some("/admin/tokens"), &form)
        .await;
    assert!((300..400).contains(&status), "back to the page: {status}");
    // Another admin's view does not take (or show) it.
    let (_, html) = app.page("/admin/tokens", &other_admin).await;
    assert!(revealed_token(&html).is_none());
    assert!(html.contains(">grafana<"));
    let (status, html) = app.page("/admin/tokens", &admin).await;
    assert_eq!(status, 200);
    let token = revealed_token(&html).expect("the new token, once");
    assert!(token.starts_with("oh_"), "{token}");
    assert!(html.contains("will not be shown again"));
    assert_eq!(api_status(&app, &token).await, 200, "the token works");
    let (_, html) = app.page("/admin/tokens", &admin).await;
    assert!(revealed_token(&html).is_none(), "shown once");
    assert!(!html.contains(&token));
    assert!(html.contains("data-state=\"live\""));
    assert!(
        html.contains(&token[..10]),
        "its first characters tell it apart"
    );

    // Only admins: an operator's page and forged form are refused and audited.
    let (status, html) = app.page("/admin/tokens", &operator).await;
    assert_eq!(status, 403);
    assert!(!html.contains("grafana"));
    let (status, _) = app
        .post_form(
            CreateApiToken::PATH,
            &operator,
            None,
            &[
                ("name", "mine"),
                ("role", "admin"),
                ("expires_in_days", "1"),
            ],
        )
        .await;
    assert_eq!(status, 403);
    let (status, _) = app
        .post_form(
            RevokeApiToken::PATH,
            &operator,
            None,
            &[("name", "grafana")],
        )
        .await;
    assert_eq!(status, 403);
    assert_eq!(api_status(&app, &token).await, 200, "still live");
    let refused: Vec<String> = users::audit_page(&app.db, Some("otto"), None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.action)
        .filter(|a| a.ends_with(".refused"))
        .collect();
    assert_eq!(
        refused,
        [
            "api_token.revoke.refused",
            "api_token.add.refused",
            "api_tokens.read.refused"
        ]
    );

    // Bad input is a clear error and makes nothing.
    for (name, role, days, says) in [
        ("has space", "viewer", "30", "token names"),
        ("ok", "root", "30", "viewer, operator or admin"),
        ("ok", "viewer", "0", "1 to 3,650 days"),
        ("grafana", "viewer", "30", "revoke it first"),
    ] {
        let (status, body) = app
            .post_form(
                CreateApiToken::PATH,
                &admin,
                None,
                &[("name", name), ("role", role), ("expires_in_days", days)],
            )
            .await;
        assert_eq!(status, 422, "{name} {role} {days}: {body}");
        assert!(body.contains(says), "{body}");
    }

    let (status, _) = app
        .post_form(
            RevokeApiToken::PATH,
            &admin,
            Some("/admin/tokens"),
            &[("name", "grafana")],
        )
        .await;
    assert!((300..400).contains(&status));
    assert_eq!(api_status(&app, &token).await, 401, "revoked at once");
    let (_, html) = app.page("/admin/tokens", &admin).await;
    assert!(html.contains("data-state=\"revoked\""));
    let actions: Vec<(String, String)> = users::audit_page(&app.db, Some("ada"), None, 10)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.action.starts_with("api_token"))
        .map(|r| (r.action, r.source.unwrap_or_default()))
        .collect();
    assert_eq!(
        actions,
        [
            ("api_token.revoke".to_string(), "127.0.0.1".to_string()),
            ("api_token.add".to_string(), "127.0.0.1".to_string())
        ]
    );
    let (_, home) = app.page("/", &admin).await;
    assert!(home.contains("id=\"admin-tokens\""));
    app.shutdown().await;
}
