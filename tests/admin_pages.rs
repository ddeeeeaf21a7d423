//! The admin pages (audit log, users) through the backend and over HTTP, on SQLite and
//! PostgreSQL: only admins read them, a refused read is itself audited, the log pages by
//! keyset and filters by actor.

mod common;

use std::sync::Arc;

use app::backend::{AdminBackend, AuditQuery, Principal, Role};
use app::error::AppError;
use common::{Kind, TestApp};
use oncehook::admin::StoreBackend;
use oncehook::config::Providers;
use oncehook::store::{now_ms, users};

both!(
    only_admins_read_the_audit_log_and_users,
    the_admin_pages_over_http
);

fn backend(app: &TestApp) -> StoreBackend {
    StoreBackend {
        db: app.db.clone(),
        providers: Arc::new(Providers::build(&app.settings.providers).unwrap()),
    }
}

fn principal(name: &str, role: Role) -> Principal {
    Principal {
        user_id: 1,
        name: name.into(),
        role,
        must_change_password: false,
        source: Some("192.0.2.9".into()),
    }
}

async fn only_admins_read_the_audit_log_and_users(kind: Kind) {
    let _turn = common::dashboard_turn().await;
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
    for role in [Role::Viewer, Role::Operator] {
        let who = principal("vera", role);
        assert!(matches!(
            backend.audit_log(&who, AuditQuery::default()).await,
            Err(AppError::Forbidden(_))
        ));
        assert!(matches!(
            backend.users(&who).await,
            Err(AppError::Forbidden(_))
        ));
    }
    let admin = principal("ada", Role::Admin);
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
        .all(|e| e.actor == "vera" && e.source.as_deref() == Some("192.0.2.9")));
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
    let _turn = common::dashboard_turn().await;
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
