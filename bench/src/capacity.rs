//! End-to-end capacity: the highest offered rate that one `oncehook serve` (receiver and
//! processor on, the operator's settings) sustains. A rate is sustained when, over the
//! whole window, the backlog stays flat and p99 receipt → effect stays under 100 ms. The
//! search doubles the rate until a probe fails, then bisects between the best sustained
//! rate and the lowest failed one; each probe has a fresh database and a fresh server, so a
//! failed probe's backlog does not weigh on the next.

use crate::Latency;

/// p99 receipt → effect must stay under this.
pub const P99_BOUND_MS: u64 = 100;

/// Why a probe was or was not sustained.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub sustained: bool,
    /// Mean backlog over the first and the last quarter of the window.
    pub backlog_early: f64,
    pub backlog_late: f64,
    pub reason: String,
}

/// The mean of the samples taken in `[from, to)` of the window (fractions of it).
fn mean_backlog(samples: &[(i64, usize)], window_ms: i64, from: f64, to: f64) -> f64 {
    let (lo, hi) = (from * window_ms as f64, to * window_ms as f64);
    let window: Vec<f64> = samples
        .iter()
        .filter(|(at, _)| (*at as f64) >= lo && (*at as f64) < hi)
        .map(|(_, n)| *n as f64)
        .collect();
    window.iter().sum::<f64>() / window.len().max(1) as f64
}

/// Flat: between the first and the last quarter of the window the backlog grew by less
/// than 100 ms of the offered traffic (a backlog growing without bound grows by a quarter
/// of the window's excess at least), and every event was acknowledged and drained.
pub fn verdict(probe: &Latency) -> Verdict {
    let early = mean_backlog(&probe.backlog, probe.window_ms, 0.0, 0.25);
    let late = mean_backlog(&probe.backlog, probe.window_ms, 0.75, 1.01);
    let allowance = (probe.offered * 0.1).max(10.0);
    let mut reasons = vec![];
    if late - early > allowance {
        reasons.push(format!("backlog grew from {early:.0} to {late:.0} events"));
    }
    if probe.p99_ms >= P99_BOUND_MS {
        reasons.push(format!("p99 {} ms", probe.p99_ms));
    }
    if probe.load.failed > 0 {
        reasons.push(format!(
            "{} deliveries not acknowledged ({})",
            probe.load.failed,
            probe.load.first_failure.as_deref().unwrap_or("")
        ));
    }
    // A rate the load generator could not offer is not a rate the server sustained. The
    // senders send every scheduled event, late if the server answers slowly, so the rate
    // is over the time they took, never shorter than the window: counted over the window
    // alone, 5,843/s acknowledged in 77 s passed for 7,500/s.
    let sending_secs = (probe.window_ms as f64 / 1000.0).max(probe.load.elapsed.as_secs_f64());
    let acked_rate = probe.load.acked as f64 / sending_secs.max(1e-3);
    if acked_rate < 0.95 * probe.offered {
        reasons.push(format!(
            "only {acked_rate:.0}/s acknowledged of {:.0}/s offered",
            probe.offered
        ));
    }
    if !probe.drained {
        reasons.push("the backlog did not drain after the window".into());
    }
    Verdict {
        sustained: reasons.is_empty(),
        backlog_early: early,
        backlog_late: late,
        reason: if reasons.is_empty() {
            "flat".into()
        } else {
            reasons.join("; ")
        },
    }
}

/// The rates to try, given what the earlier probes found.
#[derive(Clone, Debug)]
pub struct Search {
    /// Probes left.
    left: usize,
    next: f64,
    best_sustained: Option<f64>,
    lowest_failed: Option<f64>,
}

impl Search {
    pub fn new(start: f64, probes: usize) -> Self {
        Search {
            left: probes,
            next: start.max(1.0),
            best_sustained: None,
            lowest_failed: None,
        }
    }

    /// The next rate to offer, or None when the probes are spent or the bracket is within
    /// 5 % of its lower end.
    pub fn next_rate(&self) -> Option<f64> {
        if self.left == 0 {
            return None;
        }
        if let (Some(lo), Some(hi)) = (self.best_sustained, self.lowest_failed) {
            if hi - lo <= 0.05 * lo {
                return None;
            }
        }
        Some(self.next.round())
    }

