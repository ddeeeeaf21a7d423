//! `[reconcile]` in the config file.

use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReconcileSettings {
    /// How often `serve` reconciles each provider that has an `api_key`: `"15m"`, `"1h"`,
    /// `"90s"`; `"0"` turns the periodic job off (the CLI and the dashboard still run it).
    pub interval: Interval,
    /// Fix `missing_event`, `unprocessed` and `missing_fact` diffs at once (each fix goes
    /// in as an ordinary event with the webhook's own keys, so it can never double an
    /// effect). Off: every diff waits for a person.
    pub auto_fix: bool,
    /// The events pass starts this many seconds before the checkpoint, for events the
    /// provider lists late.
    pub overlap_secs: i64,
    /// A run holds its provider's lease this long, renewed while it runs: a run whose
    /// process died is taken over after at most this.
    pub lease_secs: i64,
    /// Events asked for per page (1 to 100, Stripe's ceiling).
    pub page_size: u32,
    /// How long the provider keeps events (Stripe: 30 days); an older checkpoint is a
    /// `window_exceeded` diff.
    pub window_days: i64,
    /// After the events pass, how long to wait for the processor to apply what the run
    /// ingested before the objects pass compares orders.
    pub settle_secs: u64,
    /// A scheduled run that failed or was interrupted is tried again this many seconds
    /// after it ended, doubling with each failure in a row, never later than `interval`:
    /// a provider outage of a minute must not leave the provider's truth unread for an
    /// interval.
    pub retry_secs: u64,
}

impl Default for ReconcileSettings {
    fn default() -> Self {
        ReconcileSettings {
            interval: Interval(Duration::from_secs(15 * 60)),
            auto_fix: true,
            overlap_secs: 300,
            lease_secs: 60,
            page_size: 100,
            window_days: 30,
            settle_secs: 60,
            retry_secs: 60,
        }
    }
}

impl ReconcileSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (1..=100).contains(&self.page_size),
            "reconcile.page_size must be between 1 and 100"
        );
        anyhow::ensure!(
            self.lease_secs >= 1,
            "reconcile.lease_secs must be at least 1"
        );
        anyhow::ensure!(
            self.retry_secs >= 1,
            "reconcile.retry_secs must be at least 1"
        );
        anyhow::ensure!(
            self.overlap_secs >= 0 && self.window_days >= 1,
            "reconcile.overlap_secs must be 0 or more and reconcile.window_days at least 1"
        );
        Ok(())
    }
}

/// A duration written as a number and a unit (`s`, `m`, `h`, `d`), or `"0"` for off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval(pub Duration);

impl Interval {
    pub fn parse(text: &str) -> Result<Interval, String> {
        let text = text.trim();
        if text == "0" {
            return Ok(Interval(Duration::ZERO));
        }
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(|| format!("{text:?} has no unit (write e.g. \"15m\", \"1h\", \"90s\")"))?;
        let (number, unit) = text.split_at(split);
        let n: u64 = number
            .parse()
            .map_err(|_| format!("{text:?} does not start with a whole number"))?;
        let secs = match unit.trim() {
            "s" => n,
            "m" | "min" => n.saturating_mul(60),
            "h" => n.saturating_mul(3_600),
            "d" => n.saturating_mul(86_400),
            other => return Err(format!("unknown unit {other:?} in {text:?} (s, m, h or d)")),
        };
        Ok(Interval(Duration::from_secs(secs)))
    }

    pub fn is_off(&self) -> bool {
        self.0.is_zero()
    }
}

impl std::fmt::Display for Interval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0.as_secs();
        match s {
            0 => write!(f, "0"),
            s if s % 86_400 == 0 => write!(f, "{}d", s / 86_400),
            s if s % 3_600 == 0 => write!(f, "{}h", s / 3_600),
            s if s % 60 == 0 => write!(f, "{}m", s / 60),
            s => write!(f, "{s}s"),
        }
    }
}

impl Serialize for Interval {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Interval {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Number(u64),
        }
        match Raw::deserialize(d)? {
            Raw::Text(t) => Interval::parse(&t).map_err(serde::de::Error::custom),
            Raw::Number(0) => Ok(Interval(Duration::ZERO)),
            Raw::Number(n) => Err(serde::de::Error::custom(format!(
                "{n} has no unit (write e.g. \"{n}m\" or \"{n}s\")"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_read_with_their_unit() {
        assert_eq!(Interval::parse("15m").unwrap().0, Duration::from_secs(900));
        assert_eq!(Interval::parse("90s").unwrap().0, Duration::from_secs(90));
        assert_eq!(Interval::parse("2h").unwrap().0, Duration::from_secs(7200));
        assert!(Interval::parse("0").unwrap().is_off());
        assert!(Interval::parse("15").is_err());
        assert!(Interval::parse("m").is_err());
        assert!(Interval::parse("5 weeks").is_err());
        assert_eq!(Interval::parse("15m").unwrap().to_string(), "15m");
    }
}
