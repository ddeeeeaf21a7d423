//! Provider mappings: configuration data that turns a provider's event JSON into a domain
//! transition. Every field is a list of JSON pointers tried in order (first present wins),
//! so one mapping can follow a provider across API versions.

pub use crate::domain::event::MappedEvent;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::Transition;

mod builtin;
pub use builtin::*;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mapping {
    /// Where the event id is; empty for schemes that carry it in a header (`webhook-id`).
    #[serde(default)]
    pub event_id: Vec<String>,
    pub event_type: Vec<String>,
    #[serde(default)]
    pub api_version: Vec<String>,
    /// Oldest API version understood (compared on its leading `YYYY-MM-DD`); events older
    /// than this, or without a version when one is required, are filed as unsupported.
    #[serde(default)]
    pub min_api_version: Option<String>,
    #[serde(default)]
    pub events: BTreeMap<String, EventRule>,
}

/// The transition an event type announces: fixed (`transition = "pay"`), or read from a
/// field of the event (`transition = { at = ["/data/object/status"], map = { succeeded =
/// "refund", failed = "refund_failed" } }`), as for `refund.updated`, whose status says
/// what happened. A value the map does not name (and no `default`) files the event as
/// ignored: it is kept, not acted on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TransitionRule {
    Fixed(Transition),
    ByField(TransitionByField),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransitionByField {
    pub at: Vec<String>,
    pub map: BTreeMap<String, Transition>,
    /// Used when the field is absent.
    #[serde(default)]
    pub default: Option<Transition>,
}

impl From<Transition> for TransitionRule {
    fn from(t: Transition) -> Self {
        TransitionRule::Fixed(t)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventRule {
    pub transition: TransitionRule,
    /// The merchant's order id; when absent the order is found through `lookup_ref`.
    #[serde(default)]
    pub order_id: Vec<String>,
    /// The reference that names this business change (payment intent, refund id…).
    pub external_ref: Vec<String>,
    /// The payment a refund or dispute belongs to (refunds of one payment share a running
    /// total: `charge.amount_refunded`).
    #[serde(default)]
    pub parent_ref: Vec<String>,
    /// References under which earlier events may have named the order (defaults to
    /// `external_ref`): a refund finds its order through its payment intent.
    #[serde(default)]
    pub lookup_ref: Vec<String>,
    #[serde(default)]
    pub amount: Vec<String>,
    #[serde(default)]
    pub currency: Vec<String>,
    /// Unix seconds (number) or RFC 3339 (string).
    pub occurred_at: Vec<String>,
    #[serde(default)]
    pub sequence: Vec<String>,
    /// When `external_ref` is missing, file the event as ignored rather than failed
    /// (e.g. `charge.refunded` in Stripe API versions that no longer embed the refund).
    #[serde(default)]
    pub ignore_without_ref: bool,
    /// `major`: the amount is written in major units with up to two decimals (Asaas
    /// `value: 100.5` is 10050 minor units), converted exactly, never through rounding.
    #[serde(default, skip_serializing_if = "AmountUnit::is_minor")]
    pub amount_unit: AmountUnit,
    /// The currency when the event names none (Asaas charges in BRL only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency_default: Option<String>,
    /// The UTC offset of `occurred_at` values written without one (`2026-12-06 10:00:00`
    /// in Asaas is Brasília time, `-03:00`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_offset: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AmountUnit {
    #[default]
    Minor,
    Major,
}

impl AmountUnit {
    fn is_minor(&self) -> bool {
        *self == AmountUnit::Minor
    }
}

/// The parts of an event the receiver stores before any processing; lenient by design.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Envelope {
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub api_version: Option<String>,
}

/// Why an event could not become a transition. Every variant is kept and filed, never lost.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MappingError {
    #[error("body is not JSON: {0}")]
    NotJson(String),
    #[error("event has no type at {0}")]
    NoType(String),
    #[error("unknown event type {0:?}")]
    UnknownType(String),
    /// A known type whose content says there is nothing to act on (e.g. a checkout
    /// session completed but not paid yet).
    #[error("{0}")]
    NotActedOn(String),
    #[error(
        "unsupported API version {} (this mapping understands {min} and later)",
        found.as_deref().map_or("(none)".to_string(), |v| format!("{v:?}"))
    )]
    UnsupportedVersion { found: Option<String>, min: String },
    #[error("{field}: no value at any of {pointers}")]
    Missing {
        field: &'static str,
        pointers: String,
    },
    #[error("{field}: value at {pointer} is not {expected}")]
    Invalid {
        field: &'static str,
        pointer: String,
        expected: &'static str,
    },
}

