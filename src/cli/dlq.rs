//! `oncehook dlq list|show|redrive|resolve|discard`: the dead-letter queue from the shell,
//! through the same store functions (and the same audit rows) as the dashboard.

use clap::{Args, Subcommand};

use super::actor_name;
use crate::config::Settings;
use crate::store::dead_letters::{self, DeadLetterFilter};
use crate::store::Db;

#[derive(Args, Debug, Clone, Default)]
pub struct DlqFilterArgs {
    /// open, redriven, resolved, discarded (default for list and bulk redrive: open)
    #[arg(long)]
    pub status: Option<String>,
    /// transient, permanent, business, unknown
    #[arg(long)]
    pub class: Option<String>,
    /// processor or outbox
    #[arg(long)]
    pub stage: Option<String>,
    #[arg(long)]
    pub provider: Option<String>,
    #[arg(long = "type")]
    pub event_type: Option<String>,
    #[arg(long)]
    pub order: Option<String>,
    /// Substring of the latest error.
    #[arg(long)]
    pub error: Option<String>,
    /// Entered the queue at or after this RFC 3339 time.
    #[arg(long)]
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Entered the queue before this RFC 3339 time.
    #[arg(long)]
    pub until: Option<chrono::DateTime<chrono::Utc>>,
}

impl DlqFilterArgs {
    fn is_empty(&self) -> bool {
        self.status.is_none()
            && self.class.is_none()
            && self.stage.is_none()
            && self.provider.is_none()
            && self.event_type.is_none()
            && self.order.is_none()
            && self.error.is_none()
            && self.since.is_none()
            && self.until.is_none()
    }

