//! The one interface to a session store, whichever holds it (SQLite or PostgreSQL): what
//! `reactstep run --session`, `reactstep sessions` and the UI's handlers call, shared as an
//! `Arc<dyn SessionStore>`.

use std::time::Duration;

use super::types::{NewRun, SavedRun, Session, SessionInfo};

/// What a store is opened for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Runs are saved in it: opening it writes, so one that cannot be written is refused then,
    /// not after the run it would lose.
    Write,
    /// It is only looked at (`sessions list`, `show`): a read-only store will do.
    Read,
}

/// Sessions and their runs. Errors are sentences for a person, naming the store, never its
/// password.
#[async_trait::async_trait]
pub trait SessionStore: Send + Sync {
    /// The store as messages name it: the file's path, or the URL without its password.
    fn describe(&self) -> String;

    /// The secrets the store's own address holds (a PostgreSQL URL's password): kept out of
    /// what is saved in it, with the caller's.
    fn secrets(&self) -> Vec<String> {
        Vec::new()
    }

    /// Every session, the most recently active first.
    async fn list(&self) -> Result<Vec<SessionInfo>, String>;

    /// The session `name` (trimmed, as [`super::session_name`] keeps it) and its runs, oldest
    /// first; `None` when there is no such session (a name holding NUL: none). A run whose JSON
    /// is damaged is shown without it, and said in the session's `warnings`.
    async fn show(&self, name: &str) -> Result<Option<Session>, String>;

    /// Saves `run` in the session `name`, made when there is none, and marks the session active
    /// when the run ended (or later, if another run ended later). In one transaction: two
    /// runs saved at once into one session are both kept. A name [`super::session_name`]
    /// refuses is refused; NUL in the run's texts is saved as U+FFFD.
    async fn save_run(&self, name: &str, run: NewRun) -> Result<SavedRun, String>;

    /// Deletes the session `name` (trimmed, as `show` reads it) and its runs; `false` when
    /// there was none.
    async fn delete(&self, name: &str) -> Result<bool, String>;

    /// Deletes every session last active more than `older_than` ago, with its runs; their
    /// names, sorted.
    async fn expire(&self, older_than: Duration) -> Result<Vec<String>, String>;
}
