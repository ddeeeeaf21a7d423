//! A signature scheme described in configuration, so a new provider needs no code: where
//! the signature is (a header or a query parameter, the whole value or one `key=value`
//! field of it), how it is computed (HMAC-SHA256, HMAC-SHA1, plain SHA-256, or a static
//! token), how it is written (hex or base64), and over what: a template of the signed
//! content.
//!
//! The template is literal text with placeholders: `{body}` (the raw body), `{header:NAME}`,
//! `{query:NAME}`, `{ts}` (the timestamp field of the signature header) and `{secret}` (for
//! plain hashes that mix the secret in, as PagBank's). `{query:NAME|lower}` lower-cases the
//! value. A part in square brackets is dropped when a placeholder inside it is absent
//! (Mercado Pago: `[id:{query:data.id|lower};]request-id:…`); outside brackets an absent
//! placeholder refuses the request.
//!
//! The Brazilian providers are presets over this scheme (`preset`).

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{check_tolerance, SignatureError, Verified, MAX_CANDIDATES, MAX_HEADER_BYTES};

/// How the signature is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    HmacSha256,
    HmacSha1,
    /// SHA-256 of the signed content, which must then contain `{secret}`.
    Sha256,
    /// The value is the secret itself (compared in constant time).
    Token,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Encoding {
    #[default]
    Hex,
    Base64,
}

/// The `[providers.signature]` table of a `scheme = "generic"` provider.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignatureSpec {
    /// Where the signature is: `header:NAME` (or just the header's name) or `query:NAME`.
    pub source: String,
    pub algorithm: Algorithm,
    #[serde(default)]
    pub encoding: Encoding,
    /// The signed content; not used by `token`.
    #[serde(default)]
    pub signed: String,
    /// The value is `key=value` pairs separated by commas: the signature is this key's
    /// value (several allowed: any may match). Absent: the whole value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_field: Option<String>,
    /// The key of the pair holding a Unix timestamp (seconds, or milliseconds when above
    /// 10^11), checked against `tolerance_secs` and available as `{ts}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp_field: Option<String>,
    /// Stripped from the value before decoding (`sha256=` of some providers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
}

/// The built-in providers, as looked up in their documentation (docs/src/providers/).
pub fn preset(name: &str) -> Option<SignatureSpec> {
    let spec = |source: &str, algorithm, signed: &str| SignatureSpec {
        source: source.into(),
        algorithm,
        encoding: Encoding::Hex,
        signed: signed.into(),
        signature_field: None,
        timestamp_field: None,
        prefix: None,
    };
    Some(match name {
        // `x-signature: ts=…,v1=<hex>`, HMAC-SHA256 of the manifest
        // `id:<data.id>;request-id:<x-request-id>;ts:<ts>;`, absent parts dropped.
        "mercadopago" => SignatureSpec {
            signature_field: Some("v1".into()),
            timestamp_field: Some("ts".into()),
            ..spec(
                "header:x-signature",
                Algorithm::HmacSha256,
                "[id:{query:data.id|lower};][request-id:{header:x-request-id};]ts:{ts};",
            )
        },
        // `x-authenticity-token`: SHA-256 hex of `<account token>-<raw body>`.
        "pagbank" => spec(
            "header:x-authenticity-token",
            Algorithm::Sha256,
            "{secret}-{body}",
        ),
        // `asaas-access-token`: the token chosen when the webhook was created.
        "asaas" => spec("header:asaas-access-token", Algorithm::Token, ""),
        // Efí Pix without mTLS: the `?hmac=` value registered with the webhook URL.
        "efi-pix" => spec("query:hmac", Algorithm::Token, ""),
        _ => return None,
    })
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Source {
    Header(String),
    Query(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Body,
    Secret,
    Timestamp,
    Header(String, bool),
    Query(String, bool),
    /// Dropped when any placeholder inside is absent.
    Optional(Vec<Part>),
}

/// A compiled `SignatureSpec` with its secrets.
#[derive(Clone)]
pub struct Generic {
    source: Source,
    algorithm: Algorithm,
    encoding: Encoding,
    template: Vec<Part>,
    signature_field: Option<String>,
    timestamp_field: Option<String>,
    prefix: Option<String>,
    secrets: Vec<Vec<u8>>,
    tolerance_secs: u64,
}

impl std::fmt::Debug for Generic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generic")
            .field("source", &self.source)
            .field("algorithm", &self.algorithm)
            .field(
                "secrets",
                &format_args!("[{} redacted]", self.secrets.len()),
            )
            .finish()
    }
}

