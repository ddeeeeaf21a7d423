//! The idempotency key names the business change, not the message: the SHA-256 of
//! (transition, order_id, external_ref), each part preceded by its length in bytes as a
//! big-endian u64, so no two different triples share an input (`"a|b" + "c"` and
//! `"a" + "b|c"` differ). Two events announcing the same payment collapse onto one key; two
//! real payments of one order have two external refs, two keys.

use sha2::{Digest, Sha256};

use super::Transition;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EffectKey(String);

impl EffectKey {
    pub fn new(transition: Transition, order_id: &str, external_ref: &str) -> Self {
        EffectKey(digest(&[transition.as_str(), order_id, external_ref]))
    }

    /// A key over any parts (ledger entries name themselves this way).
    pub fn from_parts(parts: &[&str]) -> Self {
        EffectKey(digest(parts))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key of an outbox row derived from its effect, stable across retries and redrives,
    /// so the receiving system can drop the relay's duplicates.
    pub fn outbox_key(&self, sink: &str, topic: &str) -> String {
        digest(&[&self.0, sink, topic])
    }
}

/// SHA-256 over length-prefixed parts, hex.
fn digest(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    hex::encode(hasher.finalize())
}

impl std::fmt::Display for EffectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_sha256_of_the_length_prefixed_parts() {
        let key = EffectKey::new(Transition::Pay, "order-1", "pi_1");
        let mut input = Vec::new();
        for part in ["pay", "order-1", "pi_1"] {
            input.extend_from_slice(&(part.len() as u64).to_be_bytes());
            input.extend_from_slice(part.as_bytes());
        }
        assert_eq!(key.as_str(), hex::encode(Sha256::digest(&input)));
    }

    #[test]
    fn parts_cannot_run_into_each_other() {
        assert_ne!(
            EffectKey::new(Transition::Pay, "a|b", "c"),
            EffectKey::new(Transition::Pay, "a", "b|c")
        );
        assert_ne!(
            EffectKey::new(Transition::Pay, "ab", "c"),
            EffectKey::new(Transition::Pay, "a", "bc")
        );
        let k = EffectKey::new(Transition::Pay, "o", "p");
        assert_ne!(k.outbox_key("a|b", "c"), k.outbox_key("a", "b|c"));
    }

    #[test]
    fn same_change_same_key_different_change_different_key() {
        let a = EffectKey::new(Transition::Pay, "o", "pi_1");
        assert_eq!(a, EffectKey::new(Transition::Pay, "o", "pi_1"));
        assert_ne!(a, EffectKey::new(Transition::Pay, "o", "pi_2"));
        assert_ne!(a, EffectKey::new(Transition::Refund, "o", "pi_1"));
        assert_ne!(a, EffectKey::new(Transition::Pay, "o2", "pi_1"));
    }

    #[test]
    fn outbox_key_is_stable_and_distinct_per_sink_and_topic() {
        let k = EffectKey::new(Transition::Pay, "o", "pi_1");
        assert_eq!(
            k.outbox_key("log", "order.paid"),
            k.outbox_key("log", "order.paid")
        );
        assert_ne!(
            k.outbox_key("log", "order.paid"),
            k.outbox_key("http", "order.paid")
        );
        assert_ne!(
            k.outbox_key("log", "order.paid"),
            k.outbox_key("log", "order.refunded")
        );
    }
}
