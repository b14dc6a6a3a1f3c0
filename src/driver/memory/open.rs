//! Which store a `--memory` names, and opening it: a `postgres://` or `postgresql://` URL is a
//! PostgreSQL database, anything else a SQLite file; without `--memory`, the file
//! `reactstep/memory.sqlite3` under the user's data directory (`~/.local/share` on Linux,
//! `$XDG_DATA_HOME` when set).

use std::path::PathBuf;

use super::postgres::{shown_url, PostgresStore};
use super::sqlite::SqliteStore;
use super::store::SessionStore;

/// Where sessions are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    Sqlite(PathBuf),
    Postgres(String),
}

impl StoreSpec {
    /// What `--memory` says, or the default file when it says nothing.
    pub fn parse(memory: Option<&str>) -> Result<Self, String> {
        match memory {
            Some(url) if is_postgres(url) => Ok(Self::Postgres(url.to_string())),
            Some("") => Err("--memory is empty: give a file or a postgres:// URL".into()),
            Some(path) => Ok(Self::Sqlite(PathBuf::from(path))),
            None => default_path().map(Self::Sqlite),
        }
    }

    /// The store as messages name it, without a URL's password.
    pub fn shown(&self) -> String {
        match self {
            Self::Sqlite(path) => path.display().to_string(),
            Self::Postgres(url) => shown_url(url),
        }
    }
}

fn is_postgres(spec: &str) -> bool {
    let lower = spec.to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

/// `<data dir>/reactstep/memory.sqlite3`.
pub fn default_path() -> Result<PathBuf, String> {
    let data = dirs::data_dir()
        .ok_or("no data directory is known for this user (no HOME): name a store with --memory")?;
    Ok(data.join("reactstep").join("memory.sqlite3"))
}

/// Opens the store `memory` names (the default file without it), its schema made when new: a
/// store that cannot be opened is an error naming it.
pub async fn open(memory: Option<&str>) -> Result<Box<dyn SessionStore>, String> {
    let spec = StoreSpec::parse(memory)?;
    let opened: Result<Box<dyn SessionStore>, String> = match &spec {
        StoreSpec::Sqlite(path) => match SqliteStore::open(path.clone()).await {
            Ok(store) => Ok(Box::new(store)),
            Err(why) => Err(why),
        },
        StoreSpec::Postgres(url) => match PostgresStore::open(url).await {
            Ok(store) => Ok(Box::new(store)),
            Err(why) => Err(why),
        },
    };
    opened.map_err(|why| format!("the session store {} cannot be opened: {why}", spec.shown()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_postgres_url_is_a_database_and_anything_else_a_file() {
        for url in ["postgres://h/db", "postgresql://u@h/db", "POSTGRES://h/db"] {
            assert_eq!(
                StoreSpec::parse(Some(url)),
                Ok(StoreSpec::Postgres(url.into()))
            );
        }
        assert_eq!(
            StoreSpec::parse(Some("memory.db")),
            Ok(StoreSpec::Sqlite("memory.db".into()))
        );
        assert!(StoreSpec::parse(Some("")).is_err());
    }
}
