//! The overview (`/`): "is the payment integration healthy?" for the last hour, day or
//! week: KPIs, three charts and what the traffic is made of. Everything comes from the
//! per-minute rollups, so the page costs the same at a million events.

use crate::api::load_overview;
use crate::backend::{order_href, DriftCheck, Overview, ProviderDelay, Range, ReconciliationKpis};
use crate::charts::{BarChart, Series};
use crate::components::ErrorPanel;
use crate::format::{age, money, short_timestamp, thousands};
use leptos::either::Either;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
pub fn OverviewPage() -> impl IntoView {
    let query = use_query_map();
    let range = Memo::new(move |_| query.with(|q| Range::parse(q.get("range").as_deref())));
    let overview = Resource::new(move || range.get(), load_overview);
    view! {
        <Title text="Overview"/>
        <header class="page-header">
            <h1>"Overview"</h1>
            <nav class="range-picker" aria-label="Time range">
                {move || Range::ALL.map(|r| {
                    let current = r == range.get();
                    view! {
                        <a href=format!("/?range={}", r.as_str())
                            class=if current { "button selected" } else { "button" }
                            aria-current=current.then_some("page")>{r.label()}</a>
                    }
                })}
            </nav>
        </header>
        <Transition fallback=|| view! { <p class="loading">"Loading the overview…"</p> }>
            {move || Suspend::new(async move {
                match overview.await {
                    Ok(o) => Either::Left(view! { <OverviewView o/> }),
                    Err(error) => Either::Right(view! { <ErrorPanel error/> }),
                }
            })}
        </Transition>
    }
}

fn ms(v: Option<i64>) -> String {
    match v {
        None => "–".into(),
        Some(i64::MAX) => "> 60 s".into(),
        Some(ms) if ms >= 1_000 => format!("≤ {:.1} s", ms as f64 / 1000.0),
        Some(ms) => format!("≤ {ms} ms"),
    }
}

fn pct(v: Option<f64>) -> String {
    v.map(|p| format!("{p:.1} %")).unwrap_or_else(|| "–".into())
}

/// The label under a chart bar: time of day for an hour or a day, date and time for a week.
fn bar_label(range: Range, start: &str) -> String {
    let full = short_timestamp(start);
    match range {
        Range::Week => full.get(5..16).unwrap_or(&full).to_string(),
        _ => full.get(11..16).unwrap_or(&full).to_string(),
    }
}

#[component]
fn Kpi(
    id: &'static str,
    label: &'static str,
    value: String,
    #[prop(optional)] note: Option<String>,
    #[prop(optional)] bad: bool,
) -> impl IntoView {
    view! {
        <div class=if bad { "kpi kpi-bad" } else { "kpi" } id=id>
            <dt>{label}</dt>
            <dd>{value}</dd>
            {note.map(|n| view! { <dd class="kpi-note">{n}</dd> })}
        </div>
    }
}

fn orders(n: i64) -> String {
    format!(
        "{} {}",
        thousands(n),
        if n == 1 { "order" } else { "orders" }
    )
}

/// "drift: 0 orders, checked 5 min ago": the newest consistency check, with links to the
/// first drifting orders when there are any.
#[component]
fn DriftKpi(check: Option<DriftCheck>) -> impl IntoView {
    let Some(c) = check else {
        return Either::Left(view! {
            <div class="kpi" id="kpi-drift">
                <dt>"Consistency"</dt>
                <dd>"not checked yet"</dd>
                <dd class="kpi-note">"oncehook verify, or serve every verify.interval_minutes"</dd>
            </div>
        });
    };
    let bad = c.drifting_orders > 0 || c.missing_messages > 0;
    let summary = format!(
        "drift: {}, checked {} ago",
        orders(c.drifting_orders),
        age(c.age_secs)
    );
    let note = format!(
        "{} checked; {} without their outbox message",
        orders(c.orders_checked),
        thousands(c.missing_messages)
    );
    Either::Right(view! {
        <div class=if bad { "kpi kpi-bad" } else { "kpi" } id="kpi-drift">
            <dt>"Consistency"</dt>
            <dd><span title=c.checked_at>{summary}</span></dd>
            <dd class="kpi-note">{note}</dd>
            {(!c.sample.is_empty()).then(|| view! {
                <dd class="kpi-note drift-orders">
                    {c.sample.into_iter().map(|id| view! {
                        <a class="mono" href=order_href(&id)>{id.clone()}</a>" "
                    }).collect_view()}
                </dd>
            })}
        </div>
    })
}

