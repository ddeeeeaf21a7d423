//! Commands oncehook sends to a provider on an operator's behalf (refunds): what one is,
//! the key that names it, and the checks a request passes before anything is stored. The
//! storage is `store::commands`; the relay sends them (`relay::sinks`, the `provider:NAME`
//! sinks); the processor confirms them when the refund's money is counted.
//!
//! A command's life: `requested` (stored with its outbox row) → `sent` (the provider
//! answered 2xx with its refund id) → `confirmed` (the refund's webhook was applied and its
//! money counted). `failed` when the relay dead-lettered it (a redrive puts it back to
//! `requested`, with the same key); `cancelled` when an operator withdrew it before it was
//! sent.

use serde::{Deserialize, Serialize};
use sha2::Digest;

/// The outbox topic of a refund command.
pub const REFUND_TOPIC: &str = "provider_command.refund";

/// The relay sink that sends commands to provider `name`.
pub fn sink_for(provider: &str) -> String {
    format!("provider:{provider}")
}

/// Stripe refuses longer idempotency keys.
pub const MAX_KEY_CHARS: usize = 255;

/// The longest reason kept (it travels in the refund's metadata, which Stripe caps at 500).
pub const MAX_REASON_CHARS: usize = 500;

/// The states of a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandState {
    Requested,
    Sent,
    Confirmed,
    Failed,
    Cancelled,
}

impl CommandState {
    pub const ALL: [CommandState; 5] = [
        CommandState::Requested,
        CommandState::Sent,
        CommandState::Confirmed,
        CommandState::Failed,
        CommandState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CommandState::Requested => "requested",
            CommandState::Sent => "sent",
            CommandState::Confirmed => "confirmed",
            CommandState::Failed => "failed",
            CommandState::Cancelled => "cancelled",
        }
    }

    /// Money asked for but not yet counted: it holds back what is left to refund.
    pub fn in_flight(self) -> bool {
        matches!(self, CommandState::Requested | CommandState::Sent)
    }
}

/// The idempotency key of refund number `n` of an order: it names the business operation,
/// so every retry, restart and redrive of that refund sends the same key and the provider
/// makes it once. An order id too long for the key is named by its SHA-256 instead.
pub fn refund_key(order_id: &str, n: i64) -> String {
    let key = format!("order:{order_id}:refund:{n}");
    if key.chars().count() <= MAX_KEY_CHARS && !order_id.chars().any(char::is_control) {
        key
    } else {
        let digest = hex::encode(sha2::Sha256::digest(order_id.as_bytes()));
        format!("order:sha256:{digest}:refund:{n}")
    }
}

/// Why a refund request is refused before anything is stored.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no order {0}")]
    UnknownOrder(String),
    #[error("order {0} has no refundable payment (none succeeded)")]
    NoPayment(String),
    #[error("the amount must be a positive number of minor units, not {0}")]
    BadAmount(i64),
    #[error("a reason is needed (1 to {MAX_REASON_CHARS} characters)")]
    BadReason,
    #[error(
        "{asked} is more than what is left to refund: {left} of {paid} paid ({refunded} refunded, \
         {in_flight} asked for and in flight), in minor units of {currency}"
    )]
    OverRefund {
        asked: i64,
        left: i64,
        paid: i64,
        refunded: i64,
        in_flight: i64,
        currency: String,
    },
    #[error("order {0} has nothing left to refund")]
    NothingLeft(String),
    /// What a dispute keeps: the provider refuses a refund of a disputed charge while the
    /// dispute says `is_charge_refundable: false` (open, or lost: the money already went
    /// back to the customer).
    #[error(
        "disputed: the provider does not allow a refund of a disputed charge; {disputed} of \
         {paid} paid is disputed, so {left} is left to refund, not {asked} (minor units of \
         {currency})"
    )]
    Disputed {
        asked: i64,
        left: i64,
        paid: i64,
        disputed: i64,
        currency: String,
    },
}

impl Refusal {
    /// Refused by the order's current state (RFC 9110's 409), not by the request's form.
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            Refusal::OverRefund { .. } | Refusal::NothingLeft(_) | Refusal::Disputed { .. }
        )
    }
}

