//! The loop's events as the page reads them: each [`Watcher`] callback becomes one JSON object
//! with a `type` (`waiting`, `thought_piece`, `thought`, `repair`, `action`, `approval`, `observation`,
//! `context`, `plan`, `evaluation`, `step`, `tools_changed`), sent down the run's stream.

use std::time::Instant;

use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedSender;

use crate::driver::approval::Decision;
use crate::driver::observation;
use crate::driver::report::StepRecord;
use crate::driver::watcher::Watcher;

/// Where a run's events go: the page's stream, one JSON object each.
pub type Events = UnboundedSender<Value>;

/// The most of one observation sent to the page; the run's report keeps it whole.
const MAX_SHOWN_BYTES: usize = 1024 * 1024;

/// Sends what the loop does to the page as it happens.
pub struct PageWatcher {
    events: Events,
    /// When the step under way was sent.
    step_started: Instant,
}

impl PageWatcher {
    pub fn new(events: Events) -> Self {
        Self {
            events,
            step_started: Instant::now(),
        }
    }

    /// Seconds since the step under way was sent.
    pub fn step_seconds(&self) -> f64 {
        self.step_started.elapsed().as_secs_f64()
    }

    fn send(&self, event: Value) {
        // A page that went away ends the run (see the runner): nothing is lost here.
        let _ = self.events.send(event);
    }
}

impl Watcher for PageWatcher {
    fn waiting(&mut self, iteration: u32) {
        self.step_started = Instant::now();
        self.send(json!({"type": "waiting", "iteration": iteration}));
    }

    fn thought_piece(&mut self, iteration: u32, piece: &str) {
        self.send(json!({"type": "thought_piece", "iteration": iteration, "text": piece}));
    }

    fn thought(&mut self, iteration: u32, thought: &str) {
        self.send(json!({"type": "thought", "iteration": iteration, "text": thought}));
    }

    fn repairing(&mut self, iteration: u32, reason: &str) {
        self.send(json!({"type": "repair", "iteration": iteration, "reason": reason}));
    }

    fn warning(&mut self, iteration: u32, text: &str) {
        self.send(json!({"type": "warning", "iteration": iteration, "text": text}));
    }

    fn action(&mut self, iteration: u32, tool: &str, args: &Value) {
        self.send(json!({"type": "action", "iteration": iteration, "tool": tool, "args": args}));
    }

    fn observation(&mut self, iteration: u32, text: &str) {
        let shown = observation::cut(text, MAX_SHOWN_BYTES);
        self.send(json!({
            "type": "observation", "iteration": iteration, "text": shown, "bytes": text.len(),
        }));
    }

    fn tools_changed(&mut self, note: &str) {
        self.send(json!({"type": "tools_changed", "text": note}));
    }

    fn approval(&mut self, iteration: u32, tool: &str, decision: &Decision) {
        let (reason, arguments) = match decision {
            Decision::Deny(reason) => (Some(reason.as_str()), None),
            Decision::Edit(arguments) => (None, Some(arguments)),
            Decision::Approve => (None, None),
        };
        self.send(json!({
            "type": "approval", "iteration": iteration, "tool": tool,
            "decision": decision.name(), "reason": reason, "arguments": arguments,
        }));
    }

    fn context(&mut self, iteration: u32, report: &Value) {
        self.send(json!({"type": "context", "iteration": iteration, "report": report}));
    }

    fn plan(&mut self, plan: &Value) {
        self.send(json!({"type": "plan", "plan": plan}));
    }

    fn evaluation(&mut self, evaluation: &Value, answer: &str) {
        let event = json!({"type": "evaluation", "evaluation": evaluation, "answer": answer});
        self.send(event);
    }

    fn stop_after(&mut self, step: &StepRecord) -> bool {
        self.send(json!({
            "type": "step", "iteration": step.iteration, "tool": step.action,
            "tokens": step.token_usage, "seconds": self.step_seconds(),
        }));
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_callback_is_one_event_with_its_type() {
        let (events, mut read) = tokio::sync::mpsc::unbounded_channel();
        let mut watcher = PageWatcher::new(events);
        watcher.waiting(1);
        watcher.thought_piece(1, "lo");
        watcher.repairing(1, "no tool named x");
        watcher.action(1, "read_file", &json!({"path": "a"}));
        watcher.approval(1, "read_file", &Decision::Deny("no".into()));
        watcher.observation(1, &"x".repeat(MAX_SHOWN_BYTES + 10));
        let mut types = Vec::new();
        while let Ok(event) = read.try_recv() {
            types.push(event["type"].as_str().unwrap_or_default().to_string());
            if event["type"] == "repair" {
                assert_eq!(event["reason"], "no tool named x");
            }
            if event["type"] == "approval" {
                assert_eq!(event["decision"], "denied");
                assert_eq!(event["reason"], "no");
            }
            if event["type"] == "observation" {
                assert_eq!(event["bytes"], MAX_SHOWN_BYTES + 10);
                assert!(event["text"].as_str().is_some_and(|t| t.contains("[cut:")));
            }
        }
        assert_eq!(
            types,
            [
                "waiting",
                "thought_piece",
                "repair",
                "action",
                "approval",
                "observation"
            ]
        );
    }
}
