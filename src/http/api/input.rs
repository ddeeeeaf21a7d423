//! What the OpenAPI document promises about the API's input, checked before a handler calls
//! the backend: each bound, pattern and enum of `/api/v1/openapi.json` is a constant here
//! and a check beside it, so what the document allows is exactly what is accepted.
//!
//! - Patterns use only explicit character classes (no `\s`, `\d`, `.`): ECMA-262, Python
//!   and Rust read `\s` differently, and a client's validator must agree with this file.
//! - A value the document forbids is a 422 with the JSON error body (a parameter that does
//!   not even parse as its type stays the 400 of the extractor).

use chrono::NaiveDate;
use serde::{Deserialize, Deserializer};

use super::ApiError;

/// Characters that are neither whitespace (Unicode `White_Space`, what `str::trim` removes)
/// nor control characters (`Cc`): a reason or a payload value needs one of them.
macro_rules! blank_class {
    () => {
        r"\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
    };
}

/// A reason (audit log, refund metadata): at most 500 characters with at least one that is
/// neither whitespace nor a control character.
pub const REASON_PATTERN: &str = concat!("[^", blank_class!(), "]");
pub const REASON_MAX_CHARS: usize = 500;

/// The inbox's payload filter: a dotted path of JSON object keys (no whitespace, control
/// characters, `.` or `=` inside a key), `=`, and a value with at least one visible
/// character: `data.object.customer = cus_123`. Spaces around the path and `=` are allowed.
pub const PAYLOAD_PATTERN: &str = concat!(
    "^ *[^.=",
    blank_class!(),
    "]+(?:\\.[^.=",
    blank_class!(),
    "]+)* *=[\\s\\S]*[^",
    blank_class!(),
    "]"
);

/// `since` / `until`, UTC unless an offset is given: `2026-12-01`, `2026-12-01T10:30`,
/// `2026-12-01 10:30:15`, or RFC 3339 with seconds and an offset
/// (`2026-12-01T10:30:15.250+01:00`, `…Z`). Only dates of the calendar (leap days in leap
/// years), hours 00-23, no leap second.
pub const TIME_PATTERN: &str = concat!(
    "^(?:[0-9]{4}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)",
    "|(?:0[13578]|1[02])-31)",
    "|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[048]|[2468][048]|[13579][26])00)-02-29)",
    "(?:[T ](?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9])?",
    "|T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]",
    "(?:\\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]))?$"
);

/// A path segment as the router takes it (see `auth::gate::is_ambiguous`: anything else is
/// a 400 before any route): not empty, no `/` or `\`, not `.` or `..`. Order ids in
/// paths follow it.
pub const SEGMENT_PATTERN: &str = r"^(?:[^/\\.][^/\\]*|\.[^/\\.][^/\\]*|\.\.[^/\\]+)$";

/// The most events a page of `GET /api/v1/events` holds.
pub const EVENTS_MAX_LIMIT: u32 = 200;
/// The most runs or diffs a page of `/api/v1/reconciliation/*` holds.
pub const RECONCILIATION_MAX_LIMIT: u32 = 500;
/// What `GET /api/v1/overview` takes as `range`.
pub const RANGES: [&str; 3] = ["1h", "24h", "7d"];

fn pattern_schema(pattern: &str) -> utoipa::openapi::ObjectBuilder {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .pattern(Some(pattern))
}

/// The schema of `since` and `until`.
pub fn time_schema() -> utoipa::openapi::Object {
    pattern_schema(TIME_PATTERN)
        .description(Some(
            "`2026-12-01`, `2026-12-01T10:30`, `2026-12-01T10:30:15` (UTC; `T` or a space \
             between date and time) or RFC 3339 with seconds and an offset \
             (`2026-12-01T10:30:15.250+01:00`, `…Z`); only real calendar dates.",
        ))
        .build()
}

/// The schema of the payload filter.
pub fn payload_schema() -> utoipa::openapi::Object {
    pattern_schema(PAYLOAD_PATTERN)
        .description(Some(
            "A payload field and its value: `data.object.customer = cus_123`. The path is JSON \
             object keys joined by `.` (none empty; no whitespace, control character or `=` in \
             a key), spaces allowed around it; the value (trimmed, surrounding `\"` dropped) \
             must equal the string there, or the text of a number or boolean.",
        ))
        .build()
}

