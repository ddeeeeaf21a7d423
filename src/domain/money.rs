//! Money as facts: each payment, refund and dispute is one provider resource; the order's
//! totals and status are a projection of its resources, so every arrival order of the same
//! facts gives the same result.
//!
//! - `Fact::update` is the ordering guard for *updates of one resource* (a refund pending →
//!   succeeded → failed): newer wins; the SQL guard mirrors it. A payment that holds money
//!   is never taken back by an authorisation, failure or cancellation (a refused
//!   regression), and money always lands on a payment that did not hold it yet.
//! - `project` derives totals, status and what needs a person's attention.
//! - `plan_entries` says which ledger entries the facts call for that the ledger does not
//!   hold yet: each fact and each reversal exactly once, a running total only for the part
//!   not already known.

use std::collections::BTreeMap;

use serde::Serialize;

use super::order::{OrderStatus, ResourceKind, Stamp, Transition};

/// One provider resource of an order, as stored in `order_facts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fact {
    pub kind: ResourceKind,
    pub resource_id: String,
    /// The payment a refund belongs to (refunds of one payment share running totals).
    pub parent_ref: Option<String>,
    /// Latest state by the guard.
    pub state: Transition,
    pub stamp: Stamp,
    /// The resource's amount (minor units); for a running total the largest observed.
    pub amount: Option<i64>,
    /// Some event proved that money moved for this resource (see `Transition::proves_money`).
    pub money_seen: bool,
    /// Newest cancellation seen on this payment, whatever the guard kept.
    pub canceled_at: Option<i64>,
}

/// An event's change, as the processor hands it over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub transition: Transition,
    pub resource_id: String,
    pub parent_ref: Option<String>,
    pub stamp: Stamp,
    pub amount: Option<i64>,
}

/// What the guard made of an update of one resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    /// New resource, or newer news about it.
    Applied,
    /// Older than the resource's latest state: recorded, changes no state.
    Stale(String),
    /// Would take money back through a non-money state (a failure after a succeeded
    /// payment): recorded, never applied.
    Refused(String),
}

/// The class of a state: an update never moves a resource to a lower class. For a payment,
/// holding money (1) or not (0): money once received is only taken back by a refund or a
/// dispute. For a refund or dispute, its lifecycle rank (pending < succeeded < failed;
/// opened < closed). Within a class the newer stamp wins. Because (class, stamp) orders
/// every update of a resource, its final state does not depend on arrival order.
pub fn class(t: Transition) -> i64 {
    match t.resource() {
        ResourceKind::Payment => i64::from(t.holds_money()),
        ResourceKind::Refund | ResourceKind::Dispute => t.rank(),
        ResourceKind::RefundTotal => 0,
    }
}

/// The guard's rule; `store::effects` puts the same rule in the UPDATE's WHERE clause.
pub fn guard(current: &Fact, change: &Change) -> Update {
    let new = change.transition;
    if current.kind == ResourceKind::RefundTotal {
        return match (change.amount, current.amount) {
            (Some(a), Some(b)) if a <= b => {
                Update::Stale(format!("a total of {b} was already observed"))
            }
            _ => Update::Applied,
        };
    }
    let (from, to) = (class(current.state), class(new));
    let newer = change.stamp.is_newer_than(&current.stamp);
    if to > from || (to == from && newer) {
        return Update::Applied;
    }
    if to < from && newer {
        return Update::Refused(format!(
            "{} of {} would undo its {} (at {}): a resource never goes back in its lifecycle{}",
            new.as_str(),
            current.resource_id,
            current.state.as_str(),
            crate_time(current.stamp.at_ms),
            if current.kind == ResourceKind::Payment {
                "; money received is only taken back by a refund or a dispute"
            } else {
                ""
            },
        ));
    }
    Update::Stale(format!(
        "{} of {} at {} is older than its latest state {} at {}",
        new.as_str(),
        current.resource_id,
        crate_time(change.stamp.at_ms),
        current.state.as_str(),
        crate_time(current.stamp.at_ms),
    ))
}

fn crate_time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_else(|| ms.to_string())
}

impl Fact {
    pub fn new(change: &Change) -> Fact {
        Fact {
            kind: change.transition.resource(),
            resource_id: change.resource_id.clone(),
            parent_ref: change.parent_ref.clone(),
            state: change.transition,
            stamp: change.stamp,
            amount: change.amount,
            money_seen: change.transition.proves_money(),
            canceled_at: (change.transition == Transition::Cancel).then_some(change.stamp.at_ms),
        }
    }

