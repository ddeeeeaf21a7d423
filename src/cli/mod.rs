//! The `oncehook` command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{Overrides, Settings};
use crate::store::read::{self, EventFilter};
use crate::store::Db;

pub mod dlq;
pub mod order;
pub mod reconcile;
pub mod simulate;
pub mod token;
pub mod user;

#[derive(Parser, Debug)]
#[command(
    name = "oncehook",
    version,
    about = "Payment webhooks in, exactly one effect out."
)]
pub struct Cli {
    #[command(flatten)]
    pub common: Common,
    /// Without one, `serve` (what `cargo leptos watch` and a bare `oncehook` run).
    #[command(subcommand)]
    pub command: Option<Command>,
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
        /// Also run the provider simulator in this process, posting realistic traffic with
        /// some of every fault to this server's own `stripe` webhook (demo data).
        #[arg(long)]
        demo: bool,
        /// The provider the demo plays: Stripe, or Mercado Pago (its payments, thin
        /// notifications to this server's own `mercadopago` webhook, and its payments API).
        #[arg(long, value_enum, default_value = "stripe", requires = "demo")]
        provider: crate::simulator::Provider,
    },
    /// Create or upgrade the database schema.
    Migrate,
    /// Orders.
    Order {
        #[command(subcommand)]
        command: OrderCommand,
    },
    /// The dead-letter queue: list, inspect, redrive, resolve, discard.
    Dlq {
        #[command(subcommand)]
        command: dlq::DlqCommand,
    },
    /// Delete finished rows older than the retention settings (serve also does this hourly).
    Prune {
        #[arg(long)]
        json: bool,
    },
    /// Received events.
    Events {
        #[command(subcommand)]
        command: EventsCommand,
    },
    /// Dashboard users: add, list, disable, enable, reset-password.
    User {
        #[command(subcommand)]
        command: crate::cli::user::UserCommand,
    },
    /// API tokens for /api/v1: add (printed once), list, revoke.
    Token {
        #[command(subcommand)]
        command: crate::cli::token::TokenCommand,
    },
    /// A Stripe-compatible provider in the box: signed webhooks with real faults, a
    /// Stripe-shaped API, and the truth to check oncehook against.
    Simulate(crate::cli::simulate::SimulateArgs),
    /// Rebuild every order's status and totals from its facts and report each order that
    /// differs, and each ledger entry without its outbox message. Exit status 3 when
    /// anything is found (1 when the check could not run, 2 for a usage error).
    Verify {
        #[arg(long)]
        json: bool,
        /// Findings listed (all are counted).
        #[arg(long, default_value_t = crate::verify::LIST_LIMIT)]
        limit: usize,
    },
    /// Compare the provider's events and objects (Mercado Pago: its payment search) with
    /// ours (see the book's
    /// docs/src/guides/on-call/reconciliation.md): prints the run and its diffs. Exit
    /// status 1 when a run failed.
    Reconcile(crate::cli::reconcile::ReconcileArgs),
    /// Send one signed webhook in a provider's own shape to any URL: `oncehook trigger
    /// pix.paid --url http://127.0.0.1:8080/webhooks/mercadopago` (the local Pix trigger).
    Trigger(crate::provider::trigger::TriggerArgs),
    /// The configuration.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Validate the configuration (file, ONCEHOOK_* variables, flags) as `serve` would and
    /// print the effective settings as TOML, secrets redacted.
    Check,
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
    /// Ask the provider for a refund (all that is left, or --amount minor units). Stored
    /// and sent by the relay of the running server with a stable Idempotency-Key.
    Refund {
        order_id: String,
        /// Minor units of the order's currency; without it, everything left to refund.
        #[arg(long)]
        amount: Option<i64>,
        #[arg(long)]
        reason: String,
        /// Who is doing this (recorded); defaults to $USER@cli.
        #[arg(long)]
        actor: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Withdraw refund command COMMAND_ID of an order before the relay starts sending it
    /// (audited); refused once it is being sent or over.
    CancelRefund {
        order_id: String,
        command_id: i64,
        /// Who is doing this (recorded); defaults to $USER@cli.
        #[arg(long)]
        actor: Option<String>,
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

pub(crate) fn actor_name(actor: Option<String>) -> String {
    actor.unwrap_or_else(|| {
        format!(
            "{}@cli",
            std::env::var("USER").unwrap_or_else(|_| "unknown".into())
        )
    })
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

/// The first admin's one-time password goes to a 0600 file in the data directory (the log
/// says where) and to standard output only when that is a terminal: a container's or a
/// service manager's captured output is kept, shipped and read by others.
fn announce_one_time_password(
    settings: &Settings,
    password: &str,
    dashboard: &str,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use std::io::IsTerminal;
    let path = crate::http::auth::keep_one_time_password(&settings.data_dir, password).context(
        "keeping the one-time password of `admin`; set a password with \
         `oncehook user reset-password admin`",
    )?;
    tracing::warn!(
        file = %path.display(),
        "no dashboard user existed: created `admin` with a one-time password, kept in {} \
         (mode 0600); sign in at {dashboard}/sign-in and choose a new password",
        path.display()
    );
    if std::io::stdout().is_terminal() {
        println!("\n  No dashboard user existed: created `admin` with the one-time password\n");
        println!("      {password}\n");
        println!("  Sign in at {dashboard}/sign-in and choose a new password.\n");
    }
    Ok(())
}

async fn open(settings: &Settings) -> anyhow::Result<Db> {
    let db = Db::connect(&settings.database_url).await?;
    db.migrate().await?;
    Ok(db)
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command.unwrap_or(Command::Serve {
        listen: None,
        demo: false,
        provider: crate::simulator::Provider::Stripe,
    }) {
        Command::Serve {
            listen,
            demo,
            provider,
        } => {
            let stop = crate::server::StopSignal::install()?;
            let mut settings = cli.common.settings(listen)?;
            settings.demo = demo;
            if demo {
                crate::simulator::demo::refuse_real_settings(&settings)?;
            }
            let dev_secret = settings.ensure_dev_provider()?;
            let demo = match demo {
                true => Some(crate::simulator::demo::prepare(&mut settings, provider).await?),
                false => None,
            };
            let server = crate::server::start(settings.clone()).await?;
            let url = server.url();

            println!("oncehook is running");
            println!("  dashboard: {}/", server.admin_url());
            for p in &settings.providers {
                println!(
                    "  webhooks:  {url}/webhooks/{}  ({:?} signatures)",
                    p.name, p.scheme
                );
            }
            // Like the one-time password, the secret itself goes only to a terminal: a
            // container's or service manager's captured output is kept and read by others.
            let on_terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
            match dev_secret {
                Some(dev) if dev.generated && on_terminal => {
                    println!(
                        "  development signing secret for provider \"stripe\": {}",
                        dev.secret
                    );
                    println!("  (generated once, kept in {})", dev.path.display());
                }
                Some(dev) => println!(
                    "  development signing secret for provider \"stripe\": in {}",
                    dev.path.display()
                ),
                None => {}
            }
            println!("  database:  {}", redact_url(&settings.database_url));
            if let Some(demo) = demo {
                let (shown, webhook) = match provider {
                    crate::simulator::Provider::Stripe => ("Stripe", "stripe"),
                    crate::simulator::Provider::MercadoPago => ("Mercado Pago", "mercadopago"),
                };
                println!(
                    "  demo:      simulated {shown} traffic to {url}/webhooks/{webhook}; its API at {} (the provider's api_base)",
                    demo.api_url
                );
                crate::simulator::demo::start(demo, format!("{url}/webhooks/{webhook}")).await?;
            }
            let passwords = crate::http::auth::password::Passwords::new(1).await?;
            if let Some(password) =
                crate::http::auth::bootstrap_first_admin(&server.db, &passwords).await?
            {
                announce_one_time_password(&settings, &password, &server.admin_url())?;
            }
            server.run_until(stop).await
        }
        Command::Simulate(args) => crate::cli::simulate::run(args).await,
        Command::Trigger(args) => {
            let settings = cli.common.settings(None)?;
            crate::provider::trigger::run(&settings.providers, args).await
        }
        Command::User { command } => {
            let settings = cli.common.settings(None)?;
            let db = open(&settings).await?;
            crate::cli::user::run(&db, command).await
        }
        Command::Token { command } => {
            let settings = cli.common.settings(None)?;
            let db = open(&settings).await?;
            crate::cli::token::run(&db, command).await
        }
        Command::Config {
            command: ConfigCommand::Check,
        } => {
            let settings = cli.common.settings(None)?;
            settings.check()?;
            print!("{}", settings.to_redacted_toml()?);
            eprintln!("configuration is valid");
            Ok(())
        }
        Command::Dlq { command } => {
            let settings = cli.common.settings(None)?;
            let db = open(&settings).await?;
            dlq::run(&db, &settings, command).await
        }
        Command::Prune { json } => {
            let settings = cli.common.settings(None)?;
            let db = open(&settings).await?;
            let pruned =
                crate::pipeline::retention::prune(&db, &settings.retention, crate::store::now_ms())
                    .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&pruned)?);
            } else {
                println!(
                    "pruned {} inbox events, {} deliveries, {} outbox rows, {} outbox attempts, {} dead letters",
                    pruned.inbox_events, pruned.deliveries, pruned.outbox, pruned.outbox_attempts, pruned.dead_letters
                );
            }
            Ok(())
        }
        Command::Verify { json, limit } => {
            let settings = cli.common.settings(None)?;
            let db = open(&settings).await?;
            let scope = settings.verify_scope();
            let mut options = crate::verify::Options::new(&scope, crate::store::now_ms());
            options.list_limit = limit;
            let report = crate::verify::run(&db, &options).await?;
            // Recorded like the periodic job's run, so the overview shows this check too.
            crate::store::verify::record(&db, &report.record("cli")).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", crate::verify::render_text(&report));
            }
            if report.is_clean() {
                Ok(())
            } else {
                Err(crate::verify::DriftFound {
                    drifting_orders: report.drifting_orders,
                    missing_messages: report.missing_messages,
                }
                .into())
            }
        }
        Command::Reconcile(args) => {
            let settings = cli.common.settings(None)?;
            let db = open(&settings).await?;
            crate::cli::reconcile::run(db, settings, args).await
        }
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
                let mut json = serde_json::to_value(&view)?;
                json["commands"] = serde_json::to_value(
                    crate::http::admin::commands::of_order(&db, &order_id).await?,
                )?;
                println!("{}", serde_json::to_string_pretty(&json)?);
            } else {
                print_order(&view);
            }
            Ok(())
        }
        Command::Order {
            command:
                OrderCommand::Refund {
                    order_id,
                    amount,
                    reason,
                    actor,
                    json,
                },
        } => {
            let db = open(&cli.common.settings(None)?).await?;
            let actor = actor_name(actor);
            crate::cli::order::refund(&db, &order_id, amount, &reason, &actor, json).await
        }
        Command::Order {
            command:
                OrderCommand::CancelRefund {
                    order_id,
                    command_id,
                    actor,
                    json,
                },
        } => {
            let db = open(&cli.common.settings(None)?).await?;
            let actor = actor_name(actor);
            crate::cli::order::cancel(&db, &order_id, command_id, &actor, json).await
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
                ..Default::default()
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
    println!("  why: {}", view.why);
    let currency = view.currency.as_deref().unwrap_or("");
    println!(
        "  paid {} {currency} · refunded {} · disputed {} · net {}",
        view.amount_paid, view.amount_refunded, view.amount_disputed, view.net
    );
    for a in &view.attention {
        println!("  attention: {a}");
    }
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
    println!("facts:");
    for f in &view.facts {
        println!(
            "  {} {:<8} {:<24} {:<16} {}",
            f.at,
            f.kind,
            f.resource_id,
            f.state,
            f.amount
                .map(|a| a.to_string())
                .unwrap_or_else(|| "-".into())
        );
    }
    println!("ledger:");
    for l in &view.ledger {
        let amount = l
            .amount
            .map(|a| a.to_string())
            .unwrap_or_else(|| "-".into());
        println!(
            "  {} {:<16} {:<24} {} {} counted {:+} -> {}",
            l.occurred_at,
            l.entry,
            l.external_ref,
            amount,
            l.currency.as_deref().unwrap_or(""),
            l.counted,
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

/// Never print a database password (see `config::redact_url`).
pub fn redact_url(url: &str) -> String {
    crate::support::redact::redact_url(url)
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
