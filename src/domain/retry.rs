//! One retry policy for every stage (processor, outbox relay, provider commands):
//! exponential backoff with full jitter, `min(cap, base · 2^attempt)`, a bounded number of
//! attempts, and a `Retry-After` from the other side taking precedence when it sent one.

use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    pub base_ms: i64,
    pub cap_ms: i64,
    /// Attempts in all (the first one included) before the item goes to the DLQ.
    pub max_attempts: i64,
    /// The longest `Retry-After` honoured; a server asking for more gets this.
    pub max_retry_after_ms: i64,
}

/// What to do after a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    RetryInMs(i64),
    GiveUp,
}

impl RetryPolicy {
    /// The ceiling of the delay after attempt number `attempt` (1-based).
    pub fn ceiling_ms(&self, attempt: i64) -> i64 {
        let exp = attempt.saturating_sub(1).clamp(0, 40) as u32;
        self.base_ms
            .saturating_mul(1i64 << exp)
            .min(self.cap_ms)
            .max(0)
    }

    /// Full jitter: uniform in `[0, ceiling]`, so a burst of failures spreads out.
    pub fn jittered_ms(&self, attempt: i64) -> i64 {
        let ceiling = self.ceiling_ms(attempt);
        if ceiling == 0 {
            0
        } else {
            rand::thread_rng().gen_range(0..=ceiling)
        }
    }

    /// After `attempt` failed: wait (what the other side asked for, if anything), or stop.
    pub fn next(&self, attempt: i64, retry_after: Option<Duration>) -> Next {
        if attempt >= self.max_attempts {
            return Next::GiveUp;
        }
        match retry_after {
            Some(wait) => {
                let ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
                Next::RetryInMs(ms.min(self.max_retry_after_ms))
            }
            None => Next::RetryInMs(self.jittered_ms(attempt)),
        }
    }
}

/// Parses a `Retry-After` value: delay seconds, or an HTTP date (relative to `now_ms`).
pub fn parse_retry_after(value: &str, now_ms: i64) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value)
        .ok()?
        .timestamp_millis();
    Some(Duration::from_millis(
        at.saturating_sub(now_ms).max(0) as u64
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            base_ms: 100,
            cap_ms: 1_000,
            max_attempts: 5,
            max_retry_after_ms: 60_000,
        }
    }

    #[test]
    fn ceiling_doubles_until_the_cap() {
        let p = policy();
        let ceilings: Vec<i64> = (1..=6).map(|a| p.ceiling_ms(a)).collect();
        assert_eq!(ceilings, vec![100, 200, 400, 800, 1_000, 1_000]);
        assert_eq!(p.ceiling_ms(i64::MAX), 1_000);
        assert_eq!(p.ceiling_ms(0), 100);
        assert_eq!(p.ceiling_ms(-3), 100);
    }

    #[test]
    fn delays_stay_within_zero_and_the_ceiling_and_vary() {
        let p = policy();
        for attempt in 1..5 {
            let delays: Vec<i64> = (0..200)
                .map(|_| match p.next(attempt, None) {
                    Next::RetryInMs(ms) => ms,
                    Next::GiveUp => panic!("attempt {attempt} is within the limit"),
                })
                .collect();
            assert!(delays
                .iter()
                .all(|d| (0..=p.ceiling_ms(attempt)).contains(d)));
            assert!(delays.iter().any(|d| *d != delays[0]), "jittered");
        }
    }

    #[test]
    fn gives_up_at_the_limit() {
        assert_eq!(policy().next(5, None), Next::GiveUp);
        assert_eq!(policy().next(6, Some(Duration::from_secs(1))), Next::GiveUp);
    }

    #[test]
    fn retry_after_sets_the_delay_and_is_clamped() {
        let p = policy();
        assert_eq!(
            p.next(1, Some(Duration::from_secs(7))),
            Next::RetryInMs(7_000)
        );
        assert_eq!(
            p.next(1, Some(Duration::from_secs(3_600))),
            Next::RetryInMs(60_000)
        );
    }

    #[test]
    fn retry_after_parses_seconds_and_http_dates() {
        let now = chrono::DateTime::parse_from_rfc3339("2015-10-21T07:28:00Z")
            .unwrap()
            .timestamp_millis();
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }
}
