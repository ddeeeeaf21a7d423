//! oncehook's dashboard. Rendered on the server (the pages work without JavaScript) and
//! hydrated in the browser when the WASM bundle is present.

// Deep view types (a table inside a panel inside a suspense) exceed the default of 128.
#![recursion_limit = "256"]

pub mod api;
pub mod backend;
pub mod charts;
pub mod components;
pub mod error;
pub mod format;
pub mod locale;
pub mod pages;
#[cfg(feature = "ssr")]
pub mod sentences;

// The `i18n` module leptos_i18n generates from locales/*.json (build.rs): the `Locale` enum,
// the keys, and the `t!`/`td_string!` macros.
include!(concat!(env!("OUT_DIR"), "/i18n/mod.rs"));

use components::TopBar;
use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Title};
use leptos_router::{
    components::{Route, Router, Routes},
    path, SsrMode,
};
use pages::{
    access::{ChangePasswordPage, SignInPage},
    admin::{AuditLogPage, TokensPage, UsersPage},
    dlq::DlqPage,
    event::EventPage,
    inbox::InboxPage,
    not_found::NotFound,
    order::OrderPage,
    overview::OverviewPage,
    reconcile::ReconciliationPage,
    search::SearchPage,
    settings::SettingsPage,
};

/// Inline, so the icon never costs a request or a 404 when `public/` was not deployed.
const FAVICON: &str = "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' \
    viewBox='0 0 32 32'%3E%3Crect width='32' height='32' rx='7' fill='%23155eef'/%3E\
    %3Ctext x='16' y='23' font-family='sans-serif' font-size='19' font-weight='700' \
    text-anchor='middle' fill='white'%3E1%3C/text%3E%3C/svg%3E";

pub fn shell(options: LeptosOptions) -> impl IntoView {
    let stylesheet = format!("/{}/{}.css", options.site_pkg_dir, options.output_name);
    // The language the server chose; hydration reads it back from here (locale.rs).
    let lang = use_context::<locale::RequestLocale>()
        .map(|l| locale::tag(l.0))
        .unwrap_or("en");
    view! {
        <!DOCTYPE html>
        <html lang=lang>
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <meta name="robots" content="noindex"/>
                <link rel="stylesheet" href=stylesheet/>
                <link rel="icon" href=FAVICON/>
                // Only under `cargo leptos watch` (LEPTOS_WATCH set): the live-reload script.
                <AutoReload options=options.clone()/>
                <HydrationScripts options/>
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

/// A page's title: "{page} · oncehook". leptos_meta writes the server's title into `<head>`
/// as it is, unescaped (the body's text is escaped), and a page's title may carry an id a
/// customer typed (`metadata.order_id`): on the server it is escaped here. In the browser
/// it becomes `document.title`, which is plain text, so it stays as it is there.
fn title_text(page: String) -> String {
    let title = format!("{page} · oncehook");
    #[cfg(feature = "ssr")]
    let title = title
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    title
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    locale::provide_i18n();

    // Effects run only in the browser, so this attribute appears exactly when hydration has
    // happened; end-to-end tests wait for it instead of guessing with timeouts.
    let (hydrated, set_hydrated) = signal(false);
    Effect::new(move |_| set_hydrated.set(true));

    view! {
        <Title formatter=title_text/>
        <Router>
            <div class="app" data-hydrated=move || hydrated.get().then_some("true")>
                <TopBar/>
                <main class="content">
                    // Async: the server waits for the data, so the first HTML already holds
                    // the events and the page is complete without JavaScript.
                    <Routes fallback=|| view! { <NotFound/> }>
                        <Route path=path!("/") view=OverviewPage ssr=SsrMode::Async/>
                        <Route path=path!("/inbox") view=InboxPage ssr=SsrMode::Async/>
                        <Route path=path!("/events") view=InboxPage ssr=SsrMode::Async/>
                        <Route path=path!("/events/:id") view=EventPage ssr=SsrMode::Async/>
                        <Route path=path!("/orders") view=OrderPage ssr=SsrMode::Async/>
                        <Route path=path!("/orders/:id") view=OrderPage ssr=SsrMode::Async/>
                        <Route path=path!("/search") view=SearchPage ssr=SsrMode::Async/>
                        <Route path=path!("/dlq") view=DlqPage ssr=SsrMode::Async/>
                        <Route path=path!("/reconciliation") view=ReconciliationPage ssr=SsrMode::Async/>
                        <Route path=path!("/admin/audit") view=AuditLogPage ssr=SsrMode::Async/>
                        <Route path=path!("/admin/users") view=UsersPage ssr=SsrMode::Async/>
                        <Route path=path!("/admin/tokens") view=TokensPage ssr=SsrMode::Async/>
                        <Route path=path!("/settings") view=SettingsPage ssr=SsrMode::Async/>
                        <Route path=path!("/sign-in") view=SignInPage ssr=SsrMode::Async/>
                        <Route path=path!("/change-password") view=ChangePasswordPage ssr=SsrMode::Async/>
                    </Routes>
                </main>
            </div>
        </Router>
    }
}

#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