    /// Applies a change to this resource: the guarded part (state, stamp) only when the
    /// guard says so; the monotone part (money seen, newest cancellation, the first money
    /// amount, the largest running total) always, so it does not depend on arrival order.
    pub fn apply(&mut self, change: &Change) -> Update {
        let verdict = guard(self, change);
        let t = change.transition;
        if self.kind == ResourceKind::RefundTotal {
            if verdict == Update::Applied {
                self.amount = change.amount.or(self.amount);
                self.stamp = change.stamp;
            }
            return verdict;
        }
        if self.parent_ref.is_none() {
            self.parent_ref = change.parent_ref.clone();
        }
        if t.proves_money() && !self.money_seen {
            self.amount = change.amount.or(self.amount);
        } else if self.amount.is_none() {
            self.amount = change.amount;
        }
        self.money_seen |= t.proves_money();
        if t == Transition::Cancel {
            self.canceled_at = Some(
                self.canceled_at
                    .map_or(change.stamp.at_ms, |c| c.max(change.stamp.at_ms)),
            );
        }
        if verdict == Update::Applied {
            self.state = t;
            self.stamp = change.stamp;
        }
        verdict
    }
}

/// Money totals of an order, minor units of its currency.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub paid: i64,
    pub refunded: i64,
    pub disputed: i64,
}

