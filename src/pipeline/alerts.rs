//! Alerts when items enter the dead-letter queue: always a log line, and a post to an
//! optional HTTP webhook with a Slack-compatible body (`{"text": …}`). Rate-limited: at most
//! one post per interval; what arrives meanwhile is summed up in the next post, so a storm
//! sends a summary, not thousands of messages.
//!
//! Also one alert when the database stops committing and one when it commits again
//! (`watch_commits`), from the outages `store::health` sees.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use crate::store::health::Outage;

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertSettings {
    /// Where to POST alerts (Slack incoming webhook or compatible); none: log only.
    pub webhook_url: Option<String>,
    /// At most one post per this many seconds; the rest is summarised.
    pub min_interval_secs: u64,
}

impl std::fmt::Debug for AlertSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertSettings")
            .field(
                "webhook_url",
                &self
                    .webhook_url
                    .as_deref()
                    .map(crate::support::redact::redact_url_path),
            )
            .field("min_interval_secs", &self.min_interval_secs)
            .finish()
    }
}

impl Default for AlertSettings {
    fn default() -> Self {
        AlertSettings {
            webhook_url: None,
            min_interval_secs: 60,
        }
    }
}

/// One item that entered the dead-letter queue.
#[derive(Clone, Debug)]
pub struct DeadLetterAlert {
    pub dead_letter_id: i64,
    pub stage: String,
    pub class: String,
    pub error: String,
    pub event_id: Option<String>,
    pub order_id: Option<String>,
}

/// Alerts waiting for the sender at most; beyond, they are counted and the next post says
/// how many were dropped (the log line is never dropped).
pub const ALERT_QUEUE: usize = 1_024;

#[derive(Clone)]
pub struct Alerter {
    tx: Option<mpsc::Sender<DeadLetterAlert>>,
    dropped: Arc<AtomicU64>,
}

impl Alerter {
    /// Log-only alerts (tests and tools that don't run the sender).
    pub fn log_only() -> Self {
        Alerter {
            tx: None,
            dropped: Arc::default(),
        }
    }

    pub fn start(settings: AlertSettings) -> (Self, JoinHandle<()>) {
        Self::start_with_capacity(settings, ALERT_QUEUE)
    }

    pub fn start_with_capacity(settings: AlertSettings, capacity: usize) -> (Self, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let dropped = Arc::new(AtomicU64::new(0));
        let handle = tokio::spawn(send_loop(settings, rx, dropped.clone()));
        (
            Alerter {
                tx: Some(tx),
                dropped,
            },
            handle,
        )
    }