/// The schema of an order id in a path.
pub fn order_id_schema() -> utoipa::openapi::Object {
    pattern_schema(SEGMENT_PATTERN)
        .description(Some(
            "The order id the provider's events name (not empty, no `/` or `\\`, not `.` or \
             `..`: such a path is a 400)",
        ))
        .build()
}

/// The schema of a reason in a request body.
pub fn reason_schema() -> utoipa::openapi::Object {
    pattern_schema(REASON_PATTERN)
        .min_length(Some(1))
        .max_length(Some(REASON_MAX_CHARS))
        .description(Some(
            "Why (it goes to the audit log): at most 500 characters, at least one of them \
             neither whitespace nor a control character.",
        ))
        .build()
}

fn invalid(message: String) -> ApiError {
    ApiError::new(422, message)
}

fn blank(c: char) -> bool {
    c <= '\u{20}'
        || ('\u{7f}'..='\u{a0}').contains(&c)
        || ('\u{2000}'..='\u{200a}').contains(&c)
        || matches!(
            c,
            '\u{1680}' | '\u{2028}' | '\u{2029}' | '\u{202f}' | '\u{205f}' | '\u{3000}'
        )
}

/// `limit` within 1..=max, its default when absent.
pub fn limit(value: Option<u32>, default: u32, max: u32) -> Result<u32, ApiError> {
    match value {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(invalid(format!("limit {n}: use 1 to {max}"))),
    }
}

/// A reason as `REASON_PATTERN` and `REASON_MAX_CHARS` say.
pub fn reason(text: &str) -> Result<(), ApiError> {
    if text.chars().count() > REASON_MAX_CHARS {
        return Err(invalid(format!(
            "the reason has more than {REASON_MAX_CHARS} characters"
        )));
    }
    if !text.chars().any(|c| !blank(c)) {
        return Err(invalid(
            "say why (a reason is required: a visible character)".into(),
        ));
    }
    Ok(())
}

/// A payload filter as `PAYLOAD_PATTERN` says.
pub fn payload(text: &str) -> Result<(), ApiError> {
    let readable = text.split_once('=').is_some_and(|(path, value)| {
        let path = path.trim_matches(' ');
        !path.is_empty()
            && path
                .split('.')
                .all(|key| !key.is_empty() && key.chars().all(|c| c != '.' && !blank(c)))
            && value.chars().any(|c| !blank(c))
    });
    if readable {
        Ok(())
    } else {
        Err(invalid(format!(
            "payload filter {text:?}: write it as data.object.customer = cus_123 \
             (a dotted path of keys without spaces, =, a value)"
        )))
    }
}

/// A time as `TIME_PATTERN` says; `name` is the parameter.
pub fn time(name: &str, text: &str) -> Result<(), ApiError> {
    if time_matches(text) {
        Ok(())
    } else {
        Err(invalid(format!(
            "{name}: {text:?} is not a time; use 2026-12-01, 2026-12-01T10:30 (UTC), \
             2026-12-01T10:30:15 (UTC) or RFC 3339 with seconds and an offset \
             (2026-12-01T10:30:15Z)"
        )))
    }
}

fn time_matches(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<u32> {
        let part = b.get(range)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0')))
    };
    let date = (|| {
        let (y, m, d) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
        (b[4] == b'-' && b[7] == b'-').then_some(())?;
        NaiveDate::from_ymd_opt(y as i32, m, d)
    })();
    if date.is_none() {
        return false;
    }
    if b.len() == 10 {
        return true;
    }
    // [T ]HH:MM
    let minutes = (|| {
        (matches!(b[10], b'T' | b' ') && b.get(13) == Some(&b':')).then_some(())?;
        (digits(11..13)? < 24 && digits(14..16)? < 60).then_some(())
    })();
    if minutes.is_none() {
        return false;
    }
    if b.len() == 16 {
        return true;
    }
    // :SS
    if b[16] != b':' || digits(17..19).is_none_or(|s| s >= 60) {
        return false;
    }
    if b.len() == 19 {
        return true;
    }
    // RFC 3339: 'T', an optional fraction of 1 to 9 digits, then Z or ±HH:MM.
    if b[10] != b'T' {
        return false;
    }
    let mut rest = &b[19..];
    if rest.first() == Some(&b'.') {
        let n = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if !(1..=9).contains(&n) {
            return false;
        }
        rest = &rest[1 + n..];
    }
    match rest {
        [b'Z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => {
            let two = |a: &u8, b: &u8| {
                (a.is_ascii_digit() && b.is_ascii_digit()).then(|| (a - b'0') * 10 + (b - b'0'))
            };
            two(h1, h2).is_some_and(|h| h < 24) && two(m1, m2).is_some_and(|m| m < 60)
        }
        _ => false,
    }
}

