//! The embedded store: one SQLite file (by default under the user's data directory). WAL, so a
//! reader never waits on a writer, and a busy timeout, so processes writing at once take turns;
//! each write is one IMMEDIATE transaction, which takes the write lock before it reads. The
//! blocking calls run on tokio's blocking threads, never on the runtime's own.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};

use super::file;
use super::name::{lookup, session_name};
use super::schema::{self, Dialect};
use super::sql::{self, for_sqlite, RunRow, RunText, SessionRow};
use super::store::{Access, SessionStore};
use super::types::{now_ms, NewRun, SavedRun, Session, SessionInfo};

/// How long a write waits for another's to end before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

pub struct SqliteStore {
    path: PathBuf,
    connection: Arc<Mutex<Connection>>,
}

impl SqliteStore {
    /// Opens the store at `path` to save runs in, making the file (readable by its owner only)
    /// and its folder when they are missing, and its schema when it has none. A link is
    /// refused, and so is a store that cannot be written: opening writes in it.
    pub async fn open(path: PathBuf) -> Result<Self, String> {
        Self::open_for(path, Access::Write).await
    }

    /// Opens the store at `path` to look at it: a store that cannot be written is read as it
    /// is. One that is missing, or has no schema or an older one, is opened as [`Self::open`]
    /// opens it.
    pub async fn open_to_read(path: PathBuf) -> Result<Self, String> {
        Self::open_for(path, Access::Read).await
    }

    async fn open_for(path: PathBuf, access: Access) -> Result<Self, String> {
        let at = path.clone();
        let connection = blocking(move || match access {
            Access::Write => connect(&at),
            Access::Read => match connect_to_read(&at)? {
                Some(connection) => Ok(connection),
                None => connect(&at),
            },
        })
        .await?;
        Ok(Self {
            path,
            connection: Arc::new(Mutex::new(connection)),
        })
    }

    /// Runs `work` on the connection, on a blocking thread.
    async fn with<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, String> {
        let connection = Arc::clone(&self.connection);
        let shown = self.describe();
        blocking(move || {
            let mut connection = connection.lock().unwrap_or_else(PoisonError::into_inner);
            work(&mut connection).map_err(|e| format!("the session store {shown}: {}", said(&e)))
        })
        .await
    }
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| format!("the session store's thread failed: {e}"))?
}

fn said(e: &rusqlite::Error) -> String {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => "it is not a SQLite database".into(),
        Some(ErrorCode::ReadOnly) => {
            format!("it cannot be written (a read-only file, folder or file system: {e})")
        }
        _ => e.to_string(),
    }
}

/// What went wrong while the store was opened to be written.
fn said_to_write(e: &rusqlite::Error) -> String {
    match e.sqlite_error_code() {
        Some(ErrorCode::ReadOnly) => format!("{}, so a run saved in it would be lost", said(e)),
        // The file is there (it was made or looked at first): what SQLite cannot open is what
        // it keeps beside it.
        Some(ErrorCode::CannotOpen) => format!(
            "it cannot be written: SQLite cannot open the journal it keeps beside the file \
             ({e}): is its folder read-only?"
        ),
        _ => said(e),
    }
}

/// The path as SQLite reads it: never through a link (and a name, see [`plain_name`]).
fn flags(access: Access) -> OpenFlags {
    let common = OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    match access {
        Access::Write => common | OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
        Access::Read => common | OpenFlags::SQLITE_OPEN_READ_ONLY,
    }
}

/// The name SQLite is given for `path`: this build reads a name that begins `file:` as a URI
/// (whatever the flags say), which may name another file, and `:memory:` as no file at all, so
/// a relative name goes as `./…`, the same file.
fn plain_name(path: &Path) -> std::borrow::Cow<'_, Path> {
    match path.is_relative() {
        true => Path::new(".").join(path).into(),
        false => path.into(),
    }
}

fn connect(path: &Path) -> Result<Connection, String> {
    file::prepare(path, Access::Write)?;
    file::match_companions(path, Access::Write)?;
    let mut connection = Connection::open_with_flags(plain_name(path), flags(Access::Write))
        .map_err(|e| said_to_write(&e))?;
    prepare(&mut connection)?;
    Ok(connection)
}

