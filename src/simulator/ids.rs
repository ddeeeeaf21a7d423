//! Stripe-looking ids (`pi_3QxRf…`, 24 characters after the prefix) drawn from a seeded
//! generator, so the same seed names every object and event the same way.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

pub struct Ids {
    rng: StdRng,
}

impl Ids {
    pub fn new(seed: u64) -> Ids {
        Ids {
            rng: StdRng::seed_from_u64(seed),
        }
    }

    pub fn next(&mut self, prefix: &str) -> String {
        let mut id = String::with_capacity(prefix.len() + 25);
        id.push_str(prefix);
        id.push('_');
        for _ in 0..24 {
            id.push(ALPHABET[self.rng.gen_range(0..ALPHABET.len())] as char);
        }
        id
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_same_seed_gives_the_same_ids() {
        let a: Vec<String> = (0..5).map(|_| super::Ids::new(7).next("pi")).collect();
        let mut ids = super::Ids::new(7);
        let b: Vec<String> = (0..5).map(|_| ids.next("pi")).collect();
        assert!(
            a.iter().all(|id| id == &b[0]),
            "restarted generator repeats"
        );
        assert_eq!(b.iter().collect::<std::collections::BTreeSet<_>>().len(), 5);
        assert!(b[0].starts_with("pi_") && b[0].len() == 27);
        assert_ne!(super::Ids::new(8).next("pi"), b[0]);
    }
}
