//! Dead letters (`/dlq`): what is failing, grouped by error class and message, oldest
//! first; one-click redrive per item, resolve / discard with a reason, and bulk redrive of
//! everything matching the filter, always after a dry-run preview. Every form is a plain
//! POST to a server function, so the page works before (or without) the WASM.

use crate::api::{load_dead_letters, preview_redrive, CloseDeadLetter, RedriveDeadLetters};
use crate::backend::{
    DeadLetterGroup, DeadLetterView, DlqPage as Page, DlqQuery, RedriveJobView, RedrivePreview,
    RedriveView,
};
use crate::components::{ErrorPanel, StatusBadge, Time};
use crate::format::{age, short_timestamp};
use leptos::either::Either;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

const CLASSES: [&str; 4] = ["transient", "permanent", "business", "unknown"];
const STATUSES: [&str; 4] = ["open", "redriven", "resolved", "discarded"];

#[component]
pub fn DlqPage() -> impl IntoView {
    let params = use_query_map();
    let query = Memo::new(move |_| {
        params.with(|q| {
            DlqQuery {
                id: q.get("id").and_then(|v| v.parse().ok()),
                class: q.get("class"),
                provider: q.get("provider"),
                stage: q.get("stage"),
                error: q.get("error"),
                status: q.get("status"),
            }
            .normalized()
        })
    });
    let wants_preview = Memo::new(move |_| params.with(|q| q.get("preview").is_some()));
    let redrive = ServerAction::<RedriveDeadLetters>::new();
    let (live_jobs, set_live_jobs) = signal(None::<Vec<RedriveJobView>>);
    poll_jobs_while_redriving(redrive, set_live_jobs);
    let close = ServerAction::<CloseDeadLetter>::new();
    // Reloads after each action when hydrated; without JavaScript the server redirects back.
    let page = Resource::new(
        move || (query.get(), redrive.version().get(), close.version().get()),
        |(query, _, _)| load_dead_letters(query),
    );
    let preview = Resource::new(
        move || (query.get(), wants_preview.get(), redrive.version().get()),
        |(query, wanted, _)| async move {
            if wanted {
                preview_redrive(query).await.map(Some)
            } else {
                Ok(None)
            }
        },
    );

    view! {
        <Title text="Dead letters"/>
        <header class="page-header">
            <h1>"Dead letters"</h1>
            <p class="lede">
                "Events and outbox messages that failed for good, grouped by error. Redrive "
                "puts an item back on its path with the same keys: it can never double an effect."
            </p>
        </header>
        <FilterForm query/>
        <LiveJobs redrive jobs=live_jobs/>
        <ActionResults redrive close/>
        <Transition fallback=|| view! { <p class="loading">"Loading dead letters…"</p> }>
            {move || Suspend::new(async move {
                let query = query.get();
                match (page.await, preview.await) {
                    (Ok(page), Ok(preview)) => Either::Left(view! {
                        <DlqBody page preview query redrive close/>
                    }),
                    (Err(error), _) | (_, Err(error)) => Either::Right(view! { <ErrorPanel error/> }),
                }
            })}
        </Transition>
    }
}

/// In the browser, while a redrive this page started is running: ask how far it is twice a
/// second. (Without JavaScript the form waits for the answer; anyone opening the page
/// meanwhile sees the same progress, rendered by the server.)
#[allow(unused_variables)]
fn poll_jobs_while_redriving(
    redrive: ServerAction<RedriveDeadLetters>,
    set_jobs: WriteSignal<Option<Vec<RedriveJobView>>>,
) {
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        let handle = set_interval_with_handle(
            move || {
                if redrive.pending().get_untracked() {
                    leptos::task::spawn_local(async move {
                        if let Ok(jobs) = crate::api::load_redrive_jobs().await {
                            set_jobs.set(Some(jobs));
                        }
                    });
                }
            },
            std::time::Duration::from_millis(500),
        )
        .ok();
        on_cleanup(move || {
            if let Some(handle) = handle {
                handle.clear();
            }
        });
    });
}

/// The progress of the redrive this page started, while it runs.
#[component]
fn LiveJobs(
    redrive: ServerAction<RedriveDeadLetters>,
    jobs: ReadSignal<Option<Vec<RedriveJobView>>>,
) -> impl IntoView {
    move || {
        redrive
            .pending()
            .get()
            .then(|| jobs.get().map(|jobs| view! { <Jobs jobs/> }))
            .flatten()
            .into_any()
    }
}

