//! `reactstep sessions list|show NAME|delete NAME|expire --older-than 24h`: the sessions that
//! `reactstep run --session` keeps, looked at and cleared from the terminal.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use super::open::{open, open_to_read};
use super::store::SessionStore;
use super::types::{Session, SessionInfo};
use crate::driver::terminal::printable;

/// Look at and clear the sessions that `reactstep run --session` keeps.
#[derive(Debug, Parser)]
#[command(name = "reactstep sessions")]
pub struct SessionsArgs {
    /// The store: a SQLite file (default: reactstep/memory.sqlite3 under the user's data
    /// directory) or a postgres:// URL.
    #[arg(long, global = true)]
    pub memory: Option<String>,
    #[arg(long, value_enum, default_value_t = Output::Simple, global = true)]
    pub output: Output,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Output {
    /// Lines for a person.
    Simple,
    /// JSON.
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The sessions, the most recently active first.
    List,
    /// A session's summary and its runs (NAME is trimmed, as `run --session` trims it).
    Show { name: String },
    /// Delete a session and its runs (NAME is trimmed, as `run --session` trims it).
    Delete { name: String },
    /// Delete the sessions not active for a while, with their runs.
    Expire {
        /// How long a session may stay idle, like 30m, 24h or 7d.
        #[arg(long, value_parser = humantime::parse_duration)]
        older_than: Duration,
    },
}

/// Runs `reactstep sessions`; the process's exit code: 0, 1 for a session that is not there,
/// 2 for bad arguments or a store that cannot be opened or read.
pub async fn main(args: impl IntoIterator<Item = String>) -> i32 {
    let args = match SessionsArgs::try_parse_from(args) {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    // Looking needs no write: a store that cannot be written is still listed and shown.
    let opened = match args.command {
        Command::List | Command::Show { .. } => open_to_read(args.memory.as_deref()).await,
        Command::Delete { .. } | Command::Expire { .. } => open(args.memory.as_deref()).await,
    };
    let store = match opened {
        Ok(store) => store,
        Err(why) => {
            eprintln!("reactstep sessions: {}", printable(&why));
            return 2;
        }
    };
    match answer(&args, store.as_ref()).await {
        Ok((text, code)) => {
            let mut out = std::io::stdout();
            // JSON's strings are the sessions' text: on a terminal, shown, not obeyed (the
            // other forms are made printable as they are written).
            let text = match std::io::IsTerminal::is_terminal(&out) {
                true => crate::driver::terminal::printable_json(&text),
                false => text,
            };
            if out.write_all(text.as_bytes()).is_err() {
                return 2;
            }
            code
        }
        Err(why) => {
            eprintln!("reactstep sessions: {}", printable(&why));
            2
        }
    }
}

/// What the command prints, and its exit code.
async fn answer(args: &SessionsArgs, store: &dyn SessionStore) -> Result<(String, i32), String> {
    let json = matches!(args.output, Output::Json);
    Ok(match &args.command {
        Command::List => {
            let sessions = store.list().await?;
            match json {
                true => (as_json(&sessions)?, 0),
                false => (list_text(&sessions), 0),
            }
        }
        Command::Show { name } => match store.show(name).await? {
            Some(session) => {
                for warning in &session.warnings {
                    eprintln!("reactstep sessions: warning: {}", printable(warning));
                }
                match json {
                    true => (as_json(&session)?, 0),
                    false => (session_text(&session), 0),
                }
            }
            None => missing(store, name, json),
        },
        Command::Delete { name } => match store.delete(name).await? {
            true if json => (as_json(&serde_json::json!({"deleted": name.trim()}))?, 0),
            true => (
                format!("deleted the session {}\n", printable(name.trim())),
                0,
            ),
            false => missing(store, name, json),
        },
        Command::Expire { older_than } => {
            let expired = store.expire(*older_than).await?;
            if json {
                (as_json(&serde_json::json!({"expired": expired}))?, 0)
            } else {
                let names: Vec<String> = expired.iter().map(|n| printable(n)).collect();
                let text = format!("expired {} sessions: {}\n", names.len(), names.join(", "));
                (text, 0)
            }
        }
    })
}

/// No session `name`: said on stderr; the JSON answer is `null`.
fn missing(store: &dyn SessionStore, name: &str, json: bool) -> (String, i32) {
    eprintln!(
        "reactstep sessions: no session named {} in {}",
        printable(name.trim()),
        printable(&store.describe())
    );
    (if json { "null\n".into() } else { String::new() }, 1)
}

fn as_json(value: &impl serde::Serialize) -> Result<String, String> {
    serde_json::to_string_pretty(value)
        .map(|text| text + "\n")
        .map_err(|e| e.to_string())
}

fn list_text(sessions: &[SessionInfo]) -> String {
    if sessions.is_empty() {
        return "no sessions\n".into();
    }
    let mut text = format!(
        "{:<24} {:>5}  {:<24}  {}\n",
        "NAME", "RUNS", "LAST ACTIVE", "CREATED"
    );
    for s in sessions {
        let _ = writeln!(
            text,
            "{:<24} {:>5}  {:<24}  {}",
            printable(&s.name),
            s.run_count,
            s.last_active,
            s.created
        );
    }
    text
}

fn session_text(session: &Session) -> String {
    let info = &session.info;
    let mut text = format!(
        "session {}: {} runs, created {}, last active {}\n",
        printable(&info.name),
        info.run_count,
        info.created,
        info.last_active
    );
    if let Some(summary) = &info.summary {
        let _ = writeln!(
            text,
            "summary of the first {} turns: {}",
            summary.turns,
            printable(&summary.text)
        );
    }
    for (n, run) in session.runs.iter().enumerate() {
        let _ = write!(
            text,
            "\n[{}] {} → {} ({})\nquestion: {}\nanswer: {}\n",
            n + 1,
            run.started,
            run.ended,
            run.termination,
            printable(&run.question),
            printable(&run.answer)
        );
    }
    text
}
