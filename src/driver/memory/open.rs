//! Which store a `--memory` names, and opening it: a `postgres://` or `postgresql://` URL is a
//! PostgreSQL database, anything else a SQLite file; without `--memory`, the file
//! `reactstep/memory.sqlite3` under the user's data directory (`~/.local/share` on Linux,
//! `$XDG_DATA_HOME` when set).

use std::path::PathBuf;

use super::postgres::{shown_url, PostgresStore};
use super::sqlite::SqliteStore;
use super::store::{Access, SessionStore};

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

/// Opens the store `memory` names (the default file without it) to save runs in, its schema
/// made when new: a store that cannot be opened, or cannot be written (opening writes in it),
/// is an error naming it. A SQLite file named through a symbolic link is refused.
pub async fn open(memory: Option<&str>) -> Result<Box<dyn SessionStore>, String> {
    open_for(memory, Access::Write).await
}

/// Opens the store `memory` names to look at it (`sessions list`, `show`): one that cannot be
/// written is read as it is.
pub async fn open_to_read(memory: Option<&str>) -> Result<Box<dyn SessionStore>, String> {
    open_for(memory, Access::Read).await
}

async fn open_for(memory: Option<&str>, access: Access) -> Result<Box<dyn SessionStore>, String> {
    let spec = StoreSpec::parse(memory)?;
    let opened: Result<Box<dyn SessionStore>, String> = match (&spec, access) {
        (StoreSpec::Sqlite(path), Access::Write) => SqliteStore::open(path.clone())
            .await
            .map(|s| Box::new(s) as _),
        (StoreSpec::Sqlite(path), Access::Read) => SqliteStore::open_to_read(path.clone())
            .await
            .map(|s| Box::new(s) as _),
        (StoreSpec::Postgres(url), Access::Write) => {
            PostgresStore::open(url).await.map(|s| Box::new(s) as _)
        }
        (StoreSpec::Postgres(url), Access::Read) => PostgresStore::open_to_read(url)
            .await
            .map(|s| Box::new(s) as _),
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
