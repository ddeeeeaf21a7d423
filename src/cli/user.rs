//! `oncehook user …`: the first admin and everyone after, from a shell on the server.

use std::io::{BufRead, IsTerminal};

use app::backend::Role;
use clap::Subcommand;

use crate::http::auth::{admin, password::Passwords};
use crate::store::{users, Db};

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Add a user. The password is read from stdin (one line) or asked for twice.
    Add {
        name: String,
        /// viewer (read), operator (also redrive/resolve/discard), admin (also users)
        #[arg(long, value_parser = parse_role, default_value = "viewer")]
        role: Role,
    },
    /// Every user with role, state and last sign-in.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Stop a user from signing in; their sessions end at once.
    Disable { name: String },
    /// Let a disabled user sign in again.
    Enable { name: String },
    /// Set a new password (stdin or prompt); the user must change it at the next sign-in
    /// and every session they had ends.
    ResetPassword { name: String },
}

pub fn parse_role(text: &str) -> Result<Role, String> {
    Role::parse(text).ok_or_else(|| "viewer, operator or admin".to_string())
}

pub fn cli_actor() -> String {
    format!(
        "{}@cli",
        std::env::var("USER").unwrap_or_else(|_| "unknown".into())
    )
}

/// One line from stdin when it is not a terminal (scripts, `echo … |`), else a prompt
/// without echo, asked twice.
fn read_password(prompt: &str) -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        let mut line = String::new();
        stdin.lock().read_line(&mut line)?;
        let password = line.trim_end_matches(['\r', '\n']).to_string();
        anyhow::ensure!(!password.is_empty(), "no password on stdin");
        return Ok(password);
    }
    let first = rpassword::prompt_password(prompt)?;
    let again = rpassword::prompt_password("Again: ")?;
    anyhow::ensure!(first == again, "the two passwords differ");
    Ok(first)
}

pub async fn run(db: &Db, command: UserCommand) -> anyhow::Result<()> {
    let actor = cli_actor();
    match command {
        UserCommand::Add { name, role } => {
            let password = read_password(&format!("Password for {name}: "))?;
            let passwords = Passwords::new(1).await?;
            admin::add_user(db, &passwords, &name, &password, role, &actor).await?;
            println!("added {name} ({role})");
        }
        UserCommand::List { json } => {
            let list = users::list(db).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                println!("{:<24} {:<9} {:<9} last sign-in", "user", "role", "state");
                for u in list {
                    let state = match (u.disabled, u.must_change_password) {
                        (true, _) => "disabled",
                        (false, true) => "must-change",
                        (false, false) => "active",
                    };
                    println!(
                        "{:<24} {:<9} {:<9} {}",
                        u.username,
                        u.role,
                        state,
                        u.last_sign_in_at.as_deref().unwrap_or("never")
                    );
                }
            }
        }
        UserCommand::Disable { name } => {
            admin::set_disabled(db, &name, true, &actor).await?;
            println!("disabled {name}");
        }
        UserCommand::Enable { name } => {
            admin::set_disabled(db, &name, false, &actor).await?;
            println!("enabled {name}");
        }
        UserCommand::ResetPassword { name } => {
            let password = read_password(&format!("New password for {name}: "))?;
            let passwords = Passwords::new(1).await?;
            admin::reset_password(db, &passwords, &name, &password, &actor).await?;
            println!("reset the password of {name}; they choose a new one at the next sign-in");
        }
    }
    Ok(())
}