impl Totals {
    pub fn net(&self) -> i64 {
        self.paid - self.refunded - self.disputed
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Projection {
    pub status: OrderStatus,
    pub totals: Totals,
    /// What a person should look at, e.g. a refund larger than what is known to be paid.
    pub attention: Vec<String>,
}

/// The group refunds of one payment share: running totals are per group.
fn refund_group(f: &Fact) -> &str {
    match f.kind {
        ResourceKind::RefundTotal => &f.resource_id,
        _ => f.parent_ref.as_deref().unwrap_or(""),
    }
}

/// Refunded per group: the known refunds that hold money, plus the part of the largest
/// running total observed that no refund known to have succeeded accounts for. A refund
/// announced both ways counts once, in either order, and a refund that fails after it was
/// observed in a total is still reversed.
fn refunded_by_group(facts: &[Fact]) -> BTreeMap<&str, i64> {
    #[derive(Default)]
    struct Group {
        net: i64,
        ever: i64,
        observed: i64,
    }
    let mut groups: BTreeMap<&str, Group> = BTreeMap::new();
    for f in facts {
        let amount = f.amount.unwrap_or(0);
        match f.kind {
            ResourceKind::Refund => {
                let g = groups.entry(refund_group(f)).or_default();
                if f.state == Transition::Refund {
                    g.net += amount;
                }
                if f.money_seen {
                    g.ever += amount;
                }
            }
            ResourceKind::RefundTotal => {
                let g = groups.entry(refund_group(f)).or_default();
                g.observed = g.observed.max(amount);
            }
            _ => {}
        }
    }
    groups
        .into_iter()
        .map(|(k, g)| (k, g.net + (g.observed - g.ever).max(0)))
        .collect()
}

/// Totals, status and attention from the facts alone.
pub fn project(facts: &[Fact]) -> Projection {
    let mut totals = Totals::default();
    let mut any_payment_money = false;
    let mut settled = false;
    let mut newest_pre_money: Option<(i64, i64, Transition)> = None;
    let mut newest_cancel: Option<i64> = None;
    let mut newest_money_payment: Option<i64> = None;
    for f in facts {
        match f.kind {
            ResourceKind::Payment => {
                if let Some(c) = f.canceled_at {
                    newest_cancel = Some(newest_cancel.map_or(c, |n| n.max(c)));
                }
                if f.state.holds_money() {
                    any_payment_money = true;
                    settled |= f.state == Transition::Settle;
                    totals.paid += f.amount.unwrap_or(0);
                    let at = f.stamp.at_ms;
                    newest_money_payment = Some(newest_money_payment.map_or(at, |n| n.max(at)));
                } else {
                    let key = (f.stamp.at_ms, f.state.rank(), f.state);
                    if newest_pre_money.is_none_or(|n| (key.0, key.1) > (n.0, n.1)) {
                        newest_pre_money = Some(key);
                    }
                }
            }
            ResourceKind::Dispute => {
                if f.money_seen && f.state != Transition::DisputeWon {
                    totals.disputed += f.amount.unwrap_or(0);
                }
            }
            ResourceKind::Refund | ResourceKind::RefundTotal => {}
        }
    }
    totals.refunded = refunded_by_group(facts).values().sum();

    let status = if totals.disputed > 0 {
        OrderStatus::Disputed
    } else if totals.refunded > 0 && totals.refunded >= totals.paid {
        OrderStatus::Refunded
    } else if totals.refunded > 0 {
        OrderStatus::PartiallyRefunded
    } else if any_payment_money && settled {
        OrderStatus::Settled
    } else if any_payment_money {
        OrderStatus::Paid
    } else {
        match newest_pre_money.map(|n| n.2) {
            Some(Transition::Authorize) => OrderStatus::Authorized,
            Some(Transition::Fail) => OrderStatus::Failed,
            Some(Transition::Cancel) => OrderStatus::Canceled,
            _ => OrderStatus::Pending,
        }
    };

    let mut attention = Vec::new();
    if totals.refunded > totals.paid {
        attention.push(format!(
            "refund_exceeds_paid: {} refunded but only {} known to be paid",
            totals.refunded, totals.paid
        ));
    }
    if let (Some(cancel), Some(paid)) = (newest_cancel, newest_money_payment) {
        if paid > cancel {
            attention.push(format!(
                "payment_after_cancel: money received at {} after the order was canceled at {}",
                crate_time(paid),
                crate_time(cancel)
            ));
        }
    }
    Projection {
        status,
        totals,
        attention,
    }
}

/// One sentence that answers "why is this order in this status", built from the facts (never
/// free text): which facts set the status, when, and what needs attention. Money reads as
/// the page's totals do (`42.00 EUR`) when the order's currency is known.
pub fn explain(facts: &[Fact], p: &Projection, currency: Option<&str>) -> String {
    explain_in(app::locale::Locale::en, facts, p, currency)
}

/// [`explain`] in the viewer's language (app::sentences says each part).
pub fn explain_in(
    loc: app::locale::Locale,
    facts: &[Fact],
    p: &Projection,
    currency: Option<&str>,
) -> String {
    use app::sentences as say;
    let when = |f: &Fact| match loc {
        app::locale::Locale::en => crate_time(f.stamp.at_ms),
        _ => chrono::DateTime::from_timestamp_millis(f.stamp.at_ms)
            .map(|t| say::moment(loc, &t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)))
            .unwrap_or_else(|| f.stamp.at_ms.to_string()),
    };
    let money = |minor: i64| app::format::money_in(loc, minor, currency);
    let named = |kind: ResourceKind, pred: &dyn Fn(&Fact) -> bool| -> Vec<String> {
        let mut list: Vec<&Fact> = facts.iter().filter(|f| f.kind == kind && pred(f)).collect();
        list.sort_by_key(|f| f.stamp.at_ms);
        list.iter()
            .map(|f| {
                format!(
                    "{} ({}, {})",
                    f.resource_id,
                    money(f.amount.unwrap_or(0)),
                    when(f)
                )
            })
            .collect()
    };
    let payments = named(ResourceKind::Payment, &|f| f.state.holds_money());
    let paid_by = if payments.is_empty() {
        say::no_payment(loc)
    } else {
        // Not "paid … by": the status before it says "paid" already.
        say::received_from(loc, &money(p.totals.paid), &payments.join(", "))
    };
    let t = p.totals;
    let mut sentence = match p.status {
        OrderStatus::Disputed => say::disputed(
            loc,
            &money(t.disputed),
            &named(ResourceKind::Dispute, &|f| {
                f.money_seen && f.state != Transition::DisputeWon
            })
            .join(", "),
            &paid_by,
        ),
        OrderStatus::Refunded | OrderStatus::PartiallyRefunded => {
            let refunds = named(ResourceKind::Refund, &|f| f.state == Transition::Refund);
            let observed = facts
                .iter()
                .any(|f| f.kind == ResourceKind::RefundTotal && f.amount.unwrap_or(0) > 0);
            let joined = refunds.join(", ");
            let by = say::refunded_by(loc, (!refunds.is_empty()).then_some(&*joined), observed);
            say::refunded(
                loc,
                p.status.as_str(),
                &money(t.refunded),
                &money(t.paid),
                &by,
                &paid_by,
            )
        }
        OrderStatus::Settled | OrderStatus::Paid => say::paid(loc, p.status.as_str(), &paid_by),
        OrderStatus::Authorized | OrderStatus::Failed | OrderStatus::Canceled => {
            let latest = facts
                .iter()
                .filter(|f| f.kind == ResourceKind::Payment && !f.state.holds_money())
                .max_by_key(|f| (f.stamp.at_ms, f.state.rank()));
            match latest {
                Some(f) => say::latest(
                    loc,
                    p.status.as_str(),
                    &f.resource_id,
                    &app::components::transition_label(loc, f.state.as_str()),
                    &when(f),
                ),
                None => say::status(loc, p.status.as_str()),
            }
        }
        OrderStatus::Pending => say::pending(loc),
    };
    let reversed = named(ResourceKind::Refund, &|f| {
        f.money_seen
            && matches!(
                f.state,
                Transition::RefundFailed | Transition::RefundCanceled
            )
    });
    if !reversed.is_empty() {
        sentence.push_str(&say::reversed(loc, &reversed.join(", ")));
    }
    let won = named(ResourceKind::Dispute, &|f| {
        f.state == Transition::DisputeWon
    });
    if !won.is_empty() {
        sentence.push_str(&say::won(loc, &won.join(", ")));
    }
    for a in &p.attention {
        sentence.push_str(&say::attention(loc, a));
    }
    sentence
}

/// What a ledger entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    Payment,
    Refund,
    RefundReversal,
    /// The part of a running total (`amount_refunded`) no known refund accounts for.
    RefundObserved,
    Dispute,
    /// A dispute's close: won reverses its money, lost keeps it (counted 0).
    DisputeClosed,
}

