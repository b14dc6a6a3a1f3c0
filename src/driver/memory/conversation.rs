//! A session continued by a loop: its earlier runs become the turns sent before the question
//! (each run's question as a `user` turn, its answer as an `assistant` turn), its summary the
//! `conversation_summary`, and `history_strategy: summarize` is asked for so that the service
//! returns a summary to keep when the turns no longer fit. When the loop ends, however it ended,
//! the run is saved in the session, scrubbed of every secret the caller named.
//!
//! A run sends the newest runs only, within [`MOST_TURNS_SENT`] and [`MOST_BYTES_SENT`]: left
//! unbounded, a long session would one day pass the service's 10,000 turns or its 8 MiB body,
//! and every later run of it would be refused. The summary stands for what is left out; its
//! `turns` are counted from the session's first turn where it is kept, and from the first turn
//! sent where it is sent.

use std::sync::Arc;

use serde_json::{json, Value};

use super::name::session_name;
use super::redact::{self, scrubbed, scrubbed_text};
use super::store::SessionStore;
use super::types::{now_ms, NewRun, SavedRun, Summary};
use crate::driver::observation::json_len;
use crate::driver::prior::PriorConversation;
use crate::driver::report::{RunReport, Termination};
use crate::driver::terminal::printable;
use crate::step::within_summary_bound;

/// The most turns of a session a run sends (its newest 100 runs).
pub const MOST_TURNS_SENT: usize = 200;
/// The most bytes of turns' text a run sends, written as JSON: a quarter of the service's body
/// limit, so that the question, context and tools have the rest.
pub const MOST_BYTES_SENT: usize = 2 << 20;

pub struct Conversation {
    store: Arc<dyn SessionStore>,
    name: String,
    /// The turns a run sends: the newest runs'.
    history: Vec<Value>,
    /// How many older turns of the session are not sent.
    left_out: usize,
    summary: Option<Summary>,
    secrets: Vec<String>,
}

