//! Mercado Pago's payment search, `GET /v1/payments/search`, over the simulator's payments:
//! `sort` (`date_created`, `date_last_updated`, `date_approved`, `money_release_date`,
//! `id`) in `criteria` `asc` or `desc`, `range` naming the date that `begin_date` and
//! `end_date` bound (both inclusive, `yyyy-MM-dd'T'HH:mm:ss.SSSZ`, or `NOW`, `NOW-7DAYS`),
//! `external_reference`, `status`, `offset` and `limit` (default 30, at most
//! [`MAX_LIMIT`]); the answer is `{"paging": {"total", "limit", "offset"}, "results":
//! [payment…]}`, refusals Mercado Pago's error object with its cause codes. Payments that
//! tie on the sort key come in id order, so offsets are stable.
// Parameter checks return the finished error answer itself.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::Shared;

/// The simulator's largest page.
pub const MAX_LIMIT: i64 = 100;
const DEFAULT_LIMIT: i64 = 30;
const SORTS: [&str; 5] = [
    "date_created",
    "date_last_updated",
    "date_approved",
    "money_release_date",
    "id",
];
const RANGES: [&str; 4] = [
    "date_created",
    "date_last_updated",
    "date_approved",
    "money_release_date",
];

/// A refusal: the status and Mercado Pago's error body.
type Refusal = (StatusCode, Value);

fn refuse(code: u32, description: &str) -> Refusal {
    (
        StatusCode::BAD_REQUEST,
        json!({"message": description, "error": "bad_request", "status": 400,
            "cause": [{"code": code, "description": description, "data": null}]}),
    )
}

pub async fn search(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let payments = match shared.db.objects_of_kind(super::mercadopago::KIND).await {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "simulator payment search");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                Json(json!({"message": "internal error", "error": "internal_error", "status": 500, "cause": []})),
            )
                .into_response();
        }
    };
    match answer(payments, &query, chrono::Utc::now().timestamp_millis()) {
        Ok(page) => Json(page).into_response(),
        Err((status, body)) => (status, Json(body)).into_response(),
    }
}

/// A date parameter, Unix ms: an RFC 3339 date, `NOW`, or `NOW-<n>DAYS`.
fn date_param(value: &str, now_ms: i64) -> Result<i64, Refusal> {
    let bad = || refuse(1001, "Date format must be yyyy-MM-dd'T'HH:mm:ss.SSSZ.");
    if let Some(rest) = value.strip_prefix("NOW") {
        if rest.is_empty() {
            return Ok(now_ms);
        }
        let days = rest
            .strip_prefix('-')
            .and_then(|r| r.strip_suffix("DAYS"))
            .and_then(|n| n.parse::<i64>().ok())
            .ok_or_else(bad)?;
        return Ok(now_ms - days * 86_400_000);
    }
    chrono::DateTime::parse_from_rfc3339(value)
        .map(|d| d.timestamp_millis())
        .map_err(|_| bad())
}

fn date_of(payment: &Value, field: &str) -> Option<i64> {
    payment[field]
        .as_str()
        .and_then(|d| chrono::DateTime::parse_from_rfc3339(d).ok())
        .map(|d| d.timestamp_millis())
}

fn id_of(payment: &Value) -> i64 {
    payment["id"].as_i64().unwrap_or(0)
}

