//! The inbox filters that are not plain column equalities: a time range typed by a person,
//! and a payload field (`data.object.customer = cus_123`) checked against the stored JSON.

use chrono::{NaiveDate, NaiveDateTime, TimeZone, Utc};
use serde_json::Value;

use crate::store::read::{list_event_bodies, list_events_by_id, EventFilter, EventRow};
use crate::store::Db;

/// Events whose bodies a payload filter reads per page at most; the page then says where it
/// stopped and "Older →" goes on from there.
pub const PAYLOAD_SCAN: i64 = 3_000;

/// `2026-12-01`, `2026-12-01T10:30`, `2026-12-01 10:30:15` (UTC) or RFC 3339, as Unix ms.
pub fn utc_instant(label: &str, text: Option<&str>) -> Result<Option<i64>, String> {
    let Some(text) = text else {
        return Ok(None);
    };
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(Some(t.timestamp_millis()));
    }
    for format in [
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, format) {
            return Ok(Some(Utc.from_utc_datetime(&t).timestamp_millis()));
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        if let Some(t) = d.and_hms_opt(0, 0, 0) {
            return Ok(Some(Utc.from_utc_datetime(&t).timestamp_millis()));
        }
    }
    Err(format!(
        "{label}: {text:?} is not a time; use 2026-12-01, 2026-12-01T10:30 (UTC) or RFC 3339"
    ))
}

/// A payload condition: the JSON pointer of a dotted path, and the value it must have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayloadCondition {
    pub pointer: String,
    pub value: String,
}

pub fn payload_condition(text: &str) -> Result<PayloadCondition, String> {
    let usage = || format!("payload filter {text:?}: write it as data.object.customer = cus_123");
    let (path, value) = text.split_once('=').ok_or_else(usage)?;
    let (path, value) = (path.trim(), value.trim());
    if path.is_empty() || value.is_empty() || path.split('.').any(str::is_empty) {
        return Err(usage());
    }
    // JSON pointer escaping: `~` and `/` inside a key.
    let pointer = path
        .split('.')
        .map(|key| key.replace('~', "~0").replace('/', "~1"))
        .fold(String::new(), |p, key| p + "/" + &key);
    Ok(PayloadCondition {
        pointer,
        value: value.trim_matches('"').to_string(),
    })
}

/// Whether a stored body has the value at the path (a string equal to it, or a number or
/// boolean that prints as it). A body that is not JSON never matches.
pub fn matches(body: &[u8], condition: &PayloadCondition) -> bool {
    // Most bodies do not hold the value at all: a byte search rules them out without
    // parsing. Only for values JSON writes as they are (no escapes possible).
    let plain = condition
        .value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_-.:@+ ".contains(&b));
    let needle = condition.value.as_bytes();
    if plain && !needle.is_empty() && !body.windows(needle.len()).any(|w| w == needle) {
        return false;
    }
    let Ok(doc) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    match doc.pointer(&condition.pointer) {
        Some(Value::String(s)) => *s == condition.value,
        Some(Value::Number(n)) => n.to_string() == condition.value,
        Some(Value::Bool(b)) => condition.value == if *b { "true" } else { "false" },
        _ => false,
    }
}

/// Newest first, up to `limit` matches among at most `PAYLOAD_SCAN` events that pass the
/// other filters; the cursor continues after the last event read. Parsing the bodies is
/// CPU work (up to `PAYLOAD_SCAN` JSON documents), so it runs on the blocking pool, never on
/// the async workers that answer webhooks.
pub async fn scan_payloads(
    db: &Db,
    mut filter: EventFilter,
    condition: &PayloadCondition,
    limit: i64,
) -> anyhow::Result<(Vec<EventRow>, Option<i64>)> {
    const BATCH: i64 = 500;
    let mut matched: Vec<i64> = Vec::new();
    let mut scanned = 0;
    let next = loop {
        filter.limit = BATCH;
        let batch = list_event_bodies(db, &filter).await?;
        let exhausted = (batch.len() as i64) < BATCH;
        let wanted = (limit - matched.len() as i64) as usize;
        let for_matching = condition.clone();
        let (found, read) =
            tokio::task::spawn_blocking(move || matching_ids(&batch, &for_matching, wanted))
                .await?;
        scanned += read.len() as i64;
        let full = found.len() == wanted;
        matched.extend(found);
        if let Some(last) = read.last() {
            filter.before = Some(*last);
        }
        if full || (!exhausted && scanned >= PAYLOAD_SCAN) {
            // More may match further down: continue after the last event read.
            break filter.before;
        }
        if exhausted {
            break None;
        }
    };
    // The full rows (with their delivery counts) only for the matches.
    let rows = list_events_by_id(db, &matched).await?;
    Ok((rows, next))
}

/// The ids of the bodies that match, in order, stopping after `wanted`; and the ids read
/// up to there (the cursor goes on after the last).
fn matching_ids(
    batch: &[(i64, Vec<u8>)],
    condition: &PayloadCondition,
    wanted: usize,
) -> (Vec<i64>, Vec<i64>) {
    let mut found = Vec::new();
    let mut read = Vec::new();
    for (id, body) in batch {
        read.push(*id);
        if matches(body, condition) {
            found.push(*id);
            if found.len() == wanted {
                break;
            }
        }
    }
    (found, read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_as_people_type_them() {
        let at = |t: &str| utc_instant("From", Some(t)).unwrap().unwrap();
        assert_eq!(at("2026-12-01"), 1_796_083_200_000);
        assert_eq!(at("2026-12-01T10:30"), 1_796_083_200_000 + 37_800_000);
        assert_eq!(at("2026-12-01 10:30:15"), 1_796_083_200_000 + 37_815_000);
        assert_eq!(
            at("2026-12-01T11:30:00+01:00"),
            1_796_083_200_000 + 37_800_000
        );
        assert_eq!(utc_instant("From", None), Ok(None));
        let err = utc_instant("To", Some("yesterday")).unwrap_err();
        assert!(err.starts_with("To: \"yesterday\" is not a time"), "{err}");
    }

    #[test]
    fn payload_conditions_read_a_dotted_path() {
        let c = payload_condition(" data.object.customer =  cus_123 ").unwrap();
        assert_eq!(c.pointer, "/data/object/customer");
        assert_eq!(c.value, "cus_123");
        assert_eq!(
            payload_condition("a.b/c = \"x\"").unwrap().pointer,
            "/a/b~1c"
        );
        for bad in ["data.object.customer", "= x", "a..b = x", "a = "] {
            assert!(payload_condition(bad).is_err(), "{bad}");
        }
        let body =
            br#"{"data": {"object": {"customer": "cus_123", "amount": 500, "live": false}}}"#;
        let check = |t: &str| matches(body, &payload_condition(t).unwrap());
        assert!(check("data.object.customer = cus_123"));
        assert!(check("data.object.amount = 500"));
        assert!(check("data.object.live = false"));
        assert!(!check("data.object.customer = cus_999"));
        assert!(!check("data.object = cus_123"));
        assert!(!matches(b"not json", &payload_condition("a = b").unwrap()));
        // A value JSON may escape is still found through the parser.
        let escaped = br#"{"data": {"url": "https:\/\/example.com\/x"}}"#;
        assert!(matches(
            escaped,
            &payload_condition("data.url = https://example.com/x").unwrap()
        ));
    }
}
