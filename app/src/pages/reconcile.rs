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
use crate::format::{age, rfc3339_of_ms, thousands};
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

fn plural(n: i64, one: &str) -> String {
    format!("{} {one}{}", thousands(n), if n == 1 { "" } else { "s" })
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

    view! {
        <Title text="Reconciliation"/>
        <header class="page-header">
            <h1>"Reconciliation"</h1>
            <p class="lede">
                "The provider's API against our inbox and facts: events never delivered, "
                "changes never announced, events held but never applied. A fix goes through "
                "the inbox with the webhook's own keys, so it can never count anything twice."
            </p>
        </header>
        <FilterForm query/>
        <ActionResults start fix resolve/>
        <Transition fallback=|| view! { <p class="loading">"Loading reconciliation…"</p> }>
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
    view! {
        <form method="get" action="/reconciliation" class="filters" id="reconcile-filter">
            <label>
                "State "
                <select name="state">
                    <option value="">"open, by kind"</option>
                    {STATES.map(|s| view! { <option value=s selected=selected(&q.state, s)>{s}</option> }).collect_view()}
                </select>
            </label>
            <label>
                "Kind "
                <select name="kind">
                    <option value="">"any"</option>
                    {KINDS.map(|k| view! { <option value=k selected=selected(&q.kind, k)>{k}</option> }).collect_view()}
                </select>
            </label>
            <label>"Provider " <input type="text" name="provider" value=q.provider.clone() size="10"/></label>
            <label>"Order " <input type="search" name="order_id" value=q.order_id.clone() size="16"/></label>
            <button type="submit" class="button">"Filter"</button>
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
    view! {
        {move || start.value().get().map(|result| match result {
            Ok(ids) => Either::Left(view! {
                <section class="panel notice" id="run-started" role="status">
                    {format!("Started run {}.", ids.iter().map(|i| format!("#{i}")).collect::<Vec<_>>().join(", "))}
                </section>
            }),
            Err(error) => Either::Right(view! { <ErrorPanel error/> }),
        })}
        {move || fix.pending().get().then(|| view! {
            <section class="panel notice" id="fixing" role="status">"Asking the provider and fixing…"</section>
        })}
        {move || fix.value().get().map(|result| match result {
            Ok(diff) => Either::Left(view! {
                <section class="panel notice" id="fix-result" role="status">
                    {format!("Diff #{} {}: {}", diff.id, diff.state, diff.resolution.unwrap_or_default())}
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
    let summary = format!(
        "{} open{} · last successful run {}",
        plural(open, "diff"),
        oldest
            .map(|o| format!(" · oldest {}", age((now - o) / 1000)))
            .unwrap_or_default(),
        page.runs
            .last_success_at
            .map(|t| format!("{} ago", age((now - t) / 1000)))
            .unwrap_or_else(|| "never".into()),
    );
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
    if providers.is_empty() {
        return Either::Left(view! {
            <p class="form-note" id="run-now">"No provider has an api_key: reconciliation needs the provider's API."</p>
        });
    }
    let several = providers.len() > 1;
    Either::Right(view! {
        <ActionForm action=start attr:class="inline-form" attr:id="run-now">
            {if several {
                Either::Left(view! {
                    <select name="provider">
                        <option value="">"every provider"</option>
                        {providers.into_iter().map(|p| view! { <option value=p.clone()>{p.clone()}</option> }).collect_view()}
                    </select>
                })
            } else {
                Either::Right(view! { <input type="hidden" name="provider" value=providers[0].clone()/> })
            }}
            <button type="submit" class="button primary" disabled=move || start.pending().get()>
                {move || if start.pending().get() { "Starting…" } else { "Run now" }}
            </button>
        </ActionForm>
    })
}

fn run_line(r: &RunView) -> String {
    format!(
        "{} events and {} objects compared, {} API calls, {} found, {} fixed",
        thousands(r.events_compared),
        thousands(r.objects_compared),
        thousands(r.api_calls),
        plural(r.diffs_found, "diff"),
        thousands(r.fixed)
    )
}

/// The runs, newest first; while one runs, its counts as the last poll saw them.
#[component]
fn Runs(initial: RunsPage, live: ReadSignal<Option<RunsPage>>) -> impl IntoView {
    let next = initial.next_before;
    let rows = move || {
        let runs = live.get().unwrap_or_else(|| initial.clone()).runs;
        runs.into_iter()
            .map(|r| {
                let running = r.status == "running";
                let took = r
                    .finished_at
                    .map(|f| age((f - r.started_at) / 1000))
                    .unwrap_or_else(|| "running…".into());
                view! {
                    <tr id=format!("run-{}", r.id) data-status=r.status.clone()>
                        <td class="mono">{format!("#{}", r.id)}</td>
                        <td>{r.provider.clone()}</td>
                        <td>{r.source.clone()}</td>
                        <td><span class=state_class(&r.status)>{r.status.clone()}</span>
                            {running.then(|| view! { " " <progress></progress> })}</td>
                        <td class="time"><Time at=rfc3339_of_ms(r.started_at)/></td>
                        <td>{took}</td>
                        <td class="run-counts">{run_line(&r)}</td>
                        <td class="reason">{r.error.clone().unwrap_or_default()}</td>
                    </tr>
                }
            })
            .collect_view()
    };
    view! {
        <section class="panel" id="reconcile-runs">
            <h2>"Runs"</h2>
            <div class="table-wrap">
                <table class="data compact">
                    <thead>
                        <tr><th>"Run"</th><th>"Provider"</th><th>"From"</th><th>"Status"</th><th>"Started"</th><th>"Took"</th><th>"Compared"</th><th>"Error"</th></tr>
                    </thead>
                    <tbody>{rows}</tbody>
                </table>
            </div>
            {next.map(|b| view! { <p><a class="button" id="older-runs" href=format!("/reconciliation?runs_before={b}")>"Older runs →"</a></p> })}
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
    if groups.is_empty() {
        return Either::Left(view! {
            <section class="panel empty" id="no-open-diffs"><p>"No open diffs: the provider and oncehook agree."</p></section>
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
                            <span class="group-error">{kind_meaning(&g.kind)}</span>
                            <span class="group-meta">{format!("{} open · oldest {}", thousands(g.count), age((now - g.oldest_found_at) / 1000))}</span>
                            {(g.count > shown).then(|| view! { <a class="button" href=all>{format!("All {} →", thousands(g.count))}</a> })}
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
    let title = match query.state.as_deref() {
        Some("fixed") => "Fixed diffs (what was done, by whom)",
        Some("resolved") => "Resolved diffs (who accepted them, and why)",
        Some("open") => "Open diffs",
        _ => "Diffs",
    };
    view! {
        <section class="panel" id="diff-list">
            <h2>{title}</h2>
            {if list.diffs.is_empty() {
                Either::Left(view! { <p class="form-note">"No diffs match."</p> })
            } else {
                Either::Right(view! { <DiffTable diffs=list.diffs can_operate fix resolve/> })
            }}
            {older.map(|href| view! { <p><a class="button" id="older-diffs" href=href>"Older →"</a></p> })}
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
    view! {
        <div class="table-wrap">
            <table class="data diff-table">
                <thead>
                    <tr>
                        <th>"#"</th><th>"Kind"</th><th>"State"</th><th>"Found"</th><th>"Order"</th>
                        <th>"Event / object"</th><th>"What differs"</th><th>"Fixed / resolved"</th>
                        {can_operate.then(|| view! { <th>"Actions"</th> })}
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
    let closed = d.closed_at.map(|at| {
        view! {
            <span>{format!("{} by {}: ", d.state, d.closed_by.clone().unwrap_or_default())}</span>
            {d.resolution.clone().unwrap_or_default()}
            {d.fix_event_id.clone().map(|e| view! { " " <span class="mono">{format!("({e})")}</span> })}
            " " <Time at=rfc3339_of_ms(at)/>
        }
    });
    view! {
        <tr id=format!("diff-{id}") data-state=d.state.clone() data-kind=d.kind.clone()>
            <td class="mono">{id}</td>
            <td class="mono">{d.kind.clone()}</td>
            <td><span class=state_class(&d.state)>{d.state.clone()}</span></td>
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
                            <button type="submit" class="button primary fix">"Fix"</button>
                        </ActionForm>
                    })}
                    {open.then(|| view! {
                        <ActionForm action=resolve attr:class="inline-form">
                            <input type="hidden" name="id" value=id/>
                            <input type="text" name="reason" placeholder="reason (required)" required size="14"/>
                            <button type="submit" class="button resolve">"Resolve"</button>
                        </ActionForm>
                    })}
                </td>
            })}
        </tr>
    }
}
