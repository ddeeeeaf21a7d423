//! Sentences the server builds from facts (an order's "why"), in the viewer's language.
//! The server's domain code decides what to say; these say it. Server only.

use crate::components::status_label;
use crate::i18n::td_string;
use crate::locale::Locale;

/// A status word (`refunded`, `partially_refunded`) as the why sentence starts with it.
pub fn status(loc: Locale, status: &str) -> String {
    status_label(loc, status).replace('_', " ")
}

pub fn no_payment(loc: Locale) -> String {
    td_string!(loc, why.no_payment).to_string()
}

pub fn received_from(loc: Locale, amount: &str, payments: &str) -> String {
    td_string!(loc, why.received_from, amount = amount, payments = payments).to_string()
}

pub fn disputed(loc: Locale, amount: &str, by: &str, paid_by: &str) -> String {
    td_string!(
        loc,
        why.disputed,
        amount = amount,
        by = by,
        paid_by = paid_by
    )
    .to_string()
}

/// Who refunded: the refunds by id, the charge's running total, or both.
pub fn refunded_by(loc: Locale, refunds: Option<&str>, observed_total: bool) -> String {
    match (refunds, observed_total) {
        (Some(refunds), true) => td_string!(loc, why.and_total, refunds = refunds).to_string(),
        (Some(refunds), false) => refunds.to_string(),
        (None, _) => td_string!(loc, why.refunded_total).to_string(),
    }
}

pub fn refunded(
    loc: Locale,
    status_word: &str,
    refunded: &str,
    paid: &str,
    by: &str,
    paid_by: &str,
) -> String {
    td_string!(
        loc,
        why.refunded,
        status = status(loc, status_word),
        refunded = refunded,
        paid = paid,
        by = by,
        paid_by = paid_by
    )
    .to_string()
}

pub fn paid(loc: Locale, status_word: &str, paid_by: &str) -> String {
    td_string!(
        loc,
        why.paid,
        status = status(loc, status_word),
        paid_by = paid_by
    )
    .to_string()
}

pub fn latest(loc: Locale, status_word: &str, id: &str, state: &str, at: &str) -> String {
    td_string!(
        loc,
        why.latest,
        status = status(loc, status_word),
        id = id,
        state = state,
        at = at
    )
    .to_string()
}

pub fn pending(loc: Locale) -> String {
    td_string!(loc, why.pending).to_string()
}

pub fn reversed(loc: Locale, list: &str) -> String {
    td_string!(loc, why.reversed, list = list).to_string()
}

pub fn won(loc: Locale, list: &str) -> String {
    td_string!(loc, why.won, list = list).to_string()
}

pub fn attention(loc: Locale, what: &str) -> String {
    td_string!(loc, why.attention, what = what).to_string()
}

pub fn command(loc: Locale, refund: &str, id: i64, by: &str) -> String {
    td_string!(loc, why.command, refund = refund, id = id, by = by).to_string()
}

/// A moment in a sentence: `2026-12-01 05:20:02` (en), `01/12/2026 05:20:02` (pt-BR), UTC.
pub fn moment(loc: Locale, rfc3339: &str) -> String {
    crate::format::short_timestamp_in(loc, rfc3339)
}

/// The order's story lines (admin::order::timeline), one function per line.
pub mod story {
    use crate::i18n::td_string;
    use crate::locale::Locale;

    /// " of 12.50 EUR" after a reference; " of 1250 (minor units)" without a currency.
    pub fn of_amount(loc: Locale, amount: Option<i64>, currency: Option<&str>) -> String {
        match (amount, currency) {
            (Some(a), Some(c)) => {
                let amount = crate::format::money_in(loc, a, Some(c));
                td_string!(loc, story.of_amount, amount = amount).to_string()
            }
            (Some(a), None) => td_string!(loc, story.of_minor, amount = a).to_string(),
            _ => String::new(),
        }
    }

    pub fn event(loc: Locale) -> String {
        td_string!(loc, story.event).to_string()
    }

    pub fn redelivered(loc: Locale, event_type: &str, id: &str) -> String {
        td_string!(loc, story.redelivered, event_type = event_type, id = id).to_string()
    }

    pub fn duplicate(loc: Locale, correlation: &str) -> String {
        td_string!(loc, story.duplicate, correlation = correlation).to_string()
    }

    pub fn received(loc: Locale, event_type: &str, id: &str, provider: &str) -> String {
        td_string!(
            loc,
            story.received,
            event_type = event_type,
            id = id,
            provider = provider
        )
        .to_string()
    }

