//! Password attempts (sign-ins and password changes) allowed per (user name, client
//! address) and per client address: governor's GCRA, in memory (each instance counts its
//! own).
//!
//! Why these keys: a limit per user name alone lets anyone lock that user out from
//! anywhere (OWASP's account lock-out denial of service); per (user, address) a stranger
//! slows only themselves, and the per-address limit stops one address from spraying many
//! names. The stores are LRU caches of bounded size, so an attacker sending endless new
//! names or addresses costs bounded memory: the least recently used keys are forgotten.

use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};

use governor::clock::DefaultClock;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed, StateStore};
use governor::{Quota, RateLimiter};
use hashlink::LruCache;

/// Keys kept per limiter (a few MB at most, whatever the attacker sends).
pub const MAX_KEYS: usize = 10_000;

/// Which allowance an attempt ran out of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The client address, for any user name.
    Address,
    /// This user name from this client address.
    UserAtAddress,
}

type Limiter<K> = RateLimiter<K, LruStore<K>, DefaultClock>;

pub struct SignInLimits {
    per_user_and_address: Limiter<(String, String)>,
    per_address: Limiter<String>,
    /// The limiters' stores, to count their keys (a `RateLimiter` does not expose its own).
    stores: (LruStore<(String, String)>, LruStore<String>),
}

impl SignInLimits {
    pub fn new(per_user_and_address_per_minute: u32, per_address_per_minute: u32) -> SignInLimits {
        let quota = |n: u32| Quota::per_minute(NonZeroU32::new(n.max(1)).expect("at least 1"));
        let stores = (LruStore::new(MAX_KEYS), LruStore::new(MAX_KEYS));
        SignInLimits {
            per_user_and_address: RateLimiter::new(
                quota(per_user_and_address_per_minute),
                stores.0.clone(),
                DefaultClock::default(),
            ),
            per_address: RateLimiter::new(
                quota(per_address_per_minute),
                stores.1.clone(),
                DefaultClock::default(),
            ),
            stores,
        }
    }

    /// Counts one attempt before the password is checked (so parallel guesses cannot run
    /// past the limit); `Err` names the allowance that is used up. An address already out
    /// of attempts does not touch the per-user store.
    pub fn check(&self, username: &str, address: &str) -> Result<(), Refused> {
        let address = address_key(address);
        if self.per_address.check_key(&address).is_err() {
            return Err(Refused::Address);
        }
        let key = (username.to_ascii_lowercase(), address);
        if self.per_user_and_address.check_key(&key).is_err() {
            return Err(Refused::UserAtAddress);
        }
        Ok(())
    }

    /// Keys remembered by each limiter (per user and address, per address).
    pub fn tracked_keys(&self) -> (usize, usize) {
        (self.stores.0.len(), self.stores.1.len())
    }
}

/// What one client is: its IPv4 address, or the /64 of its IPv6 address (one host
/// usually has a whole /64 to pick from).
pub fn address_key(address: &str) -> String {
    match address.parse::<IpAddr>().map(|ip| ip.to_canonical()) {
        Ok(IpAddr::V6(v6)) => {
            let segments = v6.segments();
            let prefix = std::net::Ipv6Addr::new(
                segments[0],
                segments[1],
                segments[2],
                segments[3],
                0,
                0,
                0,
                0,
            );
            format!("{prefix}/64")
        }
        Ok(ip) => ip.to_string(),
        Err(_) => address.to_string(),
    }
}

/// A governor keyed state store over an LRU cache of at most `capacity` keys; clones
/// share the cache.
pub struct LruStore<K: Hash + Eq> {
    entries: Arc<Mutex<LruCache<K, InMemoryState>>>,
}

impl<K: Hash + Eq> Clone for LruStore<K> {
    fn clone(&self) -> Self {
        LruStore {
            entries: self.entries.clone(),
        }
    }
}

impl<K: Hash + Eq> LruStore<K> {
    fn new(capacity: usize) -> LruStore<K> {
        LruStore {
            entries: Arc::new(Mutex::new(LruCache::new(capacity))),
        }
    }

    fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl<K: Hash + Eq + Clone> StateStore for LruStore<K> {
    type Key = K;

    fn measure_and_replace<T, F, E>(&self, key: &K, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.get(key).is_none() {
            // At capacity this forgets the least recently used key.
            entries.insert(key.clone(), InMemoryState::default());
        }
        entries
            .get(key)
            .expect("inserted above")
            .measure_and_replace(&NotKeyed::NonKey, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_user_at_each_address_and_each_address_has_its_own_allowance() {
        let limits = SignInLimits::new(3, 5);
        for _ in 0..3 {
            assert_eq!(limits.check("ana", "10.0.0.1"), Ok(()));
        }
        // Ana is out of attempts from 10.0.0.1, in any letter case...
        assert_eq!(limits.check("ANA", "10.0.0.1"), Err(Refused::UserAtAddress));
        // ...but not from another address: a stranger cannot lock her out.
        assert_eq!(limits.check("ana", "10.0.0.2"), Ok(()));
        // 10.0.0.1 used 4 of its 5; one more for another name, then it is blocked.
        assert_eq!(limits.check("carla", "10.0.0.1"), Ok(()));
        assert_eq!(limits.check("davi", "10.0.0.1"), Err(Refused::Address));
    }

    #[test]
    fn an_ipv6_client_is_its_slash_64() {
        let limits = SignInLimits::new(100, 2);
        assert_eq!(limits.check("a", "2001:db8:1:2::1"), Ok(()));
        assert_eq!(limits.check("b", "2001:db8:1:2:ffff::9"), Ok(()));
        assert_eq!(limits.check("c", "2001:db8:1:2::77"), Err(Refused::Address));
        assert_eq!(limits.check("c", "2001:db8:1:3::1"), Ok(()));
        // An IPv4 client seen through an IPv6 socket is the same client.
        assert_eq!(address_key("::ffff:192.0.2.7"), "192.0.2.7");
        assert_eq!(address_key("unknown"), "unknown");
    }

    #[test]
    fn memory_stays_bounded_whatever_the_attacker_sends() {
        let limits = SignInLimits::new(10, 1_000_000);
        // Inside one minute, nothing has recovered: a store that only forgets recovered
        // keys would hold all of them.
        for i in 0..(MAX_KEYS * 3) {
            let _ = limits.check(
                &format!("user{i}"),
                &format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255),
            );
        }
        let (per_user, per_address) = limits.tracked_keys();
        assert!(per_user <= MAX_KEYS, "{per_user}");
        assert!(per_address <= MAX_KEYS, "{per_address}");
        // The limiter still limits the keys it holds.
        for _ in 0..10 {
            assert_eq!(limits.check("ana", "192.0.2.1"), Ok(()));
        }
        assert_eq!(
            limits.check("ana", "192.0.2.1"),
            Err(Refused::UserAtAddress)
        );
    }
}
