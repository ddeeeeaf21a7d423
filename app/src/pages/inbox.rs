//! The inbox: every event the receiver stored, newest first, one row per event however many
//! times the provider delivered it.

use crate::api::load_inbox;
use crate::backend::{InboxEventView, InboxPage as Page, InboxQuery};
use crate::components::{ErrorPanel, StatusBadge, Time};
use crate::i18n::*;
use crate::locale::{current, Locale};
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

    let loc = current();
    view! {
        <Title text=td_string!(loc, nav.inbox)/>
        <header class="page-header">
            <h1>{td_string!(loc, nav.inbox)}</h1>
            <p class="lede">{td_string!(loc, inbox.lede)}</p>
        </header>
        <InboxFilters query=query.get_untracked()/>
        <p class="live-status" id="live-status" data-live=move || live.get().as_str()>
            {move || live.get().sentence(loc)}
        </p>
        <Transition fallback=move || view! { <p class="loading">{td_string!(loc, inbox.loading)}</p> }>
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

    fn sentence(self, loc: Locale) -> &'static str {
        match self {
            Live::Off => "",
            Live::On => td_string!(loc, inbox.live_on),
            Live::Paused => td_string!(loc, inbox.live_paused),
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
    let loc = current();
    view! {
        <form method="get" action="/events" class="filters" id="inbox-filter">
            <label>{td_string!(loc, inbox.provider)} <input type="text" name="provider" value=query.provider.clone() size="10"/></label>
            <label>
                {td_string!(loc, inbox.status)}
                <select name="status">
                    <option value="">{td_string!(loc, inbox.any)}</option>
                    {STATUSES.map(|s| view! { <option value=s selected=status.as_deref() == Some(s)>{crate::components::status_label(loc, s)}</option> }).collect_view()}
                </select>
            </label>
            <label>{td_string!(loc, inbox.event_type)} <input type="text" name="type" value=query.event_type.clone()/></label>
            <label>{td_string!(loc, inbox.order)} <input type="text" name="order" value=query.order_id.clone() size="14"/></label>
            <label>{td_string!(loc, inbox.event_id)} <input type="text" name="event" value=query.event_id.clone() size="14"/></label>
            <label>{td_string!(loc, inbox.correlation)} <input type="text" name="correlation" value=query.correlation_id.clone() size="14"/></label>
            <label>{td_string!(loc, inbox.from)} <input type="text" name="since" value=query.since.clone() size="16" placeholder="2026-12-01T10:00"/></label>
            <label>{td_string!(loc, inbox.to)} <input type="text" name="until" value=query.until.clone() size="16"/></label>
            <label>{td_string!(loc, inbox.payload)} <input type="text" name="payload" value=query.payload.clone() size="28" placeholder="data.object.customer = cus_123"/></label>
            <button type="submit" class="button">{td_string!(loc, inbox.filter)}</button>
        </form>
    }
}

#[component]
fn InboxTable(page: Page, is_first_page: bool, query: InboxQuery) -> impl IntoView {
    let loc = current();
    if page.events.is_empty() {
        let message = if is_first_page {
            td_string!(loc, inbox.none_yet)
        } else {
            td_string!(loc, inbox.no_older)
        };
        return Either::Left(view! {
            <section class="panel empty">
                <p>{message}</p>
                {(!is_first_page).then(|| view! { <a href=InboxQuery { before: None, ..query.clone() }.href()>{td_string!(loc, inbox.back_newest)}</a> })}
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
                        <th scope="col">{td_string!(loc, inbox.col_provider)}</th>
                        <th scope="col">{td_string!(loc, inbox.col_event)}</th>
                        <th scope="col">{td_string!(loc, inbox.col_type)}</th>
                        <th scope="col">{td_string!(loc, inbox.col_status)}</th>
                        <th scope="col">{td_string!(loc, inbox.col_order)}</th>
                        <th scope="col" class="num">{td_string!(loc, inbox.col_deliveries)}</th>
                        <th scope="col">{td_string!(loc, inbox.col_received)}</th>
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
        <nav class="pager" aria-label=td_string!(loc, inbox.pages)>
            <span class="pager-info">{pager_summary(loc, shown, is_first_page, page.next_before.is_some())}</span>
            <span class="pager-links">
                {(!is_first_page).then(|| view! { <a class="button" href=InboxQuery { before: None, ..query.clone() }.href()>{td_string!(loc, inbox.newest)}</a> })}
                {page.next_before.map(|id| view! {
                    <a class="button" rel="next" href=InboxQuery { before: Some(id), ..query.clone() }.href()>{td_string!(loc, inbox.older)}</a>
                })}
            </span>
        </nav>
    })
}

fn pager_summary(loc: Locale, shown: usize, is_first_page: bool, has_older: bool) -> String {
    let n = shown;
    match (is_first_page, has_older) {
        (true, false) if shown == 1 => td_string!(loc, inbox.only_event).to_string(),
        (true, false) => td_string!(loc, inbox.all_events, n = n).to_string(),
        (true, true) if shown == 1 => td_string!(loc, inbox.newest_one, n = n).to_string(),
        (true, true) => td_string!(loc, inbox.newest_many, n = n).to_string(),
        (false, true) if shown == 1 => td_string!(loc, inbox.older_one, n = n).to_string(),
        (false, true) => td_string!(loc, inbox.older_many, n = n).to_string(),
        (false, false) if shown == 1 => td_string!(loc, inbox.oldest_event).to_string(),
        (false, false) => td_string!(loc, inbox.oldest_many, n = n).to_string(),
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
    let loc = current();
    let deliveries_title = if repeated {
        td_string!(loc, inbox.delivered_times, n = deliveries).to_string()
    } else {
        td_string!(loc, inbox.delivered_once).to_string()
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
    use crate::locale::Locale;

    fn pager_summary(shown: usize, is_first_page: bool, has_older: bool) -> String {
        super::pager_summary(Locale::en, shown, is_first_page, has_older)
    }

    #[test]
    fn the_pager_speaks_portuguese_too() {
        let pt = |s, f, o| super::pager_summary(Locale::pt_BR, s, f, o);
        assert_eq!(pt(50, true, true), "Mostrando os 50 eventos mais recentes");
        assert_eq!(pt(1, true, false), "Mostrando o único evento");
    }

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
