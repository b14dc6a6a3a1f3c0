//! The store in PostgreSQL (`--memory postgres://…`), with the same schema as the SQLite file.
//! Each write is one transaction; the schema is made under an advisory lock, so processes that
//! open a new database at once do not race. A connection that closed (the server restarted, an
//! idle connection dropped while a long run went on) is opened again on the next call. No TLS:
//! a server on this machine or a private network.

use std::time::Duration;

use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};
use tokio_postgres::{Client, Config, NoTls};

use super::name::{lookup, session_name};
use super::schema::{self, Dialect};
use super::sql::{self, RunRow, RunText, SessionRow};
use super::store::{Access, SessionStore};
use super::types::{now_ms, NewRun, SavedRun, Session, SessionInfo};

/// How long connecting may take when the URL does not say (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The advisory lock held while the schema is made or migrated: "reactstep" in ASCII.
const SCHEMA_LOCK: i64 = 0x7265_6163_7473_7465;

pub struct PostgresStore {
    config: Config,
    /// The URL without its password or query.
    shown: String,
    client: Mutex<Option<Client>>,
}

impl PostgresStore {
    /// Connects to the database at `url` to save runs in, and makes or migrates its schema. A
    /// database that cannot be written (a role that may only read, a read-only server) is
    /// refused: opening writes in it.
    pub async fn open(url: &str) -> Result<Self, String> {
        Self::open_for(url, Access::Write).await
    }

    /// Connects to the database at `url` to look at it: one that cannot be written is read as
    /// it is. One without this build's schema is opened as [`Self::open`] opens it.
    pub async fn open_to_read(url: &str) -> Result<Self, String> {
        Self::open_for(url, Access::Read).await
    }

