//! One order (`/orders/{id}`): on top the sentence that says why it is in its status and
//! its money; below the provider resources behind it and one chronological story of
//! deliveries, processing, money counted, stale events, outbox messages, dead letters and
//! redrives.

use crate::api::load_order;
use crate::backend::{OrderDetail, TimelineEntry};
use crate::components::{ErrorPanel, StatusBadge, Time};
use crate::format::{money, short_timestamp};
use leptos::either::Either;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};

#[component]
pub fn OrderPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    // `/orders/{id}`, or `/orders?id=…` for an id that cannot be one path segment.
    let id = Memo::new(move |_| {
        params
            .with(|p| p.get("id"))
            .or_else(|| query.with(|q| q.get("id")))
            .unwrap_or_default()
    });
    let order = Resource::new(move || id.get(), load_order);
    view! {
        <Transition fallback=|| view! { <p class="loading">"Loading the order…"</p> }>
            {move || Suspend::new(async move {
                match order.await {
                    Ok(order) => Either::Left(view! { <OrderView order/> }),
                    Err(error) => Either::Right(view! { <ErrorPanel error/> }),
                }
            })}
        </Transition>
    }
}

#[component]
fn OrderView(order: OrderDetail) -> impl IntoView {
    let currency = order.currency.clone();
    let amount = move |minor: i64| money(minor, currency.as_deref());
    let totals = [
        ("Paid", order.amount_paid, "total-paid"),
        ("Refunded", order.amount_refunded, "total-refunded"),
        ("Disputed", order.amount_disputed, "total-disputed"),
        ("Net", order.net, "total-net"),
    ];
    let resources = order.resources.len();
    let steps = order.timeline.len();
    view! {
        <Title text=format!("Order {}", order.order_id)/>
        <header class="page-header">
            <h1>"Order "<span class="mono">{order.order_id.clone()}</span></h1>
            <p class="lede" id="order-why">
                <StatusBadge status=order.status.clone() reason=None/>
                " "{order.why.clone()}
            </p>
        </header>
        {(!order.attention.is_empty()).then(|| view! {
            <section class="panel panel-warn" id="order-attention" role="status">
                <h2>"Needs attention"</h2>
                <ul>{order.attention.iter().map(|a| view! { <li>{a.clone()}</li> }).collect_view()}</ul>
            </section>
        })}
        <PendingCommands commands=order.commands.clone()/>
        <section class="panel" aria-label="Money">
            <dl class="totals">
                {totals.into_iter().map(|(label, value, id)| view! {
                    <div class="total" id=id>
                        <dt>{label}</dt>
                        <dd>{amount(value)}</dd>
                    </div>
                }).collect_view()}
            </dl>
            <p class="form-note">
                {format!(
                    "Created {} UTC, last changed {} UTC. Totals are derived from the facts below: every payment, refund and dispute counted once.",
                    short_timestamp(&order.created_at),
                    short_timestamp(&order.updated_at)
                )}
            </p>
        </section>
        <section class="panel" id="resources">
            <h2>{format!("Provider resources ({resources})")}</h2>
            <div class="table-scroll">
                <table class="data compact">
                    <thead><tr><th>"Kind"</th><th>"Id"</th><th>"Belongs to"</th><th>"State"</th><th class="num">"Amount"</th><th>"As of"</th><th>"Latest event"</th></tr></thead>
                    <tbody>
                        {order.resources.iter().map(|r| view! {
                            <tr>
                                <td>{r.kind.clone()}</td>
                                <td class="mono">{r.resource_id.clone()}</td>
                                <td class="mono">{r.parent_ref.clone().unwrap_or_default()}</td>
                                <td>{r.state.clone()}</td>
                                <td class="num">{r.amount.map(|a| money(a, order.currency.as_deref())).unwrap_or_default()}</td>
                                <td class="time"><Time at=r.at.clone()/></td>
                                <td class="mono">{r.event_id.clone()}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
        </section>
        <section class="panel" id="timeline">
            <h2>{format!("Story ({steps} steps, oldest first)")}</h2>
            <ol class="timeline">
                {order.timeline.into_iter().map(|entry| view! { <TimelineItem entry/> }).collect_view()}
            </ol>
        </section>
    }
}

#[component]
fn TimelineItem(entry: TimelineEntry) -> impl IntoView {
    let class = format!("timeline-item kind-{}", entry.kind);
    let title = match entry.href.clone() {
        Some(href) => Either::Left(view! { <a href=href>{entry.title.clone()}</a> }),
        None => Either::Right(entry.title.clone()),
    };
    view! {
        <li class=class data-kind=entry.kind.clone()>
            <Time at=entry.at.clone()/>
            <span class="kind">{entry.kind.replace('-', " ")}</span>
            <div class="what">
                <span class="title">{title}</span>
                {entry.status.clone().map(|s| view! { " "<StatusBadge status=s reason=None/> })}
                {entry.detail.clone().map(|d| view! { <p class="detail">{d}</p> })}
            </div>
        </li>
    }
}

/// Refunds oncehook asked for and the provider has not confirmed yet: who asked, when, how
/// much, the key every send carries, and the last answer. Gone once confirmed or failed
/// (the story keeps them).
#[component]
fn PendingCommands(commands: Vec<crate::backend::CommandView>) -> impl IntoView {
    let pending: Vec<_> = commands.into_iter().filter(|c| c.in_flight()).collect();
    (!pending.is_empty()).then(|| {
        view! {
            <section class="panel panel-warn" id="order-pending" role="status">
                <h2>"In flight"</h2>
                <ul>
                    {pending.into_iter().map(|c| {
                        let last = c.attempts.last().map(|a| match (&a.error, a.status_code) {
                            (Some(e), _) => format!("last answer: {e}"),
                            (None, Some(code)) => format!("last answer: {code}"),
                            (None, None) => "no answer yet".to_string(),
                        }).unwrap_or_else(|| "not sent yet".to_string());
                        view! {
                            <li class="pending-command">
                                <StatusBadge status=c.state.clone() reason=None/>
                                {format!(
                                    " Refund of {} asked for by {} at {} UTC: \"{}\". ",
                                    money(c.amount, Some(&c.currency)),
                                    c.requested_by,
                                    short_timestamp(&c.requested_at),
                                    c.reason
                                )}
                                "Key "<span class="mono">{c.idempotency_key.clone()}</span>
                                {format!("; {} attempt(s), {last}.", c.attempts.len())}
                            </li>
                        }
                    }).collect_view()}
                </ul>
            </section>
        }
    })
}
