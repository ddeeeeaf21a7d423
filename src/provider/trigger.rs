//! `oncehook trigger pix.paid --url …`: one signed webhook, in a provider's own shape, sent
//! to any URL. The local Pix trigger Mercado Pago lacks (people paid themselves R$ 5 and
//! read production logs): point it at oncehook, at a tunnel, or at your own endpoint.

use anyhow::Context;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use rand::RngCore;
use serde_json::{json, Value};

use crate::provider::settings::ProviderSettings;
use crate::provider::signature::{SchemeKind, Verifier};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TriggerEvent {
    /// A Pix QR payment paid.
    #[value(name = "pix.paid")]
    PixPaid,
    /// A Pix QR payment that expired unpaid.
    #[value(name = "pix.expired")]
    PixExpired,
    /// A boleto paid (days after it was issued).
    #[value(name = "boleto.paid")]
    BoletoPaid,
    /// A card payment approved.
    #[value(name = "card.paid")]
    CardPaid,
}

#[derive(clap::Args, Debug)]
pub struct TriggerArgs {
    pub event: TriggerEvent,
    /// Where to POST it, e.g. http://127.0.0.1:8080/webhooks/mercadopago.
    #[arg(long)]
    pub url: String,
    /// A provider of the configuration (its scheme and first secret sign the event), or,
    /// with --scheme and --secret, any name.
    #[arg(long, default_value = "mercadopago")]
    pub provider: String,
    /// The scheme, when the provider is not configured: mercadopago, pagbank, asaas,
    /// efi-pix, stripe, standard-webhooks.
    #[arg(long)]
    pub scheme: Option<String>,
    /// The signing secret (or token), when the provider is not configured.
    #[arg(long, env = "ONCEHOOK_TRIGGER_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    /// The order the payment is for (metadata / external reference).
    #[arg(long, default_value = "order-trigger-1")]
    pub order: String,
    /// Minor units: 500 is R$ 5,00.
    #[arg(long, default_value_t = 500)]
    pub amount: i64,
    #[arg(long, default_value = "BRL")]
    pub currency: String,
    /// Print the request (a curl command) instead of sending it.
    #[arg(long)]
    pub print: bool,
}

/// One request, signed, ready to send.
#[derive(Debug)]
pub struct Prepared {
    pub url: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::thread_rng().fill_bytes(&mut b);
    hex::encode(b)
}

fn provider_settings(
    providers: &[ProviderSettings],
    args: &TriggerArgs,
) -> anyhow::Result<ProviderSettings> {
    if let Some(p) = providers.iter().find(|p| p.name == args.provider) {
        if args.scheme.is_none() && args.secret.is_none() {
            return Ok(p.clone());
        }
    }
    let (Some(scheme), Some(secret)) = (&args.scheme, &args.secret) else {
        anyhow::bail!(
            "provider {:?} is not configured: give --scheme and --secret (or --config with \
             that provider)",
            args.provider
        );
    };
    let scheme: SchemeKind = serde_json::from_value(json!(scheme))
        .map_err(|_| anyhow::anyhow!("unknown scheme {scheme:?}"))?;
    Ok(ProviderSettings {
        name: args.provider.clone(),
        scheme,
        secrets: vec![secret.clone()],
        tolerance_secs: 300,
        mapping: None,
        events: Default::default(),
        api: Default::default(),
        signature: None,
    })
}

/// Amount in major units with two decimals, as the Brazilian providers write it.
fn major(amount: i64) -> f64 {
    amount as f64 / 100.0
}

