//! The overview (`/`): "is the payment integration healthy?" for the last hour, day or
//! week: KPIs, three charts and what the traffic is made of. Everything comes from the
//! per-minute rollups, so the page costs the same at a million events.

use crate::api::load_overview;
use crate::backend::{order_href, DriftCheck, Overview, ProviderDelay, Range, ReconciliationKpis};
use crate::charts::{BarChart, Series};
use crate::components::ErrorPanel;
use crate::format::{age, decimal_in, money_in, pct_in, short_timestamp, thousands_in};
use crate::i18n::*;
use crate::locale::{current, Locale};
use leptos::either::Either;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
pub fn OverviewPage() -> impl IntoView {
    let query = use_query_map();
    let range = Memo::new(move |_| query.with(|q| Range::parse(q.get("range").as_deref())));
    let overview = Resource::new(move || range.get(), load_overview);
    let loc = current();
    view! {
        <Title text=td_string!(loc, nav.overview)/>
        <header class="page-header">
            <h1>{td_string!(loc, nav.overview)}</h1>
            <nav class="range-picker" aria-label=td_string!(loc, overview.range)>
                {move || Range::ALL.map(|r| {
                    let current = r == range.get();
                    view! {
                        <a href=format!("/?range={}", r.as_str())
                            class=if current { "button selected" } else { "button" }
                            aria-current=current.then_some("page")>{range_label(loc, r)}</a>
                    }
                })}
            </nav>
        </header>
        <Transition fallback=move || view! { <p class="loading">{td_string!(loc, overview.loading)}</p> }>
            {move || Suspend::new(async move {
                match overview.await {
                    Ok(o) => Either::Left(view! { <OverviewView o/> }),
                    Err(error) => Either::Right(view! { <ErrorPanel error/> }),
                }
            })}
        </Transition>
    }
}

fn range_label(loc: Locale, r: Range) -> &'static str {
    match r {
        Range::Hour => td_string!(loc, overview.range_hour),
        Range::Day => td_string!(loc, overview.range_day),
        Range::Week => td_string!(loc, overview.range_week),
    }
}

