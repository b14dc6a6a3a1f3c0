//! Session memory for the loop driver: sessions (a name, when it was made and last active, a
//! summary of its oldest turns) and their runs (question, times, answer, the report with its
//! steps, plan and evaluations), kept in an embedded SQLite file or in PostgreSQL with the same
//! schema. `reactstep run --session NAME` continues a session ([`Conversation`]);
//! `reactstep sessions` looks at them ([`command`]); anything else (the UI) calls a
//! [`SessionStore`] from [`open`].

pub mod command;
pub mod conversation;
mod file;
mod name;
mod open;
mod postgres;
pub mod redact;
mod schema;
mod sql;
mod sqlite;
mod store;
mod types;

pub use conversation::Conversation;
pub use name::session_name;
pub use open::{default_path, open, open_to_read, StoreSpec};
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;
pub use store::{Access, SessionStore};
pub use types::{NewRun, SavedRun, Session, SessionInfo, Summary};
