//! `oncehook reconcile [--provider P] [--since T] [--dry-run] [--json]`.

use std::io::IsTerminal;
use std::sync::Arc;

use clap::Args;

use crate::config::Settings;
use crate::pipeline::alerts::Alerter;
use crate::provider::settings::Providers;
use crate::reconcile::{render_text, Interval, Options, Reconciler};
use crate::store::Db;

#[derive(Args, Debug, Clone)]
pub struct ReconcileArgs {
    /// One provider (default: every provider with an `api_key`).
    #[arg(long)]
    pub provider: Option<String>,
    /// Compare events created since then instead of from the checkpoint: an RFC 3339 time,
    /// Unix seconds, or an age such as `24h` or `7d`.
    #[arg(long)]
    pub since: Option<String>,
    /// Report what differs, change nothing (no diff recorded, no fix, no checkpoint moved).
    #[arg(long)]
    pub dry_run: bool,
    /// The runs and their diffs as JSON: `{"runs": [...]}`.
    #[arg(long)]
    pub json: bool,
}

/// `--since` in Unix seconds.
pub fn parse_since(text: &str, now_s: i64) -> anyhow::Result<i64> {
    if let Ok(secs) = text.parse::<i64>() {
        return Ok(secs);
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(t.timestamp());
    }
    match Interval::parse(text) {
        Ok(age) => Ok(now_s - age.0.as_secs() as i64),
        Err(_) => anyhow::bail!(
            "--since {text:?}: expected an RFC 3339 time, Unix seconds or an age like 24h"
        ),
    }
}

pub async fn run(db: Db, settings: Settings, args: ReconcileArgs) -> anyhow::Result<()> {
    let now_s = crate::store::now_ms() / 1000;
    let since = args
        .since
        .as_deref()
        .map(|t| parse_since(t, now_s))
        .transpose()?;
    let (alerter, alert_task) = Alerter::start(settings.alerts.clone());
    let reconciler = Reconciler {
        db,
        providers: Arc::new(Providers::build(&settings.providers)?),
        settings: Arc::new(settings.reconcile_scope()),
        alerter,
    };
    let providers = match &args.provider {
        Some(p) => vec![p.clone()],
        None => reconciler.providers_with_api(),
    };
    anyhow::ensure!(
        !providers.is_empty(),
        "no provider has an api_key: reconciliation needs the provider's API"
    );
    let bar = (!args.json && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(
            indicatif::ProgressStyle::with_template("{elapsed_precise} {spinner} {msg}")
                .expect("a valid template"),
        );
        bar
    });
    let mut reports = Vec::new();
    for provider in providers {
        let options = Options {
            provider: provider.clone(),
            since,
            dry_run: args.dry_run,
            source: "cli",
            ..Default::default()
        };
        let progress = |c: &crate::store::reconcile::Counts| {
            if let Some(bar) = &bar {
                bar.set_message(format!(
                    "{provider}: {} events, {} objects compared, {} API calls, {} diffs, {} fixed",
                    c.events_compared, c.objects_compared, c.api_calls, c.diffs_found, c.fixed
                ));
                bar.tick();
            }
        };
        let report = reconciler
            .run(
                &options,
                tokio_util::sync::CancellationToken::new(),
                &progress,
            )
            .await?;
        reports.push(report);
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let failed = reports.iter().filter(|r| r.status == "failed").count();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "runs": reports }))?
        );
    } else {
        for r in &reports {
            print!("{}", render_text(r));
        }
    }
    drop(reconciler);
    // The alert of a failed run is posted before the process ends.
    let _ = alert_task.await;
    anyhow::ensure!(failed == 0, "{failed} reconciliation run(s) failed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_reads_times_seconds_and_ages() {
        assert_eq!(parse_since("1700000000", 0).unwrap(), 1_700_000_000);
        assert_eq!(
            parse_since("2023-11-14T22:13:20Z", 0).unwrap(),
            1_700_000_000
        );
        assert_eq!(parse_since("2h", 10_000).unwrap(), 2_800);
        assert!(parse_since("yesterday", 0).is_err());
    }
}
