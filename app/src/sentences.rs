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
            "reembolsado: R$ 10,00 de R$ 10,00 reembolsado por re_1; x"
        );
        assert_eq!(
            pending(Locale::pt_BR),
            "pendente: nada aconteceu com um pagamento ainda"
        );
        assert_eq!(paid(Locale::en, "settled", "p"), "settled: p");
        assert_eq!(paid(Locale::pt_BR, "paid", "p"), "pago: p");
    }
}
