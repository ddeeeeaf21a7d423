//! The inbox: every event the receiver stored, newest first, one row per event however many
//! times the provider delivered it.

use crate::api::load_inbox;
use crate::backend::{InboxEventView, InboxPage as Page, InboxQuery};
use crate::components::{ErrorPanel, StatusBadge, Time};
use leptos::either::Either;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
pub fn InboxPage() -> impl IntoView {
    let params = use_query_map();
    // A malformed cursor falls back to the newest page rather than to an error: the link was
    // hand-edited, and the newest events are what the person most likely wants.
    let query = Memo::new(move |_| {
        params.with(|q| {
            InboxQuery {
                provider: q.get("provider"),
                status: q.get("status"),
                event_type: q.get("type"),
                order_id: q.get("order"),
                event_id: q.get("event"),
                correlation_id: q.get("correlation"),
                since: q.get("since"),
                until: q.get("until"),
                payload: q.get("payload"),
                before: q.get("before").and_then(|b| b.parse::<i64>().ok()),
            }
            .normalized()
        })
    });
    let before = Memo::new(move |_| query.with(|q| q.before));
    let (live, set_live) = signal(Live::Off);
    let (tick, set_tick) = signal(0u64);
    start_live_updates(before, set_live, set_tick);
    // `tick` refetches the newest page in place (Transition keeps the rows while it loads).
    let page = Resource::new(
        move || (query.get(), tick.get()),
        |(query, _)| load_inbox(query),
    );

    view! {
        <Title text="Inbox"/>
        <header class="page-header">
            <h1>"Inbox"</h1>
            <p class="lede">
                "Every webhook event received, newest first. "
                "An event delivered many times is one row; its deliveries are counted."
            </p>
        </header>
        <InboxFilters query=query.get_untracked()/>
        <p class="live-status" id="live-status" data-live=move || live.get().as_str()>
            {move || live.get().sentence()}
        </p>
        <Transition fallback=|| view! { <p class="loading">"Loading events…"</p> }>
            {move || Suspend::new(async move {
                let is_first_page = before.get().is_none();
                let query = query.get();
                match page.await {
                    Ok(page) => Either::Left(view! { <InboxTable page is_first_page query/> }),
                    Err(error) => Either::Right(view! { <ErrorPanel error/> }),
                }
            })}
        </Transition>
    }
}

/// How often the newest page is fetched again while someone watches it.
#[cfg(feature = "hydrate")]
const LIVE_EVERY_MS: u64 = 5_000;
/// Reading further down than this (pixels scrolled) pauses the refresh, so rows do not move
/// under the reader; back at the top it resumes.
#[cfg(feature = "hydrate")]
const PAUSE_BELOW_PX: f64 = 240.0;

/// Whether new events appear by themselves (only the browser ever turns it on).
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Live {
    /// Before hydration (the server's page, or no JavaScript), and on older pages.
    Off,
    On,
    /// Scrolled down or the tab is hidden.
    Paused,
}

impl Live {
    fn as_str(self) -> &'static str {
        match self {
            Live::Off => "off",
            Live::On => "on",
            Live::Paused => "paused",
        }
    }

    fn sentence(self) -> &'static str {
        match self {
            Live::Off => "",
            Live::On => "Live: new events appear here every few seconds.",
            Live::Paused => "Paused while you read further down; scroll to the top to resume.",
        }
    }
}

/// In the browser only: every few seconds, on the newest page, with the page at the top and
/// visible, fetch the page again. Without JavaScript the page is what the server rendered.
#[allow(unused_variables)]
fn start_live_updates(
    before: Memo<Option<i64>>,
    set_live: WriteSignal<Live>,
    set_tick: WriteSignal<u64>,
) {
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        let check = move || {
            let state = if before.get_untracked().is_some() {
                Live::Off
            } else if window().scroll_y().unwrap_or(0.0) > PAUSE_BELOW_PX || document().hidden() {
                Live::Paused
            } else {
                Live::On
            };
            set_live.set(state);
            state
        };
        check();
        let handle = set_interval_with_handle(
            move || {
                if check() == Live::On {
                    set_tick.update(|t| *t += 1);
                }
            },
            std::time::Duration::from_millis(LIVE_EVERY_MS),
        )
        .ok();
        on_cleanup(move || {
            if let Some(handle) = handle {
                handle.clear();
            }
        });
    });
}

const STATUSES: [&str; 9] = [
    "pending",
    "processing",
    "applied",
    "duplicate",
    "stale",
    "refused",
    "ignored",
    "failed",
    "dead",
];

