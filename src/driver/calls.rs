//! The calls of one step: each asked about where the approval policy says so, run unless
//! denied (or run with the arguments the user edited), and sent back as a `tool_observation`
//! turn answering the call's id; a call repeated too many times in a row ends the loop.

use serde_json::{json, Value};

use super::approval::{self, ApprovalRequest, Decision};
use super::observation;
use super::registry::ToolOutcome;
use super::report::{record_tool_error, StepRecord, Termination};
use super::run::{Driver, Next, Progress};
use super::watcher::Watcher;

/// A call the loop asked about and ran (or did not, when denied).
struct Ran {
    observation: String,
    failed: bool,
    /// The arguments it ran with.
    args: Value,
    approval: Option<&'static str>,
    proposed_args: Option<Value>,
}

impl Ran {
    fn failed(observation: String, args: Value, approval: Option<&'static str>) -> Self {
        Self {
            observation,
            failed: true,
            args,
            approval,
            proposed_args: None,
        }
    }
}

impl Driver {
    /// Runs every proposed call and sends the results back, each answering its call's id.
    pub(super) async fn act(
        &self,
        reply: &Value,
        iteration: u32,
        thought: &str,
        progress: &mut Progress,
        watcher: &mut dyn Watcher,
    ) -> Next {
        let calls: Vec<Value> = match reply["parallel_actions"].as_array() {
            Some(all) if !all.is_empty() => all.clone(),
            _ => vec![reply["action_details"].clone()],
        };
        let mut history = reply["updated_conversation_history"].clone();
        for call in &calls {
            let tool = call["tool_name"].as_str().unwrap_or_default().to_string();
            let args = call["tool_args"].clone();
            watcher.action(iteration, &tool, &args);
            if let Some(stalled) = self.stalled(progress, &tool, &args) {
                return stalled;
            }
            let ran = match self
                .run_call(iteration, &tool, args, progress, watcher)
                .await
            {
                Ok(ran) => ran,
                Err(end) => return end,
            };
            let (observation, failed) = (ran.observation, ran.failed);
            watcher.observation(iteration, &observation);
            if failed {
                self.adjust_plan(&observation, progress, watcher).await;
            }
            let step = StepRecord {
                iteration,
                thought: thought.to_string(),
                action: tool,
                args: ran.args,
                observation: observation.clone(),
                timestamp: chrono::Utc::now().to_rfc3339(),
                token_usage: reply["usage"].clone(),
                approval: ran.approval,
                proposed_args: ran.proposed_args,
            };
            let stop = watcher.stop_after(&step);
            progress.report.steps.push(step);
            if stop {
                return Next::End(Termination::Custom, "stopped by the caller".into());
            }
            if let Some(turns) = history.as_array_mut() {
                // The report keeps the whole observation; the service gets what it accepts.
                let sent = observation::cut(&observation, observation::MAX_SENT_BYTES);
                turns.push(json!({
                    "role": "tool_observation", "content": sent,
                    "tool_call_id": call["tool_call_id"], "is_error": failed,
                }));
            }
        }
        progress.history = history;
        progress.query.clear();
        // The service counts the steps down; the loop's own count bounds what it says, so a
        // service that answers more steps than were left cannot run the loop past its limit.
        let told = reply["iterations_remaining"].as_u64().unwrap_or(0);
        let own = progress.iterations_left.saturating_sub(1);
        progress.iterations_left = u32::try_from(told).unwrap_or(u32::MAX).min(own);
        if progress.iterations_left == 0 {
            return Next::End(
                Termination::MaxIterations,
                "the loop reached its step limit before an answer".into(),
            );
        }
        Next::Continue
    }