    fn filter(&self) -> DeadLetterFilter {
        DeadLetterFilter {
            status: self.status.clone(),
            class: self.class.clone(),
            stage: self.stage.clone(),
            provider: self.provider.clone(),
            event_type: self.event_type.clone(),
            order_id: self.order.clone(),
            error_contains: self.error.clone(),
            since: self.since.map(|t| t.timestamp_millis()),
            until: self.until.map(|t| t.timestamp_millis()),
            ..Default::default()
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum DlqCommand {
    /// Dead letters, newest first.
    List {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        filter: DlqFilterArgs,
        /// Only ids below this (the previous page's last id).
        #[arg(long)]
        before: Option<i64>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// One dead letter with its payload, error history and redrives.
    Show {
        id: i64,
        #[arg(long)]
        json: bool,
    },
    /// Put items back on their normal path (same keys: never a doubled effect).
    Redrive {
        /// Dead letter ids; or use --event-id or filters.
        ids: Vec<i64>,
        #[arg(long)]
        event_id: Option<String>,
        #[command(flatten)]
        filter: DlqFilterArgs,
        /// Say what each item would do now, change nothing.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        reason: Option<String>,
        /// Who is doing this (recorded); defaults to $USER.
        #[arg(long)]
        actor: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Mark as fixed elsewhere.
    Resolve {
        id: i64,
        #[arg(long)]
        reason: String,
        #[arg(long)]
        actor: Option<String>,
    },
    /// Mark as not to be fixed.
    Discard {
        id: i64,
        #[arg(long)]
        reason: String,
        #[arg(long)]
        actor: Option<String>,
    },
}

pub async fn run(db: &Db, settings: &Settings, command: DlqCommand) -> anyhow::Result<()> {
    let now = crate::store::now_ms();
    match command {
        DlqCommand::List {
            json,
            filter,
            before,
            limit,
        } => {
            let mut f = filter.filter();
            if f.status.is_none() {
                f.status = Some("open".into());
            }
            f.before = before;
            f.limit = limit;
            let items = dead_letters::list(db, &f, now).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&items)?);
                return Ok(());
            }
            println!(
                "{:>6}  {:<10} {:<9} {:>4} {:>8}  {:<28} error",
                "id", "stage", "class", "try", "age", "event / order"
            );
            for d in items {
                let subject = d
                    .event_id
                    .clone()
                    .or(d.order_id.clone())
                    .unwrap_or_default();
                println!(
                    "{:>6}  {:<10} {:<9} {:>4} {:>7}s  {:<28} {}",
                    d.id, d.stage, d.error_class, d.attempts, d.age_secs, subject, d.last_error
                );
            }
            Ok(())
        }
        DlqCommand::Show { id, json } => {
            let Some(detail) = dead_letters::show(db, id, now).await? else {
                anyhow::bail!("no dead letter {id}");
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&detail)?);
            } else {
                let d = &detail.summary;
                println!(
                    "dead letter {} [{}] — {} failure in {}",
                    d.id, d.status, d.error_class, d.stage
                );
                println!(
                    "  event {}  type {}  order {}",
                    d.event_id.as_deref().unwrap_or("-"),
                    d.event_type.as_deref().unwrap_or("-"),
                    d.order_id.as_deref().unwrap_or("-")
                );
                println!(
                    "  attempts {}  first {}  last {}  resolve by {}",
                    d.attempts, d.first_attempt_at, d.last_attempt_at, d.resolve_by
                );
                println!("  correlation id {}", d.correlation_id);
                println!("  latest error: {}", d.last_error);
                println!(
                    "history:\n{}",
                    serde_json::to_string_pretty(&detail.error_history)?
                );
                println!("redrives:");
                for r in &detail.redrives {
                    println!(
                        "  {} by {}: {} ({})",
                        r.at,
                        r.actor,
                        r.outcome,
                        r.reason.as_deref().unwrap_or("no reason")
                    );
                }
                println!("payload:\n{}", detail.payload);
            }
            Ok(())
        }
        DlqCommand::Redrive {
            ids,
            event_id,
            filter,
            dry_run,
            reason,
            actor,
            json,
        } => {
            anyhow::ensure!(
                !ids.is_empty() || event_id.is_some() || !filter.is_empty(),
                "name what to redrive: dead letter ids, --event-id, or filters (e.g. --class transient)"
            );
            let mut f = filter.filter();
            f.ids = ids;
            f.event_id = event_id;
            let providers = crate::provider::settings::Providers::build(&settings.providers)?;
            let actor = actor_name(actor);
            let actor = dead_letters::Actor {
                name: &actor,
                reason: reason.as_deref(),
                source: None,
            };
            let results = crate::pipeline::redrive::redrive(
                db,
                &providers,
                &f,
                dry_run,
                &actor,
                |done, total| {
                    if total > 1 && done > 0 && (done % 100 == 0 || done == total) {
                        eprintln!(
                            "{} {done}/{total}",
                            if dry_run { "checked" } else { "redriven" }
                        );
                    }
                },
            )
            .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&results)?);
            } else {
                for r in &results {
                    println!(
                        "{:>6}  {:<10} {:<28} {}",
                        r.dead_letter_id,
                        r.stage,
                        r.event_id.as_deref().unwrap_or("-"),
                        r.outcome
                    );
                }
                println!(
                    "{} item(s){}",
                    results.len(),
                    if dry_run {
                        ", dry run: nothing changed"
                    } else {
                        ""
                    }
                );
            }
            Ok(())
        }
        DlqCommand::Resolve { id, reason, actor } => {
            close(db, id, "resolved", reason, actor, now).await
        }
        DlqCommand::Discard { id, reason, actor } => {
            close(db, id, "discarded", reason, actor, now).await
        }
    }
}

async fn close(
    db: &Db,
    id: i64,
    status: &str,
    reason: String,
    actor: Option<String>,
    now: i64,
) -> anyhow::Result<()> {
    let actor = actor_name(actor);
    dead_letters::close(
        db,
        id,
        status,
        &dead_letters::Actor {
            name: &actor,
            reason: Some(&reason),
            source: None,
        },
        now,
    )
    .await?;
    println!("dead letter {id} {status}");
    Ok(())
}
