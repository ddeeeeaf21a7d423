//! `oncehook token …`: API tokens from a shell on the server.

use app::backend::Role;
use clap::Subcommand;

use crate::store::{now_ms, tokens, Db};

#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Make a token and print it once (it is stored only as a hash).
    Add {
        /// What it is for: 1-64 letters, digits or . _ @ -
        name: String,
        /// viewer (read), operator (also redrive/resolve/discard), admin
        #[arg(long, value_parser = crate::cli::user::parse_role, default_value = "viewer")]
        role: Role,
        /// It stops working after this many days.
        #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u32).range(1..=3650))]
        expires_in_days: u32,
    },
    /// Every token with role, expiry and last use (never the token itself).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Stop a token at once.
    Revoke { name: String },
}

pub async fn run(db: &Db, command: TokenCommand) -> anyhow::Result<()> {
    let actor = crate::cli::user::cli_actor();
    match command {
        TokenCommand::Add {
            name,
            role,
            expires_in_days,
        } => {
            let now = now_ms();
            let (row, token) = tokens::create(
                db,
                &tokens::NewToken {
                    name: &name,
                    role: role.as_str(),
                    created_by: &actor,
                    maker: tokens::Maker::Shell,
                    now,
                    expires_at: now + i64::from(expires_in_days) * 86_400_000,
                },
                None,
            )
            .await?;
            eprintln!(
                "token {} ({}) expires {}; it is shown only now:",
                row.name, row.role, row.expires_at
            );
            println!("{token}");
        }
        TokenCommand::List { json } => {
            let list = tokens::list(db).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                let now = now_ms();
                println!(
                    "{:<24} {:<11} {:<9} {:<8} {:<25} last used",
                    "token", "prefix", "role", "state", "expires"
                );
                for t in list
                    .into_iter()
                    .map(|t| crate::http::admin::tokens::view(t, now))
                {
                    println!(
                        "{:<24} {:<11} {:<9} {:<8} {:<25} {}",
                        t.name,
                        t.prefix,
                        t.role,
                        t.state,
                        t.expires_at,
                        t.last_used_at.as_deref().unwrap_or("never")
                    );
                }
            }
        }
        TokenCommand::Revoke { name } => {
            let row = tokens::revoke(db, &name, &actor, None, now_ms()).await?;
            println!("revoked {} ({})", row.name, row.prefix);
        }
    }
    Ok(())
}
