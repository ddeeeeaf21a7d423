//! The idempotency key names the business change, not the message:
//! `sha256(transition | order_id | external_ref)`. Two events announcing the same payment
//! collapse onto one key; two real payments of one order have two external refs, two keys.

use sha2::{Digest, Sha256};

use super::Transition;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EffectKey(String);

impl EffectKey {
    pub fn new(transition: Transition, order_id: &str, external_ref: &str) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(transition.as_str().as_bytes());
        hasher.update(b"|");
        hasher.update(order_id.as_bytes());
        hasher.update(b"|");
        hasher.update(external_ref.as_bytes());
        EffectKey(hex::encode(hasher.finalize()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key of an outbox row derived from its effect, stable across retries and redrives,
    /// so the receiving system can drop the relay's duplicates.
    pub fn outbox_key(&self, sink: &str, topic: &str) -> String {
        let mut hasher = Sha256::new();
        hasher.update(self.0.as_bytes());
        hasher.update(b"|");
        hasher.update(sink.as_bytes());
        hasher.update(b"|");
        hasher.update(topic.as_bytes());
        hex::encode(hasher.finalize())
    }
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
    fn key_is_sha256_of_the_pipe_joined_parts() {
        let key = EffectKey::new(Transition::Pay, "order-1", "pi_1");
        let expected = hex::encode(Sha256::digest(b"pay|order-1|pi_1"));
        assert_eq!(key.as_str(), expected);
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