impl EntryKind {
    pub const ALL: [EntryKind; 6] = [
        EntryKind::Payment,
        EntryKind::Refund,
        EntryKind::RefundReversal,
        EntryKind::RefundObserved,
        EntryKind::Dispute,
        EntryKind::DisputeClosed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Payment => "payment",
            EntryKind::Refund => "refund",
            EntryKind::RefundReversal => "refund_reversal",
            EntryKind::RefundObserved => "refund_observed",
            EntryKind::Dispute => "dispute",
            EntryKind::DisputeClosed => "dispute_closed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Which total the entry's counted amount goes to.
    pub fn total(self) -> ResourceKind {
        match self {
            EntryKind::Payment => ResourceKind::Payment,
            EntryKind::Refund | EntryKind::RefundReversal | EntryKind::RefundObserved => {
                ResourceKind::Refund
            }
            EntryKind::Dispute | EntryKind::DisputeClosed => ResourceKind::Dispute,
        }
    }

    /// The outbox topic announcing the entry.
    pub fn topic(self) -> &'static str {
        match self {
            EntryKind::Payment => "payment.recorded",
            EntryKind::Refund | EntryKind::RefundObserved => "refund.recorded",
            EntryKind::RefundReversal => "refund.reversed",
            EntryKind::Dispute => "dispute.opened",
            EntryKind::DisputeClosed => "dispute.closed",
        }
    }
}

/// One row of `order_ledger`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub kind: EntryKind,
    /// The resource (payment, refund, dispute id), or for `RefundObserved` the charge.
    pub resource_id: String,
    /// The refund group (`parent_ref`) for refund entries.
    pub group: Option<String>,
    /// The fact's own amount (for `RefundObserved` the total observed).
    pub amount: i64,
    /// Signed contribution to the total named by `kind.total()`.
    pub counted: i64,
}

impl Entry {
    /// Identity of the entry within its order: what makes it exactly once.
    pub fn identity(&self) -> String {
        match self.kind {
            EntryKind::RefundObserved => format!("{}@{}", self.resource_id, self.amount),
            _ => self.resource_id.clone(),
        }
    }
}

