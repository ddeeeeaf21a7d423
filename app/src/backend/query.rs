//! Filters as they live in page URLs: cleaned when read, encoded when written.

/// A filter as typed: trimmed, empty means "any". Control characters cannot be meant
/// (and PostgreSQL text cannot even hold U+0000), so they are dropped.
pub(crate) fn clean_filter(value: Option<String>) -> Option<String> {
    value
        .map(|s| s.chars().filter(|c| !c.is_control()).collect::<String>())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Percent-encodes a query value (everything but RFC 3986 unreserved characters).
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
