//! When to try again: exponential backoff with full jitter, `min(cap, base · 2^attempt)`.

use rand::Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub base_ms: i64,
    pub cap_ms: i64,
}

impl Backoff {
    /// The ceiling of the delay before retry number `attempt` (1-based).
    pub fn ceiling_ms(&self, attempt: i64) -> i64 {
        let exp = attempt.saturating_sub(1).clamp(0, 40) as u32;
        self.base_ms
            .saturating_mul(1i64 << exp)
            .min(self.cap_ms)
            .max(0)
    }

    /// Full jitter: uniform in `[0, ceiling]`, so a burst of failures spreads out.
    pub fn delay_ms(&self, attempt: i64) -> i64 {
        let ceiling = self.ceiling_ms(attempt);
        if ceiling == 0 {
            0
        } else {
            rand::thread_rng().gen_range(0..=ceiling)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_doubles_until_the_cap() {
        let b = Backoff {
            base_ms: 100,
            cap_ms: 1_000,
        };
        let ceilings: Vec<i64> = (1..=6).map(|a| b.ceiling_ms(a)).collect();
        assert_eq!(ceilings, vec![100, 200, 400, 800, 1_000, 1_000]);
        assert_eq!(b.ceiling_ms(i64::MAX), 1_000);
        assert_eq!(b.ceiling_ms(0), 100);
    }

    #[test]
    fn delays_stay_within_zero_and_the_ceiling() {
        let b = Backoff {
            base_ms: 50,
            cap_ms: 10_000,
        };
        for attempt in 1..20 {
            for _ in 0..50 {
                let d = b.delay_ms(attempt);
                assert!((0..=b.ceiling_ms(attempt)).contains(&d));
            }
        }
    }
}
