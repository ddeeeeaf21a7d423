//! Where outbox rows go: an HTTP callback (JSON, `Idempotency-Key`, Standard Webhooks
//! signature headers), an email over SMTP, or the log. Every send reports enough for the
//! attempts log and classifies its failure.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use tokio::sync::{Mutex, Semaphore};
use tracing::info;

use crate::domain::failure::{classify_http_status, ErrorClass, Failure};
use crate::domain::retry::parse_retry_after;
use crate::pipeline::relay::settings::SinkKind;
use crate::pipeline::relay::settings::SinkSettings;
use crate::provider::signature::standard_webhooks;
use crate::store::now_ms;
use crate::store::outbox::OutboxItem;

/// What a successful send returned.
#[derive(Clone, Debug, Default)]
pub struct Sent {
    pub status_code: Option<i64>,
    pub excerpt: Option<String>,
    /// The object the other side made (a provider command's refund id).
    pub object_id: Option<String>,
}

/// A failed send: the classified failure plus what the other side said.
#[derive(Clone, Debug)]
pub struct SendError {
    pub failure: Failure,
    pub status_code: Option<i64>,
    pub excerpt: Option<String>,
}

impl SendError {
    pub(super) fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        SendError {
            failure: Failure::new(class, message),
            status_code: None,
            excerpt: None,
        }
    }
}

const EXCERPT_BYTES: usize = 512;

pub(super) fn excerpt(text: &str) -> Option<String> {
    if text.is_empty() {
        return None;
    }
    let mut end = text.len().min(EXCERPT_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(text[..end].to_string())
}

/// At most the first `EXCERPT_BYTES` of a response body; the rest is never read.
async fn read_excerpt(mut response: reqwest::Response) -> String {
    let mut buf = Vec::with_capacity(EXCERPT_BYTES);
    while buf.len() < EXCERPT_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let take = (EXCERPT_BYTES - buf.len()).min(chunk.len());
                buf.extend_from_slice(&chunk[..take]);
            }
            _ => break,
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

enum Transport {
    Log,
    Http {
        client: reqwest::Client,
        url: String,
        secret: Option<String>,
    },
    Email(Box<Mailer>),
    /// A provider's API: the commands oncehook sends it (`provider:NAME`).
    Provider(Box<crate::provider::api::ApiClient>),
}

struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: lettre::message::Mailbox,
    to: lettre::message::Mailbox,
}

/// A configured sink with its concurrency and rate limits.
pub struct Sink {
    name: String,
    transport: Transport,
    permits: Semaphore,
    /// The earliest moment the next send may start, when rate-limited.
    pace: Option<(Duration, Mutex<tokio::time::Instant>)>,
}

impl Sink {
    pub fn build(name: &str, settings: &SinkSettings) -> anyhow::Result<Sink> {
        let transport = match &settings.kind {
            SinkKind::Log => Transport::Log,
            SinkKind::Http {
                url,
                secret,
                timeout_ms,
            } => {
                if let Some(secret) = secret {
                    standard_webhooks::decode_secret(secret)?;
                }
                Transport::Http {
                    client: reqwest::Client::builder()
                        .timeout(Duration::from_millis(*timeout_ms))
                        // Never follow: a 301/302/303 turns the POST into a bodiless GET
                        // whose 2xx would mark an undelivered message delivered, and a
                        // 307/308 sends the signed request elsewhere.
                        .redirect(reqwest::redirect::Policy::none())
                        .build()?,
                    url: url.clone(),
                    secret: secret.clone(),
                }
            }
            SinkKind::Email {
                smtp_host,
                smtp_port,
                security,
                username,
                password,
                from,
                to,
                timeout_ms,
            } => {
                anyhow::ensure!(
                    !(security == "none" && (username.is_some() || password.is_some())),
                    "sink {name}: SMTP credentials over security = \"none\" would cross the \
                     network in clear; use starttls or tls"
                );
                let mut builder = match security.as_str() {
                    "none" => AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(smtp_host),
                    "starttls" => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(smtp_host)?,
                    "tls" => AsyncSmtpTransport::<Tokio1Executor>::relay(smtp_host)?,
                    other => anyhow::bail!(
                        "sink {name}: security must be none, starttls or tls, not {other:?}"
                    ),
                }
                .port(*smtp_port)
                .timeout(Some(Duration::from_millis(*timeout_ms)));
                if let Some(user) = username {
                    builder = builder.credentials(Credentials::new(
                        user.clone(),
                        password.clone().unwrap_or_default(),
                    ));
                }
                Transport::Email(Box::new(Mailer {
                    transport: builder.build(),
                    from: from
                        .parse()
                        .map_err(|e| anyhow::anyhow!("sink {name}: from: {e}"))?,
                    to: to
                        .parse()
                        .map_err(|e| anyhow::anyhow!("sink {name}: to: {e}"))?,
                }))
            }
        };
        let pace = match settings.rate_per_sec {
            Some(rate) if rate > 0.0 => Some((
                Duration::from_secs_f64(1.0 / rate),
                Mutex::new(tokio::time::Instant::now()),
            )),
            _ => None,
        };
        Ok(Sink {
            name: name.to_string(),
            transport,
            permits: Semaphore::new(settings.concurrency.max(1)),
            pace,
        })
    }

