//! The inbox: every event the receiver stored, newest first, one row per event however many
//! times the provider delivered it.

use crate::api::load_inbox;
use crate::backend::{InboxEventView, InboxPage as Page, InboxQuery};
use crate::components::{ErrorPanel, StatusBadge};
use crate::format::short_timestamp;
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
    let page = Resource::new(move || query.get(), load_inbox);

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
                        <th scope="col">"Received (UTC)"</th>
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
            <td class="mono">{order_id.map(|o| Either::Left(view! { <a href=format!("/orders/{o}")>{o.clone()}</a> })).unwrap_or_else(|| Either::Right(missing()))}</td>
            <td class="num" class:repeated=repeated title=deliveries_title>{deliveries}</td>
            <td class="time">
                <time datetime=received_at.clone() title=received_at.clone()>
                    {short_timestamp(&received_at)}
                </time>
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
