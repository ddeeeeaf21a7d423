//! Pieces shared by the pages: the top bar, status badges and the error panel.

use crate::api::{current_user, demo_mode};
use crate::error::AppError;
use crate::format::{ago, epoch_ms, short_timestamp, status_class};
use leptos::prelude::*;
use leptos_router::components::A;

#[component]
pub fn TopBar() -> impl IntoView {
    view! {
        <header class="topbar">
            <a class="brand" href="/">
                <span class="brand-mark" aria-hidden="true">"1"</span>
                "oncehook"
            </a>
            <DemoBadge/>
            <nav class="mainnav" aria-label="Main">
                <A href="/">"Overview"</A>
                <A href="/events">"Inbox"</A>
                <A href="/dlq">"Dead letters"</A>
                <A href="/reconciliation">"Reconciliation"</A>
                <A href="/settings">"Settings"</A>
            </nav>
            <form class="search" method="get" action="/search" role="search">
                <label class="visually-hidden" for="search-box">"Find an order"</label>
                <input id="search-box" type="search" name="q" autocomplete="off"
                    placeholder="Order, evt_, pi_, ch_, re_ id"/>
                <button type="submit" class="button">"Find"</button>
            </form>
            <UserMenu/>
        </header>
    }
}

/// "demo data" beside the brand when the server runs `serve --demo`, so nobody takes the
/// simulator's orders for real ones. Resolved while the server renders, so the hydrated
/// page reads the same answer and never calls the server for it.
#[component]
fn DemoBadge() -> impl IntoView {
    let demo = Resource::new(|| (), |_| demo_mode());
    view! {
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                demo.await.unwrap_or(false).then(|| view! {
                    <span class="demo-badge" id="demo-badge"
                        title="Simulated Stripe traffic from oncehook serve --demo: no real payments">
                        "demo data"
                    </span>
                })
            })}
        </Suspense>
    }
}

/// Who is signed in, with their role and a sign-out button (a POST form: no state
/// changes through GET).
#[component]
fn UserMenu() -> impl IntoView {
    let user = Resource::new(|| (), |_| current_user());
    view! {
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                user.await.ok().flatten().map(|user| view! {
                    <div class="usermenu">
                        <span class="username" id="signed-in-user">{user.name}</span>
                        <span class="role">{user.role.as_str()}</span>
                        {(user.role == crate::backend::Role::Admin).then(|| view! {
                            <a href="/admin/audit" id="admin-audit">"Audit log"</a>
                            <a href="/admin/users" id="admin-users">"Users"</a>
                            <a href="/admin/tokens" id="admin-tokens">"API tokens"</a>
                        })}
                        <form method="post" action="/auth/sign-out" class="inline">
                            <button type="submit" class="button link" id="sign-out">"Sign out"</button>
                        </form>
                    </div>
                })
            })}
        </Suspense>
    }
}

/// A processing status as a coloured pill, with the processor's reason under it when it gave one.
#[component]
pub fn StatusBadge(status: String, reason: Option<String>) -> impl IntoView {
    let class = status_class(&status);
    view! {
        <span class=class title=reason.clone()>
            {status}
        </span>
        {reason.map(|reason| view! { <span class="reason">{reason}</span> })}
    }
}

/// Shows a failed server call and, during SSR, gives the response the matching status code so
/// that monitoring and scripts see the failure too, not only people.
#[component]
pub fn ErrorPanel(error: AppError) -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        if let Ok(status) = http::StatusCode::from_u16(error.status_code()) {
            response.set_status(status);
        }
    }
    let detail = match &error {
        AppError::Backend(detail)
        | AppError::Transport(detail)
        | AppError::Forbidden(detail)
        | AppError::Invalid(detail)
        | AppError::Busy(detail)
        | AppError::Conflict(detail) => Some(detail.clone()),
        AppError::NotFound | AppError::Unauthorized => None,
    };
    let hint = match error {
        AppError::NotFound => "Check the address, or go back to the inbox.",
        AppError::Unauthorized => "Sign in again to continue.",
        AppError::Forbidden(_) => "Ask an admin for a role that allows it.",
        AppError::Invalid(_) => "Nothing was changed.",
        AppError::Busy(_) => "Wait for your other reads to finish, then reload.",
        AppError::Conflict(_) => "Nothing was changed. Reload the page to see the current state.",
        _ => "Nothing was changed. Reload the page to try again.",
    };
    view! {
        <section class="panel panel-error" role="alert">
            <h2>{error.title()}</h2>
            {detail.map(|detail| view! { <pre class="detail">{detail}</pre> })}
            <p>{hint}</p>
        </section>
    }
}

/// Now, Unix ms, on whichever side renders.
fn now_ms() -> i64 {
    #[cfg(feature = "hydrate")]
    {
        js_sys::Date::now() as i64
    }
    #[cfg(not(feature = "hydrate"))]
    {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }
}

/// A time as the viewer reads it, with how long ago. The server (and a browser without
/// JavaScript) shows UTC, saying so; once hydrated, the browser's own time zone, with its
/// offset. The exact UTC time is in the tooltip and the `datetime` attribute.
#[component]
pub fn Time(#[prop(into)] at: String) -> impl IntoView {
    let utc = short_timestamp(&at);
    let then = epoch_ms(&at);
    let (text, set_text) = signal(format!("{utc} UTC"));
    let (relative, set_relative) = signal(then.map(|t| ago(t, now_ms())));
    #[cfg(feature = "hydrate")]
    if let Some(then) = then {
        Effect::new(move |_| {
            let d = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(then as f64));
            set_text.set(format!(
                "{:04}-{:02}-{:02} {:02}:{:02}:{:02} {}",
                d.get_full_year(),
                d.get_month() + 1,
                d.get_date(),
                d.get_hours(),
                d.get_minutes(),
                d.get_seconds(),
                crate::format::offset_label(-(d.get_timezone_offset() as i32)),
            ));
            set_relative.set(Some(ago(then, now_ms())));
        });
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (set_text, set_relative);
    view! {
        <time datetime=at title=format!("{utc} UTC")>
            {text}
            {move || relative.get().map(|r| view! { " " <span class="ago">{format!("· {r}")}</span> })}
        </time>
    }
}
