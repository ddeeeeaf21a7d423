//! One event (`/events/{id}`): what became of it in one line, the payload pretty-printed
//! (the byte-exact original downloadable), every delivery, earlier errors, the effect key
//! and the order it belongs to.

use crate::api::load_event;
use crate::backend::EventDetail;
use crate::components::{ErrorPanel, StatusBadge, Time};
use crate::i18n::*;
use crate::locale::current;
use leptos::either::Either;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

#[component]
pub fn EventPage() -> impl IntoView {
    let params = use_params_map();
    let id = Memo::new(move |_| params.with(|p| p.get("id").and_then(|v| v.parse::<i64>().ok())));
    let event = Resource::new(
        move || id.get(),
        |id| async move {
            match id {
                Some(id) => load_event(id).await,
                None => Err(crate::error::AppError::NotFound),
            }
        },
    );
    let loc = current();
    view! {
        <Transition fallback=move || view! { <p class="loading">{td_string!(loc, event.loading)}</p> }>
            {move || Suspend::new(async move {
                match event.await {
                    Ok(event) => Either::Left(view! { <EventView event/> }),
                    Err(error) => Either::Right(view! { <ErrorPanel error/> }),
                }
            })}
        </Transition>
    }
}

#[component]
fn EventView(event: EventDetail) -> impl IntoView {
    let loc = current();
    let title = td_string!(loc, event.title, id = event.event_id.clone()).to_string();
    let raw_href = format!("/events/{}/raw", event.id);
    let deliveries = event.deliveries.len();
    view! {
        <Title text=title.clone()/>
        <header class="page-header">
            <h1 class="mono">{event.event_id.clone()}</h1>
            <p class="lede" id="event-outcome">
                <StatusBadge status=event.status.clone() reason=None/>
                " "{event.outcome.clone()}
                {event.collapsed_onto.clone().map(|winner| view! {
                    " "<a href=format!("/events?provider={}", event.provider)>{td_string!(loc, event.winner, id = winner).to_string()}</a>
                })}
            </p>
        </header>
        <section class="panel">
            <dl class="facts">
                <dt>{td_string!(loc, event.provider)}</dt><dd>{event.provider.clone()}</dd>
                <dt>{td_string!(loc, event.event_type)}</dt><dd class="mono">{event.event_type.clone().unwrap_or_default()}</dd>
                <dt>{td_string!(loc, event.api_version)}</dt><dd class="mono">{event.api_version.clone().unwrap_or_default()}</dd>
                <dt>{td_string!(loc, event.order)}</dt>
                <dd class="mono">{event.order_id.clone().map(|o| view! { <a id="order-link" href=crate::backend::order_href(&o)>{o.clone()}</a> })}</dd>
                <dt>{td_string!(loc, event.effect_key)}</dt><dd class="mono" id="effect-key">{event.effect_key.clone().unwrap_or_default()}</dd>
                <dt>{td_string!(loc, event.attempts)}</dt><dd>{event.attempts}</dd>
                <dt>{td_string!(loc, event.correlation)}</dt><dd class="mono">{event.correlation_id.clone()}</dd>
                <dt>{td_string!(loc, event.received)}</dt><dd><Time at=event.received_at.clone()/></dd>
                <dt>{td_string!(loc, event.processed)}</dt><dd>{event.processed_at.clone().map(|at| view! { <Time at/> })}</dd>
                {(!event.dead_letters.is_empty()).then(|| view! {
                    <dt>{td_string!(loc, event.dead_letter)}</dt>
                    <dd>{event.dead_letters.iter().map(|(id, status)| view! {
                        <a href=format!("/dlq?id={id}&status={status}")>{format!("#{id} ({})", crate::components::status_label(loc, status))}</a>" "
                    }).collect_view()}</dd>
                })}
            </dl>
        </section>
        <section class="panel" id="deliveries">
            <h2>{td_string!(loc, event.deliveries, n = deliveries).to_string()}</h2>
            <table class="data compact">
                <thead><tr><th>"#"</th><th>{td_string!(loc, event.received)}</th><th>{td_string!(loc, event.kind)}</th><th>{td_string!(loc, event.correlation)}</th></tr></thead>
                <tbody>
                    {event.deliveries.iter().enumerate().map(|(n, d)| view! {
                        <tr>
                            <td>{n + 1}</td>
                            <td class="time"><Time at=d.received_at.clone()/></td>
                            <td>{if d.duplicate { td_string!(loc, event.duplicate) } else { td_string!(loc, event.first) }}</td>
                            <td class="mono">{d.correlation_id.clone()}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
            <p class="form-note">{td_string!(loc, event.signed_note)}</p>
        </section>
        {(!event.errors.is_empty()).then(|| view! {
            <section class="panel" id="errors">
                <h2>{td_string!(loc, event.earlier_errors)}</h2>
                <ol class="mono">{event.errors.iter().map(|e| view! { <li>{e.clone()}</li> }).collect_view()}</ol>
            </section>
        })}
        <section class="panel" id="payload">
            <h2>{td_string!(loc, event.payload)}</h2>
            <p>
                <a class="button" href=raw_href download="" id="raw-download">
                    {td_string!(loc, event.download, n = crate::format::thousands_in(loc, event.raw_size as i64)).to_string()}
                </a>
            </p>
            <pre class="payload">{event.payload_pretty.clone()}</pre>
        </section>
    }
}