/// A JSON integer as JSON Schema's `integer` allows it: `-325` and `-325.0` alike (a number
/// with no fractional part), within i64.
pub fn integral<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let Some(number) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    if let Some(n) = number.as_i64() {
        return Ok(Some(n));
    }
    // -2^63 ..= 2^63 - 1: every integral f64 in [-2^63, 2^63) converts exactly.
    let bound = 2f64.powi(63);
    match number.as_f64() {
        Some(f) if f.fract() == 0.0 && (-bound..bound).contains(&f) => Ok(Some(f as i64)),
        _ => Err(serde::de::Error::custom(format!(
            "{number} is not an integer of 64 bits"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_the_documented_forms_and_real_dates() {
        for ok in [
            "2026-12-01",
            "2026-12-01T10:30",
            "2026-12-01 10:30",
            "2026-12-01 10:30:15",
            "2026-12-01T10:30:15Z",
            "2026-12-01T10:30:15.250+01:00",
            "2026-12-01T23:59:59.123456789-23:59",
            "2024-02-29",
            "2000-02-29",
            "0000-02-29",
            "1900-02-28",
        ] {
            assert!(time_matches(ok), "{ok}");
        }
        for bad in [
            "",
            "2026-12-1",
            "2026-13-01",
            "2026-04-31",
            "2025-02-29",
            "1900-02-29",
            "2026-12-01T24:00",
            "2026-12-01T10:30:60",
            "2026-12-01T10:30:15.5",
            "2026-12-01 10:30:15Z",
            "2026-12-01T10:30Z",
            "2026-12-01T10:30:15.Z",
            "2026-12-01T10:30:15.1234567890Z",
            "2026-12-01T10:30:15+24:00",
            "2026-12-01t10:30:15z",
            "٢٠٢٦-12-01",
            "last week",
        ] {
            assert!(!time_matches(bad), "{bad}");
        }
    }

    #[test]
    fn payload_filters_are_the_documented_grammar() {
        for ok in [
            "data.object.customer = cus_123",
            "a=b",
            "  a.b  =  c d ",
            "a=\n b",
            "x=\"\"",
            "ключ.ü=ж",
        ] {
            assert!(payload(ok).is_ok(), "{ok:?}");
        }
        for bad in [
            "",
            "a",
            "=b",
            "a=",
            "a= \u{3000}",
            "a..b=c",
            ".a=c",
            "a b=c",
            "a\t=c",
        ] {
            assert!(payload(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn reasons_need_a_visible_character_and_at_most_500() {
        assert!(reason("damaged").is_ok());
        assert!(reason(&"r".repeat(500)).is_ok());
        for bad in ["", " \t", "\u{1}", "\u{a0}\u{3000}", &"r".repeat(501)] {
            assert!(reason(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn integers_in_json_may_be_written_with_a_zero_fraction() {
        #[derive(Deserialize)]
        struct T {
            #[serde(default, deserialize_with = "integral")]
            n: Option<i64>,
        }
        let n = |s: &str| serde_json::from_str::<T>(s).map(|t| t.n);
        assert_eq!(n(r#"{"n": -325.0}"#).unwrap(), Some(-325));
        assert_eq!(n(r#"{"n": 7}"#).unwrap(), Some(7));
        assert_eq!(n(r#"{"n": null}"#).unwrap(), None);
        assert_eq!(n("{}").unwrap(), None);
        assert!(n(r#"{"n": 1.5}"#).is_err());
        assert!(n(r#"{"n": 9223372036854775808}"#).is_err());
        assert!(n(r#"{"n": "1"}"#).is_err());
    }
}