    /// Asks about the call where the policy says so, then runs it unless it was denied; `Err`
    /// is the loop's end (the model's answer given through a tool).
    async fn run_call(
        &self,
        iteration: u32,
        tool: &str,
        args: Value,
        progress: &mut Progress,
        watcher: &mut dyn Watcher,
    ) -> Result<Ran, Next> {
        let decision = self.decision(iteration, tool, &args).await;
        if let Some(decision) = &decision {
            watcher.approval(iteration, tool, decision);
        }
        let approval = decision.as_ref().map(Decision::name);
        let (args, proposed_args) = match decision {
            Some(Decision::Deny(reason)) => {
                let observation = approval::denial(&reason);
                return Ok(Ran::failed(observation, args, approval));
            }
            Some(Decision::Edit(edited)) => (edited, Some(args)),
            _ => (args, None),
        };
        *progress
            .report
            .tool_usage
            .entry(tool.to_string())
            .or_default() += 1;
        let registry = self.registry.read().await;
        let executed = progress.executor.run(&registry, tool, &args).await;
        drop(registry);
        if let Some(why) = &executed.recovered_from {
            record_tool_error(&mut progress.report, tool, why, executed.retries, true);
        }
        let secrets = self.known_secrets();
        let (observation, failed) = match scrubbed(executed.outcome, &secrets) {
            ToolOutcome::Done(text) => (text, false),
            ToolOutcome::Failed(why) => {
                record_tool_error(&mut progress.report, tool, &why, executed.retries, false);
                (why, true)
            }
            ToolOutcome::Submitted { answer, confidence } => {
                progress.report.confidence = confidence;
                // Given on the last step, where the model was told to answer now: as a
                // `forced_final` answer is, it ends the loop as `max_iterations`.
                let last = progress.iterations_left <= 1;
                let ended = if last {
                    Termination::MaxIterations
                } else {
                    Termination::Success
                };
                return Err(Next::End(ended, answer));
            }
        };
        let observation = match &proposed_args {
            // The model still holds its own arguments: it is told what ran instead.
            Some(_) => format!("{}\n{observation}", approval::edit_note(&args, &secrets)),
            None => observation,
        };
        Ok(Ran {
            observation,
            failed,
            args,
            approval,
            proposed_args,
        })
    }

    /// The models' keys and the environment's secrets (an MCP token named by `*_TOKEN` among
    /// them).
    fn known_secrets(&self) -> Vec<String> {
        let s = &self.settings;
        let keys = s
            .key
            .iter()
            .chain(s.fallbacks.iter().filter_map(|f| f.key.as_ref()));
        super::memory::redact::secrets(keys.cloned())
    }

    /// The approver's decision on a call the policy asks about; `None` when it does not ask.
    async fn decision(&self, iteration: u32, tool: &str, args: &Value) -> Option<Decision> {
        let metadata = self.registry.read().await.get(tool)?.1.clone();
        if !self.settings.approval.asks(&metadata) {
            return None;
        }
        let request = ApprovalRequest {
            iteration,
            tool,
            args,
            metadata: &metadata,
        };
        Some(match &self.approver {
            Some(approver) => approver.decide(request).await,
            None => Decision::Deny(approval::NO_ONE_TO_ASK.into()),
        })
    }

    /// The loop's end when this call is the same as the last `stall_threshold - 1`.
    fn stalled(&self, progress: &mut Progress, tool: &str, args: &Value) -> Option<Next> {
        let key = args.to_string();
        let count = match &progress.last_call {
            Some((t, a, n)) if t == tool && *a == key => n + 1,
            _ => 1,
        };
        progress.last_call = Some((tool.to_string(), key, count));
        (count >= self.settings.stall_threshold.max(1)).then(|| {
            Next::End(
                Termination::Stalled,
                format!("the model called {tool} with the same arguments {count} times in a row"),
            )
        })
    }
}

/// A tool's outcome without any secret the driver knows: a tool (an MCP server that echoes its
/// environment, a file holding a key) may return one, and the observation is printed, kept in
/// the report and sent to the model.
fn scrubbed(outcome: ToolOutcome, secrets: &[String]) -> ToolOutcome {
    use super::memory::redact::scrubbed_text;
    match outcome {
        ToolOutcome::Done(text) => ToolOutcome::Done(scrubbed_text(&text, secrets)),
        ToolOutcome::Failed(why) => ToolOutcome::Failed(scrubbed_text(&why, secrets)),
        submitted => submitted,
    }
}
