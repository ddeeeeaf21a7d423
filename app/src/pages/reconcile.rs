//! Reconciliation (`/reconciliation`): the provider's truth against ours. The runs (live
//! while one runs), the open diffs grouped by kind with the oldest age, each with its
//! one-click fix or a resolve with a reason, and the history of fixed and resolved diffs.
//! Filters and cursors live in the URL; every form is a plain POST to a server function,
//! so the page works before (or without) the WASM.

use crate::api::{
    load_reconciliation, FixReconciliationDiff, ResolveReconciliationDiff, StartReconciliation,
};
use crate::backend::{
    fixable, kind_meaning, DiffGroup, DiffPage, DiffQuery, DiffView, ReconciliationPage, RunView,
    RunsPage,
};
use crate::components::{ErrorPanel, Time};
use crate::format::{age, rfc3339_of_ms, thousands_in};
use crate::i18n::*;
use crate::locale::{current, Locale};
use leptos::either::Either;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

const KINDS: [&str; 7] = [
    "missing_event",
    "unprocessed",
    "missing_fact",
    "status_mismatch",
    "amount_mismatch",
    "unknown_order",
    "window_exceeded",
];
const STATES: [&str; 3] = ["open", "fixed", "resolved"];

/// The badge of a run's or a diff's state.
fn state_class(state: &str) -> &'static str {
    match state {
        "succeeded" | "fixed" => "badge badge-ok",
        "running" => "badge badge-info",
        "open" => "badge badge-warn",
        "resolved" => "badge badge-muted",
        "failed" | "interrupted" => "badge badge-bad",
        _ => "badge badge-unknown",
    }
}

/// "1 diff", "3 diffs" in the viewer's language.
fn diffs(loc: Locale, n: i64) -> String {
    let text = thousands_in(loc, n);
    if n == 1 {
        td_string!(loc, rec.diffs_one, n = text).to_string()
    } else {
        td_string!(loc, rec.diffs_many, n = text).to_string()
    }
}

/// A diff kind's meaning (backend::kind_meaning) in the viewer's language.
fn meaning(loc: Locale, kind: &str) -> String {
    match kind {
        "missing_event" => td_string!(loc, diff.missing_event).to_string(),
        "unprocessed" => td_string!(loc, diff.unprocessed).to_string(),
        "missing_fact" => td_string!(loc, diff.missing_fact).to_string(),
        "status_mismatch" => td_string!(loc, diff.status_mismatch).to_string(),
        "amount_mismatch" => td_string!(loc, diff.amount_mismatch).to_string(),
        "unknown_order" => td_string!(loc, diff.unknown_order).to_string(),
        "window_exceeded" => td_string!(loc, diff.window_exceeded).to_string(),
        other => kind_meaning(other).to_string(),
    }
}

fn state_label(loc: Locale, state: &str) -> String {
    match state {
        "fixed" => td_string!(loc, status.fixed).to_string(),
        "running" => td_string!(loc, status.running).to_string(),
        "interrupted" => td_string!(loc, status.interrupted).to_string(),
        other => crate::components::status_label(loc, other),
    }
}

#[component]
pub fn ReconciliationPage() -> impl IntoView {
    let params = use_query_map();
    let query = Memo::new(move |_| {
        params.with(|q| DiffQuery {
            state: q.get("state").filter(|s| !s.is_empty()),
            kind: q.get("kind").filter(|s| !s.is_empty()),
            provider: q.get("provider").filter(|s| !s.is_empty()),
            order_id: q.get("order_id").filter(|s| !s.is_empty()),
            run_id: q.get("run_id").and_then(|v| v.parse().ok()),
            before: q.get("before").and_then(|v| v.parse().ok()),
            limit: None,
        })
    });
    let runs_before = Memo::new(move |_| {
        params.with(|q| q.get("runs_before").and_then(|v| v.parse::<i64>().ok()))
    });
    let start = ServerAction::<StartReconciliation>::new();
    let fix = ServerAction::<FixReconciliationDiff>::new();
    let resolve = ServerAction::<ResolveReconciliationDiff>::new();
    // Bumped when a run this page watched has ended: the diffs it found appear.
    let (finished, set_finished) = signal(0u32);
    let (live, set_live) = signal(None::<RunsPage>);
    let page = Resource::new(
        move || {
            (
                query.get(),
                runs_before.get(),
                start.version().get(),
                fix.version().get(),
                resolve.version().get(),
                finished.get(),
            )
        },
        |(query, runs_before, ..)| load_reconciliation(query, runs_before),
    );
    watch_running_runs(page, set_live, set_finished);

    let loc = current();
    view! {
        <Title text=td_string!(loc, nav.reconciliation)/>
        <header class="page-header">
            <h1>{td_string!(loc, nav.reconciliation)}</h1>
            <p class="lede">{td_string!(loc, rec.lede)}</p>
        </header>
        <FilterForm query/>
        <ActionResults start fix resolve/>
        <Transition fallback=move || view! { <p class="loading">{td_string!(loc, rec.loading)}</p> }>
            {move || Suspend::new(async move {
                let query = query.get();
                match page.await {
                    Ok(page) => Either::Left(view! { <Body page query live start fix resolve/> }),
                    Err(error) => Either::Right(view! { <ErrorPanel error/> }),
                }
            })}
        </Transition>
    }
}

