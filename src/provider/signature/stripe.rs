//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]`, HMAC-SHA256 keyed with the
//! secret as a literal string over `"{t}.{raw body}"`; any matching v1 is accepted.

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{any_key_matches, check_tolerance, header, SignatureError, Verified, MAX_CANDIDATES};

const HEADER: &str = "stripe-signature";

#[derive(Clone)]
pub struct Stripe {
    secrets: Vec<Vec<u8>>,
    tolerance_secs: u64,
}

impl std::fmt::Debug for Stripe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stripe")
            .field(
                "secrets",
                &format_args!("[{} redacted]", self.secrets.len()),
            )
            .field("tolerance_secs", &self.tolerance_secs)
            .finish()
    }
}

impl Stripe {
    pub fn new(secrets: &[String], tolerance_secs: u64) -> Self {
        Stripe {
            secrets: secrets.iter().map(|s| s.as_bytes().to_vec()).collect(),
            tolerance_secs,
        }
    }

    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now_secs: i64,
    ) -> Result<Verified, SignatureError> {
        let value = header(headers, HEADER)?;
        let mut timestamp = None;
        let mut signatures = Vec::new();
        let mut candidates = 0;
        for part in value.split(',') {
            let Some((k, v)) = part.trim().split_once('=') else {
                return Err(SignatureError::Malformed(
                    HEADER,
                    "expected key=value pairs",
                ));
            };
            match k {
                "t" => {
                    timestamp = Some(v.parse::<i64>().map_err(|_| {
                        SignatureError::Malformed(HEADER, "t is not a Unix timestamp")
                    })?)
                }
                // Unparseable v1 values cannot match; other schemes (v0) are ignored.
                "v1" => {
                    candidates += 1;
                    if candidates > MAX_CANDIDATES {
                        return Err(SignatureError::Malformed(HEADER, "more than 8 signatures"));
                    }
                    signatures.extend(hex::decode(v).ok());
                }
                _ => {}
            }
        }
        let timestamp = timestamp.ok_or(SignatureError::Malformed(HEADER, "no t="))?;
        if signatures.is_empty() {
            return Err(SignatureError::Malformed(HEADER, "no v1 signature"));
        }
        check_tolerance(timestamp, now_secs, self.tolerance_secs)?;
        let prefix = format!("{timestamp}.");
        let keys = self.secrets.iter().map(Vec::as_slice);
        if any_key_matches(keys, prefix.as_bytes(), body, &signatures) {
            return Ok(Verified::default());
        }
        Err(SignatureError::NoMatch)
    }
}

/// Signs like Stripe does; used by tests, the benchmark and `oncehook send`-style tooling.
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(body);
    format!(
        "t={timestamp},v1={}",
        hex::encode(mac.finalize().into_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(HEADER, value.parse().unwrap());
        h
    }

    const NOW: i64 = 1_700_000_000;

    #[test]
    fn accepts_a_valid_signature() {
        let v = Stripe::new(&["whsec_a".into()], 300);
        let body = br#"{"id":"evt_1"}"#;
        assert!(v
            .verify(&headers(&sign("whsec_a", NOW, body)), body, NOW)
            .is_ok());
    }

    #[test]
    fn accepts_any_secret_during_rotation_and_any_v1() {
        let v = Stripe::new(&["whsec_new".into(), "whsec_old".into()], 300);
        let body = b"{}";
        assert!(v
            .verify(&headers(&sign("whsec_old", NOW, body)), body, NOW)
            .is_ok());
        let good = sign("whsec_new", NOW, body);
        let v1 = good.split("v1=").nth(1).unwrap();
        let two = format!("t={NOW},v1={},v1={v1}", "00".repeat(32));
        assert!(v.verify(&headers(&two), body, NOW).is_ok());
    }

    #[test]
    fn rejects_wrong_secret_tampered_body_and_stale_timestamp() {
        let v = Stripe::new(&["whsec_a".into()], 300);
        let body = b"{}";
        assert_eq!(
            v.verify(&headers(&sign("whsec_b", NOW, body)), body, NOW),
            Err(SignatureError::NoMatch)
        );
        assert_eq!(
            v.verify(&headers(&sign("whsec_a", NOW, body)), b"{ }", NOW),
            Err(SignatureError::NoMatch)
        );
        assert!(matches!(
            v.verify(&headers(&sign("whsec_a", NOW - 301, body)), body, NOW),
            Err(SignatureError::StaleTimestamp { .. })
        ));
        assert!(v
            .verify(&headers(&sign("whsec_a", NOW - 300, body)), body, NOW)
            .is_ok());
    }

    #[test]
    fn malformed_headers_are_400_material() {
        let v = Stripe::new(&["whsec_a".into()], 300);
        assert_eq!(
            v.verify(&HeaderMap::new(), b"", NOW),
            Err(SignatureError::MissingHeader(HEADER))
        );
        for bad in ["garbage", "t=abc,v1=00", "v1=00", "t=1"] {
            let err = v.verify(&headers(bad), b"", NOW).unwrap_err();
            assert_eq!(
                err.status(),
                axum::http::StatusCode::BAD_REQUEST,
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn empty_and_wrong_length_candidates_never_match() {
        let v = Stripe::new(&["whsec_a".into()], 300);
        let body = b"{}";
        for header in [
            format!("t={NOW},v1="),
            format!("t={NOW},v1=,v1=,v1="),
            format!("t={NOW},v1=00"),
            format!("t={NOW},v1={}", "00".repeat(33)),
        ] {
            assert!(v.verify(&headers(&header), body, NOW).is_err(), "{header}");
        }
    }

    #[test]
    fn too_many_candidates_or_a_huge_header_are_400_before_any_hmac() {
        let v = Stripe::new(&["whsec_a".into()], 300);
        let body = b"{}";
        let good = sign("whsec_a", NOW, body);
        let v1 = good.split("v1=").nth(1).unwrap();
        let eight = format!("t={NOW}{},v1={v1}", ",v1=".repeat(7));
        assert!(
            v.verify(&headers(&eight), body, NOW).is_ok(),
            "8 candidates is fine"
        );
        let nine = format!("t={NOW}{},v1={v1}", ",v1=".repeat(8));
        let err = v.verify(&headers(&nine), body, NOW).unwrap_err();
        assert_eq!(err.status(), axum::http::StatusCode::BAD_REQUEST, "{err}");
        let many = format!("t={NOW}{}", ",v1=".repeat(10_000));
        let err = v.verify(&headers(&many), body, NOW).unwrap_err();
        assert_eq!(err.status(), axum::http::StatusCode::BAD_REQUEST, "{err}");
        let huge = format!("t={NOW},v0={},v1={v1}", "0".repeat(5000));
        let err = v.verify(&headers(&huge), body, NOW).unwrap_err();
        assert_eq!(err.status(), axum::http::StatusCode::BAD_REQUEST, "{err}");
    }

    #[test]
    fn debug_output_never_shows_secrets() {
        let v = Stripe::new(&["whsec_topsecret".into()], 300);
        assert!(!format!("{v:?}").contains("topsecret"));
    }
}
