//! One order (`/orders/{id}`): on top the sentence that says why it is in its status and
//! its money; below the provider resources behind it and one chronological story of
//! deliveries, processing, money counted, stale events, outbox messages, dead letters and
//! redrives.

use crate::api::{current_user, load_order, CancelRefund, RefundOrder};
use crate::backend::{order_href, OrderDetail, Role, TimelineEntry};
use crate::components::{ErrorPanel, StatusBadge, Time};
use crate::format::{money_in, parse_money_in, short_timestamp_in};
use crate::i18n::*;
use crate::locale::current;
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
    let loc = current();
    view! {
        <Transition fallback=move || view! { <p class="loading">{td_string!(loc, order.loading)}</p> }>
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
    let loc = current();
    let currency = order.currency.clone();
    let amount = move |minor: i64| money_in(loc, minor, currency.as_deref());
    let totals = [
        (td_string!(loc, order.paid), order.amount_paid, "total-paid"),
        (
            td_string!(loc, order.refunded),
            order.amount_refunded,
            "total-refunded",
        ),
        (
            td_string!(loc, order.disputed),
            order.amount_disputed,
            "total-disputed",
        ),
        (td_string!(loc, order.net), order.net, "total-net"),
    ];
    let resources = order.resources.len();
    let steps = order.timeline.len();
    view! {
        <Title text=td_string!(loc, order.title, id = order.order_id.clone()).to_string()/>
        <header class="page-header">
            <h1>{td_string!(loc, order.heading)}<span class="mono">{order.order_id.clone()}</span></h1>
            <p class="lede" id="order-why">
                <StatusBadge status=order.status.clone() reason=None/>
                " "{order.why.clone()}
            </p>
        </header>
        {(!order.attention.is_empty()).then(|| view! {
            <section class="panel panel-warn" id="order-attention" role="status">
                <h2>{td_string!(loc, order.attention)}</h2>
                <ul>{order.attention.iter().map(|a| view! { <li>{a.clone()}</li> }).collect_view()}</ul>
            </section>
        })}
        <PendingCommands commands=order.commands.clone() order_id=order.order_id.clone() operator cancel/>
        {operator.then(|| view! { <RefundPanel order=order.clone() asked refund/> })}
        <section class="panel" aria-label=td_string!(loc, order.money)>
            <dl class="totals">
                {totals.into_iter().map(|(label, value, id)| view! {
                    <div class="total" id=id>
                        <dt>{label}</dt>
                        <dd>{amount(value)}</dd>
                    </div>
                }).collect_view()}
            </dl>
            <p class="form-note">
                {td_string!(
                    loc,
                    order.created_note,
                    created = short_timestamp_in(loc, &order.created_at),
                    updated = short_timestamp_in(loc, &order.updated_at)
                ).to_string()}
            </p>
        </section>
        <section class="panel" id="resources">
            <h2>{td_string!(loc, order.resources, count = resources).to_string()}</h2>
            <div class="table-scroll">
                <table class="data compact">
                    <thead><tr>
                        <th>{td_string!(loc, order.col_kind)}</th>
                        <th>{td_string!(loc, order.col_id)}</th>
                        <th>{td_string!(loc, order.col_belongs)}</th>
                        <th>{td_string!(loc, order.col_state)}</th>
                        <th class="num">{td_string!(loc, order.col_amount)}</th>
                        <th>{td_string!(loc, order.col_as_of)}</th>
                        <th>{td_string!(loc, order.col_latest)}</th>
                    </tr></thead>
                    <tbody>
                        {order.resources.iter().map(|r| view! {
                            <tr>
                                <td>{kind_label(loc, &r.kind)}</td>
                                <td class="mono">{r.resource_id.clone()}</td>
                                <td class="mono">{r.parent_ref.clone().unwrap_or_default()}</td>
                                <td>{crate::components::transition_label(loc, &r.state)}</td>
                                <td class="num">{r.amount.map(|a| money_in(loc, a, order.currency.as_deref())).unwrap_or_default()}</td>
                                <td class="time"><Time at=r.at.clone()/></td>
                                <td class="mono">{r.event_id.clone()}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
        </section>
        <section class="panel" id="timeline">
            <h2>{td_string!(loc, order.story, count = steps).to_string()}</h2>
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
            <span class="kind">{kind_label(current(), &entry.kind)}</span>
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
    let loc = current();
    (!pending.is_empty()).then(|| {
        view! {
            <section class="panel panel-warn" id="order-pending" role="status">
                <h2>{td_string!(loc, order.in_flight)}</h2>
                <ul>
                    {pending.into_iter().map(|c| {
                        let order_id = order_id.clone();
                        let last = c.attempts.last().map(|a| match (&a.error, a.status_code) {
                            (Some(e), _) => td_string!(loc, order.last_answer, answer = e).to_string(),
                            (None, Some(code)) => td_string!(loc, order.last_answer, answer = code).to_string(),
                            (None, None) => td_string!(loc, order.no_answer).to_string(),
                        }).unwrap_or_else(|| td_string!(loc, order.not_sent).to_string());
                        view! {
                            <li class="pending-command">
                                <StatusBadge status=c.state.clone() reason=None/>
                                {td_string!(
                                    loc,
                                    order.pending_refund,
                                    amount = money_in(loc, c.amount, Some(&c.currency)),
                                    who = c.requested_by.clone(),
                                    at = short_timestamp_in(loc, &c.requested_at),
                                    reason = c.reason.clone()
                                ).to_string()}
                                {td_string!(loc, order.key)}<span class="mono">{c.idempotency_key.clone()}</span>
                                {td_string!(loc, order.attempts, count = c.attempts.len(), last = last.clone()).to_string()}
                                // Only before any send: once sent, Stripe may have made it.
                                {(operator && c.state == "requested" && c.attempts.is_empty()).then(|| view! {
                                    " "
                                    <ActionForm action=cancel attr:class="inline-form cancel-refund">
                                        <input type="hidden" name="order_id" value=order_id.clone()/>
                                        <input type="hidden" name="command_id" value=c.id/>
                                        <button type="submit" class="button">{td_string!(loc, order.cancel_refund)}</button>
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
    let loc = current();
    let shown = money_in(loc, left, Some(&currency));
    let checked = asked.as_ref().map(|(text, reason)| {
        parse_money_in(loc, text, &currency)
            .and_then(|minor| {
                if minor > left {
                    Err(td_string!(loc, order.only_left, amount = shown.clone()).to_string())
                } else if reason.trim().is_empty() {
                    Err(td_string!(loc, order.reason_required).to_string())
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
            <h2>{td_string!(loc, order.refund)}</h2>
            {match confirm {
                Some((minor, reason)) => {
                    let amount = money_in(loc, minor, Some(&currency));
                    Either::Left(view! {
                        <div id="refund-confirm" role="alertdialog" aria-label=td_string!(loc, order.confirm_label)>
                            <p>
                                {td_string!(loc, order.confirm_question, amount = amount.clone(), id = order.order_id.clone(), left = shown.clone()).to_string()}
                                {td_string!(loc, order.reason)}<q>{reason.clone()}</q>
                            </p>
                            <p class="form-note">{td_string!(loc, order.asks_provider)}</p>
                            <ActionForm action=refund attr:class="inline-form" attr:id="refund-confirm-form">
                                <input type="hidden" name="order_id" value=order.order_id.clone()/>
                                <input type="hidden" name="amount" value=minor/>
                                <input type="hidden" name="reason" value=reason/>
                                <input type="hidden" name="form_key" value=form_key/>
                                <button type="submit" class="button primary" disabled=move || refund.pending().get()>
                                    {td_string!(loc, order.confirm_button, amount = amount.clone()).to_string()}
                                </button>
                            </ActionForm>
                            " "<a class="button" href=href.clone()>{td_string!(loc, order.cancel)}</a>
                        </div>
                    })
                }
                None => Either::Right(view! {
                    {error.map(|e| view! { <p class="form-error" id="refund-error" role="alert">{e}</p> })}
                    {note.map(|n| view! { <p class="form-note" id="refund-disputed">{td_string!(loc, order.not_refundable, why = n).to_string()}</p> })}
                    {if left > 0 {
                        Either::Left(view! {
                            <form method="get" action=action class="inline-form" id="refund-form">
                                {id_field.map(|id| view! { <input type="hidden" name="id" value=id/> })}
                                <label>{td_string!(loc, order.amount_label, currency = currency.to_ascii_uppercase()).to_string()}
                                    <input type="text" name="refund" inputmode="decimal" required size="10"
                                        value=typed placeholder=money_in(loc, left, Some(&currency))/>
                                </label>
                                <label>{td_string!(loc, order.reason_label)} <input type="text" name="reason" required size="24" value=typed_reason/></label>
                                <button type="submit" class="button">{td_string!(loc, order.review)}</button>
                                <span class="form-note">{td_string!(loc, order.left, amount = shown.clone()).to_string()}</span>
                            </form>
                        })
                    } else {
                        Either::Right(view! { <p class="form-note">{td_string!(loc, order.nothing_left)}</p> })
                    }}
                }),
            }}
            {move || refund.value().get().and_then(|r| r.err()).map(|error| view! { <ErrorPanel error/> })}
        </section>
    })
}

/// A timeline or resource kind (`delivery`, `dead-letter`, `payment_intent`…) in the
/// viewer's language, in sentence case (the stylesheet no longer capitalises it: that
/// turned "reembolso de" into "Reembolso De").
fn kind_label(loc: crate::locale::Locale, kind: &str) -> String {
    let known = match kind {
        "delivery" => td_string!(loc, kind.delivery),
        "redelivery" => td_string!(loc, kind.redelivery),
        "processed" => td_string!(loc, kind.processed),
        "money" => td_string!(loc, kind.money),
        "stale" => td_string!(loc, kind.stale),
        "outbox" => td_string!(loc, kind.outbox),
        "dead-letter" => td_string!(loc, kind.dead_letter),
        "redrive" => td_string!(loc, kind.redrive),
        "command" => td_string!(loc, kind.command),
        "reconciled" => td_string!(loc, kind.reconciled),
        "payment" => td_string!(loc, kind.payment),
        "refund" => td_string!(loc, kind.refund),
        "dispute" => td_string!(loc, kind.dispute),
        "charge" => td_string!(loc, kind.charge),
        "payment_intent" => td_string!(loc, kind.payment_intent),
        "refund_total" => td_string!(loc, kind.refund_total),
        other => return other.replace(['-', '_'], " "),
    };
    known.to_string()
}