/// The search over `payments` (pure: `now_ms` for `NOW`).
pub fn answer(
    payments: Vec<Value>,
    query: &[(String, String)],
    now_ms: i64,
) -> Result<Value, Refusal> {
    let param = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let sort = param("sort").unwrap_or("date_created");
    if !SORTS.contains(&sort) {
        return Err(refuse(1003, "Invalid sort value."));
    }
    let descending = match param("criteria").unwrap_or("desc") {
        "desc" => true,
        "asc" => false,
        _ => return Err(refuse(1004, "Invalid criteria value.")),
    };
    let range = param("range").unwrap_or("date_created");
    if !RANGES.contains(&range) {
        return Err(refuse(1, "Params Error."));
    }
    let begin = param("begin_date")
        .map(|v| date_param(v, now_ms))
        .transpose()?;
    let end = param("end_date")
        .map(|v| date_param(v, now_ms))
        .transpose()?;
    let number = |name: &str, default: i64| match param(name) {
        None => Ok(default),
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| refuse(1, "Params Error.")),
    };
    let offset = number("offset", 0)?;
    let limit = number("limit", DEFAULT_LIMIT)?;
    if limit == 0 || limit > MAX_LIMIT {
        return Err(refuse(1000, "Number of rows exceeded the limits."));
    }
    let reference = param("external_reference");
    let status = param("status");
    let mut found: Vec<Value> = payments
        .into_iter()
        .filter(|p| reference.is_none_or(|r| p["external_reference"].as_str() == Some(r)))
        .filter(|p| status.is_none_or(|s| p["status"].as_str() == Some(s)))
        .filter(|p| {
            if begin.is_none() && end.is_none() {
                return true;
            }
            date_of(p, range)
                .is_some_and(|at| begin.is_none_or(|b| at >= b) && end.is_none_or(|e| at <= e))
        })
        .collect();
    let key = |p: &Value| {
        let at = if sort == "id" {
            Some(id_of(p))
        } else {
            date_of(p, sort)
        };
        (at, id_of(p))
    };
    found.sort_by_key(key);
    if descending {
        found.reverse();
    }
    let total = found.len() as i64;
    let results: Vec<Value> = found
        .into_iter()
        .skip(offset as usize)
        .take(limit as usize)
        .collect();
    Ok(json!({
        "paging": {"total": total, "limit": limit, "offset": offset},
        "results": results,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payment(id: i64, order: &str, updated: &str) -> Value {
        json!({"id": id, "external_reference": order, "status": "approved",
            "date_created": "2026-12-01T10:00:00.000-03:00", "date_last_updated": updated})
    }

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn ids(page: &Value) -> Vec<i64> {
        page["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(id_of)
            .collect()
    }

    #[test]
    fn the_search_filters_sorts_and_pages_as_mercado_pago_does() {
        let all = vec![
            payment(3, "o-1", "2026-12-02T10:00:00.000-03:00"),
            payment(1, "o-2", "2026-12-03T10:00:00.000-03:00"),
            payment(2, "o-1", "2026-12-02T10:00:00.000-03:00"),
            payment(4, "o-3", "2026-12-09T10:00:00.000-03:00"),
        ];
        let window = [
            ("sort", "date_last_updated"),
            ("criteria", "asc"),
            ("range", "date_last_updated"),
            ("begin_date", "2026-12-02T13:00:00.000+00:00"),
            ("end_date", "2026-12-05T00:00:00.000-03:00"),
            ("limit", "2"),
        ];
        let page = answer(all.clone(), &q(&window), 0).unwrap();
        // Both ends inclusive; a tie in id order.
        assert_eq!(ids(&page), [2, 3]);
        assert_eq!(page["paging"], json!({"total": 3, "limit": 2, "offset": 0}));
        let mut next = window.to_vec();
        next.push(("offset", "2"));
        assert_eq!(ids(&answer(all.clone(), &q(&next), 0).unwrap()), [1]);
        let desc = answer(all.clone(), &q(&[("criteria", "desc"), ("sort", "id")]), 0).unwrap();
        assert_eq!(ids(&desc), [4, 3, 2, 1]);
        let one = answer(all.clone(), &q(&[("external_reference", "o-1")]), 0).unwrap();
        assert_eq!(one["paging"]["total"], 2);
        let empty = answer(
            all.clone(),
            &q(&[("range", "date_last_updated"), ("begin_date", "NOW-1DAYS")]),
            chrono::DateTime::parse_from_rfc3339("2027-01-01T00:00:00Z")
                .unwrap()
                .timestamp_millis(),
        )
        .unwrap();
        assert_eq!(
            empty,
            json!({"paging": {"total": 0, "limit": 30, "offset": 0}, "results": []})
        );
    }

    #[test]
    fn bad_parameters_are_refused_with_mercado_pagos_cause_codes() {
        let code = |pairs: &[(&str, &str)]| {
            let (status, body) = answer(vec![], &q(pairs), 0).unwrap_err();
            assert_eq!(status, StatusCode::BAD_REQUEST);
            body["cause"][0]["code"].as_u64().unwrap()
        };
        assert_eq!(code(&[("sort", "amount")]), 1003);
        assert_eq!(code(&[("criteria", "up")]), 1004);
        assert_eq!(code(&[("begin_date", "yesterday")]), 1001);
        assert_eq!(code(&[("limit", "101")]), 1000);
        assert_eq!(code(&[("limit", "0")]), 1000);
        assert_eq!(code(&[("offset", "-1")]), 1);
    }
}