/// Open diffs, the oldest, and the last successful run, linking to the page.
#[component]
fn ReconciliationKpi(kpis: Option<ReconciliationKpis>) -> impl IntoView {
    let Some(k) = kpis else {
        return Either::Left(view! {
            <div class="kpi" id="kpi-reconciliation">
                <dt>"Reconciliation"</dt>
                <dd>"not run yet"</dd>
                <dd class="kpi-note">"needs a provider api_key; oncehook reconcile, or serve every reconcile.interval"</dd>
            </div>
        });
    };
    let stale = k.last_success_age_secs.is_none_or(|a| a > 86_400);
    let note = format!(
        "{}last successful run {}",
        k.oldest_open_age_secs
            .map(|a| format!("oldest {} · ", age(a)))
            .unwrap_or_default(),
        k.last_success_age_secs
            .map(|a| format!("{} ago", age(a)))
            .unwrap_or_else(|| "never".into())
    );
    let class = if k.open_diffs > 0 || stale {
        "kpi kpi-bad"
    } else {
        "kpi"
    };
    Either::Right(view! {
        <div class=class id="kpi-reconciliation">
            <dt>"Reconciliation"</dt>
            <dd><a href="/reconciliation">{format!("{} open diff{}", thousands(k.open_diffs), if k.open_diffs == 1 { "" } else { "s" })}</a></dd>
            <dd class="kpi-note">{note}</dd>
        </div>
    })
}

/// Each provider's delay, its event's `created` to our receipt: p50 / p95 over the range.
#[component]
fn ProviderDelayKpi(delays: Vec<ProviderDelay>) -> impl IntoView {
    let delay = |v: Option<i64>| match v {
        Some(i64::MAX) => "> 3 d".to_string(),
        Some(v) if v >= 60_000 => format!("≤ {}", age(v / 1000)),
        other => ms(other),
    };
    view! {
        <div class="kpi" id="kpi-provider-delay">
            <dt>"Provider delay p50 / p95 (created → received)"</dt>
            {if delays.is_empty() {
                Either::Left(view! { <dd>"–"</dd><dd class="kpi-note">"nothing received in this range"</dd> })
            } else {
                Either::Right(delays.into_iter().map(|d| view! {
                    <dd class="provider-delay" data-provider=d.provider.clone()>
                        {format!("{}: {} / {}", d.provider, delay(d.p50_ms), delay(d.p95_ms))}
                        <span class="kpi-note">{format!(" ({} events)", thousands(d.events))}</span>
                    </dd>
                }).collect_view())
            }}
        </div>
    }
}

