//! The runs the page asks for, one at a time, on the one [`Driver`] the command built: each
//! task's events go down its page's stream, and its end (the answer, or why there is none)
//! closes it. A page that goes away, or its Stop button, cancels the run. A run named a
//! session continues it (its earlier questions and answers go as history) and is saved in it
//! when it ends, however it ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::approver::Approvals;
use super::watcher::{Events, PageWatcher};
use crate::driver::memory::{Conversation, SessionStore};
use crate::driver::report::RunReport;
use crate::driver::run::Driver;

/// A task typed on the page, and the session it continues and is saved in (none: not saved).
pub struct Job {
    pub task: String,
    pub session: Option<String>,
    pub events: Events,
}

/// Where the runs are saved, and the secrets that never reach it (the model's key, the MCP
/// servers' tokens and header values, the environment's keys).
pub struct Memory {
    pub store: Arc<dyn SessionStore>,
    pub secrets: Vec<String>,
}

/// A job as the runner takes it, with what its Stop sends: made when the job is accepted, so a
/// Stop pressed at once (while the session is still read) reaches the run.
pub struct Queued {
    job: Job,
    stopped: oneshot::Receiver<()>,
}

/// The runner as the server sees it: whether a run is under way, how to start and stop one.
pub struct Runs {
    jobs: mpsc::Sender<Queued>,
    busy: AtomicBool,
    stop: Mutex<Option<oneshot::Sender<()>>>,
}

/// Said when a task comes while another runs.
pub const BUSY: &str = "a run is under way: wait for its end, or stop it, before the next task";

impl Runs {
    /// The runner's handle, and the queue its loop reads (see [`serve`]).
    pub fn new() -> (Arc<Self>, mpsc::Receiver<Queued>) {
        let (jobs, queue) = mpsc::channel(1);
        let runs = Self {
            jobs,
            busy: AtomicBool::new(false),
            stop: Mutex::new(None),
        };
        (Arc::new(runs), queue)
    }

    /// Starts `job`, unless a run is under way (or the runner has ended): then why not.
    pub fn start(&self, job: Job) -> Result<(), String> {
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err(BUSY.into());
        }
        let stopped = self.stoppable();
        self.jobs.try_send(Queued { job, stopped }).map_err(|_| {
            self.done();
            "the runner has stopped: start reactstep ui again".to_string()
        })
    }

    /// Cancels the run under way; `false` when there is none.
    pub fn stop(&self) -> bool {
        let stop = self.stop.lock().unwrap_or_else(|e| e.into_inner()).take();
        stop.is_some_and(|stop| stop.send(()).is_ok())
    }

    fn stoppable(&self) -> oneshot::Receiver<()> {
        let (stop, stopped) = oneshot::channel();
        *self.stop.lock().unwrap_or_else(|e| e.into_inner()) = Some(stop);
        stopped
    }

    fn done(&self) {
        self.stop.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.busy.store(false, Ordering::Release);
    }
}

/// Runs each job of `queue` to its end on `driver`, asking `approvals`' page about calls, each
/// continuing its session and saved in it. `key_hint` is added to a failed run's end when the
/// model's key is missing.
pub async fn serve(
    mut driver: Driver,
    runs: Arc<Runs>,
    approvals: Arc<Approvals>,
    mut queue: mpsc::Receiver<Queued>,
    key_hint: Option<String>,
    memory: Memory,
) {
    while let Some(Queued { job, stopped }) = queue.recv().await {
        let conversation = match &job.session {
            Some(name) => {
                let secrets = memory.secrets.clone();
                match Conversation::resume(memory.store.clone(), name, secrets).await {
                    Ok(conversation) => Some(conversation),
                    Err(why) => {
                        // Not named: a name refused for holding a secret would carry it back.
                        let why = format!("the session cannot be read: {why}");
                        let _ = job.events.send(unread(&why));
                        runs.done();
                        continue;
                    }
                }
            }
            None => None,
        };
        let prior = conversation.as_ref().map(Conversation::prior);
        if let Some(prior) = &prior {
            let _ = job.events.send(json!({
                "type": "session", "name": job.session, "earlier_turns": prior.history.len(),
            }));
        }
        driver.set_prior(prior.unwrap_or_default());
        let started = chrono::Utc::now().timestamp_millis();
        let (report, step_seconds) = run(&driver, &approvals, stopped, &job).await;
        let mut end = end(&report, step_seconds, key_hint.as_deref());
        if let Some(conversation) = &conversation {
            match conversation.save(&job.task, started, &report).await {
                Ok(run) => end["saved"] = json!({"session": conversation.name(), "run": run.id}),
                Err(why) => end["not_saved"] = json!(format!("the run was not saved: {why}")),
            }
        }
        let _ = job.events.send(end);
        runs.done();
    }
}

/// One run of `job` on `driver`, cancelled when its page goes away or Stop is pressed; its
/// report, and the seconds its last step took.
async fn run(
    driver: &Driver,
    approvals: &Approvals,
    stopped: oneshot::Receiver<()>,
    job: &Job,
) -> (RunReport, f64) {
    approvals.watch(Some(job.events.clone()));
    let mut watcher = PageWatcher::new(job.events.clone());
    let page = job.events.clone();
    let cancel = async move {
        tokio::select! {
            () = page.closed() => {}
            _ = stopped => {}
        }
    };
    let report = driver.run_until(&job.task, &mut watcher, cancel).await;
    approvals.watch(None);
    (report, watcher.step_seconds())
}

/// The end of a run that could not start: its session could not be read.
fn unread(why: &str) -> Value {
    json!({
        "type": "end", "answer": why, "success": false, "termination": "failure",
        "iterations": 0, "seconds": 0, "errors": [{"source": "memory", "error": why}],
    })
}

/// The run's last event: the answer or why there is none, the totals, the errors on the way.
fn end(report: &RunReport, last_step_seconds: f64, hint: Option<&str>) -> Value {
    json!({
        "type": "end",
        "answer": report.answer,
        "answer_json": report.answer_json,
        "success": report.success,
        "termination": report.termination_reason,
        "iterations": report.iterations,
        "tokens": report.token_usage,
        "seconds": report.execution_time,
        "last_step_seconds": last_step_seconds,
        "confidence": report.confidence,
        "errors": report.error_history,
        "hint": hint,
    })
}
