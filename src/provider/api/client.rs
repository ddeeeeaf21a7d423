//! The HTTP side: authentication, pacing, retries and paging.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;

use super::error::ApiError;
use super::objects::{CreateRefund, Dispute, Event, HasId, List, PaymentIntent, Refund};
use super::MAX_PAGE;
use crate::domain::retry::{parse_retry_after, Next, RetryPolicy};
use crate::provider::settings::ProviderApiSettings;

/// A client of one provider's API. Cheap to clone; clones share the rate limit.
#[derive(Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    base: String,
    key: String,
    timeout_ms: u64,
    retry: RetryPolicy,
    limiter: Arc<DefaultDirectRateLimiter>,
    /// Mercado Pago's API rather than Stripe's: commands take its shape.
    mercadopago: bool,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient")
            .field("base", &crate::support::redact::redact_url(&self.base))
            .field("key", &crate::support::redact::REDACTED)
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

/// The filters of `GET /v1/events`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventQuery {
    pub created_gte: Option<i64>,
    pub created_gt: Option<i64>,
    pub types: Vec<String>,
    /// 1 to 100 (Stripe's default is 10; this client asks for 100 unless told).
    pub limit: Option<u32>,
    pub starting_after: Option<String>,
    pub ending_before: Option<String>,
}

impl EventQuery {
    fn params(&self) -> Vec<(String, String)> {
        let mut q = Vec::new();
        if let Some(t) = self.created_gte {
            q.push(("created[gte]".into(), t.to_string()));
        }
        if let Some(t) = self.created_gt {
            q.push(("created[gt]".into(), t.to_string()));
        }
        for t in &self.types {
            q.push(("types[]".into(), t.clone()));
        }
        if let Some(id) = &self.starting_after {
            q.push(("starting_after".into(), id.clone()));
        }
        if let Some(id) = &self.ending_before {
            q.push(("ending_before".into(), id.clone()));
        }
        q.push(("limit".into(), self.limit.unwrap_or(MAX_PAGE).to_string()));
        q
    }
}

/// Ids go into URL paths: only Stripe's id alphabet, so no id can name another path.
fn checked_id(id: &str) -> Result<&str, ApiError> {
    let ok = !id.is_empty()
        && id.len() <= 255
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(id)
    } else {
        Err(ApiError::Invalid(format!(
            "{:?} is not a provider object id",
            id.chars().take(64).collect::<String>()
        )))
    }
}

/// The largest answer read: a full page of 100 Stripe events with expanded objects is well
/// under 2 MiB.
pub const MAX_ANSWER_BYTES: usize = 8 << 20;

/// Stripe refuses longer keys.
pub const MAX_IDEMPOTENCY_KEY: usize = crate::domain::commands::MAX_KEY_CHARS;

