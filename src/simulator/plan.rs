//! What happens to each order, decided up front from the seed: payment attempts, refunds
//! (some failing later), disputes (won or lost), Checkout sessions paid by Pix or boleto
//! days later or never. Pure: the same seed and mix give the same plans.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::ids::Ids;
use super::shapes::Method;

/// How often each life happens (each a probability from 0 to 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Mix {
    /// Orders paid through a Checkout session with Pix or boleto (half each).
    pub async_checkout: f64,
    /// Card orders whose first attempt is declined (a second decline as often again).
    pub declined_attempt: f64,
    /// Payments that never succeed (card: canceled after declines; Pix/boleto: expired).
    pub never_paid: f64,
    /// Paid orders that get refunds (full or one or two partial ones).
    pub refunded: f64,
    /// Refunds that succeed and fail days later.
    pub refund_fails_later: f64,
    /// Paid orders without refunds that are disputed (won or lost, half each).
    pub disputed: f64,
    /// Fully refunded orders paid again with a new payment.
    pub paid_again: f64,
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            async_checkout: 0.25,
            declined_attempt: 0.2,
            never_paid: 0.08,
            refunded: 0.2,
            refund_fails_later: 0.15,
            disputed: 0.05,
            paid_again: 0.2,
        }
    }
}

impl Mix {
    pub fn validate(&self) -> Result<(), String> {
        let fields = [
            ("async_checkout", self.async_checkout),
            ("declined_attempt", self.declined_attempt),
            ("never_paid", self.never_paid),
            ("refunded", self.refunded),
            ("refund_fails_later", self.refund_fails_later),
            ("disputed", self.disputed),
            ("paid_again", self.paid_again),
        ];
        for (name, p) in fields {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("mix.{name} must be between 0 and 1, not {p}"));
            }
        }
        Ok(())
    }
}

/// One change to the provider's objects, at a simulated time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// A payment intent appears (`payment_intent.created`); for Pix and boleto with its
    /// Checkout session.
    Open {
        pi: String,
        amount: i64,
        currency: String,
        method: Method,
        session: Option<String>,
    },
    /// A card attempt declined: a failed charge, the intent back to
    /// `requires_payment_method`.
    Decline {
        pi: String,
        charge: String,
    },
    /// A card payment captured.
    Succeed {
        pi: String,
        charge: String,
    },
    /// The buyer gave up: the intent canceled.
    Cancel {
        pi: String,
    },
    /// The Checkout session completed with an asynchronous method not paid yet.
    CheckoutCompleted {
        session: String,
    },
    /// The Pix / boleto was paid (days later).
    AsyncPaid {
        session: String,
        charge: String,
    },
    /// The Pix / boleto expired unpaid.
    AsyncExpired {
        session: String,
    },
    Refund {
        refund: String,
        pi: String,
        amount: i64,
        /// Pix refunds start `pending`; card refunds succeed at once.
        pending: bool,
        /// The merchant wrote the order id into the refund's metadata.
        with_order_id: bool,
    },
    RefundSettled {
        refund: String,
        succeeded: bool,
    },
    RefundFailed {
        refund: String,
    },
    Dispute {
        dispute: String,
        pi: String,
    },
    DisputeClosed {
        dispute: String,
        won: bool,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// Seconds after the order began (simulated time).
    pub after_secs: i64,
    pub action: Action,
    /// The change happens but no event announces it (Stripe documents such gaps).
    pub ungenerated: bool,
    /// The change is announced by a second event type as well (`charge.refunded` beside
    /// `refund.created`, `payment_intent.succeeded` beside the Checkout event…).
    pub two_types: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OrderPlan {
    pub order_id: String,
    /// Seconds after the run's simulated start.
    pub starts_at: i64,
    pub steps: Vec<Step>,
}

/// The generation faults: what share of changes no event announces, and what share is
/// announced twice.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GenerationFaults {
    pub ungenerated: f64,
    pub two_types: f64,
}

const HOUR: i64 = 3_600;
const DAY: i64 = 86_400;

/// No order's life lasts longer (simulated): with the spread of order starts it keeps a
/// run inside the 30 days of events the API serves.
pub const MAX_ORDER_SECS: i64 = 20 * DAY;

