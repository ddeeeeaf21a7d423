//! Order statuses, the transitions events announce, and the stamp that orders updates of one
//! provider resource.
//!
//! A transition is a change of one resource (a payment, a refund, a dispute): `pay` moves a
//! payment intent to succeeded, `refund_failed` moves a refund to failed. Money and status
//! are derived from the resources' latest states in `super::money`; nothing here compares
//! stamps across resources except the pre-money status (newest of authorise / fail / cancel).

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderStatus {
    Pending,
    Authorized,
    Paid,
    Settled,
    PartiallyRefunded,
    Refunded,
    Disputed,
    Failed,
    Canceled,
}

impl OrderStatus {
    pub const ALL: [OrderStatus; 9] = [
        OrderStatus::Pending,
        OrderStatus::Authorized,
        OrderStatus::Paid,
        OrderStatus::Settled,
        OrderStatus::PartiallyRefunded,
        OrderStatus::Refunded,
        OrderStatus::Disputed,
        OrderStatus::Failed,
        OrderStatus::Canceled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OrderStatus::Pending => "pending",
            OrderStatus::Authorized => "authorized",
            OrderStatus::Paid => "paid",
            OrderStatus::Settled => "settled",
            OrderStatus::PartiallyRefunded => "partially_refunded",
            OrderStatus::Refunded => "refunded",
            OrderStatus::Disputed => "disputed",
            OrderStatus::Failed => "failed",
            OrderStatus::Canceled => "canceled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == s)
    }
}

/// The kind of provider resource a transition changes; each resource is one fact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    /// A payment intent or charge.
    Payment,
    Refund,
    Dispute,
    /// A running total of what was refunded on one charge (`charge.amount_refunded`): an
    /// observation, not a fact of its own.
    RefundTotal,
}

impl ResourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Payment => "payment",
            ResourceKind::Refund => "refund",
            ResourceKind::Dispute => "dispute",
            ResourceKind::RefundTotal => "refund_total",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            ResourceKind::Payment,
            ResourceKind::Refund,
            ResourceKind::Dispute,
            ResourceKind::RefundTotal,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transition {
    Authorize,
    Pay,
    Settle,
    Fail,
    Cancel,
    /// A refund created but not yet succeeded: no money yet.
    RefundPending,
    /// A refund that succeeded: money.
    Refund,
    /// A refund that failed after (or instead of) succeeding: reverses its money.
    RefundFailed,
    RefundCanceled,
    /// A running total of refunds on a charge (see `ResourceKind::RefundTotal`).
    RefundTotal,
    Dispute,
    /// A dispute closed in the merchant's favour: reverses its money.
    DisputeWon,
    /// A dispute closed against the merchant: the money stays withdrawn.
    DisputeLost,
}