fn ms(loc: Locale, v: Option<i64>) -> String {
    match v {
        None => "–".into(),
        Some(i64::MAX) => "> 60 s".into(),
        Some(ms) if ms >= 1_000 => format!("≤ {} s", decimal_in(loc, ms as f64 / 1000.0, 1)),
        Some(ms) => format!("≤ {} ms", thousands_in(loc, ms)),
    }
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

fn orders(loc: Locale, n: i64) -> String {
    let n_text = thousands_in(loc, n);
    if n == 1 {
        td_string!(loc, overview.orders_one, n = n_text).to_string()
    } else {
        td_string!(loc, overview.orders_many, n = n_text).to_string()
    }
}

/// "drift: 0 orders, checked 5 min ago": the newest consistency check, with links to the
/// first drifting orders when there are any.
#[component]
fn DriftKpi(check: Option<DriftCheck>) -> impl IntoView {
    let loc = current();
    let Some(c) = check else {
        return Either::Left(view! {
            <div class="kpi" id="kpi-drift">
                <dt>{td_string!(loc, overview.consistency)}</dt>
                <dd>{td_string!(loc, overview.not_checked)}</dd>
                <dd class="kpi-note">{td_string!(loc, overview.verify_hint)}</dd>
            </div>
        });
    };
    let bad = c.drifting_orders > 0 || c.missing_messages > 0;
    let summary = td_string!(
        loc,
        overview.drift,
        orders = orders(loc, c.drifting_orders),
        age = age(c.age_secs)
    )
    .to_string();
    let note = td_string!(
        loc,
        overview.drift_note,
        orders = orders(loc, c.orders_checked),
        missing = thousands_in(loc, c.missing_messages)
    )
    .to_string();
    Either::Right(view! {
        <div class=if bad { "kpi kpi-bad" } else { "kpi" } id="kpi-drift">
            <dt>{td_string!(loc, overview.consistency)}</dt>
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
    let loc = current();
    let Some(k) = kpis else {
        return Either::Left(view! {
            <div class="kpi" id="kpi-reconciliation">
                <dt>{td_string!(loc, overview.reconciliation)}</dt>
                <dd>{td_string!(loc, overview.not_run)}</dd>
                <dd class="kpi-note">{td_string!(loc, overview.reconcile_hint)}</dd>
            </div>
        });
    };
    let stale = k.last_success_age_secs.is_none_or(|a| a > 86_400);
    let note = td_string!(
        loc,
        overview.last_success,
        oldest = k
            .oldest_open_age_secs
            .map(|a| td_string!(loc, overview.oldest_sep, age = age(a)).to_string())
            .unwrap_or_default(),
        when = k
            .last_success_age_secs
            .map(|a| td_string!(loc, overview.ago, age = age(a)).to_string())
            .unwrap_or_else(|| td_string!(loc, overview.never).to_string())
    )
    .to_string();
    let diffs = thousands_in(loc, k.open_diffs);
    let diffs = if k.open_diffs == 1 {
        td_string!(loc, overview.open_diffs_one, n = diffs).to_string()
    } else {
        td_string!(loc, overview.open_diffs_many, n = diffs).to_string()
    };
    let class = if k.open_diffs > 0 || stale {
        "kpi kpi-bad"
    } else {
        "kpi"
    };
    Either::Right(view! {
        <div class=class id="kpi-reconciliation">
            <dt>{td_string!(loc, overview.reconciliation)}</dt>
            <dd><a href="/reconciliation">{diffs}</a></dd>
            <dd class="kpi-note">{note}</dd>
        </div>
    })
}

/// Each provider's delay, its event's `created` to our receipt: p50 / p95 over the range.
#[component]
fn ProviderDelayKpi(delays: Vec<ProviderDelay>) -> impl IntoView {
    let loc = current();
    let delay = move |v: Option<i64>| match v {
        Some(i64::MAX) => "> 3 d".to_string(),
        Some(v) if v >= 60_000 => format!("≤ {}", age(v / 1000)),
        other => ms(loc, other),
    };
    view! {
        <div class="kpi" id="kpi-provider-delay">
            <dt>{td_string!(loc, overview.provider_delay)}</dt>
            {if delays.is_empty() {
                Either::Left(view! { <dd>"–"</dd><dd class="kpi-note">{td_string!(loc, overview.nothing_received)}</dd> })
            } else {
                Either::Right(delays.into_iter().map(|d| view! {
                    <dd class="provider-delay" data-provider=d.provider.clone()>
                        {format!("{}: {} / {}", d.provider, delay(d.p50_ms), delay(d.p95_ms))}
                        <span class="kpi-note">{td_string!(loc, overview.delay_events, n = thousands_in(loc, d.events)).to_string()}</span>
                    </dd>
                }).collect_view())
            }}
        </div>
    }
}

#[component]
fn Breakdown(title: &'static str, rows: Vec<(String, i64)>) -> impl IntoView {
    let empty = rows.is_empty();
    let loc = current();
    view! {
        <section class="panel breakdown">
            <h2>{title}</h2>
            {if empty {
                Either::Left(view! { <p class="form-note">{td_string!(loc, overview.nothing_received_long)}</p> })
            } else {
                Either::Right(view! {
                    <table class="data compact">
                        <tbody>
                            {rows.into_iter().map(|(name, n)| view! {
                                <tr><td class="mono">{name}</td><td class="num">{thousands_in(loc, n)}</td></tr>
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
    let loc = current();
    let thousands = move |n: i64| thousands_in(loc, n);
    let pct = move |v: Option<f64>| pct_in(loc, v);
    let ms = move |v: Option<i64>| ms(loc, v);
    let labels: Vec<String> = o
        .series
        .iter()
        .map(|p| bar_label(o.range, &p.start))
        .collect();
    let per = match o.range {
        Range::Hour => td_string!(loc, overview.per_minute),
        Range::Day => td_string!(loc, overview.per_15),
        Range::Week => td_string!(loc, overview.per_2h),
    };
    let traffic = vec![
        Series {
            name: td_string!(loc, overview.series_received),
            class: "bar-ok",
            values: o.series.iter().map(|p| p.received).collect(),
        },
        Series {
            name: td_string!(loc, overview.series_redelivered),
            class: "bar-muted",
            values: o.series.iter().map(|p| p.duplicates).collect(),
        },
    ];
    let failures = vec![Series {
        name: td_string!(loc, overview.series_failures),
        class: "bar-bad",
        values: o.series.iter().map(|p| p.failures).collect(),
    }];
    // Over a minute is drawn at a minute: the axis stays readable, the tooltip says more.
    let latency = vec![Series {
        name: td_string!(loc, overview.series_latency),
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
                <h2>{td_string!(loc, overview.outage_title, reason = out.reason.clone()).to_string()}</h2>
                <p>{td_string!(loc, overview.outage_body, since = out.since.clone(), age = age(out.age_secs)).to_string()}</p>
            </section>
        })}
        <dl class="kpis" id="kpis">
            <Kpi id="kpi-received" label=td_string!(loc, overview.received) value=thousands(o.received)
                note=td_string!(loc, overview.received_note, n = thousands(o.duplicates), pct = pct(o.duplicate_rate())).to_string()/>
            <Kpi id="kpi-success" label=td_string!(loc, overview.success) value=pct(o.success_rate())
                note=td_string!(loc, overview.success_note, filed = thousands(o.filed), dead = thousands(o.dead), retries = thousands(o.retries)).to_string()
                bad={o.dead > 0}/>
            <Kpi id="kpi-latency" label=td_string!(loc, overview.latency)
                value=format!("{} / {} / {}", ms(o.latency_p50_ms), ms(o.latency_p95_ms), ms(o.latency_p99_ms))/>
            <Kpi id="kpi-backlog" label=td_string!(loc, overview.waiting) value=thousands(o.backlog)
                note=o.backlog_oldest_age_secs.map(|a| td_string!(loc, overview.oldest, age = age(a)).to_string()).unwrap_or_else(|| td_string!(loc, overview.nothing_waits).to_string())/>
            <Kpi id="kpi-dlq" label=td_string!(loc, overview.dlq_open) value=thousands(o.dlq_open)
                note=o.dlq_oldest_age_secs.map(|a| td_string!(loc, overview.oldest_dlq, age = age(a)).to_string()).unwrap_or_else(|| td_string!(loc, overview.none).to_string())
                bad={o.dlq_open > 0}/>
            <Kpi id="kpi-signatures" label=td_string!(loc, overview.signatures) value=thousands(o.signature_failures) bad={o.signature_failures > 0}/>
            <DriftKpi check=o.drift.clone()/>
            <ReconciliationKpi kpis=o.reconciliation.clone()/>
            {o.commands.clone().map(|c| view! {
                <Kpi id="kpi-commands" label=td_string!(loc, overview.commands) value=thousands(c.in_flight)
                    note=td_string!(
                        loc,
                        overview.commands_note,
                        oldest = c.oldest_in_flight_age_secs.map(|a| td_string!(loc, overview.oldest_sep, age = age(a)).to_string()).unwrap_or_default(),
                        unconfirmed = thousands(c.unconfirmed),
                        confirmed = thousands(c.confirmed),
                        failed = thousands(c.failed)
                    ).to_string()
                    bad={c.unconfirmed > 0 || c.failed > 0}/>
            })}
            <Kpi id="kpi-time-to-resolve" label=td_string!(loc, overview.resolve)
                value=o.time_to_resolve.as_ref().map(|t| format!("{} / {}", age(t.mean_secs), age(t.p95_secs))).unwrap_or_else(|| "–".into())
                note=o.time_to_resolve.as_ref().map(|t| td_string!(loc, overview.resolve_note, n = thousands(t.closed)).to_string()).unwrap_or_else(|| td_string!(loc, overview.none_closed).to_string())/>
            <ProviderDelayKpi delays=o.provider_delay.clone()/>
        </dl>
        <section class="panel charts">
            <BarChart id="chart-traffic" title=td_string!(loc, overview.chart_traffic, per = per).to_string() unit=td_string!(loc, overview.unit_events) labels=labels.clone() series=traffic/>
            <BarChart id="chart-latency" title=td_string!(loc, overview.chart_latency, per = per).to_string() unit="ms" labels=labels.clone() series=latency/>
            <BarChart id="chart-failures" title=td_string!(loc, overview.chart_failures, per = per).to_string() unit=td_string!(loc, overview.unit_events) labels=labels series=failures/>
        </section>
        <section class="panel" id="money-moved">
            <h2>{td_string!(loc, overview.money_moved)}</h2>
            {if money_rows.is_empty() {
                Either::Left(view! { <p class="form-note">{td_string!(loc, overview.no_money)}</p> })
            } else {
                Either::Right(view! {
                    <table class="data compact">
                        <thead><tr>
                            <th>{td_string!(loc, overview.currency)}</th>
                            <th class="num">{td_string!(loc, order.paid)}</th>
                            <th class="num">{td_string!(loc, order.refunded)}</th>
                            <th class="num">{td_string!(loc, order.disputed)}</th>
                        </tr></thead>
                        <tbody>
                            {money_rows.into_iter().map(|m| {
                                let c = Some(m.currency.clone());
                                view! {
                                    <tr>
                                        <td>{m.currency.clone()}</td>
                                        <td class="num">{money_in(loc, m.paid, c.as_deref())}</td>
                                        <td class="num">{money_in(loc, m.refunded, c.as_deref())}</td>
                                        <td class="num">{money_in(loc, m.disputed, c.as_deref())}</td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                })
            }}
        </section>
        <div class="breakdowns">
            <Breakdown title=td_string!(loc, overview.by_type) rows=o.by_type.clone()/>
            <Breakdown title=td_string!(loc, overview.by_provider) rows=o.by_provider.clone()/>
            <Breakdown title=td_string!(loc, overview.by_api_version) rows=o.by_api_version.clone()/>
        </div>
        <p class="form-note">{td_string!(loc, overview.counts_note)}</p>
    }
}