/// Plans for `orders` orders, spread over `span_secs` of simulated time.
pub fn plans(
    seed: u64,
    orders: usize,
    span_secs: i64,
    mix: &Mix,
    faults: GenerationFaults,
) -> Vec<OrderPlan> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut ids = Ids::new(seed ^ 0x5157_1d5e);
    (0..orders)
        .map(|n| {
            let starts_at = if orders <= 1 {
                0
            } else {
                span_secs * n as i64 / (orders as i64 - 1)
            };
            plan_one(
                &mut rng,
                &mut ids,
                format!("ord_{n:06}"),
                starts_at,
                mix,
                faults,
            )
        })
        .collect()
}

struct Builder<'a> {
    rng: &'a mut StdRng,
    faults: GenerationFaults,
    at: i64,
    steps: Vec<Step>,
}

impl Builder<'_> {
    fn push(&mut self, after: i64, action: Action) {
        self.at += after.max(1);
        let ungenerated = self.rng.gen_bool(self.faults.ungenerated);
        let two_types = self.rng.gen_bool(self.faults.two_types);
        self.steps.push(Step {
            after_secs: self.at,
            action,
            ungenerated,
            two_types,
        });
    }
}

fn plan_one(
    rng: &mut StdRng,
    ids: &mut Ids,
    order_id: String,
    starts_at: i64,
    mix: &Mix,
    faults: GenerationFaults,
) -> OrderPlan {
    let method = if rng.gen_bool(mix.async_checkout) {
        if rng.gen_bool(0.5) {
            Method::Pix
        } else {
            Method::Boleto
        }
    } else {
        Method::Card
    };
    let currency = match method {
        Method::Card => ["usd", "eur", "brl"][rng.gen_range(0..3)],
        _ => "brl",
    };
    // Whole units of 0.50, from 5.00 to 500.00.
    let amount = rng.gen_range(10..=1_000) * 50;
    let never_paid = rng.gen_bool(mix.never_paid);
    let mut b = Builder {
        rng,
        faults,
        at: 0,
        steps: Vec::new(),
    };
    let mut paid_pi = pay(&mut b, ids, method, currency, amount, never_paid, mix);
    if let Some(pi) = paid_pi.take() {
        if b.rng.gen_bool(mix.refunded) {
            let fully = refunds(&mut b, ids, &pi, method, amount, mix);
            if fully && b.rng.gen_bool(mix.paid_again) {
                b.at += b.rng.gen_range(HOUR..DAY);
                pay(&mut b, ids, Method::Card, currency, amount, false, mix);
            }
        } else if b.rng.gen_bool(mix.disputed) && method == Method::Card {
            let dispute = ids.next("du");
            let after = b.rng.gen_range(3 * DAY..6 * DAY);
            b.push(
                after,
                Action::Dispute {
                    dispute: dispute.clone(),
                    pi: pi.clone(),
                },
            );
            let won = b.rng.gen_bool(0.5);
            let after = b.rng.gen_range(DAY..4 * DAY);
            b.push(after, Action::DisputeClosed { dispute, won });
        }
    }
    OrderPlan {
        order_id,
        starts_at,
        steps: b.steps,
    }
}

/// A payment's life; the intent's id when it ends paid.
fn pay(
    b: &mut Builder,
    ids: &mut Ids,
    method: Method,
    currency: &str,
    amount: i64,
    never_paid: bool,
    mix: &Mix,
) -> Option<String> {
    let pi = ids.next("pi");
    let session = method.is_async().then(|| ids.next("cs"));
    b.push(
        1,
        Action::Open {
            pi: pi.clone(),
            amount,
            currency: currency.into(),
            method,
            session: session.clone(),
        },
    );
    if let Some(session) = session {
        let after = b.rng.gen_range(60..600);
        b.push(
            after,
            Action::CheckoutCompleted {
                session: session.clone(),
            },
        );
        let after = b.rng.gen_range(HOUR..3 * DAY);
        if never_paid {
            b.push(after, Action::AsyncExpired { session });
            return None;
        }
        b.push(
            after,
            Action::AsyncPaid {
                session,
                charge: ids.next("py"),
            },
        );
        return Some(pi);
    }
    let mut declines = 0;
    while declines < 2
        && b.rng.gen_bool(if never_paid {
            0.9
        } else {
            mix.declined_attempt
        })
    {
        let after = b.rng.gen_range(20..120);
        b.push(
            after,
            Action::Decline {
                pi: pi.clone(),
                charge: ids.next("ch"),
            },
        );
        declines += 1;
    }
    let after = b.rng.gen_range(20..300);
    if never_paid {
        b.push(after, Action::Cancel { pi });
        None
    } else {
        b.push(
            after,
            Action::Succeed {
                pi: pi.clone(),
                charge: ids.next("ch"),
            },
        );
        Some(pi)
    }
}