/// Bulk redrives: a progress bar while one runs, its summary once done.
#[component]
fn Jobs(jobs: Vec<RedriveJobView>) -> impl IntoView {
    (!jobs.is_empty()).then(|| view! {
        <section class="panel" id="redrive-jobs" role="status">
            <h2>"Bulk redrives"</h2>
            <ul class="jobs">
                {jobs.into_iter().map(|job| {
                    let running = job.finished_at.is_none() && !job.interrupted;
                    let selection = if job.selection.is_empty() { "everything open".to_string() } else { job.selection.clone() };
                    let who = format!("#{} by {} ({selection})", job.id, job.actor);
                    let line = if job.interrupted {
                        format!("{who}: interrupted at {} of {}", job.done, job.total)
                    } else if running && job.total == 0 {
                        format!("{who}: selecting the dead letters…")
                    } else {
                        format!("{who}: {} of {}", job.done, job.total)
                    };
                    view! {
                        <li data-running=running.then_some("true") data-interrupted=job.interrupted.then_some("true")>
                            {line}
                            " "
                            <progress max=job.total.max(1) value=job.done></progress>
                            " "
                            {match (job.summary, job.finished_at) {
                                (Some(summary), Some(at)) => view! { <span>{format!("done: {summary}, ")}</span><Time at/> }.into_any(),
                                _ if job.interrupted => view! {
                                    <span class="badge badge-bad">"interrupted"</span>" its instance stopped; what was done stays done, redrive the rest again"
                                }.into_any(),
                                _ => view! { <span>"running…"</span> }.into_any(),
                            }}
                        </li>
                    }
                }).collect_view()}
            </ul>
        </section>
    })
}

#[component]
fn FilterForm(query: Memo<DlqQuery>) -> impl IntoView {
    let q = query.get_untracked();
    let selected = |current: &Option<String>, value: &str| current.as_deref() == Some(value);
    view! {
        <form method="get" action="/dlq" class="filters" id="dlq-filter">
            <label>
                "Class "
                <select name="class">
                    <option value="">"any"</option>
                    {CLASSES.map(|c| view! { <option value=c selected=selected(&q.class, c)>{c}</option> }).collect_view()}
                </select>
            </label>
            <label>
                "Status "
                <select name="status">
                    {STATUSES.map(|s| view! {
                        <option value=s selected=selected(&q.status, s) || (q.status.is_none() && s == "open")>{s}</option>
                    }).collect_view()}
                </select>
            </label>
            <label>"Provider " <input type="text" name="provider" value=q.provider.clone() size="10"/></label>
            <label>"Error contains " <input type="search" name="error" value=q.error.clone()/></label>
            <button type="submit" class="button">"Filter"</button>
        </form>
    }
}

/// After an in-place (hydrated) action: what it did, inline. Without JavaScript the page
/// reloads and "Recent redrives" shows the same.
#[component]
fn ActionResults(
    redrive: ServerAction<RedriveDeadLetters>,
    close: ServerAction<CloseDeadLetter>,
) -> impl IntoView {
    view! {
        {move || redrive.value().get().map(|result| match result {
            Ok(outcomes) => Either::Left(view! {
                <section class="panel notice" id="redrive-result" role="status">
                    <p>{format!("Redrove {} dead letter{}:", outcomes.len(), if outcomes.len() == 1 { "" } else { "s" })}</p>
                    <ul>
                        {outcomes.into_iter().map(|o| view! {
                            <li><span class="mono">{format!("#{}", o.dead_letter_id)}</span>" "{o.event_id.unwrap_or_default()}" → "{o.outcome}</li>
                        }).collect_view()}
                    </ul>
                </section>
            }),
            Err(error) => Either::Right(view! { <ErrorPanel error/> }),
        })}
        {move || close.value().get().and_then(|result| result.err()).map(|error| view! { <ErrorPanel error/> })}
    }
}

