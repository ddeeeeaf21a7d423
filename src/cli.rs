//! The `oncehook` command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{Overrides, Settings};
use crate::store::read::{self, EventFilter};
use crate::store::Db;

#[derive(Parser, Debug)]
#[command(
    name = "oncehook",
    version,
    about = "Payment webhooks in, exactly one effect out."
)]
pub struct Cli {
    #[command(flatten)]
    pub common: Common,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug, Clone)]
pub struct Common {
    /// TOML configuration file (defaults < file < ONCEHOOK_* env < flags).
    #[arg(long, global = true, env = "ONCEHOOK_CONFIG")]
    pub config: Option<PathBuf>,
    /// sqlite://PATH or postgres://USER@HOST/DB
    #[arg(long, global = true)]
    pub database_url: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the receiver, the processor and the dashboard.
    Serve {
        /// Address to listen on, e.g. 127.0.0.1:8080.
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
    },
    /// Create or upgrade the database schema.
    Migrate,
    /// Orders.
    Order {
        #[command(subcommand)]
        command: OrderCommand,
    },
    /// Measure ingest and processing against the real HTTP receiver (see BENCHMARKS.md).
    Bench(crate::bench::BenchArgs),
    /// Received events.
    Events {
        #[command(subcommand)]
        command: EventsCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum OrderCommand {
    /// Everything known about one order: status, effects, stale events, ledger, outbox,
    /// events and every delivery.
    Show {
        order_id: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum EventsCommand {
    /// Latest events first.
    List {
        #[arg(long)]
        json: bool,
        #[arg(long)]
        provider: Option<String>,
        /// pending, processing, applied, duplicate, stale, refused, ignored, failed
        #[arg(long)]
        status: Option<String>,
        #[arg(long = "type")]
        event_type: Option<String>,
        #[arg(long)]
        order: Option<String>,
        /// Only events older than this inbox id (the previous page's last id).
        #[arg(long)]
        before: Option<i64>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
}

impl Common {
    pub fn settings(&self, listen: Option<std::net::SocketAddr>) -> anyhow::Result<Settings> {
        Settings::load(
            self.config.as_deref(),
            &Overrides {
                database_url: self.database_url.clone(),
                listen,
            },
        )
    }
}

async fn open(settings: &Settings) -> anyhow::Result<Db> {
    let db = Db::connect(&settings.database_url).await?;
    db.migrate().await?;
    Ok(db)
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve { listen } => {
            let mut settings = cli.common.settings(listen)?;
            let dev_secret = settings.ensure_dev_provider()?;
            let server = crate::server::start(settings.clone()).await?;
            let url = server.url();
            println!("oncehook is running");
            println!("  dashboard: {url}/");
            for p in &settings.providers {
                println!(
                    "  webhooks:  {url}/webhooks/{}  ({:?} signatures)",
                    p.name, p.scheme
                );
            }
            if let Some(secret) = dev_secret {
                println!("  development signing secret for provider \"stripe\": {secret}");
                println!(
                    "  (generated once, kept in {}/dev-stripe-secret)",
                    settings.data_dir.display()
                );
            }
            println!("  database:  {}", redact_url(&settings.database_url));
            server.run_until_signal().await
        }
        Command::Bench(args) => crate::bench::run(args, &cli.common).await,
        Command::Migrate => {
            let settings = cli.common.settings(None)?;
            open(&settings).await?;
            println!(
                "database is up to date: {}",
                redact_url(&settings.database_url)
            );
            Ok(())
        }
        Command::Order {
            command: OrderCommand::Show { order_id, json },
        } => {
            let db = open(&cli.common.settings(None)?).await?;
            let Some(view) = read::order_view(&db, &order_id).await? else {
                anyhow::bail!("no order {order_id:?}");
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&view)?);
            } else {
                print_order(&view);
            }
            Ok(())
        }
        Command::Events {
            command:
                EventsCommand::List {
                    json,
                    provider,
                    status,
                    event_type,
                    order,
                    before,
                    limit,
                },
        } => {
            let db = open(&cli.common.settings(None)?).await?;
            let filter = EventFilter {
                provider,
                status,
                event_type,
                order_id: order,
                before,
                limit,
            };
            let events = read::list_events(&db, &filter).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&events)?);
            } else {
                println!(
                    "{:>6}  {:<24} {:<10} {:<28} {:<30} {:<10} {:>4}  order",
                    "id", "received", "provider", "event id", "type", "status", "recv"
                );
                for e in events {
                    println!(
                        "{:>6}  {:<24} {:<10} {:<28} {:<30} {:<10} {:>4}  {}",
                        e.id,
                        e.received_at,
                        e.provider,
                        e.event_id,
                        e.event_type.unwrap_or_default(),
                        e.status,
                        e.deliveries,
                        e.order_id.unwrap_or_default()
                    );
                }
            }
            Ok(())
        }
    }
}

fn print_order(view: &read::OrderView) {
    println!("order {}: {}", view.order_id, view.status);
    println!(
        "  updated {}  (last event {})",
        view.updated_at,
        view.last_event_id.as_deref().unwrap_or("-")
    );
    println!("effects:");
    for e in &view.effects {
        println!(
            "  {} {:<9} {:<24} by {} ({})",
            e.applied_at, e.transition, e.external_ref, e.event_id, e.outcome
        );
    }
    println!("ledger:");
    for l in &view.ledger {
        let amount = l
            .amount
            .map(|a| a.to_string())
            .unwrap_or_else(|| "-".into());
        println!(
            "  {} {:<9} {} {} -> {}",
            l.occurred_at,
            l.transition,
            amount,
            l.currency.as_deref().unwrap_or(""),
            l.status_after
        );
    }
    println!("stale or refused events:");
    for s in &view.stale_events {
        println!(
            "  {} {} {} ({}): {}",
            s.occurred_at, s.event_id, s.transition, s.kind, s.reason
        );
    }
    println!("outbox:");
    for o in &view.outbox {
        println!(
            "  {} {} via {} [{}]",
            o.topic, o.idempotency_key, o.sink, o.status
        );
    }
    println!("deliveries: {}", view.deliveries.len());
    for d in &view.deliveries {
        println!(
            "  {} {} {}{}",
            d.received_at,
            d.provider,
            d.event_id,
            if d.duplicate { " (duplicate)" } else { "" }
        );
    }
}

/// Never print a database password.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            super::redact_url("postgres://u:secret@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(super::redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            super::redact_url("sqlite://data/x.db"),
            "sqlite://data/x.db"
        );
    }
}