/// The entries the facts call for that `existing` does not hold, with their counted amounts,
/// in the order they should be written. After writing them, the ledger's totals equal
/// `project(facts).totals`.
pub fn plan_entries(facts: &[Fact], existing: &[Entry]) -> Vec<Entry> {
    let has = |kind: EntryKind, id: &str| {
        existing
            .iter()
            .any(|e| e.kind == kind && e.resource_id == id)
    };
    let mut out = Vec::new();
    let mut facts_sorted: Vec<&Fact> = facts.iter().collect();
    facts_sorted.sort_by(|a, b| (a.kind, &a.resource_id).cmp(&(b.kind, &b.resource_id)));

    for f in &facts_sorted {
        let amount = f.amount.unwrap_or(0);
        match f.kind {
            ResourceKind::Payment
                if f.state.holds_money() && !has(EntryKind::Payment, &f.resource_id) =>
            {
                out.push(Entry {
                    kind: EntryKind::Payment,
                    resource_id: f.resource_id.clone(),
                    group: None,
                    amount,
                    counted: amount,
                });
            }
            ResourceKind::Dispute if f.money_seen => {
                if !has(EntryKind::Dispute, &f.resource_id) {
                    out.push(Entry {
                        kind: EntryKind::Dispute,
                        resource_id: f.resource_id.clone(),
                        group: None,
                        amount,
                        counted: amount,
                    });
                }
                let closed = matches!(f.state, Transition::DisputeWon | Transition::DisputeLost);
                if closed && !has(EntryKind::DisputeClosed, &f.resource_id) {
                    out.push(Entry {
                        kind: EntryKind::DisputeClosed,
                        resource_id: f.resource_id.clone(),
                        group: None,
                        amount,
                        counted: if f.state == Transition::DisputeWon {
                            -amount
                        } else {
                            0
                        },
                    });
                }
            }
            _ => {}
        }
    }

    // Refunds, per group: facts and reversals in turn, then what a running total adds on
    // top. Each entry is counted with the change of the group's refunded total it brings.
    let mut groups: BTreeMap<&str, ()> = BTreeMap::new();
    for f in &facts_sorted {
        if matches!(f.kind, ResourceKind::Refund | ResourceKind::RefundTotal) {
            groups.insert(refund_group(f), ());
        }
    }
    for e in existing {
        if e.kind.total() == ResourceKind::Refund {
            groups.insert(e.group.as_deref().unwrap_or(""), ());
        }
    }
    for group in groups.keys() {
        let in_group = |e: &&Entry| {
            e.kind.total() == ResourceKind::Refund && e.group.as_deref().unwrap_or("") == *group
        };
        let mut counted: i64 = existing.iter().filter(in_group).map(|e| e.counted).sum();
        // What the entries written so far account for: refunds net of reversals, and every
        // refund known to have succeeded (a running total already includes those).
        let mut net: i64 = 0;
        let mut ever: i64 = 0;
        for e in existing.iter().filter(in_group) {
            match e.kind {
                EntryKind::Refund => {
                    net += e.amount;
                    ever += e.amount;
                }
                EntryKind::RefundReversal => net -= e.amount,
                _ => {}
            }
        }
        let observed = facts_sorted
            .iter()
            .filter(|f| f.kind == ResourceKind::RefundTotal && refund_group(f) == *group)
            .filter_map(|f| f.amount)
            .max()
            .unwrap_or(0);
        let group_ref = (!group.is_empty()).then(|| group.to_string());
        let refunds: Vec<&&Fact> = facts_sorted
            .iter()
            .filter(|f| f.kind == ResourceKind::Refund && f.money_seen && refund_group(f) == *group)
            .collect();
        let mut steps: Vec<(EntryKind, &Fact)> = Vec::new();
        for f in &refunds {
            if !has(EntryKind::Refund, &f.resource_id) {
                steps.push((EntryKind::Refund, f));
            }
        }
        for f in &refunds {
            let reversed = matches!(
                f.state,
                Transition::RefundFailed | Transition::RefundCanceled
            );
            if reversed && !has(EntryKind::RefundReversal, &f.resource_id) {
                steps.push((EntryKind::RefundReversal, f));
            }
        }
        for (kind, f) in steps {
            let amount = f.amount.unwrap_or(0);
            if kind == EntryKind::Refund {
                net += amount;
                ever += amount;
            } else {
                net -= amount;
            }
            let target = net + (observed - ever).max(0);
            out.push(Entry {
                kind,
                resource_id: f.resource_id.clone(),
                group: group_ref.clone(),
                amount,
                counted: target - counted,
            });
            counted = target;
        }
        let target = net + (observed - ever).max(0);
        if target != counted {
            out.push(Entry {
                kind: EntryKind::RefundObserved,
                resource_id: group.to_string(),
                group: group_ref.clone(),
                amount: observed,
                counted: target - counted,
            });
        }
    }
    out
}