/// Refunds of a paid intent; whether they end refunding all of it.
fn refunds(
    b: &mut Builder,
    ids: &mut Ids,
    pi: &str,
    method: Method,
    amount: i64,
    mix: &Mix,
) -> bool {
    let parts: Vec<i64> = match b.rng.gen_range(0..3) {
        0 => vec![amount],
        1 => vec![amount / 2],
        _ => {
            let first = amount / 4;
            vec![first, amount - first]
        }
    };
    let mut all_hold = true;
    for part in &parts {
        let refund = ids.next("re");
        let after = b.rng.gen_range(HOUR..2 * DAY);
        let pending = method.is_async();
        let with_order_id = b.rng.gen_bool(0.5);
        b.push(
            after,
            Action::Refund {
                refund: refund.clone(),
                pi: pi.into(),
                amount: *part,
                pending,
                with_order_id,
            },
        );
        let fails = b.rng.gen_bool(mix.refund_fails_later);
        all_hold &= !fails;
        if pending {
            let after = b.rng.gen_range(HOUR..DAY);
            b.push(
                after,
                Action::RefundSettled {
                    refund,
                    succeeded: !fails,
                },
            );
        } else if fails {
            let after = b.rng.gen_range(DAY..3 * DAY);
            b.push(after, Action::RefundFailed { refund });
        }
    }
    if !all_hold {
        // A running total (`charge.refunded`) taken before a refund failed would overstate
        // what was refunded; Stripe sends none after the failure. Only intents whose
        // refunds all hold get one.
        for step in b.steps.iter_mut() {
            if matches!(&step.action, Action::Refund { pi: p, .. } if p == pi) {
                step.two_types = false;
            }
        }
    }
    all_hold && parts.iter().sum::<i64>() == amount
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAULTS: GenerationFaults = GenerationFaults {
        ungenerated: 0.02,
        two_types: 0.3,
    };

    #[test]
    fn the_same_seed_gives_the_same_plans_and_another_seed_others() {
        let a = plans(42, 300, 7 * DAY, &Mix::default(), FAULTS);
        assert_eq!(a, plans(42, 300, 7 * DAY, &Mix::default(), FAULTS));
        assert_ne!(a, plans(43, 300, 7 * DAY, &Mix::default(), FAULTS));
    }

    #[test]
    fn every_life_occurs_in_a_few_hundred_orders() {
        let all = plans(1, 2_000, 7 * DAY, &Mix::default(), FAULTS);
        let actions: Vec<&Action> = all
            .iter()
            .flat_map(|p| p.steps.iter().map(|s| &s.action))
            .collect();
        let has = |f: &dyn Fn(&Action) -> bool| actions.iter().any(|a| f(a));
        assert!(has(&|a| matches!(a, Action::Decline { .. })));
        assert!(has(&|a| matches!(a, Action::Cancel { .. })));
        assert!(has(&|a| matches!(a, Action::AsyncPaid { .. })));
        assert!(has(&|a| matches!(a, Action::AsyncExpired { .. })));
        assert!(has(&|a| matches!(a, Action::RefundFailed { .. })));
        assert!(has(&|a| matches!(
            a,
            Action::RefundSettled {
                succeeded: true,
                ..
            }
        )));
        assert!(has(&|a| matches!(
            a,
            Action::DisputeClosed { won: true, .. }
        )));
        assert!(has(&|a| matches!(
            a,
            Action::DisputeClosed { won: false, .. }
        )));
        let paid_twice = all.iter().any(|p| {
            p.steps
                .iter()
                .filter(|s| matches!(s.action, Action::Open { .. }))
                .count()
                == 2
        });
        assert!(paid_twice, "a second payment after a full refund");
        for plan in &all {
            assert!(
                plan.steps
                    .windows(2)
                    .all(|w| w[0].after_secs < w[1].after_secs),
                "steps of one order move forward in time: {plan:?}"
            );
            assert!(plan.steps.last().unwrap().after_secs < MAX_ORDER_SECS);
        }
    }
}
