//! Admin pages: the audit log (`/admin/audit`: every change of data and every sign-in, who,
//! what, why, from where, newest first, filterable by actor) and the users
//! (`/admin/users`). The server checks the role; a viewer or operator gets a 403 page and
//! the attempt is audited. API tokens (`/admin/tokens`) are made and revoked here too.

use crate::api::{load_api_tokens, load_audit_log, load_users, CreateApiToken, RevokeApiToken};
use crate::backend::{ApiTokensPage, AuditPage, AuditQuery, UserView};
use crate::components::{ErrorPanel, Time};
use crate::format::short_timestamp;
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
    view! {
        <Title text="Audit log"/>
        <header class="page-header">
            <h1>"Audit log"</h1>
            <p class="lede">"Every change of data and every sign-in: who, what, why, from where. Newest first."</p>
        </header>
        <form method="get" action="/admin/audit" class="filters" id="audit-filter">
            <label>"Actor "<input type="text" name="actor" value=move || query.get().actor.unwrap_or_default()/></label>
            <button type="submit" class="button">"Filter"</button>
        </form>
        <Transition fallback=|| view! { <p class="loading">"Loading the audit log…"</p> }>
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
    view! {
        <section class="panel">
            <div class="table-scroll">
                <table class="data compact" id="audit-table">
                    <thead><tr><th>"When"</th><th>"Who"</th><th>"What"</th><th>"Target"</th><th>"Why"</th><th>"Details"</th><th>"From"</th></tr></thead>
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
            {empty.then(|| view! { <p class="form-note">"Nothing recorded for this filter."</p> })}
            {older.map(|href| view! { <p><a class="button" rel="next" href=href>"Older →"</a></p> })}
        </section>
    }
}

#[component]
pub fn UsersPage() -> impl IntoView {
    let users = Resource::new(|| (), |_| load_users());
    view! {
        <Title text="Users"/>
        <header class="page-header">
            <h1>"Users"</h1>
            <p class="lede">
                "Add, disable or reset users with "<code>"oncehook user add|disable|reset-password"</code>
                "; every change is in the "<a href="/admin/audit">"audit log"</a>"."
            </p>
        </header>
        <Transition fallback=|| view! { <p class="loading">"Loading users…"</p> }>
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
    view! {
        <section class="panel">
            <table class="data compact" id="users-table">
                <thead><tr><th>"Name"</th><th>"Role"</th><th>"State"</th><th>"Last sign-in"</th><th>"Created"</th></tr></thead>
                <tbody>
                    {users.into_iter().map(|u| {
                        let state = if u.disabled {
                            "disabled"
                        } else if u.must_change_password {
                            "must change password"
                        } else {
                            "active"
                        };
                        view! {
                            <tr>
                                <td><a href=AuditQuery { actor: Some(u.name.clone()), before: None }.href()>{u.name.clone()}</a></td>
                                <td>{u.role.clone()}</td>
                                <td>{state}</td>
                                <td class="time">{match u.last_sign_in_at.clone() { Some(at) => Either::Left(view! { <Time at/> }), None => Either::Right("never") }}</td>
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
    view! {
        <Title text="API tokens"/>
        <header class="page-header">
            <h1>"API tokens"</h1>
            <p class="lede">
                "Bearer tokens for "<a href="/api/v1/openapi.json">"/api/v1"</a>
                ". A token is shown once, when it is made; only its hash is kept. Also "
                <code>"oncehook token add|list|revoke"</code>"."
            </p>
        </header>
        {move || create.value().get().and_then(|r| r.err()).map(|error| view! { <ErrorPanel error/> })}
        {move || revoke.value().get().and_then(|r| r.err()).map(|error| view! { <ErrorPanel error/> })}
        <Transition fallback=|| view! { <p class="loading">"Loading tokens…"</p> }>
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
    view! {
        {page.revealed.map(|t| view! {
            <section class="panel notice" id="revealed-token" role="status">
                <p>{format!("Token {} ({}, expires {}). Copy it now: it will not be shown again.", t.name, t.role, short_timestamp(&t.expires_at))}</p>
                <p><code class="token" id="new-token">{t.token}</code></p>
            </section>
        })}
        <section class="panel">
            <table class="data compact" id="tokens-table">
                <thead><tr><th>"Name"</th><th>"Starts with"</th><th>"Role"</th><th>"State"</th><th>"Expires"</th><th>"Last used"</th><th>"Made by"</th><th></th></tr></thead>
                <tbody>
                    {page.tokens.into_iter().map(|t| {
                        let live = t.state == "live";
                        let name = t.name.clone();
                        view! {
                            <tr data-state=t.state.clone()>
                                <td class="mono">{t.name.clone()}</td>
                                <td class="mono">{format!("{}…", t.prefix)}</td>
                                <td>{t.role.clone()}</td>
                                <td>{t.state.clone()}</td>
                                <td class="time"><Time at=t.expires_at.clone()/></td>
                                <td class="time">{match t.last_used_at.clone() { Some(at) => Either::Left(view! { <Time at/> }), None => Either::Right("never") }}</td>
                                <td>{t.created_by.clone()}</td>
                                <td>{live.then(|| view! {
                                    <ActionForm action=revoke attr:class="inline-form">
                                        <input type="hidden" name="name" value=name.clone()/>
                                        <button type="submit" class="button close">"Revoke"</button>
                                    </ActionForm>
                                })}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
            {empty.then(|| view! { <p class="form-note">"No tokens yet."</p> })}
        </section>
        <section class="panel">
            <h2>"Make a token"</h2>
            <ActionForm action=create attr:class="filters" attr:id="new-token-form">
                <label>"Name "<input type="text" name="name" required maxlength="64" placeholder="grafana"/></label>
                <label>"Role "
                    <select name="role">
                        <option value="viewer">"viewer (read)"</option>
                        <option value="operator">"operator (also redrive, resolve, discard)"</option>
                        <option value="admin">"admin"</option>
                    </select>
                </label>
                <label>"Expires after "<input type="number" name="expires_in_days" value="90" min="1" max="3650" size="5"/>" days"</label>
                <button type="submit" class="button primary">"Make token"</button>
            </ActionForm>
        </section>
    }
}