/// Shortest secret accepted: a token or key anyone could guess is no check at all.
pub const MIN_SECRET_BYTES: usize = 16;

impl Generic {
    pub fn new(
        spec: &SignatureSpec,
        secrets: &[String],
        tolerance_secs: u64,
    ) -> anyhow::Result<Generic> {
        for (i, secret) in secrets.iter().enumerate() {
            anyhow::ensure!(
                secret.len() >= MIN_SECRET_BYTES,
                "secret #{} is {} bytes long; at least {MIN_SECRET_BYTES} are needed",
                i + 1,
                secret.len()
            );
        }
        let source = match spec.source.split_once(':') {
            Some(("query", name)) if !name.is_empty() => Source::Query(name.into()),
            Some(("header", name)) if !name.is_empty() => Source::Header(name.to_lowercase()),
            None if !spec.source.is_empty() => Source::Header(spec.source.to_lowercase()),
            _ => anyhow::bail!(
                "signature source {:?}: expected header:NAME or query:NAME",
                spec.source
            ),
        };
        let template = parse_template(&spec.signed)?;
        let uses = |p: &dyn Fn(&Part) -> bool| walk(&template, p);
        match spec.algorithm {
            Algorithm::Token => anyhow::ensure!(
                spec.signed.is_empty(),
                "a token is compared as it is: `signed` must be empty"
            ),
            Algorithm::Sha256 => anyhow::ensure!(
                uses(&|p| *p == Part::Secret),
                "a plain SHA-256 must include {{secret}} in `signed`, or anyone can compute it"
            ),
            Algorithm::HmacSha256 | Algorithm::HmacSha1 => anyhow::ensure!(
                !spec.signed.is_empty(),
                "`signed` says what the HMAC covers, e.g. \"{{body}}\""
            ),
        }
        if uses(&|p| *p == Part::Timestamp) {
            anyhow::ensure!(
                spec.timestamp_field.is_some(),
                "{{ts}} needs `timestamp_field`"
            );
        }
        Ok(Generic {
            source,
            algorithm: spec.algorithm,
            encoding: spec.encoding,
            template,
            signature_field: spec.signature_field.clone(),
            timestamp_field: spec.timestamp_field.clone(),
            prefix: spec.prefix.clone(),
            secrets: secrets.iter().map(|s| s.as_bytes().to_vec()).collect(),
            tolerance_secs,
        })
    }