    pub fn log() -> Sink {
        Sink {
            name: "log".into(),
            transport: Transport::Log,
            permits: Semaphore::new(64),
            pace: None,
        }
    }

    pub async fn send(&self, item: &OutboxItem) -> Result<Sent, SendError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .expect("semaphore never closed");
        if let Some((gap, next)) = &self.pace {
            let mut next = next.lock().await;
            let now = tokio::time::Instant::now();
            let start = (*next).max(now);
            *next = start + *gap;
            drop(next);
            tokio::time::sleep_until(start).await;
        }
        match &self.transport {
            Transport::Log => {
                info!(sink = %self.name, topic = %item.topic, order_id = %item.order_id,
                      idempotency_key = %item.idempotency_key, "outbox message");
                Ok(Sent::default())
            }
            Transport::Http {
                client,
                url,
                secret,
            } => send_http(client, url, secret.as_deref(), item).await,
            Transport::Email(mailer) => send_email(mailer, item).await,
            Transport::Provider(client) => super::commands::send(client, item).await,
        }
    }
}

async fn send_http(
    client: &reqwest::Client,
    url: &str,
    secret: Option<&str>,
    item: &OutboxItem,
) -> Result<Sent, SendError> {
    let timestamp = now_ms() / 1000;
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("idempotency-key", &item.idempotency_key)
        .header("webhook-id", &item.idempotency_key)
        .header("webhook-timestamp", timestamp.to_string())
        .header("x-correlation-id", &item.correlation_id)
        .body(item.payload.clone());
    if let Some(secret) = secret {
        let signature = standard_webhooks::sign(
            secret,
            &item.idempotency_key,
            timestamp,
            item.payload.as_bytes(),
        )
        .map_err(|e| SendError::new(ErrorClass::Permanent, format!("signing: {e}")))?;
        request = request.header("webhook-signature", signature);
    }
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            let class = if e.is_timeout() || e.is_connect() || e.is_request() {
                ErrorClass::Transient
            } else {
                ErrorClass::Unknown
            };
            // Without the URL: it may carry a token.
            return Err(SendError::new(
                class,
                format!("HTTP request failed: {}", e.without_url()),
            ));
        }
    };
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, now_ms()));
    let body = read_excerpt(response).await;
    if (300..400).contains(&status) {
        return Err(SendError {
            failure: Failure::new(
                ErrorClass::Permanent,
                format!(
                    "HTTP {status} from the sink: redirects are not followed; configure the \
                     final URL"
                ),
            ),
            status_code: Some(i64::from(status)),
            excerpt: excerpt(&body),
        });
    }
    if (200..300).contains(&status) {
        return Ok(Sent {
            status_code: Some(i64::from(status)),
            excerpt: excerpt(&body),
            object_id: None,
        });
    }
    let mut failure = Failure::new(
        classify_http_status(status),
        format!("HTTP {status} from the sink"),
    );
    if matches!(status, 429 | 503) {
        failure.retry_after = retry_after;
    }
    Err(SendError {
        failure,
        status_code: Some(i64::from(status)),
        excerpt: excerpt(&body),
    })
}

