//! One order (`/orders/{id}`): on top the sentence that says why it is in its status and
//! its money; below the provider resources behind it and one chronological story of
//! deliveries, processing, money counted, stale events, outbox messages, dead letters and
//! redrives.

use crate::api::{current_user, load_order, CancelRefund, RefundOrder};
use crate::backend::{order_href, OrderDetail, Role, TimelineEntry};
use crate::components::{ErrorPanel, StatusBadge, Time};
use crate::format::{money, parse_money, short_timestamp};
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
    let refund = ServerAction::<RefundOrder>::new();
    let cancel = ServerAction::<CancelRefund>::new();
    let order = Resource::new(
        move || (id.get(), refund.version().get(), cancel.version().get()),
        |(id, ..)| load_order(id),
    );
    let user = Resource::new(|| (), |_| current_user());
    // `?refund=12.50&reason=…`: the confirmation step of the refund form.
    let asked = Memo::new(move |_| {
        query.with(|q| {
            q.get("refund")
                .map(|amount| (amount, q.get("reason").unwrap_or_default()))
        })
    });
    let (in_flight, set_in_flight) = signal(false);
    refetch_while_in_flight(order, in_flight);
    view! {
        <Transition fallback=|| view! { <p class="loading">"Loading the order…"</p> }>
            {move || Suspend::new(async move {
                let operator = user.await.ok().flatten().is_some_and(|p| p.role >= Role::Operator);
                let asked = asked.get();
                match order.await {
                    Ok(order) => Either::Left(view! { <OrderView order operator asked refund cancel set_in_flight/> }),
                    Err(error) => Either::Right(view! { <ErrorPanel error/> }),
                }
            })}
        </Transition>
    }
}

/// In the browser, while a refund is in flight: reads the order again every 1.5 s, so the
/// strip and the story follow it from requested to sent to confirmed without a reload.
#[allow(unused_variables)]
fn refetch_while_in_flight(
    order: Resource<Result<OrderDetail, crate::error::AppError>>,
    in_flight: ReadSignal<bool>,
) {
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        let handle = set_interval_with_handle(
            move || {
                if in_flight.get_untracked() {
                    order.refetch();
                }
            },
            std::time::Duration::from_millis(1_500),
        )
        .ok();
        on_cleanup(move || {
            if let Some(handle) = handle {
                handle.clear();
            }
        });
    });
}

#[component]
fn OrderView(
    order: OrderDetail,
    operator: bool,
    asked: Option<(String, String)>,
    refund: ServerAction<RefundOrder>,
    cancel: ServerAction<CancelRefund>,
    set_in_flight: WriteSignal<bool>,
) -> impl IntoView {
    // After it is on the page (an effect: the browser only), so the page's poll knows.
    let flying = order.commands.iter().any(|c| c.in_flight());
    Effect::new(move |_| set_in_flight.set(flying));
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
        <PendingCommands commands=order.commands.clone() order_id=order.order_id.clone() operator cancel/>
        {operator.then(|| view! { <RefundPanel order=order.clone() asked refund/> })}
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
fn PendingCommands(
    commands: Vec<crate::backend::CommandView>,
    order_id: String,
    operator: bool,
    cancel: ServerAction<CancelRefund>,
) -> impl IntoView {
    let pending: Vec<_> = commands.into_iter().filter(|c| c.in_flight()).collect();
    (!pending.is_empty()).then(|| {
        view! {
            <section class="panel panel-warn" id="order-pending" role="status">
                <h2>"In flight"</h2>
                <ul>
                    {pending.into_iter().map(|c| {
                        let order_id = order_id.clone();
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
                                // Only before any send: once sent, Stripe may have made it.
                                {(operator && c.state == "requested" && c.attempts.is_empty()).then(|| view! {
                                    " "
                                    <ActionForm action=cancel attr:class="inline-form cancel-refund">
                                        <input type="hidden" name="order_id" value=order_id.clone()/>
                                        <input type="hidden" name="command_id" value=c.id/>
                                        <button type="submit" class="button">"Cancel this refund"</button>
                                    </ActionForm>
                                })}
                            </li>
                        }
                    }).collect_view()}
                </ul>
                {move || cancel.value().get().and_then(|r| r.err()).map(|error| view! { <ErrorPanel error/> })}
            </section>
        }
    })
}