    pub fn verify(
        &self,
        headers: &HeaderMap,
        query: Option<&str>,
        body: &[u8],
        now_secs: i64,
    ) -> Result<Verified, SignatureError> {
        let query: Vec<(String, String)> = query
            .map(|q| {
                url::form_urlencoded::parse(q.as_bytes())
                    .into_owned()
                    .collect()
            })
            .unwrap_or_default();
        let request = Request {
            headers,
            query: &query,
        };
        let (name, value) = match &self.source {
            Source::Header(name) => (name.as_str(), request.header(name)?),
            Source::Query(name) => (name.as_str(), request.query(name)),
        };
        let value = value.ok_or_else(|| SignatureError::Missing(name.to_string()))?;
        let (candidates, timestamp) = self.candidates(name, value)?;
        if let Some(ts) = timestamp {
            let secs = if ts > 100_000_000_000 { ts / 1000 } else { ts };
            check_tolerance(secs, now_secs, self.tolerance_secs)?;
        }
        let mut matched = false;
        for secret in &self.secrets {
            let expected = match self.algorithm {
                Algorithm::Token => Sha256::digest(secret).to_vec(),
                _ => {
                    let content = render(&self.template, &request, body, secret, timestamp)?;
                    match self.algorithm {
                        Algorithm::HmacSha256 => {
                            let mut mac =
                                Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key");
                            mac.update(&content);
                            mac.finalize().into_bytes().to_vec()
                        }
                        Algorithm::HmacSha1 => {
                            let mut mac = Hmac::<sha1::Sha1>::new_from_slice(secret)
                                .expect("HMAC takes any key");
                            mac.update(&content);
                            mac.finalize().into_bytes().to_vec()
                        }
                        _ => Sha256::digest(&content).to_vec(),
                    }
                }
            };
            for candidate in &candidates {
                // Constant-time, and no early exit between secrets or candidates.
                matched |= bool::from(expected.ct_eq(candidate));
            }
        }
        if matched {
            Ok(Verified::default())
        } else {
            Err(SignatureError::NoMatch)
        }
    }

    /// Where the signature goes: `Ok(header name)` or `Err(query parameter name)`.
    pub fn placement(&self) -> Result<&str, &str> {
        match &self.source {
            Source::Header(h) => Ok(h),
            Source::Query(q) => Err(q),
        }
    }

    /// The headers the signed content names (`{header:x-request-id}`): a sender sets them
    /// before `sign`.
    pub fn signed_headers(&self) -> Vec<String> {
        fn collect(parts: &[Part], out: &mut Vec<String>) {
            for part in parts {
                match part {
                    Part::Header(h, _) => out.push(h.clone()),
                    Part::Optional(inner) => collect(inner, out),
                    _ => {}
                }
            }
        }
        let mut out = Vec::new();
        collect(&self.template, &mut out);
        out
    }

    /// The value a provider would put where `placement` says, signed with the first
    /// secret at `now_secs`: what `oncehook trigger` sends, and what `verify` accepts.
    pub fn sign(
        &self,
        headers: &HeaderMap,
        query: Option<&str>,
        body: &[u8],
        now_secs: i64,
    ) -> Result<String, SignatureError> {
        let secret = &self.secrets[0];
        if self.algorithm == Algorithm::Token {
            return Ok(String::from_utf8_lossy(secret).into_owned());
        }
        let query: Vec<(String, String)> = query
            .map(|q| {
                url::form_urlencoded::parse(q.as_bytes())
                    .into_owned()
                    .collect()
            })
            .unwrap_or_default();
        let request = Request {
            headers,
            query: &query,
        };
        let timestamp = self.timestamp_field.as_ref().map(|_| now_secs);
        let content = render(&self.template, &request, body, secret, timestamp)?;
        let tag = match self.algorithm {
            Algorithm::HmacSha256 => {
                let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("any key");
                mac.update(&content);
                mac.finalize().into_bytes().to_vec()
            }
            Algorithm::HmacSha1 => {
                let mut mac = Hmac::<sha1::Sha1>::new_from_slice(secret).expect("any key");
                mac.update(&content);
                mac.finalize().into_bytes().to_vec()
            }
            _ => Sha256::digest(&content).to_vec(),
        };
        let encoded = match self.encoding {
            Encoding::Hex => hex::encode(tag),
            Encoding::Base64 => {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD.encode(tag)
            }
        };
        let value = format!("{}{encoded}", self.prefix.as_deref().unwrap_or_default());
        Ok(match (&self.timestamp_field, &self.signature_field) {
            (Some(ts), Some(field)) => format!("{ts}={now_secs},{field}={value}"),
            (None, Some(field)) => format!("{field}={value}"),
            (_, None) => value,
        })
    }