/// The store opened read-only, when it is there with this build's schema; `None` when it must
/// be opened to be written first (missing, no schema or an older one).
fn connect_to_read(path: &Path) -> Result<Option<Connection>, String> {
    if !file::prepare(path, Access::Read)? {
        return Ok(None);
    }
    file::match_companions(path, Access::Read)?;
    let (connection, current) = match read_only(plain_name(path), OpenFlags::empty()) {
        // In a folder that cannot be written, SQLite cannot make the WAL's index beside the file
        // to read it: nobody can write it there either, so it is read as immutable, unless a
        // WAL holds runs not yet in the file, which that would not read.
        Err(e)
            if matches!(
                e.sqlite_error_code(),
                Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly)
            ) && !file::has_wal(path) =>
        {
            read_only(&immutable(path)?, OpenFlags::SQLITE_OPEN_URI)
        }
        read => read,
    }
    .map_err(|e| said(&e))?;
    schema::migrations(Dialect::Sqlite, current)?;
    Ok((current == schema::VERSION).then_some(connection))
}

/// A read-only connection to `name` and the schema version it is at.
fn read_only(name: impl AsRef<Path>, more: OpenFlags) -> rusqlite::Result<(Connection, i64)> {
    let connection = Connection::open_with_flags(name, flags(Access::Read) | more)?;
    connection.busy_timeout(BUSY_TIMEOUT)?;
    let has_version: bool =
        connection.query_row(schema::HAS_VERSION_TABLE_SQLITE, [], |row| row.get(0))?;
    let current = match has_version {
        true => connection.query_row(schema::READ_VERSION, [], |row| row.get(0))?,
        false => 0,
    };
    Ok((connection, current))
}

/// `path` as a SQLite URI that reads it as immutable.
fn immutable(path: &Path) -> Result<std::ffi::OsString, String> {
    let full = std::fs::canonicalize(path).map_err(|e| format!("it cannot be found: {e}"))?;
    let text = full
        .to_str()
        .ok_or("its path is not UTF-8, so it cannot be read in a read-only folder")?;
    let mut uri = String::from("file:");
    for c in text.chars() {
        match c {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3f"),
            '#' => uri.push_str("%23"),
            c => uri.push(c),
        }
    }
    uri.push_str("?immutable=1");
    Ok(uri.into())
}

/// The connection's settings, and the schema made or brought up to date, and a row written:
/// a store that cannot be written is refused now, not when the run is saved.
fn prepare(connection: &mut Connection) -> Result<(), String> {
    let failed = |e: rusqlite::Error| said_to_write(&e);
    connection.busy_timeout(BUSY_TIMEOUT).map_err(failed)?;
    // A file system without shared memory keeps the rollback journal: slower, still safe.
    connection
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get::<_, String>(0))
        .map_err(failed)?;
    connection
        .pragma_update(None, "synchronous", "NORMAL")
        .map_err(failed)?;
    connection
        .pragma_update(None, "foreign_keys", "ON")
        .map_err(failed)?;
    // What is deleted (a session, an expired one) is overwritten, not left in free pages.
    connection
        .pragma_update(None, "secure_delete", "ON")
        .map_err(failed)?;
    let tx = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(failed)?;
    tx.execute_batch(schema::VERSION_TABLE).map_err(failed)?;
    let current: i64 = tx
        .query_row(schema::READ_VERSION, [], |row| row.get(0))
        .map_err(failed)?;
    let migrations = schema::migrations(Dialect::Sqlite, current)?;
    for migration in &migrations {
        tx.execute_batch(migration).map_err(failed)?;
    }
    if !migrations.is_empty() {
        tx.execute(schema::CLEAR_VERSION, []).map_err(failed)?;
        tx.execute(&for_sqlite(schema::WRITE_VERSION), [schema::VERSION])
            .map_err(failed)?;
    }
    tx.execute(schema::TOUCH_VERSION, []).map_err(failed)?;
    tx.commit().map_err(failed)
}