    async fn open_for(url: &str, access: Access) -> Result<Self, String> {
        let mut config: Config = url.parse().map_err(|e| {
            let shown = shown_url(url);
            format!(
                "the URL cannot be read: {}",
                said(&e, None).replace(url, &shown)
            )
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let store = Self {
            config,
            shown: shown_url(url),
            client: Mutex::new(None),
        };
        let mut client = store.connect().await?;
        if access == Access::Write || !store.current(&mut client).await? {
            store.migrate(&mut client).await?;
        }
        *store.client.lock().await = Some(client);
        Ok(store)
    }

    async fn connect(&self) -> Result<Client, String> {
        let (client, connection) = self
            .config
            .connect(NoTls)
            .await
            .map_err(|e| self.bare(&e))?;
        tokio::spawn(async move {
            // Its end is seen by the client: the next call connects again.
            let _ = connection.await;
        });
        Ok(client)
    }

    /// Whether the database has this build's schema (a later one is refused), read without
    /// writing.
    async fn current(&self, client: &mut Client) -> Result<bool, String> {
        let failed = |e: tokio_postgres::Error| self.bare(&e);
        let tx = client
            .build_transaction()
            .read_only(true)
            .start()
            .await
            .map_err(failed)?;
        let has_version: bool = tx
            .query_one(schema::HAS_VERSION_TABLE_POSTGRES, &[])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(failed)?;
        let current: i64 = match has_version {
            true => tx
                .query_one(schema::READ_VERSION, &[])
                .await
                .and_then(|row| row.try_get(0))
                .map_err(failed)?,
            false => 0,
        };
        tx.commit().await.map_err(failed)?;
        schema::migrations(Dialect::Postgres, current)?;
        Ok(current == schema::VERSION)
    }

    async fn migrate(&self, client: &mut Client) -> Result<(), String> {
        let failed = |e: tokio_postgres::Error| self.unwritable_or_bare(&e);
        let tx = client.transaction().await.map_err(failed)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
            .await
            .map_err(failed)?;
        tx.batch_execute(schema::VERSION_TABLE)
            .await
            .map_err(failed)?;
        let current: i64 = tx
            .query_one(schema::READ_VERSION, &[])
            .await
            .map_err(failed)?
            .try_get(0)
            .map_err(failed)?;
        let migrations = schema::migrations(Dialect::Postgres, current)?;
        for migration in &migrations {
            tx.batch_execute(migration).await.map_err(failed)?;
        }
        if !migrations.is_empty() {
            tx.execute(schema::CLEAR_VERSION, &[])
                .await
                .map_err(failed)?;
            tx.execute(schema::WRITE_VERSION, &[&schema::VERSION])
                .await
                .map_err(failed)?;
        }
        tx.execute(schema::TOUCH_VERSION, &[])
            .await
            .map_err(failed)?;
        tx.commit().await.map_err(failed)
    }

    /// The connection, opened again when it closed. One call at a time uses it.
    async fn client(&self) -> Result<MappedMutexGuard<'_, Client>, String> {
        let mut guard = self.client.lock().await;
        if guard.as_ref().is_none_or(Client::is_closed) {
            let client = self.connect().await;
            *guard =
                Some(client.map_err(|why| format!("the session store {}: {why}", self.shown))?);
        }
        MutexGuard::try_map(guard, Option::as_mut)
            .map_err(|_| format!("the session store {}: no connection", self.shown))
    }

    /// What went wrong, with the causes, never the password.
    fn bare(&self, e: &tokio_postgres::Error) -> String {
        said(e, self.config.get_password())
    }

    /// What went wrong while the store was opened to be written: a database that may only be
    /// read (a role without the right, a read-only transaction or server) said as such.
    fn unwritable_or_bare(&self, e: &tokio_postgres::Error) -> String {
        use tokio_postgres::error::SqlState;
        let unwritable = [
            SqlState::INSUFFICIENT_PRIVILEGE,
            SqlState::READ_ONLY_SQL_TRANSACTION,
        ];
        match e.code() {
            Some(code) if unwritable.contains(code) => format!(
                "it cannot be written ({}), so a run saved in it would be lost",
                self.bare(e)
            ),
            _ => self.bare(e),
        }
    }

    /// What went wrong, naming the store.
    fn said(&self, e: &tokio_postgres::Error) -> String {
        format!("the session store {}: {}", self.shown, self.bare(e))
    }
}

/// `e` and its causes, with any piece of `password` taken out.
fn said(e: &tokio_postgres::Error, password: Option<&[u8]>) -> String {
    let mut text = match e.as_db_error() {
        Some(db) => db.to_string(),
        None => e.to_string(),
    };
    let mut cause = std::error::Error::source(e);
    while let Some(why) = cause {
        if e.as_db_error().is_none() {
            text.push_str(&format!(": {why}"));
        }
        cause = why.source();
    }
    match password.map(String::from_utf8_lossy) {
        Some(password) if !password.is_empty() => crate::scrub::secret_fragments(&password, &text),
        _ => text,
    }
}

/// A PostgreSQL URL without its password and query (which may hold one), for messages.
pub fn shown_url(url: &str) -> String {
    let Ok(mut parsed) = reqwest::Url::parse(url) else {
        let scheme = url.split("://").next().unwrap_or("postgres");
        return format!("{scheme}://…");
    };
    if parsed.password().is_some() {
        let _ = parsed.set_password(Some("***"));
    }
    parsed.set_query(None);
    parsed.set_fragment(None);
    parsed.to_string()
}

fn session_row(row: &tokio_postgres::Row) -> Result<SessionRow, tokio_postgres::Error> {
    Ok(SessionRow {
        name: row.try_get(0)?,
        created_ms: Some(row.try_get(1)?),
        last_active_ms: Some(row.try_get(2)?),
        summary_text: row.try_get(3)?,
        summary_turns: row.try_get(4)?,
        runs: row.try_get(5)?,
    })
}

fn run_row(row: &tokio_postgres::Row) -> Result<RunRow, tokio_postgres::Error> {
    Ok(RunRow {
        id: row.try_get(0)?,
        question: row.try_get(1)?,
        started_ms: Some(row.try_get(2)?),
        ended_ms: Some(row.try_get(3)?),
        answer: row.try_get(4)?,
        termination: row.try_get(5)?,
        report: row.try_get(6)?,
        plan: row.try_get(7)?,
        evaluations: row.try_get(8)?,
    })
}

#[async_trait::async_trait]
impl SessionStore for PostgresStore {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    fn secrets(&self) -> Vec<String> {
        self.config
            .get_password()
            .map(|password| String::from_utf8_lossy(password).into_owned())
            .into_iter()
            .collect()
    }