impl MappingError {
    /// Unknown types are not failures: the provider sends many events we don't act on.
    pub fn is_ignorable(&self) -> bool {
        matches!(
            self,
            MappingError::UnknownType(_) | MappingError::NotActedOn(_)
        )
    }
}

fn first<'a>(doc: &'a Value, pointers: &'a [String]) -> Option<(&'a String, &'a Value)> {
    pointers
        .iter()
        .find_map(|p| doc.pointer(p).filter(|v| !v.is_null()).map(|v| (p, v)))
}

/// The key a JSON pointer names when it is one plain top-level key (`/id`): no escapes, and
/// not a number (which would index a top-level array).
fn top_level_key(pointer: &str) -> Option<&str> {
    let key = pointer.strip_prefix('/')?;
    let plain = !key.contains(['/', '~']) && key.parse::<usize>().is_err();
    plain.then_some(key)
}

/// The receiver's envelope without a `Value` of the whole body.
mod envelope {
    use std::borrow::Cow;
    use std::fmt;

    use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use serde::Deserialize;

    /// A top-level value as far as the envelope cares.
    #[derive(Debug)]
    pub(super) enum Scalar<'a> {
        Str(Cow<'a, str>),
        Num(serde_json::Number),
        Null,
        /// An object, array or boolean: present, but not text.
        Other,
    }

    impl Scalar<'_> {
        /// As `mapping::text` reads a value.
        pub(super) fn text(&self) -> Option<String> {
            match self {
                Scalar::Str(s) if !s.is_empty() && !s.contains('\0') => Some(s.to_string()),
                Scalar::Num(n) => Some(n.to_string()),
                _ => None,
            }
        }
    }

    impl<'de> Deserialize<'de> for Scalar<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Scalar<'de>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a JSON value")
                }
                fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                    Ok(Scalar::Str(Cow::Borrowed(v)))
                }
                fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                    Ok(Scalar::Str(Cow::Owned(v.to_string())))
                }
                fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                    Ok(Scalar::Str(Cow::Owned(v)))
                }
                fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
                    Ok(Scalar::Num(v.into()))
                }
                fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                    Ok(Scalar::Num(v.into()))
                }
                fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                    serde_json::Number::from_f64(v)
                        .map(Scalar::Num)
                        .ok_or_else(|| E::custom("not a JSON number"))
                }
                fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                    Ok(Scalar::Other)
                }
                fn visit_unit<E>(self) -> Result<Self::Value, E> {
                    Ok(Scalar::Null)
                }
                fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                    while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    Ok(Scalar::Other)
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
                    while s.next_element::<IgnoredAny>()?.is_some() {}
                    Ok(Scalar::Other)
                }
            }
            d.deserialize_any(V)
        }
    }

    /// The top-level members of a JSON document, each value read as a `Scalar` (strings
    /// borrowed, objects skipped); a document that is not an object has none.
    pub(super) struct TopLevel<'a>(Vec<(Cow<'a, str>, Scalar<'a>)>);

    impl<'a> TopLevel<'a> {
        /// Only the members named in `keys`.
        pub(super) fn keep(mut self, keys: &[&str]) -> Self {
            self.0.retain(|(k, _)| keys.contains(&k.as_ref()));
            self
        }

        /// A member that is present and not null (the last one, as `serde_json` keeps it).
        pub(super) fn get(&self, key: &str) -> Option<&Scalar<'a>> {
            self.0
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v)
                .filter(|v| !matches!(v, Scalar::Null))
        }
    }

    impl<'de> Deserialize<'de> for TopLevel<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = TopLevel<'de>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a JSON document")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                    let mut out = Vec::new();
                    while let Some(key) = m.next_key::<Cow<'de, str>>()? {
                        out.push((key, m.next_value::<Scalar<'de>>()?));
                    }
                    Ok(TopLevel(out))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
                    while s.next_element::<IgnoredAny>()?.is_some() {}
                    Ok(TopLevel(Vec::new()))
                }
                fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                    Ok(TopLevel(Vec::new()))
                }
                fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                    Ok(TopLevel(Vec::new()))
                }
                fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                    Ok(TopLevel(Vec::new()))
                }
                fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                    Ok(TopLevel(Vec::new()))
                }
                fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                    Ok(TopLevel(Vec::new()))
                }
                fn visit_unit<E>(self) -> Result<Self::Value, E> {
                    Ok(TopLevel(Vec::new()))
                }
            }
            d.deserialize_any(V)
        }
    }
}

