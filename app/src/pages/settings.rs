//! Settings (`/settings`, read-only, anyone signed in): the effective configuration with
//! every secret shown as `<redacted>` (the same redaction as `oncehook config check`), and
//! each provider's event mapping. Changing it means editing the config file and restarting.

use crate::api::{load_settings, my_language};
use crate::backend::{MappingView, SettingsSection, SettingsView};
use crate::components::ErrorPanel;
use crate::i18n::*;
use crate::locale::{all, current, tag};
use leptos::either::Either;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
pub fn SettingsPage() -> impl IntoView {
    let settings = Resource::new(|| (), |_| load_settings());
    let loc = current();
    view! {
        <Title text=td_string!(loc, nav.settings)/>
        <header class="page-header">
            <h1>{td_string!(loc, nav.settings)}</h1>
            <p class="lede">
                {td_string!(loc, settings.lede_before)}
                <code>"ONCEHOOK_*"</code>{td_string!(loc, settings.lede_middle)}<code>"oncehook config check"</code>{td_string!(loc, settings.lede_after)}
            </p>
        </header>
        <LanguagePanel/>
        <Transition fallback=move || view! { <p class="loading">{td_string!(loc, settings.loading)}</p> }>
            {move || Suspend::new(async move {
                match settings.await {
                    Ok(settings) => Either::Left(view! { <SettingsBody settings/> }),
                    Err(error) => Either::Right(view! { <ErrorPanel error/> }),
                }
            })}
        </Transition>
    }
}

/// The signed-in person's language: a plain form (works without JavaScript) posting to
/// `/auth/language`, which comes back here already in the chosen language.
#[component]
fn LanguagePanel() -> impl IntoView {
    let loc = current();
    let mine = Resource::new(|| (), |_| my_language());
    let query = use_query_map();
    let outcome = move || query.with(|q| q.get("language"));
    view! {
        <section class="panel" id="language">
            <h2>{td_string!(loc, settings.language_title)}</h2>
            {move || outcome().map(|code| {
                let (class, text) = match code.as_str() {
                    "saved" => ("form-note saved", td_string!(loc, settings.language_saved)),
                    _ => ("form-error", td_string!(loc, settings.language_failed)),
                };
                view! { <p class=class role="status" id="language-outcome">{text}</p> }
            })}
            <Suspense fallback=|| ()>
                {move || Suspend::new(async move {
                    let mine = mine.await.ok().flatten().unwrap_or_default();
                    view! {
                        <form method="post" action="/auth/language" class="inline-form" id="language-form">
                            <label>
                                {td_string!(loc, settings.language_label)}" "
                                <select name="locale" id="language-select">
                                    <option value="" selected=mine.is_empty()>{td_string!(loc, language.automatic)}</option>
                                    {all().iter().map(|l| {
                                        let value = tag(*l);
                                        view! {
                                            <option value=value selected=mine == value>{td_string!(*l, language.name)}</option>
                                        }
                                    }).collect_view()}
                                </select>
                            </label>
                            " "
                            <button type="submit" class="button" id="language-save">{td_string!(loc, settings.language_save)}</button>
                        </form>
                        <p class="form-note">{td_string!(loc, settings.language_note)}</p>
                    }
                })}
            </Suspense>
        </section>
    }
}

#[component]
fn SettingsBody(settings: SettingsView) -> impl IntoView {
    let toc: Vec<(String, String)> = settings
        .sections
        .iter()
        .map(|s| (anchor(&s.title), s.title.clone()))
        .chain(settings.mappings.iter().map(|m| {
            (
                anchor(&format!("mapping {}", m.provider)),
                format!("mapping: {}", m.provider),
            )
        }))
        .collect();
    let loc = current();
    view! {
        <nav class="panel settings-toc" aria-label=td_string!(loc, settings.sections)>
            {toc.into_iter().map(|(id, title)| view! { <a href=format!("#{id}")>{title}</a> }).collect_view()}
        </nav>
        <div class="settings-grid">
            {settings.sections.into_iter().map(|section| view! { <Section section/> }).collect_view()}
        </div>
        {settings.mappings.into_iter().map(|mapping| view! { <Mapping mapping/> }).collect_view()}
    }
}

/// An id for a section title (`providers: stripe` → `providers-stripe`).
fn anchor(title: &str) -> String {
    title
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect::<String>()
        .split('-')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

#[component]
fn Section(section: SettingsSection) -> impl IntoView {
    let empty = section.entries.is_empty();
    let loc = current();
    view! {
        <section class="panel settings-section" id=anchor(&section.title)>
            <h2>{section.title.clone()}</h2>
            {empty.then(|| view! { <p class="form-note">{td_string!(loc, settings.nothing_set)}</p> })}
            <table class="data compact kv">
                <tbody>
                    {section.entries.into_iter().map(|(key, value)| {
                        let hidden = value.contains("<redacted>");
                        view! {
                            <tr>
                                <th scope="row" class="mono">{key}</th>
                                <td class="mono" class:redacted=hidden>{value}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}

#[component]
fn Mapping(mapping: MappingView) -> impl IntoView {
    let loc = current();
    view! {
        <section class="panel" id=anchor(&format!("mapping {}", mapping.provider))>
            <h2>{td_string!(loc, settings.mapping_title, provider = mapping.provider.clone()).to_string()}</h2>
            <p class="form-note">
                {match mapping.min_api_version {
                    Some(v) => td_string!(loc, settings.mapping_note_version, version = v).to_string(),
                    None => td_string!(loc, settings.mapping_note).to_string(),
                }}
            </p>
            <div class="table-scroll">
                <table class="data compact">
                    <thead><tr>
                        <th>{td_string!(loc, settings.col_event_type)}</th>
                        <th>{td_string!(loc, settings.col_transition)}</th>
                        <th>{td_string!(loc, settings.col_order_from)}</th>
                        <th>{td_string!(loc, settings.col_reference_from)}</th>
                        <th>{td_string!(loc, settings.col_amount_from)}</th>
                    </tr></thead>
                    <tbody>
                        {mapping.rules.into_iter().map(|r| view! {
                            <tr>
                                <td class="mono">{r.event_type}</td>
                                <td class="mono">{r.transition}</td>
                                <td class="mono">{r.order_id}</td>
                                <td class="mono">{r.external_ref}</td>
                                <td class="mono">{r.amount}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
        </section>
    }
}
