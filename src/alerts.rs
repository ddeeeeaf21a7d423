//! Alerts when items enter the dead-letter queue: always a log line, and a post to an
//! optional HTTP webhook with a Slack-compatible body (`{"text": …}`). Rate-limited: at most
//! one post per interval; what arrives meanwhile is summed up in the next post, so a storm
//! sends a summary, not thousands of messages.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{error, warn};

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
                    .map(crate::config::redact_url_path),
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

#[derive(Clone)]
pub struct Alerter {
    tx: Option<mpsc::UnboundedSender<DeadLetterAlert>>,
}

impl Alerter {
    /// Log-only alerts (tests and tools that don't run the sender).
    pub fn log_only() -> Self {
        Alerter { tx: None }
    }

    pub fn start(settings: AlertSettings) -> (Self, JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = tokio::spawn(send_loop(settings, rx));
        (Alerter { tx: Some(tx) }, handle)
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
            let _ = tx.send(alert);
        }
    }
}

fn single(a: &DeadLetterAlert) -> String {
    format!(
        ":rotating_light: oncehook dead letter #{} ({} failure in {}): {}{}{}",
        a.dead_letter_id,
        a.class,
        a.stage,
        a.error,
        a.event_id
            .as_deref()
            .map(|e| format!(" — event {e}"))
            .unwrap_or_default(),
        a.order_id
            .as_deref()
            .map(|o| format!(", order {o}"))
            .unwrap_or_default(),
    )
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
        .map(|((stage, class), n)| format!("{n} {class} in {stage}"))
        .collect();
    let last = alerts.last().map(single).unwrap_or_default();
    format!(
        ":rotating_light: oncehook: {} items entered the dead-letter queue ({}). Latest: {last}",
        alerts.len(),
        parts.join(", ")
    )
}

async fn send_loop(settings: AlertSettings, mut rx: mpsc::UnboundedReceiver<DeadLetterAlert>) {
    let Some(url) = settings.webhook_url.clone() else {
        while rx.recv().await.is_some() {}
        return;
    };
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("HTTP client");
    let interval = Duration::from_secs(settings.min_interval_secs);
    while let Some(first) = rx.recv().await {
        let mut window = vec![first];
        // Whatever else is already queued joins this post.
        while let Ok(more) = rx.try_recv() {
            window.push(more);
        }
        post(&http, &url, &summary(&window)).await;
        // Quiet period: collect, then summarise in the next post.
        tokio::time::sleep(interval).await;
    }
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
