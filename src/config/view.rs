//! The Settings page's data: the effective configuration through the same redaction as
//! `oncehook config check` (so a secret hidden there is hidden here), and each provider's
//! mapping, built once at start.

use app::backend::{MappingRuleView, MappingView, SettingsSection, SettingsView};
use serde_json::Value;

use crate::config::{redact_url_path, Providers, Settings, SinkKind};
use crate::provider::mapping::TransitionRule;

/// Top-level tables in the order people look for them; anything else follows.
const SECTION_ORDER: [&str; 11] = [
    "providers",
    "sinks",
    "outbox",
    "receiver",
    "processor",
    "dead_letters",
    "alerts",
    "retention",
    "dashboard",
    "server",
    "log",
];

pub fn settings_view(settings: &Settings, providers: &Providers) -> anyhow::Result<SettingsView> {
    let redacted = serde_json::to_value(shown_settings(settings))?;
    let Value::Object(top) = redacted else {
        anyhow::bail!("settings are not a table");
    };
    let mut general = vec![];
    let mut tables: Vec<(String, Value)> = vec![];
    for (key, value) in top {
        match value {
            Value::Object(_) | Value::Array(_) => tables.push((key, value)),
            scalar => general.push((key, text(&scalar))),
        }
    }
    let rank = |key: &str| {
        SECTION_ORDER
            .iter()
            .position(|k| *k == key)
            .unwrap_or(SECTION_ORDER.len())
    };
    tables.sort_by_key(|(key, _)| rank(key));
    let mut sections = vec![SettingsSection {
        title: "general".into(),
        entries: general,
    }];
    for (key, value) in tables {
        match value {
            // A list of tables (providers): one section per item, named by its `name`.
            Value::Array(items) if items.iter().all(Value::is_object) && !items.is_empty() => {
                for item in items {
                    let name = item["name"].as_str().unwrap_or("?").to_string();
                    let mut entries = vec![];
                    flatten("", &item, &mut entries);
                    sections.push(SettingsSection {
                        title: format!("{key}: {name}"),
                        entries,
                    });
                }
            }
            Value::Object(map) if key == "sinks" => {
                for (name, sink) in map {
                    let mut entries = vec![];
                    flatten("", &sink, &mut entries);
                    sections.push(SettingsSection {
                        title: format!("sinks: {name}"),
                        entries,
                    });
                }
            }
            other => {
                let mut entries = vec![];
                flatten("", &other, &mut entries);
                sections.push(SettingsSection {
                    title: key,
                    entries,
                });
            }
        }
    }
    // Per-event rules are shown as the mapping below, not as nested keys.
    for section in &mut sections {
        if section.title.starts_with("providers: ") {
            section.entries.retain(|(k, _)| !k.starts_with("events."));
        }
    }
    let mappings = providers
        .names()
        .into_iter()
        .filter_map(|name| providers.get(&name).map(|p| (name, p)))
        .map(|(name, provider)| MappingView {
            provider: name,
            min_api_version: provider.mapping.min_api_version.clone(),
            rules: provider
                .mapping
                .events
                .iter()
                .map(|(event_type, rule)| MappingRuleView {
                    event_type: event_type.clone(),
                    transition: transition_text(&rule.transition),
                    order_id: pointers(&rule.order_id),
                    external_ref: pointers(&rule.external_ref),
                    amount: pointers(&rule.amount),
                })
                .collect(),
        })
        .collect();
    Ok(SettingsView { sections, mappings })
}

/// The settings as the page shows them: redacted as `config check` prints them, and sink
/// URLs cut to scheme and host, since for many receivers (Slack's incoming webhooks, for
/// one) the path is the secret. Everyone signed in reads this page; the operator who
/// needs the whole URL has the config file.
fn shown_settings(settings: &Settings) -> Settings {
    let mut shown = settings.redacted();
    for sink in shown.sinks.values_mut() {
        if let SinkKind::Http { url, .. } = &mut sink.kind {
            *url = redact_url_path(url);
        }
    }
    shown
}

fn pointers(list: &[String]) -> String {
    list.join(" | ")
}

fn transition_text(rule: &TransitionRule) -> String {
    let name = |t: &crate::domain::Transition| text(&serde_json::to_value(t).unwrap_or_default());
    match rule {
        TransitionRule::Fixed(t) => name(t),
        TransitionRule::ByField(by) => {
            let mut parts: Vec<String> = by
                .map
                .iter()
                .map(|(value, t)| format!("{value} → {}", name(t)))
                .collect();
            if let Some(default) = &by.default {
                parts.push(format!("absent → {}", name(default)));
            }
            format!("by {}: {}", pointers(&by.at), parts.join(", "))
        }
    }
}

/// A value as one line: strings bare, lists comma-separated, the rest as JSON.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "(none)".into(),
        Value::Array(items) if items.is_empty() => "(none)".into(),
        Value::Array(items) if items.iter().all(|v| !v.is_object()) => {
            items.iter().map(text).collect::<Vec<_>>().join(", ")
        }
        other => other.to_string(),
    }
}

/// Nested tables become dotted keys (`retry.base_ms`).
fn flatten(prefix: &str, value: &Value, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                let key = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten(&key, value, out);
            }
        }
        Value::Array(items) if items.iter().any(Value::is_object) => {
            for (i, item) in items.iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), item, out);
            }
        }
        scalar => out.push((prefix.to_string(), text(scalar))),
    }
}