impl ApiClient {
    pub fn new(settings: &ProviderApiSettings) -> anyhow::Result<ApiClient> {
        let key = settings
            .key
            .clone()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| anyhow::anyhow!("no api_key is configured"))?;
        anyhow::ensure!(
            settings.rate_per_sec.is_finite() && settings.rate_per_sec > 0.0,
            "api_rate_per_sec must be a positive number"
        );
        let quota = Quota::with_period(Duration::from_secs_f64(1.0 / settings.rate_per_sec))
            .ok_or_else(|| anyhow::anyhow!("api_rate_per_sec is too high"))?
            // A burst of one second's worth, as Stripe's own limiter allows.
            .allow_burst(
                NonZeroU32::new(settings.rate_per_sec.ceil().min(10_000.0) as u32)
                    .unwrap_or(NonZeroU32::MIN),
            );
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(settings.timeout_ms))
            // A redirect would carry the secret key to wherever the Location points; the
            // provider's API never redirects, so a 3xx is an error to look at.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("oncehook/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(ApiClient {
            http,
            base: settings.base.trim_end_matches('/').to_string(),
            key,
            timeout_ms: settings.timeout_ms,
            retry: settings.retry,
            limiter: Arc::new(RateLimiter::direct(quota)),
            mercadopago: false,
        })
    }

    /// The client of a Mercado Pago provider: its refunds are
    /// `POST /v1/payments/{id}/refunds`.
    pub fn for_mercadopago(mut self) -> ApiClient {
        self.mercadopago = true;
        self
    }

    pub fn is_mercadopago(&self) -> bool {
        self.mercadopago
    }

    /// One page of events, newest first.
    pub async fn events(&self, query: &EventQuery) -> Result<List<Event>, ApiError> {
        self.get("/v1/events", &query.params()).await
    }

    /// Every page of events matching `query`, newest first, one page per `next_page`.
    pub fn event_pages(&self, query: EventQuery) -> Pager<'_, Event> {
        let mut params = query.params();
        params.retain(|(k, _)| k != "starting_after");
        Pager::new(self, "/v1/events".into(), params, query.starting_after)
    }

    /// Events newer than the event `checkpoint`, oldest first, one page per call: what a
    /// reconciler reading forward from its last position needs. Each page is the one
    /// right after the cursor (`ending_before`), and the cursor moves to its newest event.
    pub fn events_after(&self, checkpoint: &str, mut query: EventQuery) -> ForwardPager<'_> {
        query.starting_after = None;
        query.ending_before = None;
        ForwardPager {
            client: self,
            query,
            cursor: checkpoint.to_string(),
            done: false,
        }
    }

    pub async fn event(&self, id: &str) -> Result<Event, ApiError> {
        self.get(&format!("/v1/events/{}", checked_id(id)?), &[])
            .await
    }

    /// Mercado Pago: the payment a thin notification names, as the API answered it (the
    /// receiver stores these bytes beside the notification).
    pub async fn mercadopago_payment(&self, id: &str) -> Result<Vec<u8>, ApiError> {
        let path = format!("/v1/payments/{}", checked_id(id)?);
        let body = self.call(Method::GET, &path, &[], None, None).await?;
        match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(serde_json::Value::Object(_)) => Ok(body),
            _ => Err(ApiError::Decode(format!("{path}: not a JSON object"))),
        }
    }

    /// With `expand_latest_charge`, `latest_charge` is the charge object, not its id.
    pub async fn payment_intent(
        &self,
        id: &str,
        expand_latest_charge: bool,
    ) -> Result<PaymentIntent, ApiError> {
        let expand = expand_latest_charge.then(|| ("expand[]".into(), "latest_charge".into()));
        self.get(
            &format!("/v1/payment_intents/{}", checked_id(id)?),
            &expand.into_iter().collect::<Vec<_>>(),
        )
        .await
    }

    /// With `expand_refunds`, the charge carries its refunds list.
    pub async fn charge(
        &self,
        id: &str,
        expand_refunds: bool,
    ) -> Result<super::objects::Charge, ApiError> {
        let expand = expand_refunds.then(|| ("expand[]".into(), "refunds".into()));
        self.get(
            &format!("/v1/charges/{}", checked_id(id)?),
            &expand.into_iter().collect::<Vec<_>>(),
        )
        .await
    }

    /// Every refund of a payment intent, across pages.
    pub async fn refunds_of(&self, payment_intent: &str) -> Result<Vec<Refund>, ApiError> {
        let params = vec![
            (
                "payment_intent".to_string(),
                checked_id(payment_intent)?.to_string(),
            ),
            ("limit".into(), MAX_PAGE.to_string()),
        ];
        Pager::new(self, "/v1/refunds".into(), params, None)
            .collect()
            .await
    }

    /// Every dispute of a payment intent, across pages (`GET /v1/disputes?payment_intent=`):
    /// how a dispute no event announced is found.
    pub async fn disputes_of(&self, payment_intent: &str) -> Result<Vec<Dispute>, ApiError> {
        let params = vec![
            (
                "payment_intent".to_string(),
                checked_id(payment_intent)?.to_string(),
            ),
            ("limit".into(), MAX_PAGE.to_string()),
        ];
        Pager::new(self, "/v1/disputes".into(), params, None)
            .collect()
            .await
    }

    pub async fn dispute(&self, id: &str) -> Result<Dispute, ApiError> {
        self.get(&format!("/v1/disputes/{}", checked_id(id)?), &[])
            .await
    }

    /// `POST /v1/refunds` under `idempotency_key`, the same key on every retry: the
    /// provider then creates at most one refund however often this is retried.
    pub async fn create_refund(
        &self,
        params: &CreateRefund,
        idempotency_key: &str,
    ) -> Result<Refund, ApiError> {
        if idempotency_key.is_empty() || idempotency_key.len() > MAX_IDEMPOTENCY_KEY {
            return Err(ApiError::Invalid(format!(
                "an idempotency key has 1 to {MAX_IDEMPOTENCY_KEY} characters"
            )));
        }
        let body = self
            .call(
                Method::POST,
                "/v1/refunds",
                &[],
                Some(&params.form()),
                Some(idempotency_key),
            )
            .await?;
        decode(&body)
    }

    /// One `POST /v1/refunds` attempt under `idempotency_key`, without retrying: for the
    /// outbox relay, whose retries are stored (they survive a restart). A failure carries the
    /// `Retry-After` the provider asked for.
    pub async fn create_refund_once(
        &self,
        params: &CreateRefund,
        idempotency_key: &str,
    ) -> Result<Refund, (ApiError, Option<Duration>)> {
        if idempotency_key.is_empty() || idempotency_key.len() > MAX_IDEMPOTENCY_KEY {
            return Err((
                ApiError::Invalid(format!(
                    "an idempotency key has 1 to {MAX_IDEMPOTENCY_KEY} characters"
                )),
                None,
            ));
        }
        self.limiter.until_ready().await;
        let body = self
            .attempt(
                Method::POST,
                "/v1/refunds",
                &[],
                Some(&params.form()),
                Some(idempotency_key),
            )
            .await?;
        decode(&body).map_err(|e| (e, None))
    }

    async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(String, String)],
    ) -> Result<T, ApiError> {
        let body = self.call(Method::GET, path, query, None, None).await?;
        decode(&body)
    }

    /// One logical request: attempts until success, a permanent error, or the policy's end.
    async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(String, String)],
        form: Option<&[(String, String)]>,
        idempotency_key: Option<&str>,
    ) -> Result<Vec<u8>, ApiError> {
        let mut attempt = 1;
        loop {
            self.limiter.until_ready().await;
            let (error, retry_after) = match self
                .attempt(method.clone(), path, query, form, idempotency_key)
                .await
            {
                Ok(body) => return Ok(body),
                Err(failure) => failure,
            };
            if !error.is_transient() {
                return Err(error);
            }
            match self.retry.next(attempt, retry_after) {
                Next::RetryInMs(ms) => {
                    tracing::debug!(%method, path, attempt, wait_ms = ms, %error, "provider API retry");
                    tokio::time::sleep(Duration::from_millis(ms.max(0) as u64)).await;
                    attempt += 1;
                }
                Next::GiveUp => {
                    tracing::warn!(%method, path, attempt, %error, "provider API: giving up");
                    return Err(error);
                }
            }
        }
    }

    async fn attempt(
        &self,
        method: Method,
        path: &str,
        query: &[(String, String)],
        form: Option<&[(String, String)]>,
        idempotency_key: Option<&str>,
    ) -> Result<Vec<u8>, (ApiError, Option<Duration>)> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .query(query);
        if let Some(form) = form {
            request = request.form(form);
        }
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        self.answer(request).await
    }

    /// Mercado Pago: one `POST /v1/payments/{id}/refunds` attempt under
    /// `X-Idempotency-Key`, without retrying (the relay's retries are stored): `amount` in
    /// centavos, sent in reais (`{"amount": 12.5}`), or all that is left when `None`. The
    /// refund as the API answered it.
    pub async fn mercadopago_refund_once(
        &self,
        payment_id: &str,
        amount: Option<i64>,
        idempotency_key: &str,
    ) -> Result<serde_json::Value, (ApiError, Option<Duration>)> {
        if idempotency_key.is_empty() || idempotency_key.len() > MAX_IDEMPOTENCY_KEY {
            return Err((
                ApiError::Invalid(format!(
                    "an idempotency key has 1 to {MAX_IDEMPOTENCY_KEY} characters"
                )),
                None,
            ));
        }
        let path = format!(
            "/v1/payments/{}/refunds",
            checked_id(payment_id).map_err(|e| (e, None))?
        );
        let body = match amount {
            Some(a) if a <= 0 => {
                return Err((ApiError::Invalid(format!("a refund of {a} centavos")), None))
            }
            // Centavos as reais with two decimals, written exactly.
            Some(a) => format!("{{\"amount\":{}.{:02}}}", a / 100, a % 100),
            None => "{}".into(),
        };
        self.limiter.until_ready().await;
        let request = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("X-Idempotency-Key", idempotency_key)
            .body(body);
        let answer = self.answer(request).await?;
        match serde_json::from_slice::<serde_json::Value>(&answer) {
            Ok(refund @ serde_json::Value::Object(_)) => Ok(refund),
            _ => Err((ApiError::Decode(format!("{path}: not a JSON object")), None)),
        }
    }

    /// Sends one request and reads its answer, classified.
    async fn answer(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<Vec<u8>, (ApiError, Option<Duration>)> {
        let response = request
            .send()
            .await
            .map_err(|e| (self.transport(e), None))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = self.capped_body(response).await?;
        if status.is_success() {
            return Ok(body);
        }
        if status.is_redirection() {
            return Err((
                ApiError::Api {
                    status: status.as_u16(),
                    kind: "http_error".into(),
                    code: None,
                    message: "the API answered with a redirect, which is not followed (it \
                              would carry the key elsewhere); check the provider's api_base"
                        .into(),
                    should_retry: Some(false),
                },
                None,
            ));
        }
        let retry_after = (status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error())
            .then(|| headers.get(reqwest::header::RETRY_AFTER))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, crate::store::now_ms()));
        let should_retry = headers
            .get("stripe-should-retry")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<bool>().ok());
        Err((
            ApiError::from_answer(status.as_u16(), should_retry, &body),
            retry_after,
        ))
    }

    /// The answer's body, refused (not buffered) beyond [`MAX_ANSWER_BYTES`]: a broken or
    /// hostile endpoint cannot make the server hold an answer of any size in memory.
    async fn capped_body(
        &self,
        mut response: reqwest::Response,
    ) -> Result<Vec<u8>, (ApiError, Option<Duration>)> {
        let too_big = || {
            ApiError::Decode(format!(
                "the answer is larger than {} MiB",
                MAX_ANSWER_BYTES >> 20
            ))
        };
        if response
            .content_length()
            .is_some_and(|n| n > MAX_ANSWER_BYTES as u64)
        {
            return Err((too_big(), None));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| (self.transport(e), None))?
        {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err((too_big(), None));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// reqwest's error without its URL (the base may carry credentials).
    fn transport(&self, error: reqwest::Error) -> ApiError {
        if error.is_timeout() {
            ApiError::Timeout(self.timeout_ms)
        } else {
            let error = error.without_url();
            let mut text = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(s) = source {
                text.push_str(": ");
                text.push_str(&s.to_string());
                source = s.source();
            }
            ApiError::Transport(text)
        }
    }
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::Decode(e.to_string()))
}