    pub fn dead_lettered(&self, alert: DeadLetterAlert) {
        warn!(
            dead_letter_id = alert.dead_letter_id,
            stage = %alert.stage,
            class = %alert.class,
            event_id = alert.event_id.as_deref().unwrap_or("-"),
            order_id = alert.order_id.as_deref().unwrap_or("-"),
            error = %alert.error,
            "dead-lettered"
        );
        if let Some(tx) = &self.tx {
            if let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(alert) {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Slack's control characters escaped, so text from an event or a sink's answer cannot
/// mention `<!channel>` or forge a link.
pub fn escape_slack(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn single(a: &DeadLetterAlert) -> String {
    format!(
        ":rotating_light: oncehook dead letter #{} ({} failure in {}): {}{}{}",
        a.dead_letter_id,
        escape_slack(&a.class),
        escape_slack(&a.stage),
        escape_slack(&a.error),
        a.event_id
            .as_deref()
            .map(|e| format!(" — event {}", escape_slack(e)))
            .unwrap_or_default(),
        a.order_id
            .as_deref()
            .map(|o| format!(", order {}", escape_slack(o)))
            .unwrap_or_default(),
    )
}

/// The text for a window's worth of alerts, saying how many were dropped before it.
pub fn summary_with_drops(alerts: &[DeadLetterAlert], dropped: u64) -> String {
    let text = summary(alerts);
    if dropped == 0 {
        return text;
    }
    format!("{text} ({dropped} more alerts were dropped: the alert queue was full; see the dead-letter queue)")
}

/// The text for a window's worth of alerts.
pub fn summary(alerts: &[DeadLetterAlert]) -> String {
    if let [one] = alerts {
        return single(one);
    }
    let mut by_class: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for a in alerts {
        *by_class
            .entry((a.stage.as_str(), a.class.as_str()))
            .or_default() += 1;
    }
    let parts: Vec<String> = by_class
        .iter()
        .map(|((stage, class), n)| {
            format!("{n} {} in {}", escape_slack(class), escape_slack(stage))
        })
        .collect();
    let last = alerts.last().map(single).unwrap_or_default();
    format!(
        ":rotating_light: oncehook: {} items entered the dead-letter queue ({}). Latest: {last}",
        alerts.len(),
        parts.join(", ")
    )
}

async fn send_loop(
    settings: AlertSettings,
    mut rx: mpsc::Receiver<DeadLetterAlert>,
    dropped: Arc<AtomicU64>,
) {
    let Some(url) = settings.webhook_url.clone() else {
        while rx.recv().await.is_some() {}
        return;
    };
    let http = alert_client();
    let interval = Duration::from_secs(settings.min_interval_secs);
    while let Some(first) = rx.recv().await {
        let mut window = vec![first];
        // Whatever else is already queued joins this post.
        while let Ok(more) = rx.try_recv() {
            window.push(more);
        }
        let lost = dropped.swap(0, Ordering::Relaxed);
        post(&http, &url, &summary_with_drops(&window, lost)).await;
        // Quiet period: collect, then summarise in the next post.
        tokio::time::sleep(interval).await;
    }
}

fn alert_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("HTTP client")
}

async fn post(http: &reqwest::Client, url: &str, text: &str) {
    let result = http
        .post(url)
        .json(&serde_json::json!({ "text": text }))
        .send()
        .await
        .and_then(|r| r.error_for_status());
    if let Err(e) = result {
        error!(error = %e.without_url(), "alert webhook failed");
    }
}

/// The alert that an outage began.
pub fn outage_text(outage: &Outage) -> String {
    format!(
        ":rotating_light: oncehook: {}. Webhooks are answered 503 with Retry-After (providers \
         retry them) and /healthz is 503 until it commits again.",
        outage.describe()
    )
}

/// The alert that it ended.
pub fn recovery_text(outage: &Outage, now_ms: i64) -> String {
    let secs = (now_ms - outage.since_ms).max(0) / 1000;
    format!(
        ":white_check_mark: oncehook commits again, after {secs} s ({}).",
        outage.cause.describe()
    )
}

/// Follows `store::health`'s outages until `shutdown`: sets
/// `oncehook_database_commit_failing`, logs each start and end, and posts one alert per
/// outage and one when it ends. A flapping disk posts at most one outage per
/// `min_interval_secs`; the rest are logged (and counted in the metrics).
pub fn watch_commits(
    settings: AlertSettings,
    mut changes: watch::Receiver<Option<Outage>>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        crate::ops::metrics::commit_failing(false);
        let http = alert_client();
        let interval = Duration::from_secs(settings.min_interval_secs);
        let mut last_post: Option<tokio::time::Instant> = None;
        let mut current: Option<(Outage, bool)> = None;
        loop {
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { break },
                _ = shutdown.cancelled() => break,
            }
            let now = changes.borrow_and_update().clone();
            crate::ops::metrics::commit_failing(now.is_some());
            match now {
                Some(outage) => {
                    error!(
                        cause = outage.cause.as_str(),
                        writer = outage.writer.as_str(),
                        "{}",
                        outage.describe()
                    );
                    let post_it = last_post.is_none_or(|at| at.elapsed() >= interval);
                    if post_it {
                        last_post = Some(tokio::time::Instant::now());
                        if let Some(url) = &settings.webhook_url {
                            post(&http, url, &outage_text(&outage)).await;
                        }
                    }
                    current = Some((outage, post_it));
                }
                None => {
                    if let Some((outage, posted)) = current.take() {
                        let text = recovery_text(&outage, crate::store::now_ms());
                        warn!("{text}");
                        if let (true, Some(url)) = (posted, &settings.webhook_url) {
                            post(&http, url, &text).await;
                        }
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(id: i64, class: &str) -> DeadLetterAlert {
        DeadLetterAlert {
            dead_letter_id: id,
            stage: "processor".into(),
            class: class.into(),
            error: "body is not JSON".into(),
            event_id: Some(format!("evt_{id}")),
            order_id: None,
        }
    }

    #[test]
    fn slack_control_characters_are_escaped() {
        let mut a = alert(1, "permanent");
        a.error = "<!channel> see <https://evil.example|here> & pay".into();
        a.order_id = Some("<@U123>".into());
        let text = summary(&[a.clone(), a]);
        assert!(!text.contains('<') && !text.contains('>'), "{text}");
        assert!(
            text.contains("&lt;!channel&gt;") && text.contains("&amp; pay"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_full_alert_queue_drops_and_the_next_post_says_how_many() {
        // No webhook: the sender drains; hold it off by never yielding before sending.
        let (tx, _rx) = mpsc::channel(2);
        let alerter = Alerter {
            tx: Some(tx),
            dropped: Arc::default(),
        };
        for i in 0..7 {
            alerter.dead_lettered(alert(i, "permanent"));
        }
        assert_eq!(alerter.dropped.load(Ordering::Relaxed), 5);
        let text = summary_with_drops(&[alert(1, "permanent")], 5);
        assert!(text.contains("5 more alerts were dropped"), "{text}");
        assert!(!summary_with_drops(&[alert(1, "permanent")], 0).contains("dropped"));
    }

    #[test]
    fn one_alert_names_the_item_many_are_summed_up() {
        let one = summary(&[alert(1, "permanent")]);
        assert!(
            one.contains("#1") && one.contains("permanent") && one.contains("evt_1"),
            "{one}"
        );
        let many = summary(&[
            alert(1, "permanent"),
            alert(2, "permanent"),
            alert(3, "business"),
        ]);
        assert!(many.contains("3 items"), "{many}");
        assert!(
            many.contains("2 permanent in processor") && many.contains("1 business in processor"),
            "{many}"
        );
        assert!(many.contains("#3"), "names the latest: {many}");
    }
}