/// The event in `scheme`'s own shape; Mercado Pago's also needs a query string.
fn payload(
    scheme: SchemeKind,
    args: &TriggerArgs,
    now_secs: i64,
) -> anyhow::Result<(Value, Option<String>)> {
    let at = chrono::DateTime::from_timestamp(now_secs, 0)
        .unwrap_or_default()
        .with_timezone(&chrono::FixedOffset::west_opt(3 * 3600).expect("UTC-3"));
    let iso = at.to_rfc3339_opts(chrono::SecondsFormat::Millis, false);
    let id = random_hex(6);
    let (pix, boleto) = (
        matches!(args.event, TriggerEvent::PixPaid | TriggerEvent::PixExpired),
        args.event == TriggerEvent::BoletoPaid,
    );
    let paid = args.event != TriggerEvent::PixExpired;
    Ok(match scheme {
        SchemeKind::MercadoPago => {
            // Thin: the receiver fetches GET /v1/payments/{data.id} for the rest.
            let payment_id = u64::from_str_radix(&id, 16).unwrap_or(1) % 100_000_000_000;
            let body = json!({
                "id": u64::from_str_radix(&random_hex(5), 16).unwrap_or(1),
                "live_mode": false,
                "type": "payment",
                "date_created": iso,
                "user_id": 0,
                "api_version": "v1",
                "action": "payment.updated",
                "data": { "id": payment_id.to_string() },
            });
            (body, Some(format!("data.id={payment_id}&type=payment")))
        }
        SchemeKind::Asaas => (
            json!({
                "id": format!("evt_{}", random_hex(16)),
                "event": if paid { "PAYMENT_RECEIVED" } else { "PAYMENT_OVERDUE" },
                "dateCreated": at.format("%Y-%m-%d %H:%M:%S").to_string(),
                "payment": {
                    "object": "payment",
                    "id": format!("pay_{id}"),
                    "dateCreated": at.format("%Y-%m-%d").to_string(),
                    "value": major(args.amount),
                    "billingType": if pix { "PIX" } else if boleto { "BOLETO" } else { "CREDIT_CARD" },
                    "status": if paid { "RECEIVED" } else { "OVERDUE" },
                    "externalReference": args.order,
                },
            }),
            None,
        ),
        SchemeKind::PagBank => (
            json!({
                "id": format!("ORDE_{}", id.to_uppercase()),
                "reference_id": args.order,
                "created_at": iso,
                "charges": [{
                    "id": format!("CHAR_{}", id.to_uppercase()),
                    "reference_id": args.order,
                    "status": if paid { "PAID" } else { "CANCELED" },
                    "amount": { "value": args.amount, "currency": args.currency },
                    "payment_method": { "type": if pix { "PIX" } else if boleto { "BOLETO" } else { "CREDIT_CARD" } },
                }],
            }),
            None,
        ),
        SchemeKind::EfiPix => {
            anyhow::ensure!(
                args.event == TriggerEvent::PixPaid,
                "Efí's Pix webhook announces received Pix only: use pix.paid"
            );
            (
                json!({ "pix": [{
                    "endToEndId": format!("E{}", random_hex(15)),
                    "txid": random_hex(16),
                    "chave": "oncehook-trigger",
                    "valor": format!("{:.2}", major(args.amount)),
                    "horario": iso,
                    "infoPagador": args.order,
                }]}),
                None,
            )
        }
        SchemeKind::Stripe | SchemeKind::StandardWebhooks => {
            let method = if pix {
                "pix"
            } else if boleto {
                "boleto"
            } else {
                "card"
            };
            let (kind, status) = if paid {
                ("payment_intent.succeeded", "succeeded")
            } else {
                ("payment_intent.canceled", "canceled")
            };
            let pi = format!("pi_{id}");
            if scheme == SchemeKind::Stripe {
                (
                    json!({
                        "id": format!("evt_{}", random_hex(12)),
                        "object": "event",
                        "type": kind,
                        "api_version": "2024-06-20",
                        "created": now_secs,
                        "livemode": false,
                        "data": { "object": {
                            "id": pi, "object": "payment_intent",
                            "amount": args.amount,
                            "amount_received": if paid { args.amount } else { 0 },
                            "currency": args.currency.to_lowercase(),
                            "status": status,
                            "payment_method_types": [method],
                            "metadata": { "order_id": args.order },
                        }},
                    }),
                    None,
                )
            } else {
                (
                    json!({
                        "type": if paid { "payment.succeeded" } else { "payment.canceled" },
                        "timestamp": at.to_rfc3339(),
                        "data": {
                            "order_id": args.order,
                            "payment_id": pi,
                            "amount": args.amount,
                            "currency": args.currency,
                            "method": method,
                        },
                    }),
                    None,
                )
            }
        }
        SchemeKind::Generic => anyhow::bail!(
            "a generic provider has no payload shape oncehook knows: trigger sends the \
             presets' and Stripe's"
        ),
    })
}