    /// The decoded signatures the value carries, and its timestamp.
    fn candidates(
        &self,
        name: &str,
        value: &str,
    ) -> Result<(Vec<Vec<u8>>, Option<i64>), SignatureError> {
        let malformed = |why: &'static str| SignatureError::MalformedNamed(name.to_string(), why);
        let mut raw: Vec<&str> = Vec::new();
        let mut timestamp = None;
        match &self.signature_field {
            None => raw.push(value.trim()),
            Some(field) => {
                for pair in value.split(',') {
                    let Some((k, v)) = pair.trim().split_once('=') else {
                        return Err(malformed("expected key=value pairs"));
                    };
                    if Some(k) == self.timestamp_field.as_deref() {
                        timestamp = Some(
                            v.parse::<i64>()
                                .map_err(|_| malformed("the timestamp is not a number"))?,
                        );
                    } else if k == field {
                        raw.push(v);
                    }
                    if raw.len() > MAX_CANDIDATES {
                        return Err(malformed("too many signatures"));
                    }
                }
            }
        }
        if self.timestamp_field.is_some() && timestamp.is_none() {
            return Err(malformed("no timestamp"));
        }
        let decoded = raw
            .into_iter()
            .map(|s| {
                let s = match &self.prefix {
                    Some(p) => s.strip_prefix(p.as_str()).unwrap_or(s),
                    None => s,
                };
                if self.algorithm == Algorithm::Token {
                    // Hashed, so the comparison takes the same time whatever the length.
                    return Some(Sha256::digest(s.as_bytes()).to_vec());
                }
                match self.encoding {
                    Encoding::Hex => hex::decode(s).ok(),
                    Encoding::Base64 => {
                        use base64::Engine;
                        base64::engine::general_purpose::STANDARD.decode(s).ok()
                    }
                }
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| malformed("the signature is not valid hex or base64"))?;
        if decoded.is_empty() {
            return Err(malformed("no signature"));
        }
        Ok((decoded, timestamp))
    }
}

struct Request<'a> {
    headers: &'a HeaderMap,
    query: &'a [(String, String)],
}

impl Request<'_> {
    fn header(&self, name: &str) -> Result<Option<&str>, SignatureError> {
        let Some(value) = self.headers.get(name) else {
            return Ok(None);
        };
        if value.len() > MAX_HEADER_BYTES {
            return Err(SignatureError::MalformedNamed(
                name.to_string(),
                "longer than 4096 bytes",
            ));
        }
        value
            .to_str()
            .map(Some)
            .map_err(|_| SignatureError::MalformedNamed(name.to_string(), "not visible ASCII"))
    }

    fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn walk(parts: &[Part], p: &dyn Fn(&Part) -> bool) -> bool {
    parts.iter().any(|part| match part {
        Part::Optional(inner) => walk(inner, p),
        other => p(other),
    })
}

fn parse_template(template: &str) -> anyhow::Result<Vec<Part>> {
    let mut stack: Vec<Vec<Part>> = vec![Vec::new()];
    let mut text = String::new();
    let mut chars = template.chars();
    let flush = |text: &mut String, parts: &mut Vec<Part>| {
        if !text.is_empty() {
            parts.push(Part::Text(std::mem::take(text)));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '[' => {
                anyhow::ensure!(stack.len() == 1, "optional parts cannot nest");
                flush(&mut text, stack.last_mut().expect("a level"));
                stack.push(Vec::new());
            }
            ']' => {
                anyhow::ensure!(stack.len() == 2, "`]` without `[` in {template:?}");
                let mut inner = stack.pop().expect("the optional level");
                flush(&mut text, &mut inner);
                stack
                    .last_mut()
                    .expect("a level")
                    .push(Part::Optional(inner));
            }
            '{' => {
                let name: String = chars.by_ref().take_while(|c| *c != '}').collect();
                flush(&mut text, stack.last_mut().expect("a level"));
                let (name, lower) = match name.strip_suffix("|lower") {
                    Some(n) => (n, true),
                    None => (name.as_str(), false),
                };
                let part = match name.split_once(':') {
                    None if name == "body" => Part::Body,
                    None if name == "secret" => Part::Secret,
                    None if name == "ts" => Part::Timestamp,
                    Some(("header", h)) if !h.is_empty() => Part::Header(h.to_lowercase(), lower),
                    Some(("query", q)) if !q.is_empty() => Part::Query(q.to_string(), lower),
                    _ => anyhow::bail!(
                        "unknown placeholder {{{name}}}: use {{body}}, {{ts}}, {{secret}}, \
                         {{header:NAME}} or {{query:NAME}}"
                    ),
                };
                stack.last_mut().expect("a level").push(part);
            }
            c => text.push(c),
        }
    }
    anyhow::ensure!(stack.len() == 1, "`[` without `]` in {template:?}");
    let mut parts = stack.pop().expect("the top level");
    flush(&mut text, &mut parts);
    Ok(parts)
}

