//! The dashboard's language over the real HTTP path, on SQLite and PostgreSQL: a user who
//! chose Portuguese gets Portuguese pages (money and dates too) whatever the browser says,
//! and keeps it in a new session; without a choice `Accept-Language` decides; a language
//! the dashboard does not speak gets English. The page's `<html lang>` says which, and the
//! pages' inline scripts still carry the response's CSP nonce.

mod common;

use app::backend::Role;
use common::fixtures::*;
use common::{sign_in_request, Kind, TestApp, TEST_PASSWORD};
use reqwest::header::{ACCEPT_LANGUAGE, COOKIE, LOCATION};

both!(
    a_user_who_chose_portuguese_reads_portuguese_pages_and_keeps_the_choice,
    accept_language_decides_until_the_user_chooses,
    an_unknown_language_gets_english,
);

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A page as a browser asking for `accept` gets it: status, CSP nonce and body.
async fn get(app: &TestApp, path: &str, cookie: Option<&str>, accept: &str) -> (u16, String) {
    let mut request = client().get(format!("{}{path}", app.url));
    if let Some(cookie) = cookie {
        request = request.header(COOKIE, cookie);
    }
    if !accept.is_empty() {
        request = request.header(ACCEPT_LANGUAGE, accept);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    let body = response.text().await.unwrap();
    let nonce = csp
        .split("'nonce-")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .unwrap()
        .to_string();
    assert_eq!(
        body.matches(&format!("nonce=\"{nonce}\"")).count(),
        body.matches("<script").count(),
        "{path}: every inline script carries the response's nonce: {body}"
    );
    (status, body)
}

async fn choose(app: &TestApp, cookie: &str, locale: &str) -> String {
    let response = client()
        .post(format!("{}/auth/language", app.url))
        .header(COOKIE, cookie)
        .header("Origin", &app.url)
        .form(&[("locale", locale)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303, "{locale}");
    response.headers()[LOCATION].to_str().unwrap().to_string()
}

fn lang_of(body: &str) -> &str {
    body.split("<html lang=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no <html lang>: {body}"))
}

async fn a_user_who_chose_portuguese_reads_portuguese_pages_and_keeps_the_choice(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| s.outbox.relay.enabled = false).await;
    let mut pay = payment_intent_succeeded("evt_br_1", "pi_br_1", "78452", 123_456, T10_00);
    pay["data"]["object"]["currency"] = serde_json::json!("brl");
    assert_eq!(app.post_stripe(&pay).await.status(), 200);
    app.wait_until_processed().await;
    let cookie = app.sign_in("bruna", Role::Viewer).await;

    // Before choosing: the browser asks for English.
    let (status, body) = get(&app, "/settings", Some(&cookie), "en-US,en;q=0.9").await;
    assert_eq!(status, 200);
    assert_eq!(lang_of(&body), "en");
    assert!(body.contains("Dashboard language"), "{body}");

    assert_eq!(
        choose(&app, &cookie, "pt-BR").await,
        "/settings?language=saved#language"
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM users WHERE username = 'bruna' AND locale = 'pt-BR'")
            .await,
        1
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM audit_log WHERE action = 'user.locale'")
            .await,
        1
    );

    // The choice wins over the browser's English.
    let (_, body) = get(
        &app,
        "/settings?language=saved",
        Some(&cookie),
        "en-US,en;q=0.9",
    )
    .await;
    assert_eq!(lang_of(&body), "pt-BR");
    for text in [
        "Configurações",
        "Idioma do painel",
        "Idioma salvo.",
        "Visão geral",
        "Mensagens mortas",
        "Sair",
    ] {
        assert!(body.contains(text), "{text}: {body}");
    }
    assert!(!body.contains(">Overview<"), "{body}");

    let (status, body) = get(&app, "/orders/78452", Some(&cookie), "en").await;
    assert_eq!(status, 200);
    assert_eq!(lang_of(&body), "pt-BR");
    assert!(
        body.contains("R$\u{a0}1.234,56"),
        "money in the viewer's locale: {body}"
    );
    assert!(body.contains("Pedido"), "{body}");
    // The server's "why" sentence too, money and time included.
    assert!(
        body.contains("R$\u{a0}1.234,56 recebido de pi_br_1 (R$\u{a0}1.234,56, 01/01/2024 "),
        "the why in Portuguese: {body}"
    );

    // And its story lines.
    assert!(
        body.contains("payment_intent.succeeded evt_br_1 recebido de stripe"),
        "the story in Portuguese: {body}"
    );
    assert!(
        body.contains("pagamento pi_br_1 de R$\u{a0}1.234,56 contado: R$\u{a0}1.234,56"),
        "the story in Portuguese: {body}"
    );

    let (status, body) = get(&app, "/orders/no-such-order", Some(&cookie), "en").await;
    assert_eq!(status, 404);
    assert!(body.contains("Não encontrado"), "{body}");

    let (_, body) = get(&app, "/", Some(&cookie), "en").await;
    assert!(body.contains("Eventos recebidos"), "{body}");

    // A new session (signed in again) keeps it: it is the user's, not the session's.
    let response = sign_in_request(&client(), &app.url, "bruna", TEST_PASSWORD)
        .send()
        .await
        .unwrap();
    let again = common::session_cookie(response.headers()).unwrap();
    let (_, body) = get(&app, "/events", Some(&again), "en").await;
    assert_eq!(lang_of(&body), "pt-BR");
    assert!(body.contains("Caixa de entrada"), "{body}");

    // An unknown tag is refused and changes nothing; an empty one follows the browser again.
    assert_eq!(
        choose(&app, &cookie, "xx-YY").await,
        "/settings?language=unknown"
    );
    let (_, body) = get(&app, "/events", Some(&cookie), "en").await;
    assert_eq!(lang_of(&body), "pt-BR");
    choose(&app, &cookie, "").await;
    let (_, body) = get(&app, "/events", Some(&cookie), "en").await;
    assert_eq!(lang_of(&body), "en");
    assert_eq!(
        app.count("SELECT COUNT(*) FROM users WHERE username = 'bruna' AND locale IS NULL")
            .await,
        1
    );
    app.shutdown().await;
}