/// Totals as the ledger counts them.
pub fn ledger_totals(entries: &[Entry]) -> Totals {
    let mut t = Totals::default();
    for e in entries {
        match e.kind.total() {
            ResourceKind::Payment => t.paid += e.counted,
            ResourceKind::Refund | ResourceKind::RefundTotal => t.refunded += e.counted,
            ResourceKind::Dispute => t.disputed += e.counted,
        }
    }
    t
}

/// The facts of one order in memory: what the database does, without it. The dry run of a
/// redrive and the property tests' model use it.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    pub facts: Vec<Fact>,
}

impl Facts {
    pub fn apply(&mut self, change: &Change) -> Update {
        let kind = change.transition.resource();
        match self
            .facts
            .iter_mut()
            .find(|f| f.kind == kind && f.resource_id == change.resource_id)
        {
            Some(f) => f.apply(change),
            None => {
                self.facts.push(Fact::new(change));
                Update::Applied
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn change(t: Transition, id: &str, at_s: i64, amount: i64) -> Change {
        Change {
            transition: t,
            resource_id: id.into(),
            parent_ref: match t.resource() {
                ResourceKind::Refund | ResourceKind::Dispute => Some("pi_1".into()),
                _ => None,
            },
            stamp: Stamp {
                at_ms: at_s * 1000,
                sequence: None,
                rank: t.rank(),
            },
            amount: Some(amount),
        }
    }

    fn run(changes: &[Change]) -> (Facts, Vec<Entry>, Vec<Update>) {
        let mut facts = Facts::default();
        let mut ledger = Vec::new();
        let mut updates = Vec::new();
        for c in changes {
            updates.push(facts.apply(c));
            let new = plan_entries(&facts.facts, &ledger);
            ledger.extend(new);
        }
        (facts, ledger, updates)
    }

    fn status(changes: &[Change]) -> OrderStatus {
        project(&run(changes).0.facts).status
    }

    use Transition::*;

    #[test]
    fn two_partial_refunds_newest_first_both_count() {
        let pay = change(Pay, "pi_1", 600, 100);
        let r1 = change(Refund, "re_1", 610, 30);
        let r2 = change(Refund, "re_2", 620, 20);
        let (facts, ledger, updates) = run(&[pay, r2, r1]);
        assert!(updates.iter().all(|u| *u == Update::Applied));
        let p = project(&facts.facts);
        assert_eq!((p.totals.paid, p.totals.refunded), (100, 50));
        assert_eq!(p.status, OrderStatus::PartiallyRefunded);
        assert_eq!(ledger_totals(&ledger), p.totals);
    }

    #[test]
    fn refund_before_payment_ends_refunded_and_flags_until_the_payment_arrives() {
        let (facts, _, _) = run(&[change(Refund, "re_1", 602, 100)]);
        let p = project(&facts.facts);
        assert_eq!(p.status, OrderStatus::Refunded);
        assert!(p.attention[0].starts_with("refund_exceeds_paid"));
        let (facts, ledger, _) = run(&[
            change(Refund, "re_1", 602, 100),
            change(Pay, "pi_1", 600, 100),
        ]);
        let p = project(&facts.facts);
        assert_eq!(p.status, OrderStatus::Refunded);
        assert!(p.attention.is_empty());
        assert_eq!(ledger_totals(&ledger), p.totals);
    }

    #[test]
    fn no_settled_after_a_full_refund_and_no_paid_after_a_dispute() {
        let pay = change(Pay, "pi_1", 600, 100);
        let refund = change(Refund, "re_1", 610, 100);
        let settle = change(Settle, "pi_1", 620, 100);
        assert_eq!(
            status(&[pay.clone(), refund.clone(), settle.clone()]),
            OrderStatus::Refunded
        );
        let dispute = change(Dispute, "dp_1", 610, 100);
        let pay2 = change(Pay, "pi_2", 700, 100);
        assert_eq!(status(&[pay, dispute, pay2]), OrderStatus::Disputed);
    }

    #[test]
    fn a_refund_that_fails_later_is_reversed_once_in_either_order() {
        let pay = change(Pay, "pi_1", 600, 100);
        let pending = change(RefundPending, "re_1", 610, 40);
        let ok = change(Refund, "re_1", 611, 40);
        let failed = change(RefundFailed, "re_1", 612, 40);
        for order in [
            vec![pay.clone(), pending.clone(), ok.clone(), failed.clone()],
            vec![failed.clone(), ok.clone(), pending.clone(), pay.clone()],
            vec![pay.clone(), failed.clone(), pending.clone(), ok.clone()],
        ] {
            let (facts, ledger, _) = run(&order);
            let p = project(&facts.facts);
            assert_eq!(
                p.totals,
                Totals {
                    paid: 100,
                    refunded: 0,
                    disputed: 0
                }
            );
            assert_eq!(p.status, OrderStatus::Paid);
            let kinds: Vec<_> = ledger.iter().map(|e| e.kind).collect();
            assert_eq!(kinds.iter().filter(|k| **k == EntryKind::Refund).count(), 1);
            assert_eq!(
                kinds
                    .iter()
                    .filter(|k| **k == EntryKind::RefundReversal)
                    .count(),
                1
            );
            assert_eq!(ledger_totals(&ledger), p.totals);
        }
    }

    #[test]
    fn a_running_total_and_the_refund_it_announces_count_once() {
        let pay = change(Pay, "pi_1", 600, 100);
        let mut total = change(RefundTotal, "pi_1", 610, 30);
        total.parent_ref = None;
        let refund = change(Refund, "re_1", 610, 30);
        for order in [
            vec![pay.clone(), total.clone(), refund.clone()],
            vec![pay.clone(), refund.clone(), total.clone()],
        ] {
            let (facts, ledger, _) = run(&order);
            let p = project(&facts.facts);
            assert_eq!(p.totals.refunded, 30);
            assert_eq!(ledger_totals(&ledger), p.totals);
        }
        // A larger total than the known refunds adds only the difference.
        let mut total50 = total.clone();
        total50.amount = Some(50);
        let (facts, ledger, _) = run(&[pay, refund, total50]);
        assert_eq!(project(&facts.facts).totals.refunded, 50);
        assert_eq!(ledger.last().unwrap().counted, 20);
    }

    #[test]
    fn cancel_and_authorisation_in_one_second_leave_the_order_canceled() {
        let auth = change(Authorize, "pi_1", 600, 100);
        let cancel = change(Cancel, "pi_1", 600, 100);
        assert_eq!(
            status(&[auth.clone(), cancel.clone()]),
            OrderStatus::Canceled
        );
        assert_eq!(status(&[cancel, auth]), OrderStatus::Canceled);
    }

    #[test]
    fn money_after_a_cancel_is_counted_and_flagged_whatever_came_between() {
        let cancel = change(Cancel, "pi_1", 600, 100);
        let fail = change(Fail, "pi_2", 610, 100);
        let pay = change(Pay, "pi_2", 620, 100);
        for order in [
            vec![cancel.clone(), fail.clone(), pay.clone()],
            vec![pay.clone(), fail.clone(), cancel.clone()],
        ] {
            let p = project(&run(&order).0.facts);
            assert_eq!(p.status, OrderStatus::Paid);
            assert!(p
                .attention
                .iter()
                .any(|a| a.starts_with("payment_after_cancel")));
        }
    }

    #[test]
    fn a_failure_after_a_payment_is_refused() {
        let (_, _, updates) = run(&[
            change(Pay, "pi_1", 600, 100),
            change(Fail, "pi_1", 700, 100),
        ]);
        assert!(matches!(updates[1], Update::Refused(_)));
    }

    #[test]
    fn the_why_sentence_names_the_facts_that_set_the_status() {
        let (f, _, _) = run(&[
            change(Pay, "pi_1", 600, 100),
            change(Refund, "re_1", 720, 100),
        ]);
        let why = explain(&f.facts, &project(&f.facts), None);
        assert!(
            why.starts_with("refunded: 100 of 100 refunded by re_1 (100, 1970-01-01 00:12:00)"),
            "{why}"
        );
        assert!(
            why.contains("100 received from pi_1 (100, 1970-01-01 00:10:00)"),
            "{why}"
        );
        let (f, _, _) = run(&[
            change(Authorize, "pi_1", 600, 100),
            change(Cancel, "pi_1", 600, 100),
        ]);
        let why = explain(&f.facts, &project(&f.facts), None);
        assert!(why.starts_with("canceled: pi_1 cancel at"), "{why}");
        let (f, _, _) = run(&[change(Refund, "re_1", 720, 100)]);
        let why = explain(&f.facts, &project(&f.facts), None);
        assert!(why.contains("no payment known yet"), "{why}");
        assert!(why.contains("attention: refund_exceeds_paid"), "{why}");
    }

    #[test]
    fn a_won_dispute_reverses_and_a_lost_one_stays() {
        let pay = change(Pay, "pi_1", 600, 100);
        let open = change(Dispute, "dp_1", 610, 100);
        let won = change(DisputeWon, "dp_1", 620, 100);
        let lost = change(DisputeLost, "dp_1", 620, 100);
        let (f, l, _) = run(&[pay.clone(), won.clone(), open.clone()]);
        assert_eq!(project(&f.facts).status, OrderStatus::Paid);
        assert_eq!(ledger_totals(&l).disputed, 0);
        assert_eq!(l.len(), 3);
        let (f, l, _) = run(&[pay, open, lost]);
        assert_eq!(project(&f.facts).status, OrderStatus::Disputed);
        assert_eq!(ledger_totals(&l).disputed, 100);
    }

    /// Random histories of one order: several payment attempts, refunds that may fail,
    /// disputes that may be won or lost, running totals; delivered in every order.
    fn arb_changes() -> impl Strategy<Value = Vec<Change>> {
        let one = (
            0usize..9,
            0usize..3,
            0i64..4,
            proptest::option::of(0i64..3),
            0i64..1,
        );
        proptest::collection::vec(one, 1..9).prop_map(|items| {
            let mut out: Vec<Change> = Vec::new();
            for (what, res, at, seq, _) in items {
                let t = [
                    Authorize,
                    Fail,
                    Cancel,
                    Pay,
                    Settle,
                    Refund,
                    RefundFailed,
                    Dispute,
                    DisputeWon,
                ][what];
                let (id, amount) = match t.resource() {
                    ResourceKind::Payment => (format!("pi_{res}"), 100),
                    // One amount per resource: a refund's amount never changes.
                    ResourceKind::Refund => (format!("re_{res}"), (res as i64 + 1) * 10),
                    _ => (format!("dp_{res}"), 50),
                };
                let mut c = change(t, &id, at, amount);
                c.stamp.sequence = seq;
                // One fact per stamp and resource: two events of one resource in the same
                // instant with no order between them is not a consistent history.
                let clash = out.iter().any(|o| {
                    o.resource_id == c.resource_id
                        && !o.stamp.is_newer_than(&c.stamp)
                        && !c.stamp.is_newer_than(&o.stamp)
                        && o.transition != c.transition
                });
                if !clash {
                    out.push(c);
                }
            }
            out
        })
    }

    proptest! {
        #[test]
        fn every_arrival_order_gives_the_same_facts_totals_status_and_ledger(
            changes in arb_changes(),
            seed in any::<u64>(),
        ) {
            let (reference, ref_ledger, _) = run(&changes);
            let expected = project(&reference.facts);
            prop_assert_eq!(ledger_totals(&ref_ledger), expected.totals);
            let mut arrival = changes.clone();
            arrival.extend(changes.iter().take(3).cloned());
            let mut rng = seed;
            for i in (1..arrival.len()).rev() {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                arrival.swap(i, (rng >> 33) as usize % (i + 1));
            }
            let (facts, ledger, _) = run(&arrival);
            let got = project(&facts.facts);
            prop_assert_eq!(&got, &expected);
            prop_assert_eq!(ledger_totals(&ledger), expected.totals);
            let mut kinds: Vec<(EntryKind, String)> = ledger.iter().filter(|e| e.kind != EntryKind::RefundObserved).map(|e| (e.kind, e.resource_id.clone())).collect();
            let mut ref_kinds: Vec<(EntryKind, String)> = ref_ledger.iter().filter(|e| e.kind != EntryKind::RefundObserved).map(|e| (e.kind, e.resource_id.clone())).collect();
            kinds.sort();
            ref_kinds.sort();
            prop_assert_eq!(kinds, ref_kinds);
        }
    }
}
