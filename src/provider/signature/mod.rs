//! Webhook signature schemes. Verification runs over the raw body before anything else
//! touches it; comparisons are constant-time (`Mac::verify_slice`); error messages never
//! contain a secret or the expected signature.

pub mod generic;
pub mod standard_webhooks;
pub mod stripe;

use axum::http::HeaderMap;
use hmac::digest::CtOutput;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

pub use generic::{Generic, SignatureSpec};
pub use standard_webhooks::StandardWebhooks;
pub use stripe::Stripe;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchemeKind {
    Stripe,
    StandardWebhooks,
    /// Presets over the generic scheme (`generic::preset`).
    #[serde(rename = "mercadopago")]
    MercadoPago,
    #[serde(rename = "pagbank")]
    PagBank,
    Asaas,
    EfiPix,
    /// Described by the provider's `[providers.signature]` table.
    Generic,
}

impl SchemeKind {
    /// The name in configuration files.
    pub fn as_str(self) -> &'static str {
        match self {
            SchemeKind::Stripe => "stripe",
            SchemeKind::StandardWebhooks => "standard-webhooks",
            SchemeKind::MercadoPago => "mercadopago",
            SchemeKind::PagBank => "pagbank",
            SchemeKind::Asaas => "asaas",
            SchemeKind::EfiPix => "efi-pix",
            SchemeKind::Generic => "generic",
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignatureError {
    #[error("missing {0} header")]
    MissingHeader(&'static str),
    #[error("malformed {0} header: {1}")]
    Malformed(&'static str, &'static str),
    #[error("timestamp outside the tolerance of {tolerance_secs} s (off by {skew_secs} s)")]
    StaleTimestamp { skew_secs: i64, tolerance_secs: u64 },
    #[error("no signature matches any configured secret")]
    NoMatch,
    /// A header or query parameter a configured scheme needs (named in configuration).
    #[error("missing {0}")]
    Missing(String),
    #[error("malformed {0}: {1}")]
    MalformedNamed(String, &'static str),
}

impl SignatureError {
    /// 400 for requests we cannot even read, 401 for readable ones that fail the check.
    pub fn status(&self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        match self {
            SignatureError::MissingHeader(_)
            | SignatureError::Malformed(..)
            | SignatureError::Missing(_)
            | SignatureError::MalformedNamed(..) => StatusCode::BAD_REQUEST,
            SignatureError::StaleTimestamp { .. } | SignatureError::NoMatch => {
                StatusCode::UNAUTHORIZED
            }
        }
    }
}

/// What a verified request tells us besides "it is authentic".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verified {
    /// The event id carried by the signature headers (Standard Webhooks' `webhook-id`).
    pub header_event_id: Option<String>,
}

/// A configured scheme with its secrets (several at once while rotating).
#[derive(Clone, Debug)]
pub enum Verifier {
    Stripe(Stripe),
    StandardWebhooks(StandardWebhooks),
    Generic(Generic),
}

impl Verifier {
    /// Refuses weak secrets: an empty list, Stripe secrets shorter than 16 bytes, Standard
    /// Webhooks keys outside 24–64 bytes once decoded (an empty `whsec_` from an unset
    /// template variable would make an HMAC anyone can compute). Errors name the secret's
    /// position, never its value.
    pub fn new(kind: SchemeKind, secrets: &[String], tolerance_secs: u64) -> anyhow::Result<Self> {
        Self::with_spec(kind, secrets, tolerance_secs, None)
    }

    /// As `new`; `spec` is the `[providers.signature]` table, required by `generic` and
    /// refused by every other scheme.
    pub fn with_spec(
        kind: SchemeKind,
        secrets: &[String],
        tolerance_secs: u64,
        spec: Option<&SignatureSpec>,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(!secrets.is_empty(), "a provider needs at least one secret");
        match (kind, spec) {
            (SchemeKind::Generic, None) => {
                anyhow::bail!("scheme \"generic\" needs a [providers.signature] table")
            }
            (SchemeKind::Generic, Some(spec)) => {
                return Ok(Verifier::Generic(Generic::new(
                    spec,
                    secrets,
                    tolerance_secs,
                )?))
            }
            (kind, Some(_)) => anyhow::bail!(
                "scheme {:?} has its own signature rules: a [providers.signature] table \
                 is for scheme \"generic\"",
                kind.as_str()
            ),
            (SchemeKind::Stripe | SchemeKind::StandardWebhooks, None) => {}
            (preset, None) => {
                let spec = generic::preset(preset.as_str()).expect("every preset is defined");
                return Ok(Verifier::Generic(Generic::new(
                    &spec,
                    secrets,
                    tolerance_secs,
                )?));
            }
        }
        for (i, secret) in secrets.iter().enumerate() {
            let n = i + 1;
            match kind {
                SchemeKind::Stripe => anyhow::ensure!(
                    secret.len() >= MIN_STRIPE_SECRET_BYTES,
                    "secret #{n} is {} bytes long; a Stripe signing secret has at least \
                     {MIN_STRIPE_SECRET_BYTES}",
                    secret.len()
                ),
                _ => {
                    let key = standard_webhooks::decode_secret(secret)
                        .map_err(|e| anyhow::anyhow!("secret #{n}: {e}"))?;
                    anyhow::ensure!(
                        STANDARD_WEBHOOKS_KEY_BYTES.contains(&key.len()),
                        "secret #{n} decodes to {} bytes; a Standard Webhooks key has 24 to 64",
                        key.len()
                    );
                }
            }
        }
        Ok(match kind {
            SchemeKind::Stripe => Verifier::Stripe(Stripe::new(secrets, tolerance_secs)),
            _ => Verifier::StandardWebhooks(StandardWebhooks::new(secrets, tolerance_secs)?),
        })
    }

    /// `query`: the request's query string, which some providers sign or sign with.
    pub fn verify(
        &self,
        headers: &HeaderMap,
        query: Option<&str>,
        body: &[u8],
        now_secs: i64,
    ) -> Result<Verified, SignatureError> {
        match self {
            Verifier::Stripe(s) => s.verify(headers, body, now_secs),
            Verifier::StandardWebhooks(s) => s.verify(headers, body, now_secs),
            Verifier::Generic(s) => s.verify(headers, query, body, now_secs),
        }
    }
}

const MIN_STRIPE_SECRET_BYTES: usize = 16;
const STANDARD_WEBHOOKS_KEY_BYTES: std::ops::RangeInclusive<usize> = 24..=64;

/// Most signature candidates a request may carry (rotation needs two or three); more is
/// refused with 400 before any HMAC is computed.
pub const MAX_CANDIDATES: usize = 8;
/// Longest signature header accepted; longer is refused with 400.
pub const MAX_HEADER_BYTES: usize = 4096;
/// HMAC-SHA256 tags are 32 bytes; candidates of any other length are never compared.
const TAG_BYTES: usize = 32;

fn header<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, SignatureError> {
    let value = headers
        .get(name)
        .ok_or(SignatureError::MissingHeader(name))?;
    if value.len() > MAX_HEADER_BYTES {
        return Err(SignatureError::Malformed(name, "longer than 4096 bytes"));
    }
    value
        .to_str()
        .map_err(|_| SignatureError::Malformed(name, "not visible ASCII"))
}

/// The expected tag for one key, computed once per request whatever the candidates.
fn expected_tag(key: &[u8], prefix: &[u8], body: &[u8]) -> CtOutput<Hmac<Sha256>> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(prefix);
    mac.update(body);
    mac.finalize()
}

/// Whether any key's tag equals any candidate: one HMAC per key, then a constant-time
/// comparison against each candidate of exactly the tag's length.
fn any_key_matches<'k>(
    keys: impl IntoIterator<Item = &'k [u8]>,
    prefix: &[u8],
    body: &[u8],
    candidates: &[Vec<u8>],
) -> bool {
    let candidates: Vec<CtOutput<Hmac<Sha256>>> = candidates
        .iter()
        .filter(|c| c.len() == TAG_BYTES)
        .map(|c| {
            CtOutput::new(hmac::digest::generic_array::GenericArray::clone_from_slice(
                c,
            ))
        })
        .collect();
    if candidates.is_empty() {
        return false;
    }
    let mut matched = false;
    for key in keys {
        let expected = expected_tag(key, prefix, body);
        for candidate in &candidates {
            // CtOutput's equality is constant-time; no early exit between candidates.
            matched |= expected == *candidate;
        }
    }
    matched
}

fn check_tolerance(
    timestamp: i64,
    now_secs: i64,
    tolerance_secs: u64,
) -> Result<(), SignatureError> {
    let skew = now_secs.saturating_sub(timestamp);
    if skew.unsigned_abs() > tolerance_secs {
        return Err(SignatureError::StaleTimestamp {
            skew_secs: skew,
            tolerance_secs,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verifier(kind: SchemeKind, secrets: &[&str]) -> anyhow::Result<Verifier> {
        let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        Verifier::new(kind, &secrets, 300)
    }

    #[test]
    fn weak_secrets_are_refused_with_a_message_that_does_not_echo_them() {
        use base64::Engine;
        let b64 = |n: usize| {
            format!(
                "whsec_{}",
                base64::engine::general_purpose::STANDARD.encode(vec![7u8; n])
            )
        };
        for (kind, secrets) in [
            (SchemeKind::Stripe, vec![]),
            (SchemeKind::Stripe, vec![""]),
            (SchemeKind::Stripe, vec!["whsec_"]),
            (SchemeKind::Stripe, vec!["whsec_short"]),
            (
                SchemeKind::Stripe,
                vec!["whsec_0123456789abcdef", "fifteen-bytes!!"],
            ),
            (SchemeKind::StandardWebhooks, vec!["whsec_"]),
            (SchemeKind::StandardWebhooks, vec![""]),
        ] {
            let err = verifier(kind, &secrets).unwrap_err().to_string();
            for s in secrets.iter().filter(|s| s.len() > 6) {
                assert!(!err.contains(s), "{err} echoes {s}");
            }
        }
        let short = b64(23);
        let long = b64(65);
        assert!(verifier(SchemeKind::StandardWebhooks, &[&short]).is_err());
        assert!(verifier(SchemeKind::StandardWebhooks, &[&long]).is_err());
        assert!(verifier(SchemeKind::StandardWebhooks, &[&b64(24)]).is_ok());
        assert!(verifier(SchemeKind::StandardWebhooks, &[&b64(64)]).is_ok());
        assert!(
            verifier(SchemeKind::Stripe, &["whsec_0123456789"]).is_ok(),
            "16 bytes"
        );
        assert!(
            verifier(SchemeKind::Stripe, &["whsec_012345678"]).is_err(),
            "15 bytes"
        );
    }
}
