//! The overview page's data: KPIs and chart series from the per-minute rollups
//! (store::rollup), plus what waits now (backlog, dead letters).

use std::collections::BTreeMap;

use app::backend::{
    CommandKpis, DriftCheck, MoneyMoved, Overview, OverviewPoint, ProviderDelay, Range,
    ReconciliationKpis, StorageOutage, TimeToResolve,
};

use crate::store::read::rfc3339;
use crate::store::rollup::{
    self, delay_metric, latency_metric, minute_of, DELAY_BOUNDS_MS, LATENCY_BOUNDS_MS,
};
use crate::store::{now_ms, triage, Db};

/// Rows of the "by type / provider / API version" tables.
const TOP: usize = 10;

/// Outcomes the processor files; `dead` among them is a failure, `retry` is not filed.
const FILED: [&str; 6] = [
    "applied",
    "duplicate",
    "stale",
    "refused",
    "ignored",
    "dead",
];

/// `confirm_within_ms`: a refund the provider answered longer ago than this without its
/// webhook is counted as unconfirmed.
pub async fn overview(db: &Db, range: Range, confirm_within_ms: i64) -> anyhow::Result<Overview> {
    // Reads only: the counts of the last few seconds arrive with the next write-behind
    // (server::spawn_rollup_writer), never through a page view taking the write lock.
    let now = now_ms();
    let bucket = range.bucket_minutes();
    // A fixed number of bars, the last one holding the current minute.
    let last = minute_of(now).div_euclid(bucket) * bucket;
    let first = last - (range.minutes() / bucket - 1) * bucket;
    let rows = rollup::read(db, first, bucket).await?;
    let (backlog, backlog_oldest) = triage::inbox_waiting(db).await?;
    let (dlq_open, dlq_oldest) = triage::open_stats(db).await?;
    let age = |oldest: Option<i64>| oldest.map(|t| ((now - t) / 1000).max(0));
    let mut o = summarize(range, first, minute_of(now), &rows);
    o.backlog = backlog;
    o.backlog_oldest_age_secs = age(backlog_oldest);
    o.dlq_open = dlq_open;
    o.dlq_oldest_age_secs = age(dlq_oldest);
    o.storage_outage = db.health().outage().map(|outage| StorageOutage {
        reason: outage.cause.describe().to_string(),
        since: rfc3339(outage.since_ms),
        age_secs: ((now - outage.since_ms) / 1000).max(0),
    });
    o.drift = crate::store::verify::last_run(db)
        .await?
        .map(|run| DriftCheck {
            checked_at: rfc3339(run.finished_at),
            age_secs: ((now - run.finished_at) / 1000).max(0),
            orders_checked: run.orders_checked,
            drifting_orders: run.drifting_orders,
            missing_messages: run.missing_messages,
            sample: run.sample,
        });
    let open = crate::store::reconcile::open_by_kind(db).await?;
    let last = crate::store::reconcile::last_succeeded(db, None).await?;
    if !open.is_empty() || last.is_some() {
        o.reconciliation = Some(ReconciliationKpis {
            open_diffs: open.iter().map(|(_, n, _)| n).sum(),
            oldest_open_age_secs: age(open.iter().map(|(_, _, f)| *f).min()),
            last_success_age_secs: age(last.map(|r| r.finished_at.unwrap_or(r.updated_at))),
        });
    }
    let commands = crate::store::commands::stats(db, now - confirm_within_ms).await?;
    if commands.by_state.iter().any(|(_, n)| *n > 0) {
        let count = |state: &str| {
            commands
                .by_state
                .iter()
                .find(|(s, _)| s == state)
                .map_or(0, |(_, n)| *n)
        };
        o.commands = Some(CommandKpis {
            in_flight: count("requested") + count("sent"),
            oldest_in_flight_age_secs: age(commands.oldest_in_flight_at),
            unconfirmed: commands.sent_too_long,
            confirmed: count("confirmed"),
            failed: count("failed"),
        });
    }
    let (closed, mean, p95) = triage::time_to_close(db, first * 60_000).await?;
    if let (Some(mean), Some(p95)) = (mean, p95) {
        o.time_to_resolve = Some(TimeToResolve {
            closed,
            mean_secs: mean / 1000,
            p95_secs: p95 / 1000,
        });
    }
    Ok(o)
}

/// The smallest latency bound under which `q` of the counted events fall.
fn percentile(buckets: &BTreeMap<i64, i64>, q: f64) -> Option<i64> {
    let total: i64 = buckets.values().sum();
    if total == 0 {
        return None;
    }
    let needed = (q * total as f64).ceil() as i64;
    let mut seen = 0;
    for (bound, count) in buckets {
        seen += count;
        if seen >= needed {
            return Some(*bound);
        }
    }
    buckets.keys().last().copied()
}

