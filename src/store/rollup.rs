//! Per-minute rollups behind the overview page. Counts are added in memory as events are
//! received and processed (after their transaction committed) and written behind every few
//! seconds in one transaction, adding to what other instances wrote. The hot path pays a
//! hash-map increment, never a contended row; the page reads a few thousand rows whatever
//! the number of events. A crash loses at most the last flush interval of counts: these are
//! KPIs, the ledger and the inbox stay the record.

use std::collections::HashMap;
use std::sync::Mutex;

use super::Db;

/// The minute (Unix minutes) a Unix-ms instant falls in.
pub fn minute_of(ms: i64) -> i64 {
    ms.div_euclid(60_000)
}

/// Receipt-to-filed latency buckets, upper bounds in ms; the last catches everything.
pub const LATENCY_BOUNDS_MS: [i64; 12] = [
    10,
    25,
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    60_000,
    i64::MAX,
];

/// The metric name of a latency bucket (`latency_le_250`, `latency_le_inf`).
pub fn latency_metric(bound_ms: i64) -> String {
    if bound_ms == i64::MAX {
        "latency_le_inf".into()
    } else {
        format!("latency_le_{bound_ms}")
    }
}

/// Provider delay buckets (the event's `created` to our receipt), upper bounds in ms: a
/// second to three days, the last catches everything.
pub const DELAY_BOUNDS_MS: [i64; 11] = [
    1_000,
    5_000,
    30_000,
    60_000,
    300_000,
    900_000,
    3_600_000,
    21_600_000,
    86_400_000,
    259_200_000,
    i64::MAX,
];

/// The metric name of a provider delay bucket (`delay_le_5000`, `delay_le_inf`).
pub fn delay_metric(bound_ms: i64) -> String {
    if bound_ms == i64::MAX {
        "delay_le_inf".into()
    } else {
        format!("delay_le_{bound_ms}")
    }
}

/// Longest label kept from a payload (event types, API versions): longer ones are cut, so
/// a provider's odd payload cannot grow the table's keys without bound.
const MAX_LABEL: usize = 64;

#[derive(Debug, Default)]
pub struct Rollup {
    pending: Mutex<HashMap<(i64, String, String), i64>>,
}

impl Rollup {
    pub fn add(&self, at_ms: i64, provider: &str, metric: &str, value: i64) {
        if value == 0 {
            return;
        }
        let metric: String = metric.chars().take(MAX_LABEL).collect();
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        *pending
            .entry((minute_of(at_ms), provider.to_string(), metric))
            .or_insert(0) += value;
    }

    /// Counts a delivery the receiver stored: a redelivery, or a new event with its type and
    /// API version.
    pub fn received(
        &self,
        now: i64,
        provider: &str,
        duplicate: bool,
        event_type: Option<&str>,
        api_version: Option<&str>,
    ) {
        if duplicate {
            self.add(now, provider, "redelivered", 1);
            return;
        }
        self.add(now, provider, "received", 1);
        if let Some(t) = event_type {
            self.add(now, provider, &format!("type:{t}"), 1);
        }
        if let Some(v) = api_version {
            self.add(now, provider, &format!("api:{v}"), 1);
        }
    }

    /// Adds the money an event moved, per kind and currency (`paid:EUR`).
    pub fn moved(&self, now: i64, provider: &str, currency: &str, amounts: [(&str, i64); 3]) {
        for (kind, amount) in amounts {
            self.add(now, provider, &format!("{kind}:{currency}"), amount);
        }
    }

    /// Counts an event filed by the processor: its outcome and its latency bucket.
    pub fn filed(&self, now: i64, provider: &str, outcome: &str, received_at: i64) {
        self.add(now, provider, outcome, 1);
        if outcome != "retry" {
            let latency = (now - received_at).max(0);
            let bound = LATENCY_BOUNDS_MS
                .into_iter()
                .find(|b| latency <= *b)
                .unwrap_or(i64::MAX);
            self.add(now, provider, &latency_metric(bound), 1);
        }
    }