async fn send_email(mailer: &Mailer, item: &OutboxItem) -> Result<Sent, SendError> {
    let pretty = serde_json::from_str::<serde_json::Value>(&item.payload)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| item.payload.clone());
    let message = Message::builder()
        .from(mailer.from.clone())
        .to(mailer.to.clone())
        // The idempotency key as Message-ID lets the receiving side drop a resend.
        .message_id(Some(format!("<{}@oncehook>", item.idempotency_key)))
        .subject(format!(
            "[oncehook] {} for order {}",
            item.topic, item.order_id
        ))
        .header(ContentType::TEXT_PLAIN)
        .body(format!(
            "{} for order {}\n\n{pretty}\n",
            item.topic, item.order_id
        ))
        .map_err(|e| SendError::new(ErrorClass::Permanent, format!("building the email: {e}")))?;
    match mailer.transport.send(message).await {
        Ok(response) => Ok(Sent {
            status_code: Some(i64::from(u16::from(response.code()))),
            excerpt: excerpt(&response.message().collect::<Vec<_>>().join(" ")),
            object_id: None,
        }),
        Err(e) => {
            let class = if e.is_permanent() {
                ErrorClass::Permanent
            } else {
                ErrorClass::Transient
            };
            Err(SendError {
                status_code: e.status().map(|c| i64::from(u16::from(c))),
                failure: Failure::new(class, format!("SMTP: {e}")),
                excerpt: None,
            })
        }
    }
}

/// Every configured sink by name; `log` always exists.
#[derive(Clone)]
pub struct Sinks(Arc<HashMap<String, Arc<Sink>>>);

impl Sinks {
    pub fn build(
        settings: &std::collections::BTreeMap<String, SinkSettings>,
    ) -> anyhow::Result<Sinks> {
        let mut map: HashMap<String, Arc<Sink>> = HashMap::new();
        map.insert("log".into(), Arc::new(Sink::log()));
        for (name, s) in settings {
            map.insert(name.clone(), Arc::new(Sink::build(name, s)?));
        }
        Ok(Sinks(Arc::new(map)))
    }

    /// Adds a `provider:NAME` sink for each provider with an API key: where its commands
    /// (refunds) go.
    pub fn with_providers(
        self,
        providers: &[crate::provider::settings::ProviderSettings],
    ) -> anyhow::Result<Sinks> {
        let mut map = (*self.0).clone();
        for p in providers.iter().filter(|p| p.api.key.is_some()) {
            let name = crate::domain::commands::sink_for(&p.name);
            let client = if p.scheme == crate::provider::signature::SchemeKind::MercadoPago {
                let mut api = p.api.clone();
                if api.base == crate::provider::settings::ProviderApiSettings::default().base {
                    api.base = crate::provider::settings::MERCADOPAGO_API_BASE.into();
                }
                crate::provider::api::ApiClient::new(&api).map(|c| c.for_mercadopago())
            } else {
                crate::provider::api::ApiClient::new(&p.api)
            }
            .map_err(|e| anyhow::anyhow!("provider {}: {e}", p.name))?;
            map.insert(
                name.clone(),
                Arc::new(Sink {
                    name,
                    transport: Transport::Provider(Box::new(client)),
                    // The API client paces itself under the provider's rate limit.
                    permits: Semaphore::new(16),
                    pace: None,
                }),
            );
        }
        Ok(Sinks(Arc::new(map)))
    }

    pub fn get(&self, name: &str) -> Option<Arc<Sink>> {
        self.0.get(name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use crate::pipeline::relay::settings::SinkKind;
    use crate::pipeline::relay::settings::SinkSettings;

    #[test]
    fn smtp_credentials_over_plain_text_are_refused() {
        let email = |security: &str, username: Option<&str>| SinkSettings {
            kind: SinkKind::Email {
                smtp_host: "smtp.example".into(),
                smtp_port: 25,
                security: security.into(),
                username: username.map(Into::into),
                password: username.map(|_| "hunter2hunter2".into()),
                from: "a@shop.example".into(),
                to: "b@shop.example".into(),
                timeout_ms: 1000,
            },
            concurrency: 1,
            rate_per_sec: None,
        };
        let err = super::Sink::build("mail", &email("none", Some("u")))
            .err()
            .expect("refused")
            .to_string();
        assert!(
            err.contains("security") && !err.contains("hunter2"),
            "{err}"
        );
        assert!(super::Sink::build("mail", &email("none", None)).is_ok());
        assert!(super::Sink::build("mail", &email("starttls", Some("u"))).is_ok());
    }

    #[test]
    fn excerpts_are_bounded_and_cut_on_char_boundaries() {
        assert_eq!(super::excerpt(""), None);
        let long = "é".repeat(600);
        let e = super::excerpt(&long).unwrap();
        assert!(e.len() <= 512 && e.chars().all(|c| c == 'é'));
    }
}