/// The pages of one list, fetched on demand: each page resumes after the last object of
/// the one before (`starting_after`) while the API says `has_more`.
pub struct Pager<'a, T> {
    client: &'a ApiClient,
    path: String,
    params: Vec<(String, String)>,
    after: Option<String>,
    done: bool,
    _item: std::marker::PhantomData<T>,
}

impl<'a, T: DeserializeOwned + HasId> Pager<'a, T> {
    fn new(
        client: &'a ApiClient,
        path: String,
        params: Vec<(String, String)>,
        after: Option<String>,
    ) -> Self {
        Pager {
            client,
            path,
            params,
            after,
            done: false,
            _item: std::marker::PhantomData,
        }
    }

    /// The next page; `None` after the last.
    pub async fn next_page(&mut self) -> Result<Option<Vec<T>>, ApiError> {
        if self.done {
            return Ok(None);
        }
        let mut params = self.params.clone();
        if let Some(after) = &self.after {
            params.push(("starting_after".into(), after.clone()));
        }
        let page: List<T> = self.client.get(&self.path, &params).await?;
        match page.data.last() {
            Some(last) if page.has_more => self.after = Some(last.id().to_string()),
            // An empty page that claims more would loop for ever: stop.
            _ => self.done = true,
        }
        Ok(Some(page.data))
    }