fn render(
    parts: &[Part],
    request: &Request<'_>,
    body: &[u8],
    secret: &[u8],
    timestamp: Option<i64>,
) -> Result<Vec<u8>, SignatureError> {
    let mut out = Vec::new();
    for part in parts {
        match render_one(part, request, body, secret, timestamp)? {
            Some(bytes) => out.extend(bytes),
            None => {
                return Err(SignatureError::Missing(match part {
                    Part::Header(h, _) => h.clone(),
                    Part::Query(q, _) => format!("query parameter {q}"),
                    _ => "timestamp".into(),
                }))
            }
        }
    }
    Ok(out)
}

/// `None` when the value is absent.
fn render_one(
    part: &Part,
    request: &Request<'_>,
    body: &[u8],
    secret: &[u8],
    timestamp: Option<i64>,
) -> Result<Option<Vec<u8>>, SignatureError> {
    let cased = |v: &str, lower: bool| {
        if lower {
            v.to_lowercase().into_bytes()
        } else {
            v.as_bytes().to_vec()
        }
    };
    Ok(match part {
        Part::Text(t) => Some(t.as_bytes().to_vec()),
        Part::Body => Some(body.to_vec()),
        Part::Secret => Some(secret.to_vec()),
        Part::Timestamp => timestamp.map(|t| t.to_string().into_bytes()),
        Part::Header(h, lower) => request.header(h)?.map(|v| cased(v, *lower)),
        Part::Query(q, lower) => request.query(q).map(|v| cased(v, *lower)),
        Part::Optional(inner) => {
            let mut out = Vec::new();
            for p in inner {
                match render_one(p, request, body, secret, timestamp)? {
                    Some(bytes) => out.extend(bytes),
                    None => return Ok(Some(Vec::new())),
                }
            }
            Some(out)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    // Expected tags computed outside this code, with
    // `printf '<content>' | openssl dgst -sha256 [-hmac <secret>]`.
    const MP_SECRET: &str = "your_mp_webhook_secret";
    const MP_NOW: i64 = 1_742_505_638;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn preset_verifier(name: &str, secret: &str) -> Generic {
        Generic::new(&preset(name).unwrap(), &[secret.to_string()], 300).unwrap()
    }

    #[test]
    fn mercado_pago_signs_the_manifest_of_data_id_request_id_and_ts() {
        let v = preset_verifier("mercadopago", MP_SECRET);
        let sig =
            "ts=1742505638683,v1=458558eca8ee8d4ae2a2c7e51fe571a3c40d56ef6a2ecb03439d97cf5340a624";
        let h = headers(&[
            ("x-signature", sig),
            ("x-request-id", "bb56a2f1-6aae-46ac-982e-9dcd3581d08e"),
        ]);
        let query = Some("data.id=123456789&type=payment");
        assert!(v.verify(&h, query, b"{}", MP_NOW).is_ok());
        // The body is not signed; the query's data.id and the request id are.
        assert!(v.verify(&h, query, b"{\"other\":1}", MP_NOW).is_ok());
        assert_eq!(
            v.verify(&h, Some("data.id=123456780"), b"{}", MP_NOW),
            Err(SignatureError::NoMatch)
        );
        let other_request = headers(&[("x-signature", sig), ("x-request-id", "bb56a2f1")]);
        assert_eq!(
            v.verify(&other_request, query, b"{}", MP_NOW),
            Err(SignatureError::NoMatch)
        );
        assert!(matches!(
            v.verify(&h, query, b"{}", MP_NOW + 301),
            Err(SignatureError::StaleTimestamp { .. })
        ));
    }

    #[test]
    fn mercado_pago_drops_absent_parts_and_lower_cases_alphanumeric_ids() {
        let v = preset_verifier("mercadopago", MP_SECRET);
        // No data.id in the query: the manifest starts at request-id.
        let h = headers(&[
            ("x-signature", "ts=1742505638683,v1=5dbee0283f397f425bbb1d14c8b413aa1f008ba8ce53bcee0f070e9f707aa2ea"),
            ("x-request-id", "bb56a2f1-6aae-46ac-982e-9dcd3581d08e"),
        ]);
        assert!(v.verify(&h, None, b"{}", MP_NOW).is_ok());
        // An alphanumeric id arrives upper-case and is signed lower-case.
        let h = headers(&[
            (
                "x-signature",
                "ts=1742505638,v1=c4b1d0a51bd3ae5ee05ef57983eef033e11e10465c34a4773b790fcc2ebda147",
            ),
            ("x-request-id", "r-1"),
        ]);
        assert!(v
            .verify(&h, Some("data.id=ABC123DEF"), b"{}", MP_NOW)
            .is_ok());
        // A tampered tag, a missing header, a header without its timestamp.
        let tampered = headers(&[
            (
                "x-signature",
                "ts=1742505638,v1=c4b1d0a51bd3ae5ee05ef57983eef033e11e10465c34a4773b790fcc2ebda148",
            ),
            ("x-request-id", "r-1"),
        ]);
        assert_eq!(
            v.verify(&tampered, Some("data.id=abc123def"), b"{}", MP_NOW),
            Err(SignatureError::NoMatch)
        );
        assert_eq!(
            v.verify(&HeaderMap::new(), None, b"{}", MP_NOW),
            Err(SignatureError::Missing("x-signature".into()))
        );
        let no_ts = headers(&[("x-signature", "v1=00")]);
        assert!(matches!(
            v.verify(&no_ts, None, b"{}", MP_NOW),
            Err(SignatureError::MalformedNamed(_, "no timestamp"))
        ));
    }

    #[test]
    fn pagbank_is_a_plain_sha256_of_token_dash_body() {
        let v = preset_verifier("pagbank", "pagbank_account_token_0123");
        let body = br#"{"id":"ORDE_1","charges":[]}"#;
        let h = headers(&[(
            "x-authenticity-token",
            "77ac1c9ba71527abade3934fa374388d4ebc0654757e8bbc5a15782a1c4420be",
        )]);
        assert!(v.verify(&h, None, body, 0).is_ok());
        assert_eq!(
            v.verify(&h, None, br#"{"id":"ORDE_2","charges":[]}"#, 0),
            Err(SignatureError::NoMatch)
        );
    }

    #[test]
    fn asaas_and_efi_compare_a_static_token() {
        let asaas = preset_verifier("asaas", "asaas-token-0123456789");
        let ok = headers(&[("asaas-access-token", "asaas-token-0123456789")]);
        assert!(asaas.verify(&ok, None, b"{}", 0).is_ok());
        for wrong in ["asaas-token-012345678", "asaas-token-01234567890", "x"] {
            let h = headers(&[("asaas-access-token", wrong)]);
            assert_eq!(
                asaas.verify(&h, None, b"{}", 0),
                Err(SignatureError::NoMatch)
            );
        }
        let efi = preset_verifier("efi-pix", "efi-hmac-0123456789");
        assert!(efi
            .verify(
                &HeaderMap::new(),
                Some("hmac=efi-hmac-0123456789&ignorar="),
                b"{}",
                0
            )
            .is_ok());
        assert_eq!(
            efi.verify(
                &HeaderMap::new(),
                Some("hmac=efi-hmac-0123456788"),
                b"{}",
                0
            ),
            Err(SignatureError::NoMatch)
        );
    }

    #[test]
    fn a_generic_scheme_from_configuration_needs_no_code() {
        let spec: SignatureSpec = toml::from_str(
            r#"
            source = "header:X-Hub-Signature"
            algorithm = "hmac-sha1"
            encoding = "hex"
            prefix = "sha1="
            signed = "{body}"
            "#,
        )
        .unwrap();
        let secret = "a-secret-of-16-bytes";
        let v = Generic::new(&spec, &[secret.to_string()], 300).unwrap();
        let body = b"{\"zen\":\"x\"}";
        let mut mac = Hmac::<sha1::Sha1>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(body);
        let tag = hex::encode(mac.finalize().into_bytes());
        let h = headers(&[("x-hub-signature", &format!("sha1={tag}"))]);
        assert!(v.verify(&h, None, body, 0).is_ok());
        assert_eq!(v.verify(&h, None, b"{}", 0), Err(SignatureError::NoMatch));
    }

    #[test]
    fn what_sign_writes_verify_accepts_for_every_preset() {
        for name in ["mercadopago", "pagbank", "asaas", "efi-pix"] {
            let v = preset_verifier(name, "a-secret-of-16-bytes!");
            let mut h = HeaderMap::new();
            for header in v.signed_headers() {
                h.insert(
                    axum::http::HeaderName::from_bytes(header.as_bytes()).unwrap(),
                    HeaderValue::from_static("req-1"),
                );
            }
            let mut query = "data.id=42".to_string();
            let value = v.sign(&h, Some(&query), b"{\"a\":1}", MP_NOW).unwrap();
            match v.placement() {
                Ok(header) => {
                    h.insert(
                        axum::http::HeaderName::from_bytes(header.as_bytes()).unwrap(),
                        HeaderValue::from_str(&value).unwrap(),
                    );
                }
                Err(param) => query.push_str(&format!("&{param}={value}")),
            }
            assert!(
                v.verify(&h, Some(&query), b"{\"a\":1}", MP_NOW).is_ok(),
                "{name}"
            );
        }
    }

    #[test]
    fn a_spec_that_checks_nothing_is_refused() {
        let spec = |algorithm, signed: &str| SignatureSpec {
            source: "x-sig".into(),
            algorithm,
            encoding: Encoding::Hex,
            signed: signed.into(),
            signature_field: None,
            timestamp_field: None,
            prefix: None,
        };
        let secrets = ["0123456789abcdef".to_string()];
        for (bad, why) in [
            (spec(Algorithm::Sha256, "{body}"), "{secret}"),
            (spec(Algorithm::HmacSha256, ""), "signed"),
            (spec(Algorithm::Token, "{body}"), "empty"),
            (
                spec(Algorithm::HmacSha256, "{ts}.{body}"),
                "timestamp_field",
            ),
            (spec(Algorithm::HmacSha256, "{nope}"), "unknown placeholder"),
            (spec(Algorithm::HmacSha256, "[{body}"), "without"),
        ] {
            let err = Generic::new(&bad, &secrets, 300).unwrap_err().to_string();
            assert!(err.contains(why), "{err}");
        }
        let short = Generic::new(&preset("asaas").unwrap(), &["short".to_string()], 300)
            .unwrap_err()
            .to_string();
        assert!(
            short.contains("at least 16") && !short.contains("short\""),
            "{short}"
        );
    }
}