/// The signed request for `args`, as its provider would send it at `now_secs`.
pub fn prepare(
    providers: &[ProviderSettings],
    args: &TriggerArgs,
    now_secs: i64,
) -> anyhow::Result<Prepared> {
    let provider = provider_settings(providers, args)?;
    let verifier = Verifier::with_spec(
        provider.scheme,
        &provider.secrets,
        provider.tolerance_secs,
        provider.signature.as_ref(),
    )
    .with_context(|| format!("provider {}", provider.name))?;
    let (body, query) = payload(provider.scheme, args, now_secs)?;
    let body = serde_json::to_vec(&body)?;
    let mut headers = HeaderMap::new();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let mut url = args.url.clone();
    let join = |url: &mut String, q: &str| {
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(q);
    };
    if let Some(q) = &query {
        join(&mut url, q);
    }
    match &verifier {
        Verifier::Stripe(_) => {
            let secret = &provider.secrets[0];
            let value = crate::provider::signature::stripe::sign(secret, now_secs, &body);
            headers.insert("stripe-signature", HeaderValue::from_str(&value)?);
        }
        Verifier::StandardWebhooks(_) => {
            let id = format!("msg_{}", random_hex(12));
            let value = crate::provider::signature::standard_webhooks::sign(
                &provider.secrets[0],
                &id,
                now_secs,
                &body,
            )?;
            headers.insert("webhook-id", HeaderValue::from_str(&id)?);
            headers.insert("webhook-timestamp", HeaderValue::from(now_secs));
            headers.insert("webhook-signature", HeaderValue::from_str(&value)?);
        }
        Verifier::Generic(generic) => {
            for name in generic.signed_headers() {
                headers.insert(
                    HeaderName::from_bytes(name.as_bytes())?,
                    HeaderValue::from_str(&uuid::Uuid::new_v4().to_string())?,
                );
            }
            let value = generic
                .sign(&headers, query.as_deref(), &body, now_secs)
                .map_err(|e| anyhow::anyhow!("signing: {e}"))?;
            match generic.placement() {
                Ok(header) => {
                    headers.insert(HeaderName::from_bytes(header.as_bytes())?, value.parse()?);
                }
                Err(param) => {
                    let encoded: String =
                        url::form_urlencoded::byte_serialize(value.as_bytes()).collect();
                    join(&mut url, &format!("{param}={encoded}"));
                }
            }
        }
    }
    Ok(Prepared { url, headers, body })
}

/// Sends it (or prints it with `--print`); the answer's status decides the exit status.
/// Sends it; `providers` are the configured ones (a named one signs with its own secret).
pub async fn run(providers: &[ProviderSettings], args: TriggerArgs) -> anyhow::Result<()> {
    let prepared = prepare(providers, &args, chrono::Utc::now().timestamp())?;
    if args.print {
        let mut line = format!("curl -sS -X POST '{}'", prepared.url);
        for (k, v) in &prepared.headers {
            line.push_str(&format!(" -H '{}: {}'", k, v.to_str().unwrap_or_default()));
        }
        line.push_str(&format!(
            " --data-binary '{}'",
            String::from_utf8_lossy(&prepared.body).replace('\'', "'\\''")
        ));
        println!("{line}");
        return Ok(());
    }
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(30))
        .build()?;
    let mut request = http.post(&prepared.url).body(prepared.body);
    for (k, v) in &prepared.headers {
        request = request.header(k.as_str(), v.as_bytes());
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("POST {}", prepared.url))?;
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let shown: String = text.chars().take(2_000).collect();
    println!("{} {status}\n{shown}", args.event_name());
    anyhow::ensure!(status.is_success(), "the endpoint answered {status}");
    Ok(())
}

impl TriggerArgs {
    fn event_name(&self) -> &'static str {
        match self.event {
            TriggerEvent::PixPaid => "pix.paid",
            TriggerEvent::PixExpired => "pix.expired",
            TriggerEvent::BoletoPaid => "boleto.paid",
            TriggerEvent::CardPaid => "card.paid",
        }
    }
}