    /// Counts an event's provider delay in its bucket (a clock ahead of ours reads as 0).
    pub fn delayed(&self, now: i64, provider: &str, delay_ms: i64) {
        let delay = delay_ms.max(0);
        let bound = DELAY_BOUNDS_MS
            .into_iter()
            .find(|b| delay <= *b)
            .unwrap_or(i64::MAX);
        self.add(now, provider, &delay_metric(bound), 1);
    }

    /// Writes what was counted since the last flush; on failure the counts are kept for
    /// the next one. Returns how many rows were written.
    pub async fn flush(&self, db: &Db) -> anyhow::Result<usize> {
        let batch = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        if batch.is_empty() {
            return Ok(0);
        }
        let written = write(db, &batch).await;
        if written.is_err() {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            for (key, value) in batch {
                *pending.entry(key).or_insert(0) += value;
            }
        }
        written
    }
}

async fn write(db: &Db, batch: &HashMap<(i64, String, String), i64>) -> anyhow::Result<usize> {
    // Sorted, so concurrent flushes of several instances take row locks in one order.
    let mut rows: Vec<_> = batch.iter().collect();
    rows.sort();
    let mut tx = db.writer().begin().await?;
    for ((minute, provider, metric), value) in &rows {
        sqlx::query(
            "INSERT INTO minute_stats (minute, provider, metric, value) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (minute, provider, metric) DO UPDATE SET value = minute_stats.value + excluded.value",
        )
        .bind(minute)
        .bind(provider.as_str())
        .bind(metric.as_str())
        .bind(**value)
        .execute(&mut *tx)
        .await?;
    }
    super::commit_checked(tx).await?;
    Ok(rows.len())
}

/// Sums per bucket of `bucket_minutes` and metric, from `since_minute` on:
/// (bucket start minute, provider, metric, value).
pub async fn read(
    db: &Db,
    since_minute: i64,
    bucket_minutes: i64,
) -> anyhow::Result<Vec<(i64, String, String, i64)>> {
    use sqlx::Row;
    let rows = sqlx::query(
        "SELECT (minute / $2) * $2 AS bucket, provider, metric, CAST(SUM(value) AS BIGINT) AS total \
         FROM minute_stats WHERE minute >= $1 GROUP BY bucket, provider, metric",
    )
    .bind(since_minute)
    .bind(bucket_minutes.max(1))
    .fetch_all(db.reader())
    .await?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get("bucket")?,
                r.try_get("provider")?,
                r.try_get("metric")?,
                r.try_get("total")?,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_per_minute_provider_and_metric() {
        let rollup = Rollup::default();
        rollup.add(60_000, "stripe", "received", 1);
        rollup.add(119_999, "stripe", "received", 2);
        rollup.add(120_000, "stripe", "received", 1);
        rollup.add(60_000, "stripe", "received", 0);
        rollup.filed(61_000, "stripe", "applied", 60_990);
        rollup.filed(61_000, "stripe", "retry", 0);
        let pending = rollup.pending.lock().unwrap();
        let get = |m: i64, metric: &str| {
            pending
                .get(&(m, "stripe".to_string(), metric.to_string()))
                .copied()
        };
        assert_eq!(get(1, "received"), Some(3));
        assert_eq!(get(2, "received"), Some(1));
        assert_eq!(get(1, "applied"), Some(1));
        assert_eq!(
            get(1, "latency_le_10"),
            Some(1),
            "10 ms is in the ≤ 10 ms bucket"
        );
        assert_eq!(get(1, "retry"), Some(1));
        assert_eq!(pending.len(), 5, "a retry has no latency: {pending:?}");
        assert_eq!(minute_of(-1), -1);
    }

    #[test]
    fn labels_from_payloads_are_cut() {
        let rollup = Rollup::default();
        rollup.add(0, "stripe", &format!("type:{}", "x".repeat(500)), 1);
        let pending = rollup.pending.lock().unwrap();
        assert!(pending
            .keys()
            .all(|(_, _, m)| m.chars().count() == MAX_LABEL));
    }
}
