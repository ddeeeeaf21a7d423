//! Admin pages: the audit log (`/admin/audit`: every change of data and every sign-in, who,
//! what, why, from where, newest first, filterable by actor) and the users
//! (`/admin/users`). The server checks the role; a viewer or operator gets a 403 page and
//! the attempt is audited. API tokens (`/admin/tokens`) are made and revoked here too.

use crate::api::{load_api_tokens, load_audit_log, load_users, CreateApiToken, RevokeApiToken};
use crate::backend::{ApiTokensPage, AuditPage, AuditQuery, UserView};
use crate::components::{ErrorPanel, Time};
use crate::format::short_timestamp_in;
use crate::i18n::*;
use crate::locale::{current, Locale};
use leptos::either::Either;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
pub fn AuditLogPage() -> impl IntoView {
    let query_map = use_query_map();
    let query = Memo::new(move |_| {
        query_map.with(|q| {
            AuditQuery {
                actor: q.get("actor"),
                before: q.get("before").and_then(|b| b.parse().ok()),
            }
            .normalized()
        })
    });
    let page = Resource::new(move || query.get(), load_audit_log);
    let loc = current();
    view! {
        <Title text=td_string!(loc, nav.audit)/>
        <header class="page-header">
            <h1>{td_string!(loc, nav.audit)}</h1>
            <p class="lede">{td_string!(loc, admin.audit_lede)}</p>
        </header>
        <form method="get" action="/admin/audit" class="filters" id="audit-filter">
            <label>{td_string!(loc, admin.actor)}<input type="text" name="actor" value=move || query.get().actor.unwrap_or_default()/></label>
            <button type="submit" class="button">{td_string!(loc, inbox.filter)}</button>
        </form>
        <Transition fallback=move || view! { <p class="loading">{td_string!(loc, admin.loading_audit)}</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(page) => Either::Left(view! { <AuditTable page query=query.get_untracked()/> }),
                    Err(error) => Either::Right(view! { <ErrorPanel error/> }),
                }
            })}
        </Transition>
    }
}

