//! The statements both stores run, written once in PostgreSQL's words (`$1` …; SQLite reads
//! them as `?1` …), and the rows they read, turned into what callers see.

use serde_json::Value;

use super::types::{rfc3339, NewRun, SavedRun, Session, SessionInfo, Summary};

const SESSION_COLUMNS: &str = "SELECT s.name, s.created_ms, s.last_active_ms, s.summary_text, \
     s.summary_turns, (SELECT COUNT(*) FROM runs r WHERE r.session = s.name) FROM sessions s";

/// Every session, the most recently active first.
pub fn list() -> String {
    format!("{SESSION_COLUMNS} ORDER BY s.last_active_ms DESC, s.name")
}

/// The session `$1`.
pub fn one_session() -> String {
    format!("{SESSION_COLUMNS} WHERE s.name = $1")
}

/// The runs of the session `$1`, oldest first.
pub const RUNS: &str = "SELECT id, question, started_ms, ended_ms, answer, termination, report, \
     plan, evaluations FROM runs WHERE session = $1 ORDER BY id";

/// Makes the session `$1` (created `$2`) or marks it active at `$3` unless it was active later;
/// its summary becomes `$4` (covering `$5` turns) when one is given that covers no fewer turns
/// than the one kept: two runs of a session at once each end with a summary of what they were
/// sent, and the one that started earlier, saved last, must not undo what the other covered.
pub const UPSERT_SESSION: &str = "INSERT INTO sessions \
     (name, created_ms, last_active_ms, summary_text, summary_turns) VALUES ($1, $2, $3, $4, $5) \
     ON CONFLICT (name) DO UPDATE SET \
     last_active_ms = CASE WHEN excluded.last_active_ms > sessions.last_active_ms \
         THEN excluded.last_active_ms ELSE sessions.last_active_ms END, \
     summary_text = CASE WHEN excluded.summary_text IS NULL \
         OR excluded.summary_turns < sessions.summary_turns \
         THEN sessions.summary_text ELSE excluded.summary_text END, \
     summary_turns = CASE WHEN excluded.summary_text IS NULL \
         OR excluded.summary_turns < sessions.summary_turns \
         THEN sessions.summary_turns ELSE excluded.summary_turns END";

/// A run of the session `$1`; its id.
pub const INSERT_RUN: &str = "INSERT INTO runs \
     (session, question, started_ms, ended_ms, answer, termination, report, plan, evaluations) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id";

/// The session `$1`; its runs go with it (`ON DELETE CASCADE`).
pub const DELETE_SESSION: &str = "DELETE FROM sessions WHERE name = $1";

/// The sessions last active before `$1`, with their runs; their names.
pub const EXPIRE: &str = "DELETE FROM sessions WHERE last_active_ms < $1 RETURNING name";

/// A statement in SQLite's words: `$1` becomes `?1`, a numbered parameter there too.
pub fn for_sqlite(statement: &str) -> String {
    statement.replace('$', "?")
}

/// A row of [`list`] or [`one_session`], in column order.
pub struct SessionRow {
    pub name: String,
    /// `None` for a time that is not a number (written by another program): shown as "".
    pub created_ms: Option<i64>,
    pub last_active_ms: Option<i64>,
    pub summary_text: Option<String>,
    pub summary_turns: Option<i64>,
    pub runs: i64,
}

impl SessionRow {
    pub fn info(self) -> SessionInfo {
        let summary = self.summary_text.map(|text| Summary {
            text,
            turns: self
                .summary_turns
                .and_then(|t| u64::try_from(t).ok())
                .unwrap_or(0),
        });
        SessionInfo {
            name: self.name,
            created: time(self.created_ms),
            last_active: time(self.last_active_ms),
            summary,
            run_count: u64::try_from(self.runs).unwrap_or(0),
        }
    }
}

/// A row of [`RUNS`], in column order.
pub struct RunRow {
    pub id: i64,
    pub question: String,
    /// `None` for a time that is not a number, left out with a warning.
    pub started_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    pub answer: String,
    pub termination: String,
    pub report: String,
    pub plan: Option<String>,
    pub evaluations: String,
}

impl RunRow {
    /// The run as callers see it. A damaged column of JSON (a report that is not JSON) is left
    /// out, said in `warnings`: the run's question and answer are still shown and sent.
    pub fn run(self, warnings: &mut Vec<String>) -> SavedRun {
        let id = self.id;
        for (what, ms) in [("start", self.started_ms), ("end", self.ended_ms)] {
            if ms.is_none() {
                warnings.push(format!(
                    "the {what} time of run {id} is not a number: left out"
                ));
            }
        }
        let mut json = |what: &str, text: &str| match serde_json::from_str::<Value>(text) {
            Ok(value) => Some(value),
            Err(e) => {
                warnings.push(format!(
                    "the {what} of run {id} is not JSON ({e}): left out"
                ));
                None
            }
        };
        SavedRun {
            id,
            report: json("report", &self.report).unwrap_or(Value::Null),
            plan: self.plan.and_then(|plan| json("plan", &plan)),
            evaluations: json("evaluations", &self.evaluations)
                .filter(Value::is_array)
                .unwrap_or_else(|| Value::Array(Vec::new())),
            question: self.question,
            started: time(self.started_ms),
            ended: time(self.ended_ms),
            answer: self.answer,
            termination: self.termination,
        }
    }
}

/// A time as RFC 3339, or "" for one that could not be read.
fn time(ms: Option<i64>) -> String {
    ms.map_or_else(String::new, rfc3339)
}

/// The session of `row` with its `runs`: a run that could not be read at all (`Err`, why) is
/// left out, and said in the session's warnings.
pub fn session(row: SessionRow, runs: Vec<Result<RunRow, String>>) -> Session {
    let mut warnings = Vec::new();
    let runs = runs
        .into_iter()
        .filter_map(|run| match run {
            Ok(run) => Some(run.run(&mut warnings)),
            Err(why) => {
                warnings.push(format!("a run cannot be read ({why}): left out"));
                None
            }
        })
        .collect();
    Session {
        info: row.info(),
        runs,
        warnings,
    }
}

/// The JSON of a run to save, as text.
pub struct RunText {
    pub report: String,
    pub plan: Option<String>,
    pub evaluations: String,
}

impl RunText {
    pub fn of(run: &NewRun) -> Self {
        Self {
            report: run.report.to_string(),
            plan: run.plan.as_ref().map(Value::to_string),
            evaluations: run.evaluations.to_string(),
        }
    }
}

/// `run` as it was saved under `id`.
pub fn saved(id: i64, run: NewRun) -> SavedRun {
    SavedRun {
        id,
        question: run.question,
        started: rfc3339(run.started_ms),
        ended: rfc3339(run.ended_ms),
        answer: run.answer,
        termination: run.termination,
        report: run.report,
        plan: run.plan,
        evaluations: run.evaluations,
    }
}