    /// Every remaining object.
    pub async fn collect(mut self) -> Result<Vec<T>, ApiError> {
        let mut all = Vec::new();
        while let Some(page) = self.next_page().await? {
            all.extend(page);
        }
        Ok(all)
    }
}

/// Pages of events after a checkpoint, oldest first (see `ApiClient::events_after`).
pub struct ForwardPager<'a> {
    client: &'a ApiClient,
    query: EventQuery,
    cursor: String,
    done: bool,
}

impl ForwardPager<'_> {
    /// The next page, oldest event first; `None` once no newer event exists.
    pub async fn next_page(&mut self) -> Result<Option<Vec<Event>>, ApiError> {
        if self.done {
            return Ok(None);
        }
        let query = EventQuery {
            ending_before: Some(self.cursor.clone()),
            ..self.query.clone()
        };
        let page = self.client.events(&query).await?;
        let mut events = page.data;
        match events.first() {
            Some(newest) => self.cursor = newest.id.clone(),
            None => {
                self.done = true;
                return Ok(None);
            }
        }
        self.done = !page.has_more;
        events.reverse();
        Ok(Some(events))
    }

    /// The newest event seen: the checkpoint to resume from next time.
    pub fn checkpoint(&self) -> &str {
        &self.cursor
    }
}

mod mercadopago;
pub use mercadopago::{search_date, updated_ms, PaymentPages, PaymentSearch, SEARCH_PATH};

#[cfg(test)]
mod tests;
