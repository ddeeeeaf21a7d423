//! Pieces shared by the pages: the top bar, status badges and the error panel.

use crate::api::{current_user, demo_mode};
use crate::error::AppError;
use crate::format::{ago_in, epoch_ms, short_timestamp_in, status_class};
use crate::i18n::*;
use crate::locale::{current, Locale};
use leptos::prelude::*;
use leptos_router::components::A;

#[component]
pub fn TopBar() -> impl IntoView {
    let loc = current();
    view! {
        <header class="topbar">
            <a class="brand" href="/">
                <span class="brand-mark" aria-hidden="true">"1"</span>
                "oncehook"
            </a>
            <DemoBadge/>
            <nav class="mainnav" aria-label=td_string!(loc, nav.main)>
                <A href="/">{td_string!(loc, nav.overview)}</A>
                <A href="/events">{td_string!(loc, nav.inbox)}</A>
                <A href="/dlq">{td_string!(loc, nav.dlq)}</A>
                <A href="/reconciliation">{td_string!(loc, nav.reconciliation)}</A>
                <A href="/settings">{td_string!(loc, nav.settings)}</A>
            </nav>
            <form class="search" method="get" action="/search" role="search">
                <label class="visually-hidden" for="search-box">{td_string!(loc, nav.find_label)}</label>
                <input id="search-box" type="search" name="q" autocomplete="off"
                    placeholder=td_string!(loc, nav.find_placeholder)/>
                <button type="submit" class="button">{td_string!(loc, nav.find)}</button>
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
    let loc = current();
    view! {
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                demo.await.unwrap_or(false).then(|| view! {
                    <span class="demo-badge" id="demo-badge"
                        title=td_string!(loc, nav.demo_title)>
                        {td_string!(loc, nav.demo)}
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
    let loc = current();
    view! {
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                user.await.ok().flatten().map(|user| view! {
                    <div class="usermenu">
                        <span class="username" id="signed-in-user">{user.name}</span>
                        <span class="role" data-role=user.role.as_str()>{role_label(loc, user.role)}</span>
                        {(user.role == crate::backend::Role::Admin).then(|| view! {
                            <a href="/admin/audit" id="admin-audit">{td_string!(loc, nav.audit)}</a>
                            <a href="/admin/users" id="admin-users">{td_string!(loc, nav.users)}</a>
                            <a href="/admin/tokens" id="admin-tokens">{td_string!(loc, nav.tokens)}</a>
                        })}
                        <form method="post" action="/auth/sign-out" class="inline">
                            <button type="submit" class="button link" id="sign-out">{td_string!(loc, nav.sign_out)}</button>
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
    let label = status_label(current(), &status);
    view! {
        <span class=class title=reason.clone() data-status=status>
            {label}
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
    let loc = current();
    let hint = match error {
        AppError::NotFound => td_string!(loc, error.hint_not_found),
        AppError::Unauthorized => td_string!(loc, error.hint_unauthorized),
        AppError::Forbidden(_) => td_string!(loc, error.hint_forbidden),
        AppError::Invalid(_) => td_string!(loc, error.hint_invalid),
        AppError::Busy(_) => td_string!(loc, error.hint_busy),
        AppError::Conflict(_) => td_string!(loc, error.hint_conflict),
        _ => td_string!(loc, error.hint_retry),
    };
    view! {
        <section class="panel panel-error" role="alert">
            <h2>{error.title_in(loc)}</h2>
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
    let loc = current();
    let utc = short_timestamp_in(loc, &at);
    let then = epoch_ms(&at);
    let (text, set_text) = signal(format!("{utc} UTC"));
    let (relative, set_relative) = signal(then.map(|t| ago_in(loc, t, now_ms())));
    #[cfg(feature = "hydrate")]
    if let Some(then) = then {
        Effect::new(move |_| {
            let d = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(then as f64));
            let local = crate::format::datetime_parts_in(
                loc,
                (
                    i64::from(d.get_full_year()),
                    i64::from(d.get_month() + 1),
                    i64::from(d.get_date()),
                ),
                (
                    i64::from(d.get_hours()),
                    i64::from(d.get_minutes()),
                    i64::from(d.get_seconds()),
                ),
            );
            set_text.set(format!(
                "{local} {}",
                crate::format::offset_label(-(d.get_timezone_offset() as i32)),
            ));
            set_relative.set(Some(ago_in(loc, then, now_ms())));
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

/// A role as the viewer's language names it.
pub fn role_label(loc: Locale, role: crate::backend::Role) -> &'static str {
    use crate::backend::Role;
    match role {
        Role::Viewer => td_string!(loc, role.viewer),
        Role::Operator => td_string!(loc, role.operator),
        Role::Admin => td_string!(loc, role.admin),
    }
}

/// A status word from the database (`applied`, `refunded`…) in the viewer's language; an
/// unknown one as it is.
pub fn status_label(loc: Locale, status: &str) -> String {
    let known = match status {
        "applied" => td_string!(loc, status.applied),
        "pending" => td_string!(loc, status.pending),
        "processing" => td_string!(loc, status.processing),
        "stale" => td_string!(loc, status.stale),
        "refused" => td_string!(loc, status.refused),
        "failed" => td_string!(loc, status.failed),
        "dead" => td_string!(loc, status.dead),
        "duplicate" => td_string!(loc, status.duplicate),
        "ignored" => td_string!(loc, status.ignored),
        "paid" => td_string!(loc, status.paid),
        "refunded" => td_string!(loc, status.refunded),
        "partially_refunded" => td_string!(loc, status.partially_refunded),
        "disputed" => td_string!(loc, status.disputed),
        "authorized" => td_string!(loc, status.authorized),
        "cancelled" => td_string!(loc, status.cancelled),
        "canceled" => td_string!(loc, status.canceled),
        "created" => td_string!(loc, status.created),
        "requested" => td_string!(loc, status.requested),
        "sent" => td_string!(loc, status.sent),
        "confirmed" => td_string!(loc, status.confirmed),
        "delivered" => td_string!(loc, status.delivered),
        "open" => td_string!(loc, status.open),
        "redriven" => td_string!(loc, status.redriven),
        "resolved" => td_string!(loc, status.resolved),
        "discarded" => td_string!(loc, status.discarded),
        "succeeded" => td_string!(loc, status.succeeded),
        other => return other.to_string(),
    };
    known.to_string()
}

/// A transition or resource state (`refund_pending`, `pay`…) as words in the viewer's
/// language; anything else with its underscores as spaces.
pub fn transition_label(loc: Locale, transition: &str) -> String {
    let known = match transition {
        "authorize" => td_string!(loc, transition.authorize),
        "pay" => td_string!(loc, transition.pay),
        "settle" => td_string!(loc, transition.settle),
        "fail" => td_string!(loc, transition.fail),
        "cancel" => td_string!(loc, transition.cancel),
        "refund_pending" => td_string!(loc, transition.refund_pending),
        "refund" => td_string!(loc, transition.refund),
        "refund_failed" => td_string!(loc, transition.refund_failed),
        "refund_canceled" => td_string!(loc, transition.refund_canceled),
        "refund_total" => td_string!(loc, transition.refund_total),
        "dispute" => td_string!(loc, transition.dispute),
        "dispute_won" => td_string!(loc, transition.dispute_won),
        "dispute_lost" => td_string!(loc, transition.dispute_lost),
        other => return other.replace('_', " "),
    };
    known.to_string()
}