/// Filters as a GET form: the URL is the state, so a filtered view can be shared.
#[component]
fn InboxFilters(query: InboxQuery) -> impl IntoView {
    let status = query.status.clone();
    view! {
        <form method="get" action="/events" class="filters" id="inbox-filter">
            <label>"Provider " <input type="text" name="provider" value=query.provider.clone() size="10"/></label>
            <label>
                "Status "
                <select name="status">
                    <option value="">"any"</option>
                    {STATUSES.map(|s| view! { <option value=s selected=status.as_deref() == Some(s)>{s}</option> }).collect_view()}
                </select>
            </label>
            <label>"Type " <input type="text" name="type" value=query.event_type.clone()/></label>
            <label>"Order " <input type="text" name="order" value=query.order_id.clone() size="14"/></label>
            <label>"Event id " <input type="text" name="event" value=query.event_id.clone() size="14"/></label>
            <label>"Correlation id " <input type="text" name="correlation" value=query.correlation_id.clone() size="14"/></label>
            <label>"From (UTC) " <input type="text" name="since" value=query.since.clone() size="16" placeholder="2026-12-01T10:00"/></label>
            <label>"To (UTC) " <input type="text" name="until" value=query.until.clone() size="16"/></label>
            <label>"Payload " <input type="text" name="payload" value=query.payload.clone() size="28" placeholder="data.object.customer = cus_123"/></label>
            <button type="submit" class="button">"Filter"</button>
        </form>
    }
}

#[component]
fn InboxTable(page: Page, is_first_page: bool, query: InboxQuery) -> impl IntoView {
    if page.events.is_empty() {
        let message = if is_first_page {
            "No events yet. They appear here as soon as a provider delivers one."
        } else {
            "No older events."
        };
        return Either::Left(view! {
            <section class="panel empty">
                <p>{message}</p>
                {(!is_first_page).then(|| view! { <a href=InboxQuery { before: None, ..query.clone() }.href()>"Back to the newest events"</a> })}
            </section>
        });
    }

    let shown = page.events.len();
    let rows = page
        .events
        .into_iter()
        .map(|event| view! { <InboxRow event/> })
        .collect_view();

    Either::Right(view! {
        <div class="table-wrap">
            <table class="data" id="inbox-table">
                <thead>
                    <tr>
                        <th scope="col">"Provider"</th>
                        <th scope="col">"Event ID"</th>
                        <th scope="col">"Type"</th>
                        <th scope="col">"Status"</th>
                        <th scope="col">"Order"</th>
                        <th scope="col" class="num">"Deliveries"</th>
                        <th scope="col">"Received"</th>
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
        <nav class="pager" aria-label="Inbox pages">
            <span class="pager-info">{pager_summary(shown, is_first_page, page.next_before.is_some())}</span>
            <span class="pager-links">
                {(!is_first_page).then(|| view! { <a class="button" href=InboxQuery { before: None, ..query.clone() }.href()>"Newest"</a> })}
                {page.next_before.map(|id| view! {
                    <a class="button" rel="next" href=InboxQuery { before: Some(id), ..query.clone() }.href()>"Older →"</a>
                })}
            </span>
        </nav>
    })
}

fn pager_summary(shown: usize, is_first_page: bool, has_older: bool) -> String {
    let events = if shown == 1 { "event" } else { "events" };
    match (is_first_page, has_older) {
        (true, false) if shown == 1 => "Showing the only event".to_string(),
        (true, false) => format!("Showing all {shown} events"),
        (true, true) => format!("Showing the {shown} newest {events}"),
        (false, true) => format!("Showing {shown} older {events}"),
        (false, false) if shown == 1 => "Showing the oldest event".to_string(),
        (false, false) => format!("Showing the {shown} oldest events"),
    }
}

#[component]
fn InboxRow(event: InboxEventView) -> impl IntoView {
    let InboxEventView {
        id,
        provider,
        event_id,
        event_type,
        status,
        reason,
        order_id,
        deliveries,
        received_at,
    } = event;
    let repeated = deliveries > 1;
    let deliveries_title = if repeated {
        format!("Delivered {deliveries} times, processed once")
    } else {
        "Delivered once".to_string()
    };
    let missing = || view! { <span class="none">"—"</span> };

    view! {
        <tr>
            <td><span class="provider">{provider}</span></td>
            <td class="mono event-id"><a href=format!("/events/{id}")>{event_id}</a></td>
            <td class="mono">{event_type.map(Either::Left).unwrap_or_else(|| Either::Right(missing()))}</td>
            <td class="status"><StatusBadge status reason/></td>
            <td class="mono">{order_id.map(|o| Either::Left(view! { <a href=crate::backend::order_href(&o)>{o.clone()}</a> })).unwrap_or_else(|| Either::Right(missing()))}</td>
            <td class="num" class:repeated=repeated title=deliveries_title>{deliveries}</td>
            <td class="time">
                <Time at=received_at/>
            </td>
        </tr>
    }
}

#[cfg(test)]
mod tests {
    use super::pager_summary;

    #[test]
    fn pager_says_where_in_the_history_the_page_is() {
        assert_eq!(pager_summary(1, true, false), "Showing the only event");
        assert_eq!(pager_summary(7, true, false), "Showing all 7 events");
        assert_eq!(
            pager_summary(50, true, true),
            "Showing the 50 newest events"
        );
        assert_eq!(pager_summary(50, false, true), "Showing 50 older events");
        assert_eq!(
            pager_summary(19, false, false),
            "Showing the 19 oldest events"
        );
        assert_eq!(pager_summary(1, false, false), "Showing the oldest event");
    }
}