fn top(map: BTreeMap<String, i64>) -> Vec<(String, i64)> {
    let mut list: Vec<_> = map.into_iter().filter(|(_, n)| *n > 0).collect();
    list.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    list.truncate(TOP);
    list
}

/// Pure: rollup rows (bucket start minute, provider, metric, value) to the page's view.
pub fn summarize(
    range: Range,
    first_bucket: i64,
    now_minute: i64,
    rows: &[(i64, String, String, i64)],
) -> Overview {
    let bucket = range.bucket_minutes();
    let latency_bound: BTreeMap<String, i64> = LATENCY_BOUNDS_MS
        .into_iter()
        .map(|b| (latency_metric(b), b))
        .collect();
    let delay_bound: BTreeMap<String, i64> = DELAY_BOUNDS_MS
        .into_iter()
        .map(|b| (delay_metric(b), b))
        .collect();
    let mut delays: BTreeMap<String, BTreeMap<i64, i64>> = BTreeMap::new();
    let mut total: BTreeMap<&str, i64> = BTreeMap::new();
    let mut latency: BTreeMap<i64, i64> = BTreeMap::new();
    let mut per_bucket: BTreeMap<i64, (i64, i64, i64, BTreeMap<i64, i64>)> = BTreeMap::new();
    let (mut by_type, mut by_provider, mut by_api) =
        (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    let mut money: BTreeMap<String, MoneyMoved> = BTreeMap::new();
    for (start, provider, metric, value) in rows {
        let point = per_bucket.entry(*start).or_default();
        match metric.as_str() {
            "received" => {
                point.0 += value;
                *by_provider.entry(provider.clone()).or_insert(0) += value;
            }
            "redelivered" => point.1 += value,
            "dead" | "signature_failed" => point.2 += value,
            _ => {}
        }
        if let Some(bound) = latency_bound.get(metric) {
            *latency.entry(*bound).or_insert(0) += value;
            *point.3.entry(*bound).or_insert(0) += value;
        } else if let Some(bound) = delay_bound.get(metric) {
            *delays
                .entry(provider.clone())
                .or_default()
                .entry(*bound)
                .or_insert(0) += value;
        } else if let Some(t) = metric.strip_prefix("type:") {
            *by_type.entry(t.to_string()).or_insert(0) += value;
        } else if let Some(v) = metric.strip_prefix("api:") {
            *by_api.entry(v.to_string()).or_insert(0) += value;
        } else if let Some((kind, currency)) = metric.split_once(':') {
            let m = money
                .entry(currency.to_string())
                .or_insert_with(|| MoneyMoved {
                    currency: currency.to_string(),
                    paid: 0,
                    refunded: 0,
                    disputed: 0,
                });
            match kind {
                "paid" => m.paid += value,
                "refunded" => m.refunded += value,
                "disputed" => m.disputed += value,
                _ => {}
            }
        } else {
            for known in FILED
                .iter()
                .chain(["received", "redelivered", "signature_failed", "retry"].iter())
            {
                if metric == known {
                    *total.entry(known).or_insert(0) += value;
                }
            }
        }
    }
    let series = (first_bucket..=now_minute)
        .step_by(bucket.max(1) as usize)
        .map(|start| {
            let (received, duplicates, failures, lat) =
                per_bucket.get(&start).cloned().unwrap_or_default();
            OverviewPoint {
                start: rfc3339(start * 60_000),
                received,
                duplicates,
                failures,
                p95_ms: percentile(&lat, 0.95),
            }
        })
        .collect();
    let get = |k: &str| total.get(k).copied().unwrap_or(0);
    let mut provider_delay: Vec<ProviderDelay> = delays
        .into_iter()
        .map(|(provider, buckets)| ProviderDelay {
            provider,
            events: buckets.values().sum(),
            p50_ms: percentile(&buckets, 0.50),
            p95_ms: percentile(&buckets, 0.95),
        })
        .collect();
    provider_delay.sort_by(|a, b| {
        b.events
            .cmp(&a.events)
            .then_with(|| a.provider.cmp(&b.provider))
    });
    Overview {
        range,
        storage_outage: None,
        received: get("received"),
        duplicates: get("redelivered"),
        signature_failures: get("signature_failed"),
        filed: FILED.iter().map(|k| get(k)).sum(),
        dead: get("dead"),
        retries: get("retry"),
        latency_p50_ms: percentile(&latency, 0.50),
        latency_p95_ms: percentile(&latency, 0.95),
        latency_p99_ms: percentile(&latency, 0.99),
        backlog: 0,
        backlog_oldest_age_secs: None,
        dlq_open: 0,
        dlq_oldest_age_secs: None,
        drift: None,
        reconciliation: None,
        commands: None,
        provider_delay,
        time_to_resolve: None,
        money: money.into_values().collect(),
        by_type: top(by_type),
        by_provider: top(by_provider),
        by_api_version: top(by_api),
        series,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(start: i64, metric: &str, value: i64) -> (i64, String, String, i64) {
        (start, "stripe".into(), metric.into(), value)
    }

    #[test]
    fn rollups_become_kpis_and_a_series_with_empty_buckets() {
        let rows = vec![
            row(100, "received", 8),
            row(100, "redelivered", 2),
            row(100, "duplicate", 1),
            row(100, "type:payment_intent.succeeded", 6),
            row(100, "type:charge.refunded", 2),
            row(100, "api:2024-06-20", 8),
            row(100, "applied", 7),
            row(100, "dead", 1),
            row(100, "retry", 3),
            row(100, "latency_le_10", 6),
            row(100, "latency_le_250", 1),
            row(102, "latency_le_inf", 1),
            row(102, "signature_failed", 4),
            row(102, "paid:EUR", 5_000),
            row(102, "refunded:EUR", 1_500),
        ];
        let o = summarize(Range::Hour, 100, 103, &rows);
        assert_eq!((o.received, o.duplicates, o.signature_failures), (8, 2, 4));
        assert_eq!(
            (o.filed, o.dead, o.retries),
            (9, 1, 3),
            "a collapsed duplicate is filed"
        );
        assert_eq!(o.duplicate_rate(), Some(20.0));
        assert_eq!(o.success_rate(), Some(100.0 * 8.0 / 9.0));
        assert_eq!(o.latency_p50_ms, Some(10));
        assert_eq!(
            o.latency_p95_ms,
            Some(i64::MAX),
            "8 events: the 8th is over a minute"
        );
        assert_eq!(o.by_type[0], ("payment_intent.succeeded".into(), 6));
        assert_eq!(o.by_provider, vec![("stripe".into(), 8)]);
        assert_eq!(o.by_api_version, vec![("2024-06-20".into(), 8)]);
        assert_eq!(
            o.money,
            vec![MoneyMoved {
                currency: "EUR".into(),
                paid: 5_000,
                refunded: 1_500,
                disputed: 0
            }]
        );
        let bars: Vec<(i64, i64, i64)> = o
            .series
            .iter()
            .map(|p| (p.received, p.duplicates, p.failures))
            .collect();
        assert_eq!(bars, vec![(8, 2, 1), (0, 0, 0), (0, 0, 4), (0, 0, 0)]);
        assert_eq!(o.series[0].start, rfc3339(100 * 60_000));
        assert_eq!(o.series[0].p95_ms, Some(250));
        assert_eq!(o.series[1].p95_ms, None);
    }

    #[test]
    fn provider_delays_are_percentiles_per_provider_busiest_first() {
        let other =
            |metric: &str, value: i64| (100, "adyen".to_string(), metric.to_string(), value);
        let rows = vec![
            row(100, "delay_le_1000", 90),
            row(101, "delay_le_60000", 8),
            row(101, "delay_le_inf", 2),
            other("delay_le_300000", 3),
            // Not delays: they stay where they were.
            row(100, "latency_le_10", 5),
        ];
        let o = summarize(Range::Hour, 100, 103, &rows);
        assert_eq!(
            o.provider_delay,
            vec![
                ProviderDelay {
                    provider: "stripe".into(),
                    events: 100,
                    p50_ms: Some(1_000),
                    p95_ms: Some(60_000),
                },
                ProviderDelay {
                    provider: "adyen".into(),
                    events: 3,
                    p50_ms: Some(300_000),
                    p95_ms: Some(300_000),
                },
            ]
        );
        assert_eq!(o.latency_p50_ms, Some(10));
        assert_eq!(o.filed, 0, "delay buckets are not outcomes");
    }

    #[test]
    fn an_empty_range_has_no_rates_and_a_flat_series() {
        let o = summarize(Range::Day, 0, 24 * 60 - 1, &[]);
        assert_eq!(o.series.len(), 96);
        assert_eq!(
            (o.duplicate_rate(), o.success_rate(), o.latency_p99_ms),
            (None, None, None)
        );
    }
}