impl Transition {
    pub const ALL: [Transition; 13] = [
        Transition::Authorize,
        Transition::Pay,
        Transition::Settle,
        Transition::Fail,
        Transition::Cancel,
        Transition::RefundPending,
        Transition::Refund,
        Transition::RefundFailed,
        Transition::RefundCanceled,
        Transition::RefundTotal,
        Transition::Dispute,
        Transition::DisputeWon,
        Transition::DisputeLost,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Transition::Authorize => "authorize",
            Transition::Pay => "pay",
            Transition::Settle => "settle",
            Transition::Fail => "fail",
            Transition::Cancel => "cancel",
            Transition::RefundPending => "refund_pending",
            Transition::Refund => "refund",
            Transition::RefundFailed => "refund_failed",
            Transition::RefundCanceled => "refund_canceled",
            Transition::RefundTotal => "refund_total",
            Transition::Dispute => "dispute",
            Transition::DisputeWon => "dispute_won",
            Transition::DisputeLost => "dispute_lost",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    pub fn resource(self) -> ResourceKind {
        use Transition::*;
        match self {
            Authorize | Pay | Settle | Fail | Cancel => ResourceKind::Payment,
            RefundPending | Refund | RefundFailed | RefundCanceled => ResourceKind::Refund,
            RefundTotal => ResourceKind::RefundTotal,
            Dispute | DisputeWon | DisputeLost => ResourceKind::Dispute,
        }
    }

    /// Position in its resource's lifecycle: breaks same-timestamp ties without a
    /// sequence. Terminal states outrank the ones before them; for the pre-money order
    /// status, a cancel outranks a failure, which outranks an authorisation.
    pub fn rank(self) -> i64 {
        use Transition::*;
        match self {
            Authorize => 1,
            Fail => 2,
            Cancel => 3,
            Pay => 4,
            Settle => 5,
            RefundPending => 1,
            Refund => 2,
            RefundFailed | RefundCanceled => 3,
            Dispute => 1,
            DisputeWon | DisputeLost => 2,
            RefundTotal => 0,
        }
    }

    /// The resource's state after this transition holds money (counted in the totals).
    pub fn holds_money(self) -> bool {
        use Transition::*;
        matches!(self, Pay | Settle | Refund | Dispute | DisputeLost)
    }

    /// The event proves that money moved at some point, whatever the resource's latest
    /// state: a succeeded payment or refund, or any dispute event (a closed dispute was
    /// opened first, and opening one withdraws the money).
    pub fn proves_money(self) -> bool {
        use Transition::*;
        matches!(
            self,
            Pay | Settle | Refund | Dispute | DisputeWon | DisputeLost
        )
    }

    /// The status a person reads for this transition in lists (what it would make the
    /// order if nothing else were known).
    pub fn label(self) -> &'static str {
        self.as_str()
    }
}

/// When an update of one resource happened, as far as ordering is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Provider timestamp, Unix milliseconds.
    pub at_ms: i64,
    /// The resource's own sequence number, when the provider sends one.
    pub sequence: Option<i64>,
    /// Lifecycle rank of the transition (`Transition::rank`).
    pub rank: i64,
}

impl Stamp {
    /// Strictly newer than `last`, both stamps of the same resource: a later timestamp; on
    /// a tie the resource's sequence when both carry one, else the lifecycle rank. The SQL
    /// guard implements the same rule.
    pub fn is_newer_than(&self, last: &Stamp) -> bool {
        if self.at_ms != last.at_ms {
            return self.at_ms > last.at_ms;
        }
        match (self.sequence, last.sequence) {
            (Some(new), Some(old)) if new != old => new > old,
            _ => self.rank > last.rank,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in OrderStatus::ALL {
            assert_eq!(OrderStatus::parse(s.as_str()), Some(s));
        }
        for t in Transition::ALL {
            assert_eq!(Transition::parse(t.as_str()), Some(t));
            assert_eq!(
                ResourceKind::parse(t.resource().as_str()),
                Some(t.resource())
            );
        }
        assert_eq!(OrderStatus::parse("nope"), None);
        assert_eq!(Transition::parse("nope"), None);
    }

    #[test]
    fn sequence_breaks_ties_before_rank_and_rank_without_one() {
        let s = |seq, t: Transition| Stamp {
            at_ms: 1000,
            sequence: seq,
            rank: t.rank(),
        };
        assert!(
            s(Some(3), Transition::RefundPending).is_newer_than(&s(Some(2), Transition::Refund))
        );
        assert!(
            !s(Some(1), Transition::RefundFailed).is_newer_than(&s(Some(2), Transition::Refund))
        );
        assert!(s(None, Transition::RefundFailed).is_newer_than(&s(Some(2), Transition::Refund)));
        assert!(!s(None, Transition::Refund).is_newer_than(&s(None, Transition::Refund)));
        let later = Stamp {
            at_ms: 2000,
            ..s(Some(0), Transition::Authorize)
        };
        assert!(later.is_newer_than(&s(Some(9), Transition::Settle)));
    }

    #[test]
    fn a_cancel_outranks_an_authorisation_in_the_same_second() {
        assert!(Transition::Cancel.rank() > Transition::Authorize.rank());
        assert!(Transition::Cancel.rank() > Transition::Fail.rank());
    }
}
