//! What the loop tells whoever watches it (the terminal's progress, the page), as it goes.

use serde_json::Value;

use super::approval::Decision;
use super::report::StepRecord;

/// What the loop tells whoever watches it, as it goes.
pub trait Watcher {
    /// A step was sent; the model is at work.
    fn waiting(&mut self, _iteration: u32) {}
    /// A piece of the thought as it forms (streamed steps only).
    fn thought_piece(&mut self, _iteration: u32, _piece: &str) {}
    /// The step's whole thought.
    fn thought(&mut self, _iteration: u32, _thought: &str) {}
    /// The output streamed so far was invalid (`reason`): the service asks the model again in a
    /// repair round, whose thought streams anew.
    fn repairing(&mut self, _iteration: u32, _reason: &str) {}
    /// The service failed the step in a way it says a retry can help (`why`): it is sent again
    /// after `wait`.
    fn retrying(&mut self, _iteration: u32, _why: &str, _wait: std::time::Duration) {}
    fn action(&mut self, _iteration: u32, _tool: &str, _args: &Value) {}
    fn observation(&mut self, _iteration: u32, _text: &str) {}
    /// A source's tools were listed again (or could not be): what changed.
    fn tools_changed(&mut self, _note: &str) {}
    /// A call was asked about, and this was decided.
    fn approval(&mut self, _iteration: u32, _tool: &str, _decision: &Decision) {}
    /// One of the step's `warnings`: what the service says the step did that the caller should
    /// know (its loop guard told the model it repeats itself, a field meant nothing …).
    fn warning(&mut self, _iteration: u32, _text: &str) {}
    /// The step's `context_report`: what the service included, cut and dropped to fit.
    fn context(&mut self, _iteration: u32, _report: &Value) {}
    /// The plan the loop follows (`--plan`), first made or adjusted after an observation.
    fn plan(&mut self, _plan: &Value) {}
    /// The evaluation of the candidate `answer` (`--reflect`).
    fn evaluation(&mut self, _evaluation: &Value, _answer: &str) {}
    /// `true` ends the loop with `custom`.
    fn stop_after(&mut self, _step: &StepRecord) -> bool {
        false
    }
}

/// Watches nothing.
pub struct Quiet;
impl Watcher for Quiet {}