    async fn list(&self) -> Result<Vec<SessionInfo>, String> {
        let client = self.client().await?;
        let rows = client
            .query(&sql::list(), &[])
            .await
            .map_err(|e| self.said(&e))?;
        rows.iter()
            .map(|r| Ok(session_row(r).map_err(|e| self.said(&e))?.info()))
            .collect()
    }

    async fn show(&self, name: &str) -> Result<Option<Session>, String> {
        let failed = |e: tokio_postgres::Error| self.said(&e);
        let Some(name) = lookup(name) else {
            return Ok(None);
        };
        let mut client = self.client().await?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(failed)?;
        let Some(session) = tx
            .query_opt(&sql::one_session(), &[&name])
            .await
            .map_err(failed)?
        else {
            return Ok(None);
        };
        let runs = tx.query(sql::RUNS, &[&name]).await.map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        let runs = runs
            .iter()
            .map(|r| run_row(r).map_err(|e| self.bare(&e)))
            .collect();
        Ok(Some(sql::session(
            session_row(&session).map_err(failed)?,
            runs,
        )))
    }

    async fn save_run(&self, name: &str, run: NewRun) -> Result<SavedRun, String> {
        let failed = |e: tokio_postgres::Error| self.said(&e);
        let name = session_name(name)?;
        let run = run.without_nul();
        let text = RunText::of(&run);
        let summary = run.summary.as_ref();
        let summary_text = summary.map(|s| s.text.as_str());
        let summary_turns = summary.map(|s| i64::try_from(s.turns).unwrap_or(i64::MAX));
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(failed)?;
        let session = [
            &name as &(dyn tokio_postgres::types::ToSql + Sync),
            &run.started_ms,
            &run.ended_ms,
            &summary_text,
            &summary_turns,
        ];
        tx.execute(sql::UPSERT_SESSION, &session)
            .await
            .map_err(failed)?;
        let row = tx
            .query_one(
                sql::INSERT_RUN,
                &[
                    &name,
                    &run.question,
                    &run.started_ms,
                    &run.ended_ms,
                    &run.answer,
                    &run.termination,
                    &text.report,
                    &text.plan,
                    &text.evaluations,
                ],
            )
            .await
            .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        Ok(sql::saved(row.try_get(0).map_err(failed)?, run))
    }

    async fn delete(&self, name: &str) -> Result<bool, String> {
        let Some(name) = lookup(name) else {
            return Ok(false);
        };
        let client = self.client().await?;
        let deleted = client
            .execute(sql::DELETE_SESSION, &[&name])
            .await
            .map_err(|e| self.said(&e))?;
        Ok(deleted > 0)
    }

    async fn expire(&self, older_than: Duration) -> Result<Vec<String>, String> {
        let age = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
        let cutoff = now_ms().saturating_sub(age);
        let client = self.client().await?;
        let rows = client
            .query(sql::EXPIRE, &[&cutoff])
            .await
            .map_err(|e| self.said(&e))?;
        let mut names = rows
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<Vec<String>, _>>()
            .map_err(|e| self.said(&e))?;
        names.sort();
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_shown_without_its_password_or_query() {
        assert_eq!(
            shown_url("postgres://me:s3cret@db.local:5433/memory?password=s3cret"),
            "postgres://me:***@db.local:5433/memory"
        );
        assert_eq!(
            shown_url("postgresql://db.local/memory"),
            "postgresql://db.local/memory"
        );
        assert_eq!(shown_url("postgres://me:s3cret@[bad"), "postgres://…");
    }
}