#[component]
fn Breakdown(title: &'static str, rows: Vec<(String, i64)>) -> impl IntoView {
    let empty = rows.is_empty();
    view! {
        <section class="panel breakdown">
            <h2>{title}</h2>
            {if empty {
                Either::Left(view! { <p class="form-note">"Nothing received in this range."</p> })
            } else {
                Either::Right(view! {
                    <table class="data compact">
                        <tbody>
                            {rows.into_iter().map(|(name, n)| view! {
                                <tr><td class="mono">{name}</td><td class="num">{thousands(n)}</td></tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                })
            }}
        </section>
    }
}

#[component]
fn OverviewView(o: Overview) -> impl IntoView {
    let labels: Vec<String> = o
        .series
        .iter()
        .map(|p| bar_label(o.range, &p.start))
        .collect();
    let per = match o.range {
        Range::Hour => "per minute",
        Range::Day => "per 15 minutes",
        Range::Week => "per 2 hours",
    };
    let traffic = vec![
        Series {
            name: "received",
            class: "bar-ok",
            values: o.series.iter().map(|p| p.received).collect(),
        },
        Series {
            name: "redelivered",
            class: "bar-muted",
            values: o.series.iter().map(|p| p.duplicates).collect(),
        },
    ];
    let failures = vec![Series {
        name: "dead-lettered or refused signature",
        class: "bar-bad",
        values: o.series.iter().map(|p| p.failures).collect(),
    }];
    // Over a minute is drawn at a minute: the axis stays readable, the tooltip says more.
    let latency = vec![Series {
        name: "p95 receipt → filed",
        class: "bar-info",
        values: o
            .series
            .iter()
            .map(|p| p.p95_ms.map_or(0, |v| v.min(60_000)))
            .collect(),
    }];
    let money_rows = o.money.clone();
    let outage = o.storage_outage.clone();
    view! {
        {outage.map(|out| view! {
            <section class="panel panel-error storage-outage" id="storage-outage" role="alert">
                <h2>{format!("The database cannot commit: {}", out.reason)}</h2>
                <p>{format!(
                    "Since {} ({} ago). Webhooks are answered 503 with Retry-After, so providers \
                     send them again; nothing acknowledged is lost. /healthz answers 503, so a \
                     load balancer stops sending here. This clears by itself once a commit \
                     succeeds.",
                    out.since, age(out.age_secs)
                )}</p>
            </section>
        })}
        <dl class="kpis" id="kpis">
            <Kpi id="kpi-received" label="Events received" value=thousands(o.received)
                note=format!("{} redelivered ({} of deliveries)", thousands(o.duplicates), pct(o.duplicate_rate()))/>
            <Kpi id="kpi-success" label="Success rate" value=pct(o.success_rate())
                note=format!("{} filed, {} dead-lettered, {} retries", thousands(o.filed), thousands(o.dead), thousands(o.retries))
                bad={o.dead > 0}/>
            <Kpi id="kpi-latency" label="Receipt → effect p50 / p95 / p99"
                value=format!("{} / {} / {}", ms(o.latency_p50_ms), ms(o.latency_p95_ms), ms(o.latency_p99_ms))/>
            <Kpi id="kpi-backlog" label="Waiting now" value=thousands(o.backlog)
                note=o.backlog_oldest_age_secs.map(|a| format!("oldest {}", age(a))).unwrap_or_else(|| "nothing waits".into())/>
            <Kpi id="kpi-dlq" label="Dead letters open" value=thousands(o.dlq_open)
                note=o.dlq_oldest_age_secs.map(|a| format!("oldest {}", age(a))).unwrap_or_else(|| "none".into())
                bad={o.dlq_open > 0}/>
            <Kpi id="kpi-signatures" label="Signature failures" value=thousands(o.signature_failures) bad={o.signature_failures > 0}/>
            <DriftKpi check=o.drift.clone()/>
            <ReconciliationKpi kpis=o.reconciliation.clone()/>
            {o.commands.clone().map(|c| view! {
                <Kpi id="kpi-commands" label="Refunds asked of providers, in flight" value=thousands(c.in_flight)
                    note=format!(
                        "{}{} unconfirmed (sent, no webhook yet) · {} confirmed · {} failed",
                        c.oldest_in_flight_age_secs.map(|a| format!("oldest {} · ", age(a))).unwrap_or_default(),
                        thousands(c.unconfirmed), thousands(c.confirmed), thousands(c.failed)
                    )
                    bad={c.unconfirmed > 0 || c.failed > 0}/>
            })}
            <Kpi id="kpi-time-to-resolve" label="Dead letters: filed → closed, mean / p95"
                value=o.time_to_resolve.as_ref().map(|t| format!("{} / {}", age(t.mean_secs), age(t.p95_secs))).unwrap_or_else(|| "–".into())
                note=o.time_to_resolve.as_ref().map(|t| format!("{} closed (redriven, resolved or discarded)", thousands(t.closed))).unwrap_or_else(|| "none closed in this range".into())/>
            <ProviderDelayKpi delays=o.provider_delay.clone()/>
        </dl>
        <section class="panel charts">
            <BarChart id="chart-traffic" title=format!("Deliveries {per}") unit="events" labels=labels.clone() series=traffic/>
            <BarChart id="chart-latency" title=format!("Receipt → effect p95 {per}") unit="ms" labels=labels.clone() series=latency/>
            <BarChart id="chart-failures" title=format!("Failures {per}") unit="events" labels=labels series=failures/>
        </section>
        <section class="panel" id="money-moved">
            <h2>"Money moved"</h2>
            {if money_rows.is_empty() {
                Either::Left(view! { <p class="form-note">"No money moved in this range."</p> })
            } else {
                Either::Right(view! {
                    <table class="data compact">
                        <thead><tr><th>"Currency"</th><th class="num">"Paid"</th><th class="num">"Refunded"</th><th class="num">"Disputed"</th></tr></thead>
                        <tbody>
                            {money_rows.into_iter().map(|m| {
                                let c = Some(m.currency.clone());
                                view! {
                                    <tr>
                                        <td>{m.currency.clone()}</td>
                                        <td class="num">{money(m.paid, c.as_deref())}</td>
                                        <td class="num">{money(m.refunded, c.as_deref())}</td>
                                        <td class="num">{money(m.disputed, c.as_deref())}</td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                })
            }}
        </section>
        <div class="breakdowns">
            <Breakdown title="Events by type" rows=o.by_type.clone()/>
            <Breakdown title="By provider" rows=o.by_provider.clone()/>
            <Breakdown title="By API version" rows=o.by_api_version.clone()/>
        </div>
        <p class="form-note">"Counts are written every few seconds by each instance; waiting work and dead letters are read live."</p>
    }
}
