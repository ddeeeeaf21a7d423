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
use crate::format::{age, short_timestamp_in, thousands_in};
use crate::i18n::*;
use crate::locale::{current, Locale};
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

    let loc = current();
    view! {
        <Title text=td_string!(loc, nav.dlq)/>
        <header class="page-header">
            <h1>{td_string!(loc, nav.dlq)}</h1>
            <p class="lede">{td_string!(loc, dlq.lede)}</p>
        </header>
        <FilterForm query/>
        <LiveJobs redrive jobs=live_jobs/>
        <ActionResults redrive close/>
        <Transition fallback=move || view! { <p class="loading">{td_string!(loc, dlq.loading)}</p> }>
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
    let loc = current();
    (!jobs.is_empty()).then(|| view! {
        <section class="panel" id="redrive-jobs" role="status">
            <h2>{td_string!(loc, dlq.bulk)}</h2>
            <ul class="jobs">
                {jobs.into_iter().map(|job| {
                    let running = job.finished_at.is_none() && !job.interrupted;
                    let selection = if job.selection.is_empty() { td_string!(loc, dlq.everything_open).to_string() } else { job.selection.clone() };
                    let who = td_string!(loc, dlq.job_who, id = job.id, actor = job.actor.clone(), selection = selection).to_string();
                    let line = if job.interrupted {
                        td_string!(loc, dlq.job_interrupted, who = who, done = job.done, total = job.total).to_string()
                    } else if running && job.total == 0 {
                        td_string!(loc, dlq.job_selecting, who = who).to_string()
                    } else {
                        td_string!(loc, dlq.job_progress, who = who, done = job.done, total = job.total).to_string()
                    };
                    view! {
                        <li data-running=running.then_some("true") data-interrupted=job.interrupted.then_some("true")>
                            {line}
                            " "
                            <progress max=job.total.max(1) value=job.done></progress>
                            " "
                            {match (job.summary, job.finished_at) {
                                (Some(summary), Some(at)) => view! { <span>{td_string!(loc, dlq.job_done, summary = summary).to_string()}</span><Time at/> }.into_any(),
                                _ if job.interrupted => view! {
                                    <span class="badge badge-bad">{td_string!(loc, dlq.interrupted)}</span>{td_string!(loc, dlq.interrupted_note)}
                                }.into_any(),
                                _ => view! { <span>{td_string!(loc, dlq.running)}</span> }.into_any(),
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
    let loc = current();
    view! {
        <form method="get" action="/dlq" class="filters" id="dlq-filter">
            <label>
                {td_string!(loc, dlq.class)}
                <select name="class">
                    <option value="">{td_string!(loc, inbox.any)}</option>
                    {CLASSES.map(|c| view! { <option value=c selected=selected(&q.class, c)>{class_label(loc, c)}</option> }).collect_view()}
                </select>
            </label>
            <label>
                {td_string!(loc, inbox.status)}
                <select name="status">
                    {STATUSES.map(|s| view! {
                        <option value=s selected=selected(&q.status, s) || (q.status.is_none() && s == "open")>{crate::components::status_label(loc, s)}</option>
                    }).collect_view()}
                </select>
            </label>
            <label>{td_string!(loc, inbox.provider)} <input type="text" name="provider" value=q.provider.clone() size="10"/></label>
            <label>{td_string!(loc, dlq.error_contains)} <input type="search" name="error" value=q.error.clone()/></label>
            <button type="submit" class="button">{td_string!(loc, inbox.filter)}</button>
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
    let loc = current();
    view! {
        {move || redrive.value().get().map(|result| match result {
            Ok(outcomes) => Either::Left(view! {
                <section class="panel notice" id="redrive-result" role="status">
                    <p>{if outcomes.len() == 1 {
                        td_string!(loc, dlq.redrove_one, n = outcomes.len()).to_string()
                    } else {
                        td_string!(loc, dlq.redrove_many, n = outcomes.len()).to_string()
                    }}</p>
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
    let loc = current();
    let summary = match page.oldest_open_age_secs {
        Some(oldest) => td_string!(
            loc,
            dlq.summary,
            open = thousands_in(loc, page.open),
            oldest = age(oldest),
            due = thousands_in(loc, page.due_within_24h)
        )
        .to_string(),
        None => td_string!(loc, dlq.nothing_open).to_string(),
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
            Either::Left(view! { <section class="panel empty"><p>{td_string!(loc, dlq.no_match)}</p></section> })
        } else {
            Either::Right(view! {
                <p class="dlq-actions">
                    {if page.truncated {
                        td_string!(loc, dlq.shown_truncated, n = shown).to_string()
                    } else if shown == 1 {
                        td_string!(loc, dlq.shown_one, n = shown).to_string()
                    } else {
                        td_string!(loc, dlq.shown, n = shown).to_string()
                    }}
                    <a class="button" href=preview_href id="preview-all">{td_string!(loc, dlq.preview_all)}</a>
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
    let loc = current();
    view! {
        <section class="panel" id="dlq-history">
            <h2>{td_string!(loc, dlq.history, id = history.id).to_string()}</h2>
            <h3>{td_string!(loc, dlq.failed_attempts, n = history.attempts.len()).to_string()}</h3>
            <ol class="mono">{history.attempts.into_iter().map(|a| view! { <li>{a}</li> }).collect_view()}</ol>
            <h3>{td_string!(loc, dlq.redrives)}</h3>
            {if none {
                Either::Left(view! { <p class="form-note">{td_string!(loc, dlq.never_redriven)}</p> })
            } else {
                Either::Right(view! {
                    <ol>
                        {history.redrives.into_iter().map(|r| view! {
                            <li>
                                {td_string!(loc, dlq.redrive_line, at = short_timestamp_in(loc, &r.at), actor = r.actor.clone(), outcome = r.outcome.clone()).to_string()}
                                {r.reason.map(|reason| td_string!(loc, dlq.reason_paren, reason = reason).to_string())}
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
    let loc = current();
    view! {
        <section class="panel preview" id="redrive-preview">
            <h2>{if matching == 1 {
                td_string!(loc, dlq.dry_run_one, n = matching).to_string()
            } else {
                td_string!(loc, dlq.dry_run_many, n = matching).to_string()
            }}</h2>
            <p class="form-note">
                {td_string!(loc, dlq.nothing_changed)}
                {(listed < matching).then(|| td_string!(loc, dlq.first_shown, n = listed).to_string())}
                "."
            </p>
            <table class="data compact">
                <thead><tr><th>{td_string!(loc, dlq.col_dead_letter)}</th><th>{td_string!(loc, dlq.col_event)}</th><th>{td_string!(loc, dlq.col_would)}</th></tr></thead>
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
                    <input type="text" name="reason" placeholder=td_string!(loc, dlq.reason_optional)/>
                    <button type="submit" class="button primary">{td_string!(loc, dlq.redrive_all, n = matching).to_string()}</button>
                </ActionForm>
            })}
        </section>
    }
}

#[component]
fn RecentRedrives(redrives: Vec<RedriveView>) -> impl IntoView {
    let loc = current();
    view! {
        <section class="panel" id="recent-redrives">
            <h2>{td_string!(loc, dlq.recent)}</h2>
            <table class="data compact">
                <thead>
                    <tr>
                        <th>{td_string!(loc, dlq.col_dead_letter)}</th>
                        <th>{td_string!(loc, dlq.col_event)}</th>
                        <th>{td_string!(loc, dlq.col_by)}</th>
                        <th>{td_string!(loc, dlq.col_why)}</th>
                        <th>{td_string!(loc, dlq.col_redrive)}</th>
                        <th>{td_string!(loc, dlq.col_now)}</th>
                        <th>{td_string!(loc, dlq.col_when)}</th>
                    </tr>
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
    let loc = current();
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
                <span class="badge badge-bad" data-class=group.class.clone()>{class_label(loc, &group.class)}</span>
                <span class="group-error">{group.error.clone()}</span>
                <span class="group-meta">{if count == 1 {
                    td_string!(loc, dlq.items_one, n = count, age = age(group.oldest_age_secs)).to_string()
                } else {
                    td_string!(loc, dlq.items_many, n = count, age = age(group.oldest_age_secs)).to_string()
                }}</span>
                <a class="button" href=preview_href>{td_string!(loc, dlq.preview_group, n = count).to_string()}</a>
            </header>
            <div class="table-wrap">
                <table class="data dlq-table">
                    <thead>
                        <tr>
                            <th>"#"</th><th>{td_string!(loc, dlq.col_event)}</th><th>{td_string!(loc, dlq.col_type)}</th><th>{td_string!(loc, dlq.col_order)}</th>
                            <th class="num">{td_string!(loc, dlq.col_attempts)}</th><th>{td_string!(loc, dlq.col_age)}</th><th>{td_string!(loc, dlq.col_deal_by)}</th>
                            {can_operate.then(|| view! { <th>{td_string!(loc, dlq.col_actions)}</th> })}
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
    let loc = current();
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
                        <input type="text" name="reason" placeholder=td_string!(loc, dlq.reason_optional) size="14"/>
                        <button type="submit" class="button redrive">{td_string!(loc, dlq.redrive)}</button>
                    </ActionForm>
                    <ActionForm action=close attr:class="inline-form">
                        <input type="hidden" name="id" value=id/>
                        <select name="action">
                            <option value="resolve">{td_string!(loc, dlq.resolve)}</option>
                            <option value="discard">{td_string!(loc, dlq.discard)}</option>
                        </select>
                        <input type="text" name="reason" placeholder=td_string!(loc, dlq.reason_required) required size="14"/>
                        <button type="submit" class="button close">{td_string!(loc, dlq.close)}</button>
                    </ActionForm>
                </td>
            })}
        </tr>
    }
}

/// An error class (`transient`, `permanent`, `business`, `unknown`) in the viewer's language.
fn class_label(loc: Locale, class: &str) -> String {
    match class {
        "transient" => td_string!(loc, class.transient).to_string(),
        "permanent" => td_string!(loc, class.permanent).to_string(),
        "business" => td_string!(loc, class.business).to_string(),
        "unknown" => td_string!(loc, class.unknown).to_string(),
        other => other.to_string(),
    }
}