/// A column of text as it is, whatever another program wrote there: bytes that are not UTF-8
/// read with U+FFFD, a number as its digits, NULL as nothing.
fn text(row: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Option<String>> {
    Ok(match row.get_ref(at)? {
        ValueRef::Null => None,
        ValueRef::Integer(n) => Some(n.to_string()),
        ValueRef::Real(x) => Some(x.to_string()),
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => {
            Some(String::from_utf8_lossy(bytes).into_owned())
        }
    })
}

/// A time column in milliseconds; `None` when another program wrote what is not a number (SQLite
/// keeps any value in any column): the row is still read, and its question and answer shown.
fn time(row: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Option<i64>> {
    Ok(match row.get_ref(i)? {
        ValueRef::Integer(n) => Some(n),
        ValueRef::Text(text) => std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.trim().parse().ok()),
        _ => None,
    })
}

fn session_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<SessionRow> {
    Ok(SessionRow {
        name: text(row, 0)?.unwrap_or_default(),
        created_ms: time(row, 1)?,
        last_active_ms: time(row, 2)?,
        summary_text: text(row, 3)?,
        summary_turns: row.get(4).unwrap_or(None),
        runs: row.get(5)?,
    })
}

fn run_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
    Ok(RunRow {
        id: row.get(0)?,
        question: text(row, 1)?.unwrap_or_default(),
        started_ms: time(row, 2)?,
        ended_ms: time(row, 3)?,
        answer: text(row, 4)?.unwrap_or_default(),
        termination: text(row, 5)?.unwrap_or_default(),
        report: text(row, 6)?.unwrap_or_default(),
        plan: text(row, 7)?,
        evaluations: text(row, 8)?.unwrap_or_default(),
    })
}

/// A session's row and its runs' rows, each read or not (`Err`, why).
type Rows = (SessionRow, Vec<Result<RunRow, String>>);

/// The session `name` and its rows, read in one transaction: a row that cannot be read (a time
/// that is not a number) is `Err`, why.
fn read_session(connection: &mut Connection, name: &str) -> rusqlite::Result<Option<Rows>> {
    let tx = connection.transaction()?;
    let Some(session) = tx
        .query_row(&for_sqlite(&sql::one_session()), [name], session_row)
        .optional()?
    else {
        return Ok(None);
    };
    let mut statement = tx.prepare(&for_sqlite(sql::RUNS))?;
    let mut rows = statement.query([name])?;
    let mut runs = Vec::new();
    while let Some(row) = rows.next()? {
        runs.push(run_row(row).map_err(|e| e.to_string()));
    }
    Ok(Some((session, runs)))
}

fn insert_run(connection: &mut Connection, name: &str, run: &NewRun) -> rusqlite::Result<i64> {
    let text = RunText::of(run);
    let summary = run.summary.as_ref();
    let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute(
        &for_sqlite(sql::UPSERT_SESSION),
        params![
            name,
            run.started_ms,
            run.ended_ms,
            summary.map(|s| &s.text),
            summary.map(|s| i64::try_from(s.turns).unwrap_or(i64::MAX)),
        ],
    )?;
    let id = tx.query_row(
        &for_sqlite(sql::INSERT_RUN),
        params![
            name,
            run.question,
            run.started_ms,
            run.ended_ms,
            run.answer,
            run.termination,
            text.report,
            text.plan,
            text.evaluations,
        ],
        |row| row.get(0),
    )?;
    tx.commit()?;
    Ok(id)
}

#[async_trait::async_trait]
impl SessionStore for SqliteStore {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    async fn list(&self) -> Result<Vec<SessionInfo>, String> {
        let rows = self
            .with(|connection| {
                connection
                    .prepare(&for_sqlite(&sql::list()))?
                    .query_map([], session_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .await?;
        Ok(rows.into_iter().map(SessionRow::info).collect())
    }

    async fn show(&self, name: &str) -> Result<Option<Session>, String> {
        let Some(name) = lookup(name).map(String::from) else {
            return Ok(None);
        };
        let read = self
            .with(move |connection| read_session(connection, &name))
            .await?;
        Ok(read.map(|(session, runs)| sql::session(session, runs)))
    }

    async fn save_run(&self, name: &str, run: NewRun) -> Result<SavedRun, String> {
        let name = session_name(name)?;
        let run = run.without_nul();
        let (id, run) = self
            .with(move |connection| Ok((insert_run(connection, &name, &run)?, run)))
            .await?;
        Ok(sql::saved(id, run))
    }

    async fn delete(&self, name: &str) -> Result<bool, String> {
        let Some(name) = lookup(name).map(String::from) else {
            return Ok(false);
        };
        self.with(move |connection| {
            let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let deleted = tx.execute(&for_sqlite(sql::DELETE_SESSION), [name])?;
            tx.commit()?;
            Ok(deleted > 0)
        })
        .await
    }

    async fn expire(&self, older_than: Duration) -> Result<Vec<String>, String> {
        let cutoff =
            now_ms().saturating_sub(i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX));
        let mut names = self
            .with(move |connection| {
                let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let names = tx
                    .prepare(&for_sqlite(sql::EXPIRE))?
                    .query_map([cutoff], |row| row.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                tx.commit()?;
                Ok(names)
            })
            .await?;
        names.sort();
        Ok(names)
    }
}