#[component]
fn DlqBody(
    page: Page,
    preview: Option<RedrivePreview>,
    query: DlqQuery,
    redrive: ServerAction<RedriveDeadLetters>,
    close: ServerAction<CloseDeadLetter>,
) -> impl IntoView {
    let can_operate = page.can_operate;
    let summary = match page.oldest_open_age_secs {
        Some(oldest) => format!(
            "open {} · oldest {} · due within 24 h {}",
            page.open,
            age(oldest),
            page.due_within_24h
        ),
        None => "nothing open".to_string(),
    };
    let shown: usize = page.groups.iter().map(|g| g.items.len()).sum();
    let preview_href = {
        let qs = query.to_query_string();
        if qs.is_empty() {
            "/dlq?preview=1".to_string()
        } else {
            format!("/dlq?{qs}&preview=1")
        }
    };
    view! {
        <p class="dlq-summary" id="dlq-summary">{summary}</p>
        <Jobs jobs=page.jobs.clone()/>
        {page.history.clone().map(|history| view! { <History history/> })}
        {preview.map(|preview| view! { <PreviewPanel preview query=query.clone() can_operate redrive/> })}
        {(!page.recent_redrives.is_empty()).then(|| view! { <RecentRedrives redrives=page.recent_redrives.clone()/> })}
        {if page.groups.is_empty() {
            Either::Left(view! { <section class="panel empty"><p>"No dead letters match."</p></section> })
        } else {
            Either::Right(view! {
                <p class="dlq-actions">
                    {format!("{shown} shown{}. ", if page.truncated { " (the newest; more match)" } else { "" })}
                    <a class="button" href=preview_href id="preview-all">"Preview redrive of everything matching…"</a>
                </p>
                {page.groups.into_iter().map(|group| view! { <Group group can_operate redrive close/> }).collect_view()}
            })
        }}
    }
}

/// One dead letter's failed attempts and redrives, oldest first (`/dlq?id=…`).
#[component]
fn History(history: crate::backend::DeadLetterHistory) -> impl IntoView {
    let none = history.redrives.is_empty();
    view! {
        <section class="panel" id="dlq-history">
            <h2>{format!("History of dead letter #{}", history.id)}</h2>
            <h3>{format!("Failed attempts ({})", history.attempts.len())}</h3>
            <ol class="mono">{history.attempts.into_iter().map(|a| view! { <li>{a}</li> }).collect_view()}</ol>
            <h3>"Redrives"</h3>
            {if none {
                Either::Left(view! { <p class="form-note">"Never redriven."</p> })
            } else {
                Either::Right(view! {
                    <ol>
                        {history.redrives.into_iter().map(|r| view! {
                            <li>
                                {format!("{} by {}: {}", short_timestamp(&r.at), r.actor, r.outcome)}
                                {r.reason.map(|reason| format!(" (reason: {reason})"))}
                            </li>
                        }).collect_view()}
                    </ol>
                })
            }}
        </section>
    }
}

