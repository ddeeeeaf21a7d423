//! Password hashing: argon2id with the crate's defaults (19 MiB, 2 passes, 1 lane: the
//! OWASP minimum), run on the blocking pool behind a small semaphore so a burst of
//! sign-ins cannot take every core from the webhook receiver.

use std::sync::Arc;

use anyhow::Context;
use argon2::password_hash::{rand_core::OsRng, PasswordHash, SaltString};
use argon2::{Argon2, PasswordHasher, PasswordVerifier};
use rand::Rng;
use tokio::sync::Semaphore;

/// Shortest password accepted when someone chooses one.
pub const MIN_PASSWORD_LEN: usize = 12;

pub struct Passwords {
    permits: Semaphore,
    /// A hash of a random password nobody knows: an unknown user name is verified against
    /// it, so a sign-in for a name that does not exist takes as long as a wrong password.
    dummy: String,
}

impl Passwords {
    /// `concurrency` hashes at most at once (each takes one core for tens of milliseconds).
    pub async fn new(concurrency: usize) -> anyhow::Result<Arc<Passwords>> {
        let dummy = hash_blocking(generate_password()).await?;
        Ok(Arc::new(Passwords {
            permits: Semaphore::new(concurrency.max(1)),
            dummy,
        }))
    }

    pub async fn hash(&self, password: String) -> anyhow::Result<String> {
        let _permit = self.permits.acquire().await?;
        hash_blocking(password).await
    }

    /// True when `password` matches `hash`; `None` (no such user) is checked against the
    /// dummy hash and is always false.
    pub async fn verify(&self, password: String, hash: Option<String>) -> bool {
        let Ok(_permit) = self.permits.acquire().await else {
            return false;
        };
        let known = hash.is_some();
        let hash = hash.unwrap_or_else(|| self.dummy.clone());
        let matches = tokio::task::spawn_blocking(move || {
            PasswordHash::new(&hash).is_ok_and(|parsed| {
                Argon2::default()
                    .verify_password(password.as_bytes(), &parsed)
                    .is_ok()
            })
        })
        .await
        .unwrap_or(false);
        known && matches
    }
}

async fn hash_blocking(password: String) -> anyhow::Result<String> {
    tokio::task::spawn_blocking(move || {
        let salt = SaltString::generate(&mut OsRng);
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|h| h.to_string())
            .map_err(|e| anyhow::anyhow!("hashing the password: {e}"))
    })
    .await
    .context("password hashing task")?
}

/// A one-time password: 20 letters and digits (about 119 bits).
pub fn generate_password() -> String {
    rand::thread_rng()
        .sample_iter(&rand::distributions::Alphanumeric)
        .take(20)
        .map(char::from)
        .collect()
}

/// Why a chosen password is refused, if it is.
pub fn check_new_password(password: &str, username: &str) -> Result<(), String> {
    if password.chars().count() < MIN_PASSWORD_LEN {
        return Err(format!("use at least {MIN_PASSWORD_LEN} characters"));
    }
    if password.eq_ignore_ascii_case(username) {
        return Err("the password must not be the user name".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hashes_are_argon2id_with_default_parameters_and_verify() {
        let passwords = Passwords::new(2).await.unwrap();
        let hash = passwords
            .hash("correct horse battery".into())
            .await
            .unwrap();
        assert!(
            hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{hash}"
        );
        assert!(
            passwords
                .verify("correct horse battery".into(), Some(hash.clone()))
                .await
        );
        assert!(
            !passwords
                .verify("wrong horse battery".into(), Some(hash.clone()))
                .await
        );
        // Same password, fresh salt.
        assert_ne!(
            passwords
                .hash("correct horse battery".into())
                .await
                .unwrap(),
            hash
        );
    }

    #[tokio::test]
    async fn unknown_users_cost_a_verification_and_never_match() {
        let passwords = Passwords::new(1).await.unwrap();
        let started = std::time::Instant::now();
        assert!(!passwords.verify("anything".into(), None).await);
        let unknown = started.elapsed();
        let hash = passwords.hash("a real password".into()).await.unwrap();
        let started = std::time::Instant::now();
        assert!(!passwords.verify("anything".into(), Some(hash)).await);
        let wrong = started.elapsed();
        // The same work either way (generous bounds: a shared 2-core machine).
        assert!(
            unknown * 4 > wrong && wrong * 4 > unknown,
            "{unknown:?} vs {wrong:?}"
        );
        // Even the dummy's own password cannot sign in as nobody.
        assert!(!passwords.verify(String::new(), None).await);
    }

    #[test]
    fn chosen_passwords_have_a_floor() {
        assert!(check_new_password("short", "ana").is_err());
        assert!(check_new_password("administrator", "Administrator").is_err());
        assert!(check_new_password("a long enough phrase", "ana").is_ok());
        let generated = generate_password();
        assert_eq!(generated.len(), 20);
        assert!(generated.chars().all(|c| c.is_ascii_alphanumeric()));
        assert!(check_new_password(&generated, "admin").is_ok());
    }
}