/// An operator's refund, in two steps that both work without JavaScript: a GET form with
/// the amount in the currency's units and a reason, then a confirmation that says the
/// amount in the currency and posts it once (its key makes a double click one refund).
#[component]
fn RefundPanel(
    order: OrderDetail,
    asked: Option<(String, String)>,
    refund: ServerAction<RefundOrder>,
) -> impl IntoView {
    let Some(currency) = order.currency.clone().filter(|_| order.amount_paid > 0) else {
        return Either::Left(());
    };
    // The server's figure: it counts what holds an amount and what disputes keep.
    let left = order.refundable;
    let note = order.refund_note.clone();
    let href = order_href(&order.order_id);
    // `/orders?id=…` for ids that cannot be a path segment: the form sends the id along.
    let (action, id_field) = match href.strip_prefix("/orders?id=") {
        Some(_) => ("/orders".to_string(), Some(order.order_id.clone())),
        None => (href.clone(), None),
    };
    let shown = money(left, Some(&currency));
    let checked = asked.as_ref().map(|(text, reason)| {
        parse_money(text, &currency)
            .and_then(|minor| {
                if minor > left {
                    Err(format!("only {shown} is left to refund"))
                } else if reason.trim().is_empty() {
                    Err("say why (a reason is required)".into())
                } else {
                    Ok(minor)
                }
            })
            .map(|minor| (minor, reason.clone()))
    });
    let form_key = format!(
        "refund:{}:{}:{}",
        order.order_id,
        order.commands.len() + 1,
        checked
            .as_ref()
            .and_then(|c| c.as_ref().ok())
            .map_or(0, |(m, _)| *m)
    );
    let error = checked.as_ref().and_then(|c| c.as_ref().err().cloned());
    let confirm = checked.and_then(Result::ok);
    let (typed, typed_reason) = asked.unwrap_or_default();
    Either::Right(view! {
        <section class="panel" id="refund-panel">
            <h2>"Refund"</h2>
            {match confirm {
                Some((minor, reason)) => {
                    let amount = money(minor, Some(&currency));
                    Either::Left(view! {
                        <div id="refund-confirm" role="alertdialog" aria-label="Confirm the refund">
                            <p>
                                {format!("Refund {amount} of order {} to the customer (of {shown} left to refund)? ", order.order_id)}
                                "Reason: "<q>{reason.clone()}</q>
                            </p>
                            <p class="form-note">"oncehook asks the provider; the refund counts once its webhook arrives."</p>
                            <ActionForm action=refund attr:class="inline-form" attr:id="refund-confirm-form">
                                <input type="hidden" name="order_id" value=order.order_id.clone()/>
                                <input type="hidden" name="amount" value=minor/>
                                <input type="hidden" name="reason" value=reason/>
                                <input type="hidden" name="form_key" value=form_key/>
                                <button type="submit" class="button primary" disabled=move || refund.pending().get()>
                                    {format!("Confirm refund of {amount}")}
                                </button>
                            </ActionForm>
                            " "<a class="button" href=href.clone()>"Cancel"</a>
                        </div>
                    })
                }
                None => Either::Right(view! {
                    {error.map(|e| view! { <p class="form-error" id="refund-error" role="alert">{e}</p> })}
                    {note.map(|n| view! { <p class="form-note" id="refund-disputed">{format!("Not refundable: {n}.")}</p> })}
                    {if left > 0 {
                        Either::Left(view! {
                            <form method="get" action=action class="inline-form" id="refund-form">
                                {id_field.map(|id| view! { <input type="hidden" name="id" value=id/> })}
                                <label>{format!("Amount ({}) ", currency.to_ascii_uppercase())}
                                    <input type="text" name="refund" inputmode="decimal" required size="10"
                                        value=typed placeholder=money(left, Some(&currency))/>
                                </label>
                                <label>"Reason " <input type="text" name="reason" required size="24" value=typed_reason/></label>
                                <button type="submit" class="button">"Review refund…"</button>
                                <span class="form-note">{format!(" {shown} left to refund")}</span>
                            </form>
                        })
                    } else {
                        Either::Right(view! { <p class="form-note">"Nothing is left to refund."</p> })
                    }}
                }),
            }}
            {move || refund.value().get().and_then(|r| r.err()).map(|error| view! { <ErrorPanel error/> })}
        </section>
    })
}