/// What an order has room to refund, read under its lock (`store::commands::room`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Room {
    pub paid: i64,
    pub refunded: i64,
    /// Asked for and not over: requested, sent, or failed with its dead letter still open
    /// (a redrive would send it).
    pub held: i64,
    /// Disputed and not refundable by the provider's word (`is_charge_refundable: false`, or
    /// unknown).
    pub disputed: i64,
    /// Those disputes, for the page: (dispute id, state).
    pub disputes: Vec<(String, String)>,
}

impl Room {
    /// The amount a request for `asked` (none: all that is left) makes, or why not.
    pub fn refund(
        &self,
        order_id: &str,
        asked: Option<i64>,
        currency: &str,
    ) -> Result<i64, Refusal> {
        let without_disputes = (self.paid - self.refunded - self.held).max(0);
        let left = (without_disputes - self.disputed).max(0);
        let disputed = |asked: i64| Refusal::Disputed {
            asked,
            left,
            paid: self.paid,
            disputed: self.disputed,
            currency: currency.to_string(),
        };
        if self.disputed == 0 {
            return refund_amount(
                order_id,
                asked,
                self.paid,
                self.refunded,
                self.held,
                currency,
            );
        }
        match asked {
            Some(a) if a <= 0 => Err(Refusal::BadAmount(a)),
            Some(a) if a <= left => Ok(a),
            Some(a) => Err(disputed(a)),
            None if left > 0 => Ok(left),
            None => Err(disputed(without_disputes)),
        }
    }

    /// What is left to refund.
    pub fn left(&self) -> i64 {
        (self.paid - self.refunded - self.held - self.disputed).max(0)
    }

    /// Why less than the rest is refundable, when disputes are the reason.
    pub fn note(&self) -> Option<String> {
        if self.disputed == 0 {
            return None;
        }
        let named: Vec<String> = self
            .disputes
            .iter()
            .map(|(id, state)| match state.as_str() {
                "dispute_lost" => format!("{id}, lost"),
                _ => format!("{id}, open"),
            })
            .collect();
        Some(format!(
            "disputed: the provider does not allow a refund of a disputed charge ({})",
            named.join("; ")
        ))
    }
}

/// What is left to refund, and the amount a request for `asked` (none: all of it) makes.
pub fn refund_amount(
    order_id: &str,
    asked: Option<i64>,
    paid: i64,
    refunded: i64,
    in_flight: i64,
    currency: &str,
) -> Result<i64, Refusal> {
    let left = (paid - refunded - in_flight).max(0);
    match asked {
        Some(a) if a <= 0 => Err(Refusal::BadAmount(a)),
        Some(a) if a > left => Err(Refusal::OverRefund {
            asked: a,
            left,
            paid,
            refunded,
            in_flight,
            currency: currency.to_string(),
        }),
        Some(a) => Ok(a),
        None if left == 0 => Err(Refusal::NothingLeft(order_id.to_string())),
        None => Ok(left),
    }
}

