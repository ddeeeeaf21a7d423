//! Sign-in attempts allowed per user name and per client address (governor's GCRA,
//! in memory: each instance counts its own).

use std::num::NonZeroU32;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

pub struct SignInLimits {
    per_user: DefaultKeyedRateLimiter<String>,
    per_address: DefaultKeyedRateLimiter<String>,
}

/// Keys kept before forgetting the ones whose limit has fully recovered.
const MAX_KEYS: usize = 10_000;

impl SignInLimits {
    pub fn new(per_user_per_minute: u32, per_address_per_minute: u32) -> SignInLimits {
        let quota = |n: u32| Quota::per_minute(NonZeroU32::new(n.max(1)).expect("at least 1"));
        SignInLimits {
            per_user: RateLimiter::keyed(quota(per_user_per_minute)),
            per_address: RateLimiter::keyed(quota(per_address_per_minute)),
        }
    }

    /// Counts one attempt; false when the user or the address has used its allowance.
    pub fn allow(&self, username: &str, address: &str) -> bool {
        for limiter in [&self.per_user, &self.per_address] {
            if limiter.len() > MAX_KEYS {
                limiter.retain_recent();
            }
        }
        let user_ok = self
            .per_user
            .check_key(&username.to_ascii_lowercase())
            .is_ok();
        let address_ok = self.per_address.check_key(&address.to_string()).is_ok();
        user_ok && address_ok
    }
}

#[cfg(test)]
mod tests {
    use super::SignInLimits;

    #[test]
    fn each_user_and_each_address_has_its_own_allowance() {
        let limits = SignInLimits::new(3, 5);
        for _ in 0..3 {
            assert!(limits.allow("ana", "10.0.0.1"));
        }
        // Ana is out of attempts from anywhere, in any letter case.
        assert!(!limits.allow("ana", "10.0.0.2"));
        assert!(!limits.allow("ANA", "10.0.0.3"));
        // Another user from a fresh address is not affected.
        assert!(limits.allow("bruno", "10.0.0.4"));
        // 10.0.0.1 used 3 of its 5; two more for other names, then it is blocked too.
        assert!(limits.allow("carla", "10.0.0.1"));
        assert!(limits.allow("davi", "10.0.0.1"));
        assert!(!limits.allow("eva", "10.0.0.1"));
    }
}
