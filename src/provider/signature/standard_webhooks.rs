//! Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64> …`
//! (space-separated), secrets `whsec_<base64>`, HMAC-SHA256 over `"{id}.{timestamp}.{body}"`.

use axum::http::HeaderMap;
use base64::{engine::general_purpose::STANDARD as B64, Engine};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{any_key_matches, check_tolerance, header, SignatureError, Verified, MAX_CANDIDATES};

#[derive(Clone)]
pub struct StandardWebhooks {
    keys: Vec<Vec<u8>>,
    tolerance_secs: u64,
}

impl std::fmt::Debug for StandardWebhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StandardWebhooks")
            .field("keys", &format_args!("[{} redacted]", self.keys.len()))
            .field("tolerance_secs", &self.tolerance_secs)
            .finish()
    }
}

/// Decodes a `whsec_<base64>` secret into its key bytes.
pub fn decode_secret(secret: &str) -> anyhow::Result<Vec<u8>> {
    let b64 = secret.strip_prefix("whsec_").unwrap_or(secret);
    B64.decode(b64)
        .map_err(|_| anyhow::anyhow!("a standard-webhooks secret must be whsec_<base64>"))
}

impl StandardWebhooks {
    pub fn new(secrets: &[String], tolerance_secs: u64) -> anyhow::Result<Self> {
        let keys = secrets
            .iter()
            .map(|s| decode_secret(s))
            .collect::<anyhow::Result<_>>()?;
        Ok(StandardWebhooks {
            keys,
            tolerance_secs,
        })
    }

    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now_secs: i64,
    ) -> Result<Verified, SignatureError> {
        let id = header(headers, "webhook-id")?;
        let timestamp = header(headers, "webhook-timestamp")?
            .parse::<i64>()
            .map_err(|_| SignatureError::Malformed("webhook-timestamp", "not a Unix timestamp"))?;
        let candidates: Vec<&str> = header(headers, "webhook-signature")?
            .split(' ')
            .filter_map(|s| s.strip_prefix("v1,"))
            .collect();
        if candidates.len() > MAX_CANDIDATES {
            return Err(SignatureError::Malformed(
                "webhook-signature",
                "more than 8 signatures",
            ));
        }
        let signatures: Vec<Vec<u8>> = candidates
            .iter()
            .filter_map(|s| B64.decode(s).ok())
            .collect();
        if signatures.is_empty() {
            return Err(SignatureError::Malformed(
                "webhook-signature",
                "no v1 signature",
            ));
        }
        check_tolerance(timestamp, now_secs, self.tolerance_secs)?;
        let prefix = format!("{id}.{timestamp}.");
        let keys = self.keys.iter().map(Vec::as_slice);
        if any_key_matches(keys, prefix.as_bytes(), body, &signatures) {
            return Ok(Verified {
                header_event_id: Some(id.to_string()),
            });
        }
        Err(SignatureError::NoMatch)
    }
}

/// The `webhook-signature` value for a body, as a sender computes it.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> anyhow::Result<String> {
    let key = decode_secret(secret)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    Ok(format!("v1,{}", B64.encode(mac.finalize().into_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;
    // The example secret of the Standard Webhooks specification.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn headers(id: &str, ts: i64, sig: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("webhook-id", id.parse().unwrap());
        h.insert("webhook-timestamp", ts.to_string().parse().unwrap());
        h.insert("webhook-signature", sig.parse().unwrap());
        h
    }

    #[test]
    fn matches_the_specification_example() {
        // From the Standard Webhooks spec: id msg_p5jXN8AQM9LWM0D4loKWxJek, ts 1614265330.
        let body = br#"{"test": 2432232314}"#;
        let sig = sign(SECRET, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body).unwrap();
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        let v = StandardWebhooks::new(&[SECRET.into()], 300).unwrap();
        let verified = v
            .verify(
                &headers("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, &sig),
                body,
                1614265330,
            )
            .unwrap();
        assert_eq!(
            verified.header_event_id.as_deref(),
            Some("msg_p5jXN8AQM9LWM0D4loKWxJek")
        );
    }

    #[test]
    fn accepts_any_of_several_signatures_and_secrets() {
        let old = "whsec_".to_string() + &B64.encode(b"old-key-old-key-old-key");
        let v = StandardWebhooks::new(&[SECRET.into(), old.clone()], 300).unwrap();
        let body = b"{}";
        let good = sign(&old, "msg_1", NOW, body).unwrap();
        let both = format!("v1,{} {good}", B64.encode([0u8; 32]));
        assert!(v.verify(&headers("msg_1", NOW, &both), body, NOW).is_ok());
    }

    #[test]
    fn rejects_tampering_wrong_id_and_stale_timestamps() {
        let v = StandardWebhooks::new(&[SECRET.into()], 300).unwrap();
        let body = b"{}";
        let sig = sign(SECRET, "msg_1", NOW, body).unwrap();
        assert_eq!(
            v.verify(&headers("msg_2", NOW, &sig), body, NOW),
            Err(SignatureError::NoMatch)
        );
        assert_eq!(
            v.verify(&headers("msg_1", NOW, &sig), b"[]", NOW),
            Err(SignatureError::NoMatch)
        );
        let old = sign(SECRET, "msg_1", NOW - 1000, body).unwrap();
        assert!(matches!(
            v.verify(&headers("msg_1", NOW - 1000, &old), body, NOW),
            Err(SignatureError::StaleTimestamp { .. })
        ));
        assert_eq!(
            v.verify(&HeaderMap::new(), body, NOW),
            Err(SignatureError::MissingHeader("webhook-id"))
        );
    }

    #[test]
    fn empty_and_wrong_length_candidates_never_match() {
        let v = StandardWebhooks::new(&[SECRET.into()], 300).unwrap();
        let body = b"{}";
        for sig in [
            "v1,",
            "v1, v1, v1,",
            "v1,AAAA",
            &format!("v1,{}", B64.encode([0u8; 33])),
        ] {
            assert!(
                v.verify(&headers("msg_1", NOW, sig), body, NOW).is_err(),
                "{sig}"
            );
        }
    }

    #[test]
    fn too_many_candidates_or_a_huge_header_are_400() {
        let v = StandardWebhooks::new(&[SECRET.into()], 300).unwrap();
        let body = b"{}";
        let good = sign(SECRET, "msg_1", NOW, body).unwrap();
        let eight = format!("{}{good}", "v1, ".repeat(7));
        assert!(v.verify(&headers("msg_1", NOW, &eight), body, NOW).is_ok());
        let nine = format!("{}{good}", "v1, ".repeat(8));
        let err = v
            .verify(&headers("msg_1", NOW, &nine), body, NOW)
            .unwrap_err();
        assert_eq!(err.status(), axum::http::StatusCode::BAD_REQUEST, "{err}");
        let many = "v1, ".repeat(10_000);
        let err = v
            .verify(&headers("msg_1", NOW, many.trim()), body, NOW)
            .unwrap_err();
        assert_eq!(err.status(), axum::http::StatusCode::BAD_REQUEST, "{err}");
        let huge = format!("v0,{} {good}", "A".repeat(5000));
        let err = v
            .verify(&headers("msg_1", NOW, &huge), body, NOW)
            .unwrap_err();
        assert_eq!(err.status(), axum::http::StatusCode::BAD_REQUEST, "{err}");
    }

    #[test]
    fn a_secret_that_is_not_base64_is_a_config_error() {
        assert!(StandardWebhooks::new(&["whsec_***".into()], 300).is_err());
    }
}
