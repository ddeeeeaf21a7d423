//! Refused password attempts go to the audit log as one row per (action, refused key) and
//! window, with the count, instead of one row per request: a flood of refusals then costs
//! at most two writes per key and window (the row when the window opens, its final count
//! when it closes) and bounded memory, so it cannot fill the audit log or keep SQLite's
//! one writer from the webhook receiver.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::store::users::{self, AuditEntry};
use crate::store::Db;

/// How long one row counts refusals: the limiters' period.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Windows open at once; beyond, refusals share one row (target `many`).
pub const MAX_TALLIES: usize = 10_000;

/// One refused attempt, as the audit row that opens its window shows it.
pub struct Refusal<'a> {
    /// `sign_in.limited`, `user.password_change.limited`
    pub action: &'static str,
    pub actor: &'a str,
    /// What ran out of attempts: `user:NAME` or `address:ADDR`.
    pub target: String,
    pub reason: &'static str,
    pub source: Option<&'a str>,
    pub now: i64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Key {
    action: &'static str,
    target: String,
}

struct Tally {
    opened: Instant,
    count: u64,
    /// The audit row once written.
    row: Option<i64>,
    /// What the row holds, to write it at the close if the first write failed.
    actor: String,
    reason: &'static str,
    source: Option<String>,
    opened_at_ms: i64,
}

#[derive(Default)]
pub struct Refusals {
    tallies: Mutex<HashMap<Key, Tally>>,
}

impl Refusals {
    /// Counts `refusal`: the first of a window writes its audit row; later ones only count.
    pub async fn record(&self, db: &Db, refusal: Refusal<'_>) {
        let mut key = Key {
            action: refusal.action,
            target: refusal.target.clone(),
        };
        let now = Instant::now();
        let closed = {
            let mut tallies = self.lock();
            if let Some(tally) = tallies.get_mut(&key) {
                if now.duration_since(tally.opened) < WINDOW {
                    tally.count += 1;
                    return;
                }
            }
            let closed = tallies.remove(&key).map(|tally| (key.clone(), tally));
            if tallies.len() >= MAX_TALLIES {
                key.target = "many".into();
                if let Some(tally) = tallies.get_mut(&key) {
                    tally.count += 1;
                    return;
                }
            }
            tallies.insert(
                key.clone(),
                Tally {
                    opened: now,
                    count: 1,
                    row: None,
                    actor: refusal.actor.to_string(),
                    reason: refusal.reason,
                    source: refusal.source.map(str::to_string),
                    opened_at_ms: refusal.now,
                },
            );
            closed
        };
        if let Some((key, tally)) = closed {
            write_final(db, &key, &tally).await;
        }
        let written = users::insert_audit(
            db,
            &AuditEntry {
                actor: refusal.actor,
                action: key.action,
                target: &key.target,
                reason: Some(refusal.reason),
                details: Some(&details(1)),
                source: refusal.source,
                now: refusal.now,
            },
        )
        .await;
        match written {
            Ok(id) => {
                if let Some(tally) = self.lock().get_mut(&key) {
                    tally.row = Some(id);
                }
            }
            Err(e) => tracing::error!(action = key.action, "could not write the audit log: {e:#}"),
        }
    }

    /// Writes the final count of every window that has ended (`all`: of every window, at
    /// shutdown) and forgets them.
    pub async fn close(&self, db: &Db, all: bool) {
        let now = Instant::now();
        let ended: Vec<(Key, Tally)> = {
            let mut tallies = self.lock();
            let keys: Vec<Key> = tallies
                .iter()
                .filter(|(_, t)| all || now.duration_since(t.opened) >= WINDOW)
                .map(|(k, _)| k.clone())
                .collect();
            keys.into_iter()
                .filter_map(|k| tallies.remove(&k).map(|t| (k, t)))
                .collect()
        };
        for (key, tally) in ended {
            write_final(db, &key, &tally).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Tally>> {
        self.tallies.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn details(count: u64) -> String {
    if count == 1 {
        "1 refused attempt".into()
    } else {
        format!("{count} refused attempts")
    }
}

/// The window's count into its row (or the whole row, if the first write failed).
async fn write_final(db: &Db, key: &Key, tally: &Tally) {
    let details = details(tally.count);
    let written = match tally.row {
        Some(_) if tally.count == 1 => Ok(()),
        Some(id) => users::set_audit_details(db, id, &details).await,
        None => users::insert_audit(
            db,
            &AuditEntry {
                actor: &tally.actor,
                action: key.action,
                target: &key.target,
                reason: Some(tally.reason),
                details: Some(&details),
                source: tally.source.as_deref(),
                now: tally.opened_at_ms,
            },
        )
        .await
        .map(|_| ()),
    };
    if let Err(e) = written {
        tracing::error!(
            action = key.action,
            count = tally.count,
            "could not write the audit log: {e:#}"
        );
    }
}