#[component]
fn PreviewPanel(
    preview: RedrivePreview,
    query: DlqQuery,
    can_operate: bool,
    redrive: ServerAction<RedriveDeadLetters>,
) -> impl IntoView {
    let matching = preview.matching;
    let listed = preview.outcomes.len();
    view! {
        <section class="panel preview" id="redrive-preview">
            <h2>{format!("Dry run: {matching} dead letter{} would be redriven", if matching == 1 { "" } else { "s" })}</h2>
            <p class="form-note">
                "Nothing has changed. This is what each item would do now"
                {(listed < matching).then(|| format!(" (the first {listed} shown)"))}
                "."
            </p>
            <table class="data compact">
                <thead><tr><th>"Dead letter"</th><th>"Event"</th><th>"Would"</th></tr></thead>
                <tbody>
                    {preview.outcomes.into_iter().map(|o| view! {
                        <tr>
                            <td class="mono">{format!("#{}", o.dead_letter_id)}</td>
                            <td class="mono">{o.event_id.unwrap_or_default()}</td>
                            <td>{o.outcome}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
            {(can_operate && matching > 0).then(|| view! {
                <ActionForm action=redrive attr:class="inline-form" attr:id="bulk-redrive-form">
                    <input type="hidden" name="class" value=query.class.clone()/>
                    <input type="hidden" name="provider" value=query.provider.clone()/>
                    <input type="hidden" name="stage" value=query.stage.clone()/>
                    <input type="hidden" name="error" value=query.error.clone()/>
                    <input type="hidden" name="status" value=query.status.clone()/>
                    {query.id.map(|id| view! { <input type="hidden" name="id" value=id/> })}
                    <input type="text" name="reason" placeholder="reason (optional)"/>
                    <button type="submit" class="button primary">{format!("Redrive all {matching}")}</button>
                </ActionForm>
            })}
        </section>
    }
}

#[component]
fn RecentRedrives(redrives: Vec<RedriveView>) -> impl IntoView {
    view! {
        <section class="panel" id="recent-redrives">
            <h2>"Recent redrives"</h2>
            <table class="data compact">
                <thead>
                    <tr><th>"Dead letter"</th><th>"Event"</th><th>"By"</th><th>"Why"</th><th>"Redrive"</th><th>"Now"</th><th>"When"</th></tr>
                </thead>
                <tbody>
                    {redrives.into_iter().map(|r| view! {
                        <tr>
                            <td class="mono">{format!("#{}", r.dead_letter_id)}</td>
                            <td class="mono">{r.event_id.unwrap_or_default()}</td>
                            <td>{r.actor}</td>
                            <td>{r.reason.unwrap_or_default()}</td>
                            <td>{r.outcome}</td>
                            <td class="status">{r.current_status.map(|s| view! { <StatusBadge status=s reason=None/> })}</td>
                            <td class="time"><Time at=r.at.clone()/></td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}

#[component]
fn Group(
    group: DeadLetterGroup,
    can_operate: bool,
    redrive: ServerAction<RedriveDeadLetters>,
    close: ServerAction<CloseDeadLetter>,
) -> impl IntoView {
    let count = group.items.len();
    let preview_href = format!(
        "/dlq?{}&preview=1",
        DlqQuery {
            class: Some(group.class.clone()),
            error: Some(group.error.clone()),
            ..Default::default()
        }
        .to_query_string()
    );
    view! {
        <section class="panel dlq-group">
            <header class="group-header">
                <span class="badge badge-bad">{group.class.clone()}</span>
                <span class="group-error">{group.error.clone()}</span>
                <span class="group-meta">{format!("{count} item{} · oldest {}", if count == 1 { "" } else { "s" }, age(group.oldest_age_secs))}</span>
                <a class="button" href=preview_href>{format!("Preview redrive of {count}…")}</a>
            </header>
            <div class="table-wrap">
                <table class="data dlq-table">
                    <thead>
                        <tr>
                            <th>"#"</th><th>"Event"</th><th>"Type"</th><th>"Order"</th>
                            <th class="num">"Attempts"</th><th>"Age"</th><th>"Deal with by"</th>
                            {can_operate.then(|| view! { <th>"Actions"</th> })}
                        </tr>
                    </thead>
                    <tbody>
                        {group.items.into_iter().map(|item| view! { <Item item can_operate redrive close/> }).collect_view()}
                    </tbody>
                </table>
            </div>
        </section>
    }
}

#[component]
fn Item(
    item: DeadLetterView,
    can_operate: bool,
    redrive: ServerAction<RedriveDeadLetters>,
    close: ServerAction<CloseDeadLetter>,
) -> impl IntoView {
    let id = item.id;
    let what = item
        .event_type
        .clone()
        .or_else(|| item.sink.clone().map(|s| format!("outbox → {s}")))
        .unwrap_or_default();
    view! {
        <tr id=format!("dead-letter-{id}") data-status=item.status.clone()>
            <td class="mono">{id}</td>
            <td class="mono event-id">{item.event_id.clone().unwrap_or_default()}</td>
            <td class="mono">{what}</td>
            <td class="mono">{item.order_id.clone().map(|o| view! { <a href=crate::backend::order_href(&o)>{o.clone()}</a> })}</td>
            <td class="num">{item.attempts}</td>
            <td title=item.first_attempt_at.clone()>{age(item.age_secs)}</td>
            <td class="time"><Time at=item.resolve_by.clone()/></td>
            {can_operate.then(|| view! {
                <td class="actions">
                    <ActionForm action=redrive attr:class="inline-form">
                        <input type="hidden" name="id" value=id/>
                        <input type="text" name="reason" placeholder="reason (optional)" size="14"/>
                        <button type="submit" class="button redrive">"Redrive"</button>
                    </ActionForm>
                    <ActionForm action=close attr:class="inline-form">
                        <input type="hidden" name="id" value=id/>
                        <select name="action">
                            <option value="resolve">"Resolve"</option>
                            <option value="discard">"Discard"</option>
                        </select>
                        <input type="text" name="reason" placeholder="reason (required)" required size="14"/>
                        <button type="submit" class="button close">"Close"</button>
                    </ActionForm>
                </td>
            })}
        </tr>
    }
}