#[component]
fn AuditTable(page: AuditPage, query: AuditQuery) -> impl IntoView {
    let older = page.next_before.map(|before| {
        AuditQuery {
            before: Some(before),
            ..query.clone()
        }
        .href()
    });
    let empty = page.entries.is_empty();
    let loc = current();
    view! {
        <section class="panel">
            <div class="table-scroll">
                <table class="data compact" id="audit-table">
                    <thead><tr>
                        <th>{td_string!(loc, admin.col_when)}</th><th>{td_string!(loc, admin.col_who)}</th>
                        <th>{td_string!(loc, admin.col_what)}</th><th>{td_string!(loc, admin.col_target)}</th>
                        <th>{td_string!(loc, admin.col_why)}</th><th>{td_string!(loc, admin.col_details)}</th>
                        <th>{td_string!(loc, admin.col_from)}</th>
                    </tr></thead>
                    <tbody>
                        {page.entries.into_iter().map(|e| view! {
                            <tr>
                                <td class="time"><Time at=e.at.clone()/></td>
                                <td><a href=AuditQuery { actor: Some(e.actor.clone()), before: None }.href()>{e.actor.clone()}</a></td>
                                <td class="mono">{e.action.clone()}</td>
                                <td class="mono">{e.target.clone()}</td>
                                <td>{e.reason.clone().unwrap_or_default()}</td>
                                <td>{e.details.clone().unwrap_or_default()}</td>
                                <td class="mono">{e.source.clone().unwrap_or_default()}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
            {empty.then(|| view! { <p class="form-note">{td_string!(loc, admin.nothing_recorded)}</p> })}
            {older.map(|href| view! { <p><a class="button" rel="next" href=href>{td_string!(loc, inbox.older)}</a></p> })}
        </section>
    }
}

#[component]
pub fn UsersPage() -> impl IntoView {
    let users = Resource::new(|| (), |_| load_users());
    let loc = current();
    view! {
        <Title text=td_string!(loc, nav.users)/>
        <header class="page-header">
            <h1>{td_string!(loc, nav.users)}</h1>
            <p class="lede">
                {td_string!(loc, admin.users_lede_before)}<code>"oncehook user add|disable|reset-password"</code>
                {td_string!(loc, admin.users_lede_middle)}<a href="/admin/audit">{td_string!(loc, admin.audit_link)}</a>"."
            </p>
        </header>
        <Transition fallback=move || view! { <p class="loading">{td_string!(loc, admin.loading_users)}</p> }>
            {move || Suspend::new(async move {
                match users.await {
                    Ok(users) => Either::Left(view! { <UsersTable users/> }),
                    Err(error) => Either::Right(view! { <ErrorPanel error/> }),
                }
            })}
        </Transition>
    }
}

#[component]
fn UsersTable(users: Vec<UserView>) -> impl IntoView {
    let loc = current();
    view! {
        <section class="panel">
            <table class="data compact" id="users-table">
                <thead><tr>
                    <th>{td_string!(loc, admin.col_name)}</th><th>{td_string!(loc, admin.col_role)}</th>
                    <th>{td_string!(loc, admin.col_state)}</th><th>{td_string!(loc, admin.col_last_sign_in)}</th>
                    <th>{td_string!(loc, admin.col_created)}</th>
                </tr></thead>
                <tbody>
                    {users.into_iter().map(|u| {
                        let state = if u.disabled {
                            td_string!(loc, admin.disabled)
                        } else if u.must_change_password {
                            td_string!(loc, admin.must_change)
                        } else {
                            td_string!(loc, admin.active)
                        };
                        view! {
                            <tr>
                                <td><a href=AuditQuery { actor: Some(u.name.clone()), before: None }.href()>{u.name.clone()}</a></td>
                                <td>{role_word(loc, &u.role)}</td>
                                <td>{state}</td>
                                <td class="time">{match u.last_sign_in_at.clone() { Some(at) => Either::Left(view! { <Time at/> }), None => Either::Right(td_string!(loc, admin.never)) }}</td>
                                <td class="time"><Time at=u.created_at.clone()/></td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}

/// API tokens (`/admin/tokens`, admins): make one (shown once, on the next view of this
/// page: the same with and without JavaScript), see role, expiry and last use, revoke.
#[component]
pub fn TokensPage() -> impl IntoView {
    let create = ServerAction::<CreateApiToken>::new();
    let revoke = ServerAction::<RevokeApiToken>::new();
    // Reloads after each action when hydrated; without JavaScript the server redirects back.
    let page = Resource::new(
        move || (create.version().get(), revoke.version().get()),
        |_| load_api_tokens(),
    );
    let loc = current();
    view! {
        <Title text=td_string!(loc, nav.tokens)/>
        <header class="page-header">
            <h1>{td_string!(loc, nav.tokens)}</h1>
            <p class="lede">
                {td_string!(loc, admin.tokens_lede_before)}<a href="/api/v1/openapi.json">"/api/v1"</a>
                {td_string!(loc, admin.tokens_lede_after)}
                <code>"oncehook token add|list|revoke"</code>"."
            </p>
        </header>
        {move || create.value().get().and_then(|r| r.err()).map(|error| view! { <ErrorPanel error/> })}
        {move || revoke.value().get().and_then(|r| r.err()).map(|error| view! { <ErrorPanel error/> })}
        <Transition fallback=move || view! { <p class="loading">{td_string!(loc, admin.loading_tokens)}</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(page) => Either::Left(view! { <TokensBody page create revoke/> }),
                    Err(error) => Either::Right(view! { <ErrorPanel error/> }),
                }
            })}
        </Transition>
    }
}

#[component]
fn TokensBody(
    page: ApiTokensPage,
    create: ServerAction<CreateApiToken>,
    revoke: ServerAction<RevokeApiToken>,
) -> impl IntoView {
    let empty = page.tokens.is_empty();
    let loc = current();
    view! {
        {page.revealed.map(|t| view! {
            <section class="panel notice" id="revealed-token" role="status">
                <p>{td_string!(loc, admin.revealed, name = t.name.clone(), role = role_word(loc, &t.role), expires = short_timestamp_in(loc, &t.expires_at)).to_string()}</p>
                <p><code class="token" id="new-token">{t.token}</code></p>
            </section>
        })}
        <section class="panel">
            <table class="data compact" id="tokens-table">
                <thead><tr>
                    <th>{td_string!(loc, admin.col_name)}</th><th>{td_string!(loc, admin.col_prefix)}</th>
                    <th>{td_string!(loc, admin.col_role)}</th><th>{td_string!(loc, admin.col_state)}</th>
                    <th>{td_string!(loc, admin.col_expires)}</th><th>{td_string!(loc, admin.col_last_used)}</th>
                    <th>{td_string!(loc, admin.col_made_by)}</th><th></th>
                </tr></thead>
                <tbody>
                    {page.tokens.into_iter().map(|t| {
                        let live = t.state == "live";
                        let name = t.name.clone();
                        view! {
                            <tr data-state=t.state.clone()>
                                <td class="mono">{t.name.clone()}</td>
                                <td class="mono">{format!("{}…", t.prefix)}</td>
                                <td>{role_word(loc, &t.role)}</td>
                                <td>{token_state(loc, &t.state)}</td>
                                <td class="time"><Time at=t.expires_at.clone()/></td>
                                <td class="time">{match t.last_used_at.clone() { Some(at) => Either::Left(view! { <Time at/> }), None => Either::Right(td_string!(loc, admin.never)) }}</td>
                                <td>{t.created_by.clone()}</td>
                                <td>{live.then(|| view! {
                                    <ActionForm action=revoke attr:class="inline-form">
                                        <input type="hidden" name="name" value=name.clone()/>
                                        <button type="submit" class="button close">{td_string!(loc, admin.revoke)}</button>
                                    </ActionForm>
                                })}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
            {empty.then(|| view! { <p class="form-note">{td_string!(loc, admin.no_tokens)}</p> })}
        </section>
        <section class="panel">
            <h2>{td_string!(loc, admin.make_title)}</h2>
            <ActionForm action=create attr:class="filters" attr:id="new-token-form">
                <label>{td_string!(loc, admin.name)}<input type="text" name="name" required maxlength="64" placeholder="grafana"/></label>
                <label>{td_string!(loc, admin.role)}
                    <select name="role">
                        <option value="viewer">{td_string!(loc, admin.role_viewer)}</option>
                        <option value="operator">{td_string!(loc, admin.role_operator)}</option>
                        <option value="admin">{td_string!(loc, role.admin)}</option>
                    </select>
                </label>
                <label>{td_string!(loc, admin.expires_after)}<input type="number" name="expires_in_days" value="90" min="1" max="3650" size="5"/>{td_string!(loc, admin.days)}</label>
                <button type="submit" class="button primary">{td_string!(loc, admin.make)}</button>
            </ActionForm>
        </section>
    }
}

/// A role as stored (`viewer`, `operator`, `admin`) in the viewer's language.
fn role_word(loc: Locale, role: &str) -> String {
    match crate::backend::Role::parse(role) {
        Some(role) => crate::components::role_label(loc, role).to_string(),
        None => role.to_string(),
    }
}

fn token_state(loc: Locale, state: &str) -> String {
    match state {
        "live" => td_string!(loc, status.live).to_string(),
        "revoked" => td_string!(loc, status.revoked).to_string(),
        "expired" => td_string!(loc, status.expired).to_string(),
        other => other.to_string(),
    }
}