impl Conversation {
    /// The session `name` in `store`, ready to continue (a session that does not exist yet is
    /// made when the first run is saved). `secrets`, and the store's own (its URL's password),
    /// never reach the store: a name holding one (or a piece of one) is refused, without
    /// saying it, and so is a name [`session_name`] refuses (the name is kept as it reads it,
    /// trimmed). A run of the session that cannot be read whole (a report that is not JSON)
    /// is said on stderr, and its question and answer are sent without it.
    pub async fn resume(
        store: Arc<dyn SessionStore>,
        name: &str,
        secrets: Vec<String>,
    ) -> Result<Self, String> {
        let name = session_name(name)?;
        let secrets = redact::with(secrets, store.secrets());
        if redact::holds_secret(&name, &secrets) {
            return Err(
                "the session name holds a secret (a key, token or password this process knows \
                 of, or a piece of one): it would be saved and listed as it is; choose another \
                 name"
                    .into(),
            );
        }
        let (history, summary) = match store.show(&name).await? {
            Some(session) => {
                for warning in &session.warnings {
                    eprintln!(
                        "reactstep: the session {}: {}",
                        printable(&name),
                        printable(warning)
                    );
                }
                (turns(&session.runs), session.info.summary)
            }
            None => (Vec::new(), None),
        };
        let (history, left_out) = newest(history);
        let covered = summary.as_ref().map_or(0, |s| s.turns as usize);
        if left_out > covered {
            eprintln!(
                "reactstep: the session {}: its {} oldest turns are past what a run sends (the \
                 newest {MOST_TURNS_SENT} turns, {} MiB) and no summary covers them, so they are \
                 not sent",
                printable(&name),
                left_out - covered,
                MOST_BYTES_SENT >> 20
            );
        }
        Ok(Self {
            store,
            name,
            history,
            left_out,
            summary: summary.filter(|s| !s.text.is_empty()),
            secrets,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    /// What a loop's `LoopSettings::prior` is set to, to continue the session.
    pub fn prior(&self) -> PriorConversation {
        PriorConversation {
            history: self.history.clone(),
            summary: self.summary.as_ref().map(|s| self.sent_summary(s)),
            history_strategy: Some("summarize".into()),
        }
    }

    /// Saves the run on `question` that started at `started_ms` and ended with `report`.
    pub async fn save(
        &self,
        question: &str,
        started_ms: i64,
        report: &RunReport,
    ) -> Result<SavedRun, String> {
        let run = self.new_run(question, started_ms, now_ms(), report);
        self.store.save_run(&self.name, run).await
    }

    /// The run as it is saved: its texts scrubbed; the report's `plan` and `evaluations`
    /// (from `--plan` and `--reflect`) beside it; the summary the service returned, when it is
    /// a new one.
    pub fn new_run(
        &self,
        question: &str,
        started_ms: i64,
        ended_ms: i64,
        report: &RunReport,
    ) -> NewRun {
        let secrets = &self.secrets;
        let json = serde_json::to_value(report).unwrap_or(Value::Null);
        let plan = json.get("plan").filter(|p| !p.is_null()).cloned();
        let evaluations = match json.get("evaluations") {
            Some(Value::Array(all)) => Value::Array(all.clone()),
            _ => json!([]),
        };
        let summary = self.kept_summary(report).map(|s| Summary {
            text: scrubbed_text(&s.text, secrets),
            turns: s.turns,
        });
        NewRun {
            question: scrubbed_text(question, secrets),
            started_ms,
            ended_ms,
            answer: scrubbed_text(&report.answer, secrets),
            termination: termination_name(report.termination_reason),
            report: scrubbed(json, secrets),
            plan: plan.map(|p| scrubbed(p, secrets)),
            evaluations: scrubbed(evaluations, secrets),
            summary,
        }
        .without_nul()
    }

    /// The summary the run ended with, when it is not the one the session had. It may cover
    /// turns of the run's own steps, which the next run does not send (it sends the run's
    /// question and answer instead): it then stands for the turns up to this run's question,
    /// which are the same in the next run, and the answer goes as a turn of its own.
    fn kept_summary(&self, report: &RunReport) -> Option<Summary> {
        let returned = report.conversation_summary.as_ref()?;
        // The one the run was sent, unchanged (the service made none): nothing new to keep.
        if self.summary.as_ref().map(|s| self.sent_summary(s)).as_ref() == Some(returned) {
            return None;
        }
        let text = returned["text"].as_str().filter(|t| !t.is_empty())?;
        let turns = returned["turns"].as_u64()?;
        let same_turns = self.history.len() as u64 + 1;
        let summary = Summary {
            text: within_summary_bound(text).to_string(),
            turns: turns.min(same_turns) + self.left_out as u64,
        };
        (self.summary.as_ref() != Some(&summary)).then_some(summary)
    }

    /// The kept summary as the service reads it: its turns counted from the first turn sent.
    /// Within what the service takes (`turns` a u32, the text at most 100,000 characters), so
    /// that no summary kept, however it was made, makes the session's runs refused.
    fn sent_summary(&self, summary: &Summary) -> Value {
        let turns = summary.turns.saturating_sub(self.left_out as u64);
        let turns = turns.min(u64::from(u32::MAX));
        json!({"text": within_summary_bound(&summary.text), "turns": turns})
    }
}

/// The turns of the newest runs within [`MOST_TURNS_SENT`] and [`MOST_BYTES_SENT`] (whole runs,
/// so the turns sent begin with a question), and how many older turns are left out.
fn newest(mut turns: Vec<Value>) -> (Vec<Value>, usize) {
    let mut bytes = 0;
    let mut kept = 0;
    for run in turns.rchunks(2) {
        bytes += run
            .iter()
            // As sent: a control character is six bytes (`\u0001`), not one.
            .map(|t| t["content"].as_str().map_or(0, json_len))
            .sum::<usize>();
        if kept + run.len() > MOST_TURNS_SENT || bytes > MOST_BYTES_SENT {
            break;
        }
        kept += run.len();
    }
    let left_out = turns.len() - kept;
    turns.drain(..left_out);
    (turns, left_out)
}

fn termination_name(termination: Termination) -> String {
    serde_json::to_value(termination)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

/// Each earlier run as a `user` turn (its question) and an `assistant` turn (its answer, or how
/// it ended without one), oldest first.
fn turns(runs: &[SavedRun]) -> Vec<Value> {
    runs.iter()
        .flat_map(|run| {
            let question = match run.question.trim() {
                "" => "(no question)",
                question => question,
            };
            let answer = match (run.termination.as_str(), run.answer.trim()) {
                ("success", "") => "(an empty answer)".to_string(),
                ("success", answer) => answer.to_string(),
                (ended, "") => format!("[This run ended without an answer: {ended}.]"),
                (ended, said) => format!("[This run ended without an answer: {ended}.] {said}"),
            };
            // A time that could not be read from the store ("") is sent as none.
            let at = |time: &str| (!time.is_empty()).then(|| time.to_string());
            [
                json!({"role": "user", "content": question, "timestamp": at(&run.started)}),
                json!({"role": "assistant", "content": answer, "timestamp": at(&run.ended)}),
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(question: &str, answer: &str, termination: &str) -> SavedRun {
        SavedRun {
            id: 1,
            question: question.into(),
            started: "2026-01-01T00:00:00.000Z".into(),
            ended: "2026-01-01T00:00:05.000Z".into(),
            answer: answer.into(),
            termination: termination.into(),
            report: json!({}),
            plan: None,
            evaluations: json!([]),
        }
    }

    #[test]
    fn each_run_is_a_question_and_an_answer_and_an_unfinished_one_says_how_it_ended() {
        let sent = turns(&[
            run("What is 6 * 7?", "42", "success"),
            run("And 7 * 8?", "the loop was cancelled", "cancelled"),
            run("  ", " ", "success"),
        ]);
        let shape: Vec<(&str, &str)> = sent
            .iter()
            .map(|t| {
                (
                    t["role"].as_str().unwrap_or(""),
                    t["content"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("user", "What is 6 * 7?"),
                ("assistant", "42"),
                ("user", "And 7 * 8?"),
                (
                    "assistant",
                    "[This run ended without an answer: cancelled.] the loop was cancelled"
                ),
                ("user", "(no question)"),
                ("assistant", "(an empty answer)"),
            ]
        );
        assert_eq!(sent[1]["timestamp"], "2026-01-01T00:00:05.000Z");
    }

    fn runs_of(sizes: &[usize]) -> Vec<Value> {
        let runs: Vec<SavedRun> = sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| run(&format!("{i}{}", "q".repeat(size)), "a", "success"))
            .collect();
        turns(&runs)
    }

    #[test]
    fn a_session_within_the_bounds_is_sent_whole() {
        let (sent, left_out) = newest(runs_of(&[10; 100]));
        assert_eq!((sent.len(), left_out), (200, 0));
        assert_eq!(newest(Vec::new()), (Vec::new(), 0));
    }

    #[test]
    fn past_the_turns_bound_the_oldest_runs_are_left_out_whole() {
        let (sent, left_out) = newest(runs_of(&[10; 103]));
        assert_eq!((sent.len(), left_out), (MOST_TURNS_SENT, 6));
        assert_eq!(sent[0]["role"], "user");
        assert!(sent[0]["content"]
            .as_str()
            .is_some_and(|q| q.starts_with('3')));
    }

    #[test]
    fn past_the_bytes_bound_the_oldest_runs_are_left_out_and_a_run_over_it_alone_sends_none() {
        let big = MOST_BYTES_SENT / 3;
        let (sent, left_out) = newest(runs_of(&[big, big, big, 10]));
        assert_eq!((sent.len(), left_out), (6, 2));
        let (sent, left_out) = newest(runs_of(&[10, MOST_BYTES_SENT]));
        assert_eq!(
            (sent.len(), left_out),
            (0, 4),
            "the newer run alone is over it"
        );
    }
}