/// A reason as stored: trimmed, without control characters, non-empty and bounded.
pub fn parse_reason(reason: &str) -> Result<String, Refusal> {
    let cleaned: String = reason.chars().filter(|c| !c.is_control()).collect();
    let cleaned = cleaned.trim();
    if cleaned.is_empty() || cleaned.chars().count() > MAX_REASON_CHARS {
        return Err(Refusal::BadReason);
    }
    Ok(cleaned.to_string())
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandSettings {
    /// A command the provider answered (`sent`) whose webhook has not confirmed it after
    /// this many seconds is flagged: counted on the overview and in
    /// `oncehook_provider_commands_unconfirmed` (reconciliation's objects pass finds the
    /// refund at the provider and confirms it).
    pub confirm_within_secs: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_names_the_operation_and_stays_within_stripes_limit() {
        assert_eq!(refund_key("78452", 1), "order:78452:refund:1");
        assert_eq!(refund_key("78452", 2), "order:78452:refund:2");
        let long = "x".repeat(300);
        let key = refund_key(&long, 3);
        assert!(key.len() <= MAX_KEY_CHARS, "{}", key.len());
        assert!(key.starts_with("order:sha256:") && key.ends_with(":refund:3"));
        // Stable: the same order and number give the same key every time.
        assert_eq!(key, refund_key(&long, 3));
        assert_ne!(refund_key(&long, 3), refund_key(&"y".repeat(300), 3));
        // Exactly at the limit it is still readable; one past, hashed.
        let fits = "a".repeat(MAX_KEY_CHARS - "order::refund:1".len());
        assert_eq!(refund_key(&fits, 1).len(), MAX_KEY_CHARS);
        assert!(refund_key(&format!("{fits}a"), 1).starts_with("order:sha256:"));
    }

    #[test]
    fn what_is_left_counts_refunds_in_flight() {
        assert_eq!(refund_amount("o", None, 4200, 0, 0, "eur"), Ok(4200));
        assert_eq!(refund_amount("o", None, 4200, 1000, 1200, "eur"), Ok(2000));
        assert_eq!(
            refund_amount("o", Some(2000), 4200, 1000, 1200, "eur"),
            Ok(2000)
        );
        assert!(matches!(
            refund_amount("o", Some(2001), 4200, 1000, 1200, "eur"),
            Err(Refusal::OverRefund { left: 2000, .. })
        ));
        assert_eq!(
            refund_amount("o", None, 4200, 4200, 0, "eur"),
            Err(Refusal::NothingLeft("o".into()))
        );
        assert_eq!(
            refund_amount("o", Some(0), 4200, 0, 0, "eur"),
            Err(Refusal::BadAmount(0))
        );
        assert_eq!(
            refund_amount("o", Some(-5), 4200, 0, 0, "eur"),
            Err(Refusal::BadAmount(-5))
        );
        // More refunded than paid (a refund made elsewhere): nothing left, never negative.
        assert!(matches!(
            refund_amount("o", Some(1), 100, 300, 0, "eur"),
            Err(Refusal::OverRefund { left: 0, .. })
        ));
    }

    #[test]
    fn disputes_the_provider_will_not_refund_are_not_left() {
        let room = Room {
            paid: 10_000,
            refunded: 0,
            held: 1_000,
            disputed: 4_000,
            disputes: vec![("dp_1".into(), "dispute".into())],
        };
        assert_eq!(room.left(), 5_000);
        assert_eq!(room.refund("o", None, "eur"), Ok(5_000));
        assert_eq!(room.refund("o", Some(5_000), "eur"), Ok(5_000));
        let refused = room.refund("o", Some(5_001), "eur").unwrap_err();
        assert!(
            matches!(refused, Refusal::Disputed { left: 5_000, .. }),
            "{refused:?}"
        );
        assert!(refused
            .to_string()
            .starts_with("disputed: the provider does not allow"));
        assert!(refused.is_conflict());
        assert!(matches!(
            room.refund("o", Some(9_001), "eur"),
            Err(Refusal::Disputed { left: 5_000, .. })
        ));
        assert_eq!(room.refund("o", Some(0), "eur"), Err(Refusal::BadAmount(0)));
        let lost = Room {
            paid: 21_200,
            disputed: 21_200,
            disputes: vec![("dp_1".into(), "dispute_lost".into())],
            ..Room::default()
        };
        assert!(matches!(
            lost.refund("o", None, "usd"),
            Err(Refusal::Disputed { .. })
        ));
        assert_eq!(
            lost.note().as_deref(),
            Some(
                "disputed: the provider does not allow a refund of a disputed charge (dp_1, lost)"
            )
        );
        assert_eq!(
            Room {
                paid: 5,
                ..Room::default()
            }
            .note(),
            None
        );
        assert!(!Refusal::BadReason.is_conflict());
    }

    #[test]
    fn reasons_are_cleaned_and_bounded() {
        assert_eq!(parse_reason("  damaged\n "), Ok("damaged".into()));
        assert_eq!(parse_reason(" \t"), Err(Refusal::BadReason));
        assert_eq!(parse_reason(&"r".repeat(501)), Err(Refusal::BadReason));
        assert_eq!(parse_reason(&"r".repeat(500)).unwrap().len(), 500);
    }
}