    pub fn record(&mut self, rate: f64, sustained: bool) {
        self.left = self.left.saturating_sub(1);
        if sustained {
            self.best_sustained = Some(self.best_sustained.map_or(rate, |b| b.max(rate)));
        } else {
            self.lowest_failed = Some(self.lowest_failed.map_or(rate, |f| f.min(rate)));
        }
        self.next = match (self.best_sustained, self.lowest_failed) {
            (Some(lo), Some(hi)) => (lo + hi) / 2.0,
            (Some(lo), None) => lo * 2.0,
            (None, Some(hi)) => hi / 2.0,
            (None, None) => self.next,
        };
    }

    /// The highest rate a probe sustained.
    pub fn capacity(&self) -> Option<f64> {
        self.best_sustained
    }
}

#[cfg(test)]
mod tests {
    use super::{verdict, Search};

    /// A 60 s probe at 7,500/s whose senders got every event acknowledged, flat and fast,
    /// but took `sending_secs` to send them.
    fn probe(sending_secs: u64) -> crate::Latency {
        crate::Latency {
            label: "probe".into(),
            offered: 7_500.0,
            load: crate::load::LoadReport {
                acked: 450_000,
                acked_duplicates: 0,
                failed: 0,
                first_failure: None,
                latency_us: hdrhistogram::Histogram::new(3).unwrap(),
                elapsed: std::time::Duration::from_secs(sending_secs),
                next_new: 450_000,
                client_cpu_secs: 0.0,
            },
            p50_ms: 20,
            p99_ms: 83,
            max_ms: 90,
            processed: 450_000,
            by_second: vec![],
            stamped_by_second: vec![],
            longest_look_gap: None,
            backlog: (0..60).map(|s| (s * 1_000, 10)).collect(),
            window_ms: 60_000,
            backlog_at_end: 0,
            drained: true,
            cpu: Default::default(),
        }
    }

    #[test]
    fn a_rate_the_senders_needed_longer_to_send_is_not_sustained() {
        assert!(verdict(&probe(60)).sustained);
        let late = verdict(&probe(77));
        assert!(!late.sustained);
        assert!(
            late.reason.contains("only 5844/s acknowledged"),
            "{}",
            late.reason
        );
    }

    #[test]
    fn the_seconds_line_pairs_each_second_with_the_servers_own_p99() {
        let mut p = probe(60);
        p.by_second = vec![(0, 40), (1, 308), (2, 55)];
        p.stamped_by_second = vec![(0, 18), (1, 153)];
        assert_eq!(p.by_second_line(), "0:40/18 1:308/153 2:55/-");
        assert_eq!(p.slow_seconds(100), (1, Some((1, 308))));
    }

    /// Against a server that sustains exactly `capacity`, the search ends within 5 % below it.
    fn search(capacity: f64, start: f64, probes: usize) -> (Option<f64>, usize) {
        let mut s = Search::new(start, probes);
        let mut tried = 0;
        while let Some(rate) = s.next_rate() {
            tried += 1;
            s.record(rate, rate <= capacity);
        }
        (s.capacity(), tried)
    }

    #[test]
    fn doubles_then_bisects_to_within_five_percent() {
        let (found, tried) = search(3_300.0, 500.0, 12);
        let found = found.unwrap();
        assert!((3_300.0 * 0.95..=3_300.0).contains(&found), "{found}");
        assert!(tried <= 12);
    }

    #[test]
    fn halves_when_the_first_rate_fails() {
        let (found, _) = search(120.0, 1_000.0, 12);
        let found = found.unwrap();
        assert!((114.0..=120.0).contains(&found), "{found}");
    }

    #[test]
    fn stops_when_the_probes_are_spent() {
        let (_, tried) = search(1e9, 100.0, 4);
        assert_eq!(tried, 4);
        let mut s = Search::new(100.0, 1);
        s.record(100.0, false);
        assert_eq!(s.next_rate(), None);
        assert_eq!(s.capacity(), None);
    }
}
