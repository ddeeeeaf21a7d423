//! Settings (`/settings`, read-only, anyone signed in): the effective configuration with
//! every secret shown as `<redacted>` (the same redaction as `oncehook config check`), and
//! each provider's event mapping. Changing it means editing the config file and restarting.

use crate::api::load_settings;
use crate::backend::{MappingView, SettingsSection, SettingsView};
use crate::components::ErrorPanel;
use leptos::either::Either;
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn SettingsPage() -> impl IntoView {
    let settings = Resource::new(|| (), |_| load_settings());
    view! {
        <Title text="Settings"/>
        <header class="page-header">
            <h1>"Settings"</h1>
            <p class="lede">
                "What this instance runs with, read-only; secrets are never shown. Change the config file (or "
                <code>"ONCEHOOK_*"</code>" variables) and restart; "<code>"oncehook config check"</code>" validates first."
            </p>
        </header>
        <Transition fallback=|| view! { <p class="loading">"Loading settings…"</p> }>
            {move || Suspend::new(async move {
                match settings.await {
                    Ok(settings) => Either::Left(view! { <SettingsBody settings/> }),
                    Err(error) => Either::Right(view! { <ErrorPanel error/> }),
                }
            })}
        </Transition>
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
    view! {
        <nav class="panel settings-toc" aria-label="Sections">
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
    view! {
        <section class="panel settings-section" id=anchor(&section.title)>
            <h2>{section.title.clone()}</h2>
            {empty.then(|| view! { <p class="form-note">"(nothing set)"</p> })}
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
    view! {
        <section class="panel" id=anchor(&format!("mapping {}", mapping.provider))>
            <h2>{format!("Mapping: {}", mapping.provider)}</h2>
            <p class="form-note">
                {match mapping.min_api_version {
                    Some(v) => format!("Event types acted on (others are kept and filed as ignored). Oldest API version understood: {v}."),
                    None => "Event types acted on (others are kept and filed as ignored).".to_string(),
                }}
            </p>
            <div class="table-scroll">
                <table class="data compact">
                    <thead><tr><th>"Event type"</th><th>"Transition"</th><th>"Order id from"</th><th>"Reference from"</th><th>"Amount from"</th></tr></thead>
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