/// A NUL character makes a value unusable as an identifier: PostgreSQL text cannot hold
/// it (the commit would fail), so such a value reads as absent on both databases.
fn text(doc: &Value, pointers: &[String]) -> Option<String> {
    first(doc, pointers).and_then(|(_, v)| match v {
        Value::String(s) if !s.is_empty() && !s.contains('\0') => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
}

fn required_text(
    doc: &Value,
    pointers: &[String],
    field: &'static str,
) -> Result<String, MappingError> {
    text(doc, pointers).ok_or_else(|| MappingError::Missing {
        field,
        pointers: pointers.join(", "),
    })
}

fn integer(
    doc: &Value,
    pointers: &[String],
    field: &'static str,
) -> Result<Option<i64>, MappingError> {
    match first(doc, pointers) {
        None => Ok(None),
        Some((p, v)) => v.as_i64().map(Some).ok_or_else(|| MappingError::Invalid {
            field,
            pointer: p.clone(),
            expected: "an integer",
        }),
    }
}

/// Largest amount accepted, in minor units: far above any real payment, far below where
/// sums of amounts could overflow.
pub const MAX_AMOUNT: i64 = 1_000_000_000_000_000;

/// Minor units from a major-unit amount with at most two decimals (`100.5`, `"5.00"`),
/// read from its decimal text so no float rounding is involved.
fn major_to_minor(text: &str) -> Option<i64> {
    let (sign, digits) = match text.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let fraction = fraction.trim_end_matches('0');
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || fraction.len() > 2
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let cents: i64 = format!("{fraction:0<2}").parse().ok()?;
    whole
        .parse::<i64>()
        .ok()?
        .checked_mul(100)?
        .checked_add(cents)
        .map(|v| sign * v)
}

fn amount_in(
    doc: &Value,
    pointers: &[String],
    unit: AmountUnit,
) -> Result<Option<i64>, MappingError> {
    if unit == AmountUnit::Minor {
        return amount(doc, pointers);
    }
    let Some((p, v)) = first(doc, pointers) else {
        return Ok(None);
    };
    let text = match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        _ => String::new(),
    };
    match major_to_minor(&text) {
        Some(a) if a.abs() <= MAX_AMOUNT => Ok(Some(a)),
        _ => Err(MappingError::Invalid {
            field: "amount",
            pointer: p.clone(),
            expected: "an amount in major units with at most two decimals",
        }),
    }
}

fn amount(doc: &Value, pointers: &[String]) -> Result<Option<i64>, MappingError> {
    match integer(doc, pointers, "amount")? {
        Some(a) if a.abs() > MAX_AMOUNT => Err(MappingError::Invalid {
            field: "amount",
            pointer: first(doc, pointers)
                .map(|(p, _)| p.clone())
                .unwrap_or_default(),
            expected: "an amount within ±10^15 minor units",
        }),
        other => Ok(other),
    }
}

fn timestamp_ms_at(
    doc: &Value,
    pointers: &[String],
    local_offset: Option<&str>,
) -> Result<i64, MappingError> {
    if let (Some(offset), Some((_, Value::String(s)))) = (local_offset, first(doc, pointers)) {
        let naive = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S");
        let offset = chrono::DateTime::parse_from_rfc3339(&format!("2000-01-01T00:00:00{offset}"));
        if let (Ok(naive), Ok(offset)) = (naive, offset) {
            if let Some(t) = naive.and_local_timezone(*offset.offset()).single() {
                return Ok(t.timestamp_millis());
            }
        }
    }
    timestamp_ms(doc, pointers)
}

fn timestamp_ms(doc: &Value, pointers: &[String]) -> Result<i64, MappingError> {
    let (p, v) = first(doc, pointers).ok_or_else(|| MappingError::Missing {
        field: "occurred_at",
        pointers: pointers.join(", "),
    })?;
    let invalid = || MappingError::Invalid {
        field: "occurred_at",
        pointer: p.clone(),
        expected: "Unix seconds or an RFC 3339 time",
    };
    match v {
        Value::Number(n) => n
            .as_i64()
            .and_then(|s| s.checked_mul(1000))
            .ok_or_else(invalid),
        Value::String(s) => chrono::DateTime::parse_from_rfc3339(s)
            .map(|t| t.timestamp_millis())
            .map_err(|_| invalid()),
        _ => Err(invalid()),
    }
}

impl Mapping {
    /// Reads id, type and API version without judging them; `header_event_id` wins for
    /// schemes that sign the id in a header.
    pub fn envelope(&self, doc: Option<&Value>, header_event_id: Option<&str>) -> Envelope {
        Envelope {
            event_id: header_event_id
                .map(str::to_owned)
                .or_else(|| doc.and_then(|d| text(d, &self.event_id))),
            event_type: doc.and_then(|d| text(d, &self.event_type)),
            api_version: doc.and_then(|d| text(d, &self.api_version)),
        }
    }

    /// The envelope read straight from the raw body: when every envelope pointer names a
    /// top-level key (Stripe's `/id`, `/type`, `/api_version`; Standard Webhooks' `/type`),
    /// only those keys' values are kept, borrowed from the body, and everything else is
    /// skipped without building a `serde_json::Value` of the whole event (the receiver's
    /// hot path). Any other pointer reads the whole document, as `envelope` does. Either way
    /// the result is exactly `envelope(serde_json::from_slice(body).ok(), header_event_id)`.
    pub fn read_envelope(&self, body: &[u8], header_event_id: Option<&str>) -> Envelope {
        let pointers = [&self.event_id, &self.event_type, &self.api_version];
        let keys: Option<Vec<&str>> = pointers
            .iter()
            .flat_map(|p| p.iter())
            .map(|p| top_level_key(p))
            .collect();
        let Some(keys) = keys else {
            let doc: Option<Value> = serde_json::from_slice(body).ok();
            return self.envelope(doc.as_ref(), header_event_id);
        };
        let top = match serde_json::from_slice::<envelope::TopLevel>(body) {
            Ok(top) => Some(top.keep(&keys)),
            Err(_) => None,
        };
        let text = |pointers: &[String]| -> Option<String> {
            let top = top.as_ref()?;
            pointers
                .iter()
                .filter_map(|p| top_level_key(p))
                .find_map(|k| top.get(k))
                .and_then(envelope::Scalar::text)
        };
        Envelope {
            event_id: header_event_id
                .map(str::to_owned)
                .or_else(|| text(&self.event_id)),
            event_type: text(&self.event_type),
            api_version: text(&self.api_version),
        }
    }

    pub fn map(&self, body: &[u8]) -> Result<MappedEvent, MappingError> {
        let doc: Value =
            serde_json::from_slice(body).map_err(|e| MappingError::NotJson(e.to_string()))?;
        let event_type = text(&doc, &self.event_type)
            .ok_or_else(|| MappingError::NoType(self.event_type.join(", ")))?;
        if let Some(min) = &self.min_api_version {
            let found = text(&doc, &self.api_version);
            let understood = found
                .as_deref()
                .is_some_and(|v| v.get(..10).unwrap_or(v) >= min.as_str());
            if !understood {
                return Err(MappingError::UnsupportedVersion {
                    found,
                    min: min.clone(),
                });
            }
        }
        let rule = self
            .events
            .get(&event_type)
            .ok_or_else(|| MappingError::UnknownType(event_type.clone()))?;
        let transition = match &rule.transition {
            TransitionRule::Fixed(t) => *t,
            TransitionRule::ByField(by) => match text(&doc, &by.at) {
                Some(value) => *by.map.get(&value).ok_or_else(|| {
                    MappingError::NotActedOn(format!(
                        "{event_type} with {} = {value:?} is not acted on",
                        by.at.join(" | ")
                    ))
                })?,
                None => by.default.ok_or_else(|| MappingError::Missing {
                    field: "transition",
                    pointers: by.at.join(", "),
                })?,
            },
        };
        let external_ref = match text(&doc, &rule.external_ref) {
            Some(r) => r,
            None if rule.ignore_without_ref => {
                return Err(MappingError::NotActedOn(format!(
                    "{event_type} without {}",
                    rule.external_ref.join(", ")
                )))
            }
            None => required_text(&doc, &rule.external_ref, "external_ref")?,
        };
        let lookup = if rule.lookup_ref.is_empty() {
            &rule.external_ref
        } else {
            &rule.lookup_ref
        };
        let mut lookup_refs: Vec<String> = lookup
            .iter()
            .filter_map(|p| text(&doc, std::slice::from_ref(p)))
            .collect();
        if !lookup_refs.contains(&external_ref) {
            lookup_refs.push(external_ref.clone());
        }
        Ok(MappedEvent {
            transition,
            order_id: text(&doc, &rule.order_id),
            parent_ref: text(&doc, &rule.parent_ref),
            external_ref,
            lookup_refs,
            amount: amount_in(&doc, &rule.amount, rule.amount_unit)?,
            currency: text(&doc, &rule.currency)
                .or_else(|| rule.currency_default.clone())
                .map(|c| c.to_ascii_uppercase()),
            occurred_at_ms: timestamp_ms_at(&doc, &rule.occurred_at, rule.local_offset.as_deref())?,
            sequence: integer(&doc, &rule.sequence, "sequence")?,
            event_type,
        })
    }

    /// Layers per-type overrides from the config on top of a built-in mapping.
    pub fn with_overrides(mut self, overrides: &BTreeMap<String, EventRule>) -> Self {
        for (k, v) in overrides {
            self.events.insert(k.clone(), v.clone());
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pi_succeeded(api_version: &str) -> Value {
        json!({
            "id": "evt_1", "object": "event", "api_version": api_version, "created": 1700000000,
            "type": "payment_intent.succeeded",
            "data": {"object": {"id": "pi_1", "object": "payment_intent", "amount": 4200,
                "amount_received": 4200, "currency": "eur", "metadata": {"order_id": "o-1"}}}
        })
    }

    fn map(doc: &Value) -> Result<MappedEvent, MappingError> {
        stripe_default().map(doc.to_string().as_bytes())
    }

    /// The receiver's borrowed read gives exactly what a `Value` of the whole body gives,
    /// for bodies a provider or an attacker may send.
    #[test]
    fn the_borrowed_envelope_equals_the_value_envelope() {
        let mut nested = stripe_default();
        nested.event_id = vec!["/data/object/id".into(), "/id".into()];
        let mut numeric = stripe_default();
        numeric.event_type = vec!["/0".into()];
        let mappings = [
            stripe_default(),
            standard_webhooks_default(),
            nested,
            numeric,
        ];
        let bodies: Vec<Vec<u8>> = [
            pi_succeeded("2024-06-20").to_string(),
            serde_json::to_string_pretty(&pi_succeeded("2025-03-31.basil")).unwrap(),
            r#"{"id":"evt_\u00e9\n","type":"a\"b","api_version":null}"#.into(),
            r#"{"id":12345678901234567890,"type":1.5e3,"api_version":-3}"#.into(),
            r#"{"id":"","type":{"nested":true},"api_version":[1,2]}"#.into(),
            r#"{"id":"evt\u0000x","type":"t","type":"last wins"}"#.into(),
            r#"{"id":true,"type":false,"data":{"id":"inner"}}"#.into(),
            r#"["evt_1","payment_intent.succeeded"]"#.into(),
            r#""just a string""#.into(),
            "null".into(),
            "42".into(),
            r#"{"id":"evt_1"} trailing"#.into(),
            r#"{"id":"evt_1","#.into(),
            "not json at all".into(),
            "".into(),
        ]
        .into_iter()
        .map(String::into_bytes)
        .chain([
            vec![0xff, 0xfe, b'{'],
            [&br#"{"id":""#[..], &[0xff], br#""}"#].concat(),
        ])
        .collect();
        for mapping in &mappings {
            for body in &bodies {
                for header in [None, Some("msg_1")] {
                    let doc: Option<Value> = serde_json::from_slice(body).ok();
                    assert_eq!(
                        mapping.read_envelope(body, header),
                        mapping.envelope(doc.as_ref(), header),
                        "{}",
                        String::from_utf8_lossy(body)
                    );
                }
            }
        }
    }

    #[test]
    fn top_level_keys_are_plain_names_only() {
        assert_eq!(top_level_key("/id"), Some("id"));
        assert_eq!(top_level_key("/data/object/id"), None);
        assert_eq!(top_level_key("/a~1b"), None);
        assert_eq!(top_level_key("/0"), None);
        assert_eq!(top_level_key("id"), None);
    }

    #[test]
    fn maps_payment_intent_succeeded() {
        let m = map(&pi_succeeded("2024-06-20")).unwrap();
        assert_eq!(m.transition, Transition::Pay);
        assert_eq!(m.order_id.as_deref(), Some("o-1"));
        assert_eq!(m.external_ref, "pi_1");
        assert_eq!(m.amount, Some(4200));
        assert_eq!(m.currency.as_deref(), Some("EUR"));
        assert_eq!(m.occurred_at_ms, 1_700_000_000_000);
    }

    #[test]
    fn invoice_finds_the_payment_intent_in_old_and_new_api_versions() {
        let old = json!({"id": "evt_2", "api_version": "2020-08-27", "created": 1, "type": "invoice.payment_succeeded",
            "data": {"object": {"id": "in_1", "payment_intent": "pi_1", "amount_paid": 4200, "currency": "eur"}}});
        let new = json!({"id": "evt_3", "api_version": "2025-03-31.basil", "created": 1, "type": "invoice.paid",
            "data": {"object": {"id": "in_1", "amount_paid": 4200, "currency": "eur",
                "payments": {"object": "list", "data": [{"payment": {"type": "payment_intent", "payment_intent": "pi_1"}}]}}}});
        assert_eq!(map(&old).unwrap().external_ref, "pi_1");
        let m = map(&new).unwrap();
        assert_eq!(m.external_ref, "pi_1");
        assert_eq!(m.order_id, None);
        assert_eq!(m.lookup_refs, vec!["pi_1".to_string()]);
    }

    #[test]
    fn charge_refunded_is_a_running_total_of_its_payment_in_every_version() {
        let old = json!({"id": "evt_4", "api_version": "2022-08-01", "created": 5, "type": "charge.refunded",
            "data": {"object": {"id": "ch_1", "payment_intent": "pi_1", "amount_refunded": 4200, "currency": "eur",
                "refunds": {"data": [{"id": "re_1", "amount": 4200}]}}}});
        let new = json!({"id": "evt_5", "api_version": "2024-06-20", "created": 5, "type": "charge.refunded",
            "data": {"object": {"id": "ch_1", "payment_intent": "pi_1", "amount_refunded": 1500, "currency": "eur"}}});
        for (doc, total) in [(old, 4200), (new, 1500)] {
            let m = map(&doc).unwrap();
            assert_eq!(
                (m.transition, m.external_ref.as_str(), m.amount),
                (Transition::RefundTotal, "pi_1", Some(total))
            );
            assert_eq!(m.lookup_refs, vec!["pi_1", "ch_1"]);
        }
        // A charge without a payment intent is its own group.
        let bare = json!({"id": "evt_6", "api_version": "2024-06-20", "created": 5, "type": "charge.refunded",
            "data": {"object": {"id": "ch_9", "amount_refunded": 100, "currency": "eur"}}});
        assert_eq!(map(&bare).unwrap().external_ref, "ch_9");
    }

    fn refund_event(kind: &str, status: Option<&str>) -> Value {
        let mut object = json!({"id": "re_1", "object": "refund", "amount": 700, "currency": "brl",
            "charge": "ch_1", "payment_intent": "pi_1"});
        if let Some(status) = status {
            object["status"] = json!(status);
        }
        json!({"id": "evt_r", "api_version": "2025-03-31.basil", "created": 9, "type": kind,
            "data": {"object": object}})
    }

    #[test]
    fn refund_events_follow_the_refunds_status() {
        use Transition::*;
        for (kind, status, expected) in [
            ("refund.created", Some("succeeded"), Refund),
            ("refund.created", Some("pending"), RefundPending),
            ("refund.created", None, Refund),
            ("refund.updated", Some("succeeded"), Refund),
            ("refund.updated", Some("failed"), RefundFailed),
            ("refund.updated", Some("canceled"), RefundCanceled),
            ("refund.failed", Some("failed"), RefundFailed),
            ("refund.failed", None, RefundFailed),
            ("charge.refund.updated", Some("failed"), RefundFailed),
            (
                "charge.refund.updated",
                Some("requires_action"),
                RefundPending,
            ),
        ] {
            let m = map(&refund_event(kind, status)).unwrap();
            assert_eq!(m.transition, expected, "{kind} {status:?}");
            assert_eq!(m.external_ref, "re_1");
            assert_eq!(m.parent_ref.as_deref(), Some("pi_1"));
            assert_eq!(m.amount, Some(700));
        }
        let unknown = map(&refund_event("refund.updated", Some("mystery"))).unwrap_err();
        assert!(unknown.is_ignorable(), "{unknown}");
        assert!(matches!(
            map(&refund_event("refund.updated", None)),
            Err(MappingError::Missing {
                field: "transition",
                ..
            })
        ));
    }

    #[test]
    fn dispute_closed_reverses_when_won_and_stays_when_lost() {
        let closed = |status: &str| {
            json!({"id": "evt_d", "api_version": "2024-06-20", "created": 9, "type": "charge.dispute.closed",
                "data": {"object": {"id": "dp_1", "object": "dispute", "amount": 500, "currency": "eur",
                    "charge": "ch_1", "payment_intent": "pi_1", "status": status}}})
        };
        assert_eq!(
            map(&closed("won")).unwrap().transition,
            Transition::DisputeWon
        );
        assert_eq!(
            map(&closed("lost")).unwrap().transition,
            Transition::DisputeLost
        );
        assert_eq!(
            map(&closed("lost")).unwrap().parent_ref.as_deref(),
            Some("pi_1")
        );
    }

    #[test]
    fn checkout_sessions_pay_only_when_paid() {
        let session = |kind: &str, payment_status: &str| {
            json!({"id": "evt_c", "api_version": "2024-06-20", "created": 9, "type": kind,
                "data": {"object": {"id": "cs_1", "object": "checkout.session", "amount_total": 10990,
                    "currency": "brl", "client_reference_id": "ord_78452", "payment_intent": "pi_9",
                    "payment_status": payment_status, "status": "complete", "metadata": {}}}})
        };
        let paid = map(&session("checkout.session.completed", "paid")).unwrap();
        assert_eq!(
            (
                paid.transition,
                paid.order_id.as_deref(),
                paid.external_ref.as_str(),
                paid.amount
            ),
            (Transition::Pay, Some("ord_78452"), "pi_9", Some(10990))
        );
        assert!(map(&session("checkout.session.completed", "unpaid"))
            .unwrap_err()
            .is_ignorable());
        assert_eq!(
            map(&session("checkout.session.async_payment_succeeded", "paid"))
                .unwrap()
                .transition,
            Transition::Pay
        );
        assert_eq!(
            map(&session("checkout.session.async_payment_failed", "unpaid"))
                .unwrap()
                .transition,
            Transition::Fail
        );
    }

    #[test]
    fn a_transition_read_from_a_field_loads_from_toml() {
        let load = |text: &str| -> EventRule {
            figment::Figment::from(
                <figment::providers::Toml as figment::providers::Format>::string(text),
            )
            .extract()
            .unwrap()
        };
        let rule = load(
            r#"
            transition = { at = ["/data/object/status"], map = { succeeded = "refund", failed = "refund_failed" } }
            external_ref = ["/data/object/id"]
            occurred_at = ["/created"]
            "#,
        );
        assert!(matches!(rule.transition, TransitionRule::ByField(_)));
        let fixed =
            load("transition = \"pay\"\nexternal_ref = [\"/id\"]\noccurred_at = [\"/created\"]");
        assert_eq!(fixed.transition, TransitionRule::Fixed(Transition::Pay));
    }

    #[test]
    fn unsupported_versions_unknown_types_and_bad_bodies_are_named() {
        assert!(matches!(
            map(&pi_succeeded("2019-12-03")),
            Err(MappingError::UnsupportedVersion { .. })
        ));
        let mut no_version = pi_succeeded("x");
        no_version.as_object_mut().unwrap().remove("api_version");
        assert!(matches!(
            map(&no_version),
            Err(MappingError::UnsupportedVersion { found: None, .. })
        ));
        let mut unknown = pi_succeeded("2024-06-20");
        unknown["type"] = json!("customer.created");
        assert_eq!(
            map(&unknown),
            Err(MappingError::UnknownType("customer.created".into()))
        );
        assert!(matches!(
            stripe_default().map(b"not json"),
            Err(MappingError::NotJson(_))
        ));
        let mut bad_amount = pi_succeeded("2024-06-20");
        bad_amount["data"]["object"]["amount_received"] = json!("lots");
        assert!(matches!(
            map(&bad_amount),
            Err(MappingError::Invalid {
                field: "amount",
                ..
            })
        ));
        let mut no_time = pi_succeeded("2024-06-20");
        no_time.as_object_mut().unwrap().remove("created");
        assert!(matches!(
            map(&no_time),
            Err(MappingError::Missing {
                field: "occurred_at",
                ..
            })
        ));
    }

    #[test]
    fn absurd_timestamps_and_amounts_are_errors_not_overflows() {
        let mut doc = pi_succeeded("2024-06-20");
        doc["created"] = json!(-9_223_372_036_854_776i64);
        assert!(matches!(
            map(&doc),
            Err(MappingError::Invalid {
                field: "occurred_at",
                ..
            })
        ));
        let mut doc = pi_succeeded("2024-06-20");
        doc["data"]["object"]["amount_received"] = json!(i64::MAX);
        assert!(matches!(
            map(&doc),
            Err(MappingError::Invalid {
                field: "amount",
                ..
            })
        ));
        doc["data"]["object"]["amount_received"] = json!(MAX_AMOUNT);
        assert_eq!(map(&doc).unwrap().amount, Some(MAX_AMOUNT));
    }

    #[test]
    fn standard_webhooks_mapping_reads_rfc3339_and_sequence() {
        let doc = json!({"type": "payment.succeeded", "timestamp": "2024-01-01T10:00:00Z",
            "data": {"order_id": "o-9", "payment_id": "pay_1", "amount": 100, "currency": "usd", "sequence": 3}});
        let m = standard_webhooks_default()
            .map(doc.to_string().as_bytes())
            .unwrap();
        assert_eq!(m.sequence, Some(3));
        assert_eq!(m.occurred_at_ms, 1_704_103_200_000);
        let env = standard_webhooks_default().envelope(Some(&doc), Some("msg_1"));
        assert_eq!(env.event_id.as_deref(), Some("msg_1"));
        assert_eq!(env.event_type.as_deref(), Some("payment.succeeded"));
    }

    #[test]
    fn the_mapping_round_trips_through_toml_config() {
        let text = toml_roundtrip(&stripe_default());
        assert_eq!(text, stripe_default());
    }

    fn toml_roundtrip(m: &Mapping) -> Mapping {
        let json = serde_json::to_value(m).unwrap();
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn major_units_convert_exactly() {
        for (text, minor) in [
            ("100.5", Some(10050)),
            ("5.00", Some(500)),
            ("0.01", Some(1)),
            ("12", Some(1200)),
            ("-3.1", Some(-310)),
            ("1.005", None),
            ("1e3", None),
            ("", None),
            ("1.2.3", None),
        ] {
            assert_eq!(major_to_minor(text), minor, "{text}");
        }
    }

    #[test]
    fn an_asaas_payment_in_reais_and_brasilia_time_is_money_in_minor_units() {
        let body = br#"{"id":"evt_1","event":"PAYMENT_RECEIVED","dateCreated":"2026-12-06 10:00:00","payment":{"id":"pay_1","value":1234.56,"externalReference":"order-9","billingType":"PIX"}}"#;
        let m = asaas_default().map(body).unwrap();
        assert_eq!(m.transition, Transition::Pay);
        assert_eq!(m.order_id.as_deref(), Some("order-9"));
        assert_eq!(m.external_ref, "pay_1");
        assert_eq!(m.amount, Some(123_456));
        assert_eq!(m.currency.as_deref(), Some("BRL"));
        let utc = chrono::DateTime::parse_from_rfc3339("2026-12-06T13:00:00Z").unwrap();
        assert_eq!(m.occurred_at_ms, utc.timestamp_millis());
        let odd = br#"{"id":"evt_2","event":"PAYMENT_RECEIVED","dateCreated":"2026-12-06 10:00:00","payment":{"id":"pay_2","value":0.001,"externalReference":"o"}}"#;
        assert!(
            asaas_default().map(odd).is_err(),
            "a third decimal is not money"
        );
    }

    #[test]
    fn a_fetched_mercado_pago_payment_brings_every_fact_it_holds() {
        let m = mercadopago_default();
        let facts = |p: serde_json::Value| -> Vec<(Transition, Option<i64>)> {
            let body = p.to_string().into_bytes();
            let mut all = vec![m.map(&body).map(|e| (e.transition, e.amount)).unwrap()];
            for (_, view) in mercadopago_views(&body) {
                let e = m.map(&view).unwrap();
                all.push((e.transition, e.amount));
            }
            all
        };
        let base = serde_json::json!({
            "id": 1310000000001u64, "status": "approved", "status_detail": "accredited",
            "currency_id": "BRL", "transaction_amount": 120.5,
            "transaction_amount_refunded": 0, "external_reference": "ord_1",
            "date_created": "2026-12-01T10:00:00.000-03:00",
            "date_approved": "2026-12-01T10:05:00.000-03:00",
            "date_last_updated": "2026-12-01T10:05:00.000-03:00",
        });
        assert_eq!(facts(base.clone()), [(Transition::Pay, Some(12_050))]);
        let mut partial = base.clone();
        partial["status_detail"] = "partially_refunded".into();
        partial["transaction_amount_refunded"] = 30.25.into();
        assert_eq!(
            facts(partial),
            [
                (Transition::Pay, Some(12_050)),
                (Transition::RefundTotal, Some(3_025))
            ]
        );
        let mut refunded = base.clone();
        refunded["status"] = "refunded".into();
        refunded["transaction_amount_refunded"] = 120.5.into();
        assert_eq!(
            facts(refunded),
            [
                (Transition::RefundTotal, Some(12_050)),
                (Transition::Pay, Some(12_050))
            ]
        );
        let mut charged_back = base.clone();
        charged_back["status"] = "charged_back".into();
        assert_eq!(
            facts(charged_back),
            [
                (Transition::Dispute, Some(12_050)),
                (Transition::Pay, Some(12_050))
            ]
        );
        // Never approved: the status is the only fact.
        let mut expired = base;
        expired["status"] = "cancelled".into();
        expired["date_approved"] = serde_json::Value::Null;
        assert_eq!(facts(expired), [(Transition::Cancel, Some(12_050))]);
    }
}
