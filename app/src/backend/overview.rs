//! The overview (`/`): KPIs and charts for a time range.

use serde::{Deserialize, Serialize};

/// The overview's time range: `1h` (per minute), `24h` (per 15 minutes), `7d` (per 2 hours).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub enum Range {
    Hour,
    Day,
    Week,
}

impl Range {
    pub const ALL: [Range; 3] = [Range::Hour, Range::Day, Range::Week];

    /// Anything unknown reads as the last hour.
    pub fn parse(text: Option<&str>) -> Range {
        match text {
            Some("24h") => Range::Day,
            Some("7d") => Range::Week,
            _ => Range::Hour,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Range::Hour => "1h",
            Range::Day => "24h",
            Range::Week => "7d",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Range::Hour => "Last hour",
            Range::Day => "Last 24 hours",
            Range::Week => "Last 7 days",
        }
    }

    pub fn minutes(self) -> i64 {
        match self {
            Range::Hour => 60,
            Range::Day => 24 * 60,
            Range::Week => 7 * 24 * 60,
        }
    }

    /// Width of one chart bar.
    pub fn bucket_minutes(self) -> i64 {
        match self {
            Range::Hour => 1,
            Range::Day => 15,
            Range::Week => 120,
        }
    }
}

/// One bar of the overview's charts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct OverviewPoint {
    /// RFC 3339, UTC: the bucket's start.
    pub start: String,
    pub received: i64,
    pub duplicates: i64,
    /// Dead-lettered events and signature failures.
    pub failures: i64,
    /// Receipt-to-filed p95 within the bucket, as the upper bound of its latency bucket, ms.
    pub p95_ms: Option<i64>,
}

/// Money moved in one currency, minor units.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct MoneyMoved {
    pub currency: String,
    pub paid: i64,
    pub refunded: i64,
    pub disputed: i64,
}

/// The database cannot commit: webhooks are answered 503 (providers retry them) and
/// `/healthz` is 503 until it can again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct StorageOutage {
    /// For people: "the disk is full".
    pub reason: String,
    /// RFC 3339, UTC: the first failed commit.
    pub since: String,
    pub age_secs: i64,
}

/// The newest consistency check (`oncehook verify` or serve's periodic job): orders whose
/// stored status or totals differ from what their facts give.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DriftCheck {
    /// RFC 3339, UTC: when the run finished.
    pub checked_at: String,
    pub age_secs: i64,
    pub orders_checked: i64,
    pub drifting_orders: i64,
    /// Ledger entries without their outbox message.
    pub missing_messages: i64,
    /// The first drifting order ids (at most 10).
    pub sample: Vec<String>,
}

/// How late a provider delivers: its event's `created` to our receipt, over the range, as
/// upper bounds of delay buckets (ms; `i64::MAX`: over three days). A provider falling
/// behind shows here first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ProviderDelay {
    pub provider: String,
    pub events: i64,
    pub p50_ms: Option<i64>,
    pub p95_ms: Option<i64>,
}

/// Dead letters closed in the range (redriven, resolved or discarded): how long they were
/// open, from filed to closed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct TimeToResolve {
    pub closed: i64,
    pub mean_secs: i64,
    pub p95_secs: i64,
}

/// Reconciliation now, whatever the range.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ReconciliationKpis {
    pub open_diffs: i64,
    pub oldest_open_age_secs: Option<i64>,
    /// `None` until a full run succeeded.
    pub last_success_age_secs: Option<i64>,
}

/// Refunds oncehook asked providers for, now (all time for confirmed and failed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct CommandKpis {
    /// requested or sent: not counted yet.
    pub in_flight: i64,
    pub oldest_in_flight_age_secs: Option<i64>,
    /// Answered by the provider (`sent`) longer than `commands.confirm_within_secs` ago and
    /// still without the webhook that confirms them.
    pub unconfirmed: i64,
    pub confirmed: i64,
    pub failed: i64,
}

/// "Is the payment integration healthy?" on one page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct Overview {
    pub range: Range,
    /// Set while this server's database cannot commit (a full disk, an I/O error, the
    /// database unreachable): what the overview's red banner says.
    pub storage_outage: Option<StorageOutage>,
    /// Events received (first deliveries) and redeliveries.
    pub received: i64,
    pub duplicates: i64,
    pub signature_failures: i64,
    /// Events the processor filed, and those of them that ended in the dead-letter queue.
    pub filed: i64,
    pub dead: i64,
    pub retries: i64,
    /// Receipt to filed, as upper bounds of latency buckets, ms (`i64::MAX`: over a minute).
    pub latency_p50_ms: Option<i64>,
    pub latency_p95_ms: Option<i64>,
    pub latency_p99_ms: Option<i64>,
    /// Now, whatever the range.
    pub backlog: i64,
    pub backlog_oldest_age_secs: Option<i64>,
    pub dlq_open: i64,
    pub dlq_oldest_age_secs: Option<i64>,
    /// `None` until a check has run.
    pub drift: Option<DriftCheck>,
    /// `None` until a run was made or a diff found.
    pub reconciliation: Option<ReconciliationKpis>,
    /// `None` until oncehook asked a provider for a refund.
    pub commands: Option<CommandKpis>,
    /// Per provider, busiest first.
    pub provider_delay: Vec<ProviderDelay>,
    /// `None` when no dead letter was closed in the range.
    pub time_to_resolve: Option<TimeToResolve>,
    pub money: Vec<MoneyMoved>,
    /// Most frequent first.
    pub by_type: Vec<(String, i64)>,
    pub by_provider: Vec<(String, i64)>,
    pub by_api_version: Vec<(String, i64)>,
    /// Oldest first, one per bucket of the range, empty buckets included.
    pub series: Vec<OverviewPoint>,
}

impl Overview {
    /// Share of deliveries that were redeliveries, percent.
    pub fn duplicate_rate(&self) -> Option<f64> {
        let all = self.received + self.duplicates;
        (all > 0).then(|| 100.0 * self.duplicates as f64 / all as f64)
    }

    /// Share of filed events that did not end in the dead-letter queue, percent.
    pub fn success_rate(&self) -> Option<f64> {
        (self.filed > 0).then(|| 100.0 * (self.filed - self.dead) as f64 / self.filed as f64)
    }
}