/// In the browser, while the page shows a run that is still running: asks for the runs
/// every second (the live progress), and reloads the page once none runs. Without
/// JavaScript the server renders the same counts on each reload.
#[allow(unused_variables)]
fn watch_running_runs(
    page: Resource<Result<ReconciliationPage, crate::error::AppError>>,
    set_live: WriteSignal<Option<RunsPage>>,
    set_finished: WriteSignal<u32>,
) {
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        let running = move |runs: &RunsPage| runs.runs.iter().any(|r| r.status == "running");
        let handle = set_interval_with_handle(
            move || {
                let shown_running = page
                    .get_untracked()
                    .and_then(|p| p.ok())
                    .is_some_and(|p| running(&p.runs));
                if !shown_running {
                    return;
                }
                leptos::task::spawn_local(async move {
                    if let Ok(runs) = crate::api::load_reconciliation_runs().await {
                        let still = running(&runs);
                        set_live.set(Some(runs));
                        if !still {
                            set_live.set(None);
                            set_finished.update(|n| *n += 1);
                        }
                    }
                });
            },
            std::time::Duration::from_millis(1_000),
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
fn FilterForm(query: Memo<DiffQuery>) -> impl IntoView {
    let q = query.get_untracked();
    let selected = |current: &Option<String>, value: &str| current.as_deref() == Some(value);
    let loc = current();
    view! {
        <form method="get" action="/reconciliation" class="filters" id="reconcile-filter">
            <label>
                {td_string!(loc, rec.state)}
                <select name="state">
                    <option value="">{td_string!(loc, rec.open_by_kind)}</option>
                    {STATES.map(|s| view! { <option value=s selected=selected(&q.state, s)>{state_label(loc, s)}</option> }).collect_view()}
                </select>
            </label>
            <label>
                {td_string!(loc, rec.kind)}
                <select name="kind">
                    <option value="">{td_string!(loc, inbox.any)}</option>
                    {KINDS.map(|k| view! { <option value=k selected=selected(&q.kind, k)>{k}</option> }).collect_view()}
                </select>
            </label>
            <label>{td_string!(loc, inbox.provider)} <input type="text" name="provider" value=q.provider.clone() size="10"/></label>
            <label>{td_string!(loc, inbox.order)} <input type="search" name="order_id" value=q.order_id.clone() size="16"/></label>
            <button type="submit" class="button">{td_string!(loc, inbox.filter)}</button>
        </form>
    }
}

/// What an in-place (hydrated) action did, inline. Without JavaScript the page reloads and
/// the diff's row and the runs show the same.
#[component]
fn ActionResults(
    start: ServerAction<StartReconciliation>,
    fix: ServerAction<FixReconciliationDiff>,
    resolve: ServerAction<ResolveReconciliationDiff>,
) -> impl IntoView {
    let loc = current();
    view! {
        {move || start.value().get().map(|result| match result {
            Ok(ids) => Either::Left(view! {
                <section class="panel notice" id="run-started" role="status">
                    {td_string!(loc, rec.started, ids = ids.iter().map(|i| format!("#{i}")).collect::<Vec<_>>().join(", ")).to_string()}
                </section>
            }),
            Err(error) => Either::Right(view! { <ErrorPanel error/> }),
        })}
        {move || fix.pending().get().then(|| view! {
            <section class="panel notice" id="fixing" role="status">{td_string!(loc, rec.fixing)}</section>
        })}
        {move || fix.value().get().map(|result| match result {
            Ok(diff) => Either::Left(view! {
                <section class="panel notice" id="fix-result" role="status">
                    {td_string!(loc, rec.diff_result, id = diff.id, state = state_label(loc, &diff.state), resolution = diff.resolution.unwrap_or_default()).to_string()}
                </section>
            }),
            Err(error) => Either::Right(view! { <ErrorPanel error/> }),
        })}
        {move || resolve.value().get().and_then(|r| r.err()).map(|error| view! { <ErrorPanel error/> })}
    }
}

#[component]
fn Body(
    page: ReconciliationPage,
    query: DiffQuery,
    live: ReadSignal<Option<RunsPage>>,
    start: ServerAction<StartReconciliation>,
    fix: ServerAction<FixReconciliationDiff>,
    resolve: ServerAction<ResolveReconciliationDiff>,
) -> impl IntoView {
    let now = page.now;
    let can_operate = page.can_operate;
    let open: i64 = page.runs.open.iter().map(|k| k.count).sum();
    let oldest = page.runs.open.iter().map(|k| k.oldest_found_at).min();
    let loc = current();
    let summary = td_string!(
        loc,
        rec.summary,
        diffs = diffs(loc, open),
        oldest = oldest
            .map(|o| td_string!(loc, rec.oldest, age = age((now - o) / 1000)).to_string())
            .unwrap_or_default(),
        when = page
            .runs
            .last_success_at
            .map(|t| td_string!(loc, overview.ago, age = age((now - t) / 1000)).to_string())
            .unwrap_or_else(|| td_string!(loc, overview.never).to_string())
    )
    .to_string();
    let grouped = page.list.is_none();
    view! {
        <p class="dlq-summary" id="reconcile-summary">{summary}</p>
        {can_operate.then(|| view! { <RunNow providers=page.providers.clone() start/> })}
        <Runs initial=page.runs.clone() live/>
        {if grouped {
            Either::Left(view! { <Groups groups=page.groups now can_operate fix resolve/> })
        } else {
            Either::Right(view! { <List list=page.list.unwrap_or(DiffPage { diffs: vec![], next_before: None }) query now can_operate fix resolve/> })
        }}
    }
}

#[component]
fn RunNow(providers: Vec<String>, start: ServerAction<StartReconciliation>) -> impl IntoView {
    let loc = current();
    if providers.is_empty() {
        return Either::Left(view! {
            <p class="form-note" id="run-now">{td_string!(loc, rec.no_api_key)}</p>
        });
    }
    let several = providers.len() > 1;
    Either::Right(view! {
        <ActionForm action=start attr:class="inline-form" attr:id="run-now">
            {if several {
                Either::Left(view! {
                    <select name="provider">
                        <option value="">{td_string!(loc, rec.every_provider)}</option>
                        {providers.into_iter().map(|p| view! { <option value=p.clone()>{p.clone()}</option> }).collect_view()}
                    </select>
                })
            } else {
                Either::Right(view! { <input type="hidden" name="provider" value=providers[0].clone()/> })
            }}
            <button type="submit" class="button primary" disabled=move || start.pending().get()>
                {move || if start.pending().get() { td_string!(loc, rec.starting) } else { td_string!(loc, rec.run_now) }}
            </button>
        </ActionForm>
    })
}

fn run_line(loc: Locale, r: &RunView) -> String {
    td_string!(
        loc,
        rec.run_line,
        events = thousands_in(loc, r.events_compared),
        objects = thousands_in(loc, r.objects_compared),
        calls = thousands_in(loc, r.api_calls),
        diffs = diffs(loc, r.diffs_found),
        fixed = thousands_in(loc, r.fixed)
    )
    .to_string()
}

/// The runs, newest first; while one runs, its counts as the last poll saw them.
#[component]
fn Runs(initial: RunsPage, live: ReadSignal<Option<RunsPage>>) -> impl IntoView {
    let next = initial.next_before;
    let loc = current();
    let rows = move || {
        let runs = live.get().unwrap_or_else(|| initial.clone()).runs;
        runs.into_iter()
            .map(|r| {
                let running = r.status == "running";
                let took = r
                    .finished_at
                    .map(|f| age((f - r.started_at) / 1000))
                    .unwrap_or_else(|| td_string!(loc, dlq.running).to_string());
                view! {
                    <tr id=format!("run-{}", r.id) data-status=r.status.clone()>
                        <td class="mono">{format!("#{}", r.id)}</td>
                        <td>{r.provider.clone()}</td>
                        <td>{r.source.clone()}</td>
                        <td><span class=state_class(&r.status)>{state_label(loc, &r.status)}</span>
                            {running.then(|| view! { " " <progress></progress> })}</td>
                        <td class="time"><Time at=rfc3339_of_ms(r.started_at)/></td>
                        <td>{took}</td>
                        <td class="run-counts">{run_line(loc, &r)}</td>
                        <td class="reason">{r.error.clone().unwrap_or_default()}</td>
                    </tr>
                }
            })
            .collect_view()
    };
    view! {
        <section class="panel" id="reconcile-runs">
            <h2>{td_string!(loc, rec.runs)}</h2>
            <div class="table-wrap">
                <table class="data compact">
                    <thead>
                        <tr>
                            <th>{td_string!(loc, rec.col_run)}</th><th>{td_string!(loc, rec.col_provider)}</th>
                            <th>{td_string!(loc, rec.col_from)}</th><th>{td_string!(loc, rec.col_status)}</th>
                            <th>{td_string!(loc, rec.col_started)}</th><th>{td_string!(loc, rec.col_took)}</th>
                            <th>{td_string!(loc, rec.col_compared)}</th><th>{td_string!(loc, rec.col_error)}</th>
                        </tr>
                    </thead>
                    <tbody>{rows}</tbody>
                </table>
            </div>
            {next.map(|b| view! { <p><a class="button" id="older-runs" href=format!("/reconciliation?runs_before={b}")>{td_string!(loc, rec.older_runs)}</a></p> })}
        </section>
    }
}

#[component]
fn Groups(
    groups: Vec<DiffGroup>,
    now: i64,
    can_operate: bool,
    fix: ServerAction<FixReconciliationDiff>,
    resolve: ServerAction<ResolveReconciliationDiff>,
) -> impl IntoView {
    let loc = current();
    if groups.is_empty() {
        return Either::Left(view! {
            <section class="panel empty" id="no-open-diffs"><p>{td_string!(loc, rec.agree)}</p></section>
        });
    }
    Either::Right(
        groups
            .into_iter()
            .map(|g| {
                let all = format!("/reconciliation?state=open&kind={}", g.kind);
                let shown = g.diffs.len() as i64;
                view! {
                    <section class="panel dlq-group" id=format!("kind-{}", g.kind) data-kind=g.kind.clone()>
                        <header class="group-header">
                            <span class="badge badge-warn">{g.kind.clone()}</span>
                            <span class="group-error">{meaning(loc, &g.kind)}</span>
                            <span class="group-meta">{td_string!(loc, rec.group_meta, n = thousands_in(loc, g.count), age = age((now - g.oldest_found_at) / 1000)).to_string()}</span>
                            {(g.count > shown).then(|| view! { <a class="button" href=all>{td_string!(loc, rec.all, n = thousands_in(loc, g.count)).to_string()}</a> })}
                        </header>
                        <DiffTable diffs=g.diffs can_operate fix resolve/>
                    </section>
                }
            })
            .collect_view(),
    )
}

#[component]
fn List(
    list: DiffPage,
    query: DiffQuery,
    now: i64,
    can_operate: bool,
    fix: ServerAction<FixReconciliationDiff>,
    resolve: ServerAction<ResolveReconciliationDiff>,
) -> impl IntoView {
    let _ = now;
    let qs = query.to_query_string();
    let older = list.next_before.map(|b| {
        if qs.is_empty() {
            format!("/reconciliation?before={b}")
        } else {
            format!("/reconciliation?{qs}&before={b}")
        }
    });
    let loc = current();
    let title = match query.state.as_deref() {
        Some("fixed") => td_string!(loc, rec.fixed_title),
        Some("resolved") => td_string!(loc, rec.resolved_title),
        Some("open") => td_string!(loc, rec.open_title),
        _ => td_string!(loc, rec.diffs_title),
    };
    view! {
        <section class="panel" id="diff-list">
            <h2>{title}</h2>
            {if list.diffs.is_empty() {
                Either::Left(view! { <p class="form-note">{td_string!(loc, rec.no_diffs)}</p> })
            } else {
                Either::Right(view! { <DiffTable diffs=list.diffs can_operate fix resolve/> })
            }}
            {older.map(|href| view! { <p><a class="button" id="older-diffs" href=href>{td_string!(loc, inbox.older)}</a></p> })}
        </section>
    }
}

#[component]
fn DiffTable(
    diffs: Vec<DiffView>,
    can_operate: bool,
    fix: ServerAction<FixReconciliationDiff>,
    resolve: ServerAction<ResolveReconciliationDiff>,
) -> impl IntoView {
    let loc = current();
    view! {
        <div class="table-wrap">
            <table class="data diff-table">
                <thead>
                    <tr>
                        <th>"#"</th><th>{td_string!(loc, rec.col_kind)}</th><th>{td_string!(loc, rec.col_state)}</th>
                        <th>{td_string!(loc, rec.col_found)}</th><th>{td_string!(loc, rec.col_order)}</th>
                        <th>{td_string!(loc, rec.col_object)}</th><th>{td_string!(loc, rec.col_differs)}</th><th>{td_string!(loc, rec.col_closed)}</th>
                        {can_operate.then(|| view! { <th>{td_string!(loc, dlq.col_actions)}</th> })}
                    </tr>
                </thead>
                <tbody>
                    {diffs.into_iter().map(|d| view! { <DiffRow d can_operate fix resolve/> }).collect_view()}
                </tbody>
            </table>
        </div>
    }
}

#[component]
fn DiffRow(
    d: DiffView,
    can_operate: bool,
    fix: ServerAction<FixReconciliationDiff>,
    resolve: ServerAction<ResolveReconciliationDiff>,
) -> impl IntoView {
    let id = d.id;
    let open = d.state == "open";
    let loc = current();
    let closed = d.closed_at.map(|at| {
        view! {
            <span>{td_string!(loc, rec.closed_by, state = state_label(loc, &d.state), who = d.closed_by.clone().unwrap_or_default()).to_string()}</span>
            {d.resolution.clone().unwrap_or_default()}
            {d.fix_event_id.clone().map(|e| view! { " " <span class="mono">{format!("({e})")}</span> })}
            " " <Time at=rfc3339_of_ms(at)/>
        }
    });
    view! {
        <tr id=format!("diff-{id}") data-state=d.state.clone() data-kind=d.kind.clone()>
            <td class="mono">{id}</td>
            <td class="mono">{d.kind.clone()}</td>
            <td><span class=state_class(&d.state)>{state_label(loc, &d.state)}</span></td>
            <td class="time"><Time at=rfc3339_of_ms(d.found_at)/></td>
            <td class="mono">{d.order_id.clone().map(|o| view! { <a href=crate::backend::order_href(&o)>{o.clone()}</a> })}</td>
            <td class="mono">{d.provider_event_id.clone().or(d.object_id.clone()).unwrap_or_default()}</td>
            <td>{d.detail.clone()}</td>
            <td>{closed}</td>
            {can_operate.then(|| view! {
                <td class="actions">
                    {(open && fixable(&d.kind)).then(|| view! {
                        <ActionForm action=fix attr:class="inline-form">
                            <input type="hidden" name="id" value=id/>
                            <button type="submit" class="button primary fix">{td_string!(loc, rec.fix)}</button>
                        </ActionForm>
                    })}
                    {open.then(|| view! {
                        <ActionForm action=resolve attr:class="inline-form">
                            <input type="hidden" name="id" value=id/>
                            <input type="text" name="reason" placeholder=td_string!(loc, dlq.reason_required) required size="14"/>
                            <button type="submit" class="button resolve">{td_string!(loc, dlq.resolve)}</button>
                        </ActionForm>
                    })}
                </td>
            })}
        </tr>
    }
}
