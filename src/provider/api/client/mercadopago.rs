//! Mercado Pago's payment search, `GET /v1/payments/search`: every payment whose
//! `date_last_updated` falls in a window, oldest change first, a page at a time. Its answer
//! is `{"paging": {"total", "limit", "offset"}, "results": [payment…]}`; it pages by
//! `offset`, which a payment updated during the walk would shift (it leaves the window and
//! the rest move up one), so the pager moves its window's start instead: each page begins
//! at the newest `date_last_updated` of the one before, skipping the payments already read
//! at that instant. Through the client's `call`: its retries (429, 5xx, timeouts), no
//! redirects, the answer's size cap.

use serde::Deserialize;
use serde_json::Value;

use super::super::error::ApiError;
use super::{decode, ApiClient};
use reqwest::Method;

/// The search's path.
pub const SEARCH_PATH: &str = "/v1/payments/search";

/// What to search: payments changed in `[begin_ms, end_ms]` (Unix ms), `limit` a page, of
/// one order only with `external_reference`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaymentSearch {
    pub begin_ms: i64,
    pub end_ms: i64,
    pub limit: u32,
    pub external_reference: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Answer {
    paging: Paging,
    results: Vec<Value>,
}

#[derive(Debug, Deserialize)]
struct Paging {
    total: i64,
    #[serde(default)]
    offset: i64,
}

/// A date as the search takes it (`yyyy-MM-dd'T'HH:mm:ss.SSSZ`): `2026-12-06T13:00:00.000+00:00`.
pub fn search_date(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
}

/// A payment's `date_last_updated`, Unix ms.
pub fn updated_ms(payment: &Value) -> Option<i64> {
    payment["date_last_updated"]
        .as_str()
        .and_then(|d| chrono::DateTime::parse_from_rfc3339(d).ok())
        .map(|d| d.timestamp_millis())
}

impl ApiClient {
    /// The pages of a payment search, oldest change first.
    pub fn mercadopago_payments(&self, search: PaymentSearch) -> PaymentPages<'_> {
        PaymentPages {
            client: self,
            begin_ms: search.begin_ms,
            skip: 0,
            search,
            done: false,
        }
    }
}

/// The pages of one payment search (see `ApiClient::mercadopago_payments`).
pub struct PaymentPages<'a> {
    client: &'a ApiClient,
    search: PaymentSearch,
    /// Where the next page begins, and how many payments changed at exactly that instant
    /// were read already.
    begin_ms: i64,
    skip: u32,
    done: bool,
}

impl PaymentPages<'_> {
    /// The next page of payments; `None` after the last. An answer that cannot be walked
    /// (a page larger than asked for, out of order, a payment without `date_last_updated`)
    /// is an error, never a page skipped.
    pub async fn next_page(&mut self) -> Result<Option<Vec<Value>>, ApiError> {
        if self.done {
            return Ok(None);
        }
        let s = &self.search;
        let mut params: Vec<(String, String)> = vec![
            ("sort".into(), "date_last_updated".into()),
            ("criteria".into(), "asc".into()),
            ("range".into(), "date_last_updated".into()),
            ("begin_date".into(), search_date(self.begin_ms)),
            ("end_date".into(), search_date(s.end_ms)),
            ("offset".into(), self.skip.to_string()),
            ("limit".into(), s.limit.to_string()),
        ];
        if let Some(reference) = &s.external_reference {
            params.push(("external_reference".into(), reference.clone()));
        }
        let body = self
            .client
            .call(Method::GET, SEARCH_PATH, &params, None, None)
            .await?;
        let answer: Answer = decode(&body)?;
        let results = answer.results;
        if results.len() > s.limit as usize {
            return Err(ApiError::Decode(format!(
                "{SEARCH_PATH}: a page of {} payments where {} were asked for",
                results.len(),
                s.limit
            )));
        }
        let mut stamps = Vec::with_capacity(results.len());
        for p in &results {
            let at = updated_ms(p).ok_or_else(|| {
                ApiError::Decode(format!(
                    "{SEARCH_PATH}: payment {} has no date_last_updated",
                    p["id"]
                ))
            })?;
            if at < stamps.last().copied().unwrap_or(self.begin_ms) {
                return Err(ApiError::Decode(format!(
                    "{SEARCH_PATH}: payments not in date_last_updated order (asked for sort=date_last_updated&criteria=asc)"
                )));
            }
            stamps.push(at);
        }
        let Some(&last) = stamps.last() else {
            self.done = true;
            return Ok(None);
        };
        let at_last = stamps.iter().rev().take_while(|t| **t == last).count() as u32;
        if last == self.begin_ms {
            self.skip += at_last;
        } else {
            self.begin_ms = last;
            self.skip = at_last;
        }
        self.done = results.len() < s.limit as usize
            || answer.paging.offset + results.len() as i64 >= answer.paging.total;
        Ok(Some(results))
    }
}
