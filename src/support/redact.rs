//! Secrets kept out of logs, pages and printed settings.

/// What secrets are replaced with wherever settings are shown.
pub const REDACTED: &str = "<redacted>";

/// Keys of a URL's query whose values are secrets.
fn secret_query_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["pass", "secret", "token", "key", "sig", "auth"]
        .iter()
        .any(|k| key.contains(k))
}

/// A URL safe to print: the password of its credentials and secret-looking query values
/// (`?password=`, `token=`…) replaced.
pub fn redact_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = match base.find("://") {
        Some(scheme) => {
            let rest = &base[scheme + 3..];
            let authority_end = rest.find('/').unwrap_or(rest.len());
            match rest[..authority_end].rfind('@') {
                Some(at) => {
                    let user = rest[..at].split(':').next().unwrap_or("");
                    let with_password = rest[..at].contains(':');
                    format!(
                        "{}{user}{}{}",
                        &base[..scheme + 3],
                        if with_password { ":***" } else { "" },
                        &rest[at..]
                    )
                }
                None => base.to_string(),
            }
        }
        None => base.to_string(),
    };
    if let Some(query) = query {
        out.push('?');
        let parts: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if secret_query_key(k) => format!("{k}=***"),
                _ => pair.to_string(),
            })
            .collect();
        out.push_str(&parts.join("&"));
    }
    out
}

/// A URL whose path is itself the secret (Slack incoming webhooks): scheme and host only.
pub fn redact_url_path(url: &str) -> String {
    match url.find("://") {
        Some(scheme) => {
            let rest = &url[scheme + 3..];
            let host_end = rest.find(['/', '?']).unwrap_or(rest.len());
            let host = &rest[..host_end];
            let host = host.rsplit('@').next().unwrap_or(host);
            format!("{}{host}/{REDACTED}", &url[..scheme + 3])
        }
        None => REDACTED.to_string(),
    }
}
