//! When a session ends: after `session_idle_minutes` without a request, and at the latest
//! `session_lifetime_minutes` after its sign-in, however active it is.
//!
//! The session is not saved on every request (that would make every page view a write
//! competing with ingest for SQLite's one writer): a request moves the idle expiry on only
//! when the last move is a minute old (half the idle time, if that is shorter), so the idle
//! timeout is honoured to within that minute.

use std::time::Duration;

use tower_sessions::cookie::time::{self, OffsetDateTime};
use tower_sessions::Expiry;

const TOUCH_AT_MOST_EVERY: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
pub struct SessionTimes {
    idle: Duration,
    lifetime: Duration,
}

impl SessionTimes {
    pub fn new(idle_minutes: i64, lifetime_minutes: i64) -> SessionTimes {
        let minutes = |m: i64| Duration::from_secs(60 * m.max(1) as u64);
        SessionTimes {
            idle: minutes(idle_minutes),
            lifetime: minutes(lifetime_minutes),
        }
    }

    pub fn idle(&self) -> time::Duration {
        to_time(self.idle)
    }

    /// True once the session signed in at `signed_in_ms` has lived its lifetime.
    pub fn ended(&self, signed_in_ms: i64, now_ms: i64) -> bool {
        now_ms.saturating_sub(signed_in_ms) >= millis(self.lifetime)
    }

    /// True when a request at `now_ms` should move the idle expiry on (save the session).
    pub fn touch_due(&self, touched_ms: i64, now_ms: i64) -> bool {
        now_ms.saturating_sub(touched_ms) >= millis(TOUCH_AT_MOST_EVERY.min(self.idle / 2))
    }

    /// The expiry to save the session with at `now_ms`: the idle timeout, or the end of its
    /// lifetime when that comes first.
    pub fn expiry(&self, signed_in_ms: i64, now_ms: i64) -> Expiry {
        let end_ms = signed_in_ms.saturating_add(millis(self.lifetime));
        if now_ms.saturating_add(millis(self.idle)) <= end_ms {
            Expiry::OnInactivity(self.idle())
        } else {
            let end = OffsetDateTime::from_unix_timestamp_nanos(i128::from(end_ms) * 1_000_000)
                .unwrap_or(OffsetDateTime::UNIX_EPOCH);
            Expiry::AtDateTime(end)
        }
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn to_time(d: Duration) -> time::Duration {
    time::Duration::try_from(d).unwrap_or(time::Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    #[test]
    fn a_session_ends_at_its_lifetime_however_active() {
        let times = SessionTimes::new(60, 12 * 60);
        let signed_in = 1_000_000;
        assert!(!times.ended(signed_in, signed_in + 12 * 60 * MIN - 1));
        assert!(times.ended(signed_in, signed_in + 12 * 60 * MIN));
        // Early on, the idle timeout decides; in the last hour, the lifetime does.
        assert_eq!(
            times.expiry(signed_in, signed_in + MIN),
            Expiry::OnInactivity(time::Duration::minutes(60))
        );
        let late = times.expiry(signed_in, signed_in + 11 * 60 * MIN + 30 * MIN);
        let end = OffsetDateTime::from_unix_timestamp_nanos(
            i128::from(signed_in + 12 * 60 * MIN) * 1_000_000,
        )
        .unwrap();
        assert_eq!(late, Expiry::AtDateTime(end));
    }

    #[test]
    fn the_idle_expiry_moves_at_most_once_a_minute() {
        let times = SessionTimes::new(60, 720);
        assert!(!times.touch_due(0, 59_999));
        assert!(times.touch_due(0, 60_000));
        // A one-minute idle timeout is moved every half minute, so it still holds.
        let short = SessionTimes::new(1, 720);
        assert!(!short.touch_due(0, 29_999));
        assert!(short.touch_due(0, 30_000));
        // Nonsense settings are read as one minute.
        let zero = SessionTimes::new(0, -5);
        assert!(zero.ended(0, MIN));
        assert!(!zero.ended(0, MIN - 1));
    }
}
