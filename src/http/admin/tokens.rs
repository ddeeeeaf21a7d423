//! API tokens from the dashboard (admins): list, make, revoke. A new token is kept in this
//! process's memory for the admin who made it until their next view of the token page
//! shows it (at most [`REVEAL_FOR`]), so it is shown once with and without JavaScript and
//! is never written anywhere in clear.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use app::backend::{ApiTokenView, RevealedToken};

use crate::store::tokens::TokenRow;

/// A made token waits this long to be shown; after that it is dropped unseen (and can be
/// revoked and made again).
const REVEAL_FOR: Duration = Duration::from_secs(300);

/// Tokens made but not shown yet, by the id of the admin who made them.
#[derive(Default)]
pub struct RevealedTokens(Mutex<HashMap<i64, (RevealedToken, Instant)>>);

impl RevealedTokens {
    pub fn keep(&self, user_id: i64, token: RevealedToken) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, (_, at)| at.elapsed() < REVEAL_FOR);
        map.insert(user_id, (token, Instant::now()));
    }

    /// The token waiting for this admin, removed as it is taken.
    pub fn take(&self, user_id: i64) -> Option<RevealedToken> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&user_id)
            .filter(|(_, at)| at.elapsed() < REVEAL_FOR)
            .map(|(token, _)| token)
    }
}

pub fn view(row: TokenRow, now: i64) -> ApiTokenView {
    let state = match (&row.revoked_at, row.is_live(now)) {
        (Some(_), _) => "revoked",
        (None, false) => "expired",
        (None, true) => "live",
    };
    ApiTokenView {
        state: state.into(),
        name: row.name,
        prefix: row.prefix,
        role: row.role,
        created_by: row.created_by,
        created_at: row.created_at,
        expires_at: row.expires_at,
        last_used_at: row.last_used_at,
    }
}