async fn accept_language_decides_until_the_user_chooses(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    // Signed out: the sign-in page already speaks the browser's language.
    let (_, body) = get(&app, "/sign-in", None, "pt-BR,pt;q=0.9,en;q=0.8").await;
    assert_eq!(lang_of(&body), "pt-BR");
    assert!(body.contains("Entrar"), "{body}");

    let cookie = app.sign_in("paulo", Role::Operator).await;
    let (status, body) = get(&app, "/", Some(&cookie), "pt-BR,pt;q=0.9").await;
    assert_eq!(status, 200);
    assert_eq!(lang_of(&body), "pt-BR");
    assert!(body.contains("Visão geral"), "{body}");
    // Portuguese of Portugal is the Portuguese there is.
    let (_, body) = get(&app, "/dlq", Some(&cookie), "pt-PT").await;
    assert_eq!(lang_of(&body), "pt-BR");
    // English wins when the browser prefers it.
    let (_, body) = get(&app, "/", Some(&cookie), "en;q=0.9,pt;q=0.5").await;
    assert_eq!(lang_of(&body), "en");
    assert!(body.contains("Overview"), "{body}");
    // The user's English beats the browser's Portuguese.
    choose(&app, &cookie, "en").await;
    let (_, body) = get(&app, "/", Some(&cookie), "pt-BR").await;
    assert_eq!(lang_of(&body), "en");
    app.shutdown().await;
}

async fn an_unknown_language_gets_english(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let cookie = app.sign_in("dieter", Role::Viewer).await;
    for accept in ["de-DE,de;q=0.9,fr;q=0.8", "", "*", "x-klingon;q=1"] {
        let (status, body) = get(&app, "/events", Some(&cookie), accept).await;
        assert_eq!(status, 200, "{accept}");
        assert_eq!(lang_of(&body), "en", "{accept}");
        assert!(body.contains("Inbox"), "{accept}: {body}");
    }
    let (_, body) = get(&app, "/sign-in", None, "de").await;
    assert_eq!(lang_of(&body), "en");
    app.shutdown().await;
}