    pub fn correlation(loc: Locale, correlation: &str) -> String {
        td_string!(loc, story.correlation, correlation = correlation).to_string()
    }

    pub fn waiting(loc: Locale, id: &str) -> String {
        td_string!(loc, story.waiting, id = id).to_string()
    }

    pub fn processed(loc: Locale, id: &str) -> String {
        td_string!(loc, story.processed, id = id).to_string()
    }

    /// A ledger entry kind (`payment`, `refund_reversal`…) as words.
    pub fn entry(loc: Locale, kind: &str) -> String {
        match kind {
            "payment" => td_string!(loc, entry.payment).to_string(),
            "refund" => td_string!(loc, entry.refund).to_string(),
            "refund_reversal" => td_string!(loc, entry.refund_reversal).to_string(),
            "refund_observed" => td_string!(loc, entry.refund_observed).to_string(),
            "dispute" => td_string!(loc, entry.dispute).to_string(),
            "dispute_closed" => td_string!(loc, entry.dispute_closed).to_string(),
            other => other.replace('_', " "),
        }
    }

    pub fn counted(
        loc: Locale,
        entry: &str,
        reference: &str,
        amount: &str,
        counted: &str,
    ) -> String {
        td_string!(
            loc,
            story.counted,
            entry = entry,
            reference = reference,
            amount = amount,
            counted = counted
        )
        .to_string()
    }

    pub fn from_event(loc: Locale, event: &str, at: &str, status: &str) -> String {
        let status = super::status(loc, status);
        td_string!(
            loc,
            story.from_event,
            event = event,
            at = at,
            status = status
        )
        .to_string()
    }

    pub fn changed_nothing(loc: Locale, transition: &str, id: &str, amount: &str) -> String {
        td_string!(
            loc,
            story.changed_nothing,
            transition = transition,
            id = id,
            amount = amount
        )
        .to_string()
    }

    pub fn stale_detail(loc: Locale, reason: &str, at: &str, status: &str) -> String {
        let status = super::status(loc, status);
        td_string!(
            loc,
            story.stale_detail,
            reason = reason,
            at = at,
            status = status
        )
        .to_string()
    }

    pub fn message(loc: Locale, topic: &str, sink: &str) -> String {
        td_string!(loc, story.message, topic = topic, sink = sink).to_string()
    }

    pub fn delivered_after(loc: Locale, at: &str, attempts: i64, key: &str) -> String {
        td_string!(
            loc,
            story.delivered_after,
            at = at,
            attempts = attempts,
            key = key
        )
        .to_string()
    }

    pub fn attempts_so_far(loc: Locale, attempts: i64, key: &str) -> String {
        td_string!(loc, story.attempts_so_far, attempts = attempts, key = key).to_string()
    }

    pub fn dead_letter(loc: Locale, id: i64, stage: &str, class: &str, error: &str) -> String {
        td_string!(
            loc,
            story.dead_letter,
            id = id,
            stage = stage,
            class = class,
            error = error
        )
        .to_string()
    }

    pub fn deal_by(loc: Locale, attempts: i64, by: &str) -> String {
        td_string!(loc, story.deal_by, attempts = attempts, by = by).to_string()
    }

    pub fn redriven_by(loc: Locale, id: i64, actor: &str) -> String {
        td_string!(loc, story.redriven_by, id = id, actor = actor).to_string()
    }

    pub fn outcome_reason(loc: Locale, outcome: &str, reason: &str) -> String {
        td_string!(
            loc,
            story.outcome_reason,
            outcome = outcome,
            reason = reason
        )
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_why_reads_in_both_languages() {
        let en = refunded(
            Locale::en,
            "partially_refunded",
            "10.00 BRL",
            "50.00 BRL",
            "re_1",
            "x",
        );
        assert_eq!(
            en,
            "partially refunded: 10.00 BRL of 50.00 BRL refunded by re_1; x"
        );
        let pt = refunded(
            Locale::pt_BR,
            "refunded",
            "R$ 10,00",
            "R$ 10,00",
            "re_1",
            "x",
        );
        assert_eq!(
            pt,
            "reembolsado: R$ 10,00 de R$ 10,00 reembolsados (re_1); x"
        );
        assert_eq!(
            pending(Locale::pt_BR),
            "pendente: nada aconteceu com um pagamento ainda"
        );
        assert_eq!(paid(Locale::en, "settled", "p"), "settled: p");
        assert_eq!(paid(Locale::pt_BR, "paid", "p"), "pago: p");
    }
}
