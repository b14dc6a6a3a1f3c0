//! Fallbacks inside one step (`llm_config.fallbacks`): when the model fails in a way another
//! model can fix (a rate limit after the retries, an unavailable provider, a timeout, a
//! refusal, a prompt too long for its window when the next window is bigger), the step is
//! made again for the next model, from a copy of the request kept for it, exactly as a step
//! sent to that model would be (its counter, budget, tool mode and its own state), and with
//! its own key; all within the step's one deadline. A failure no model can fix (a rejected key,
//! a request the provider refuses as formed, invalid output) is answered at once.
//!
//! Streaming: a model that fails before anything of its output was sent to the client is
//! followed by the next, unseen but for the answer's `fallback_attempts`; once output has been
//! streamed, the failure is the step's (a client cannot take back what it showed).

use std::collections::VecDeque;
use std::future::Future;

use super::error::{FailedAttempt, StepError, StepErrorKind};
use super::input::{Fallback, LlmConfig, StepInput};
use super::live::{Live, LiveSender};
use super::output::StepOutput;
use super::usage::{less, Billed};
use crate::llm::{LlmError, Provider};

/// Events between one model's step and the client's stream, while that model may still fail
/// over to the next.
const FORWARDED_EVENTS: usize = 16;

/// No model is asked with less of the step's deadline left: it could only time out.
const LEAST_TIME_LEFT: std::time::Duration = std::time::Duration::from_secs(1);

/// The models tried so far, kept outside the step's deadline: a step cut short still reports
/// which models failed before.
#[derive(Default)]
pub(super) struct Attempts(std::sync::Mutex<Tried>);

#[derive(Default)]
struct Tried {
    /// The request named fallbacks: the answer reports its models.
    chained: bool,
    failed: Vec<FailedAttempt>,
    /// The model being asked, and the step's billed usage when it began.
    current: Option<(Provider, String, Option<crate::llm::Usage>)>,
}

impl Attempts {
    fn with<T>(&self, f: impl FnOnce(&mut Tried) -> T) -> Option<T> {
        self.0.lock().ok().map(|mut tried| f(&mut tried))
    }

    /// The step's result with its models reported: the failed ones (on an error, every model
    /// tried, the last one's error being the step's), and `usage` summed over all of them.
    /// A request without fallbacks is left as it was.
    pub(super) fn report(&self, result: &mut Result<StepOutput, StepError>, billed: &Billed) {
        let Some(tried) = self.with(std::mem::take) else {
            return;
        };
        if !tried.chained {
            return;
        }
        let Tried {
            mut failed,
            current,
            ..
        } = tried;
        let total = billed.get();
        match result {
            Ok(output) if !failed.is_empty() => {
                output.warnings.push(format!(
                    "{} model(s) of the chain failed before the one that answered (see model_used and fallback_attempts); usage sums every model's calls",
                    failed.len()
                ));
                output.usage = total;
                output.fallback_attempts = failed;
            }
            Ok(_) => {}
            Err(error) => {
                if let Some((provider, model, before)) = current {
                    failed.push(FailedAttempt {
                        provider,
                        model,
                        usage: less(total, before),
                        error: None,
                    });
                }
                if total.is_some() && !matches!(error.kind, StepErrorKind::ClientGone) {
                    error.usage = total.map(Box::new);
                }
                error.fallback_attempts = failed;
            }
        }
    }
}

/// Runs `step` with the request's model, then with each fallback in turn while the failure is
/// one the next model can fix. `step` is one whole step on the model its input names.
pub(super) async fn each_model<F, Fut>(
    mut input: Box<StepInput>,
    live: Option<LiveSender>,
    billed: &Billed,
    attempts: &Attempts,
    step: F,
) -> Result<StepOutput, StepError>
where
    F: Fn(Box<StepInput>, Option<LiveSender>) -> Fut,
    Fut: Future<Output = Result<StepOutput, StepError>>,
{
    let mut rest: VecDeque<Fallback> = std::mem::take(&mut input.fallbacks).into();
    if rest.is_empty() {
        return step(input, live).await;
    }
    attempts.with(|tried| tried.chained = true);
    let mut on_fallback = false;
    loop {
        input.falls_back = !rest.is_empty();
        // The request as it arrived, for the next model: this one's step consumes its own.
        let spare = input.falls_back.then(|| spare(&input));
        let before = billed.get();
        attempts.with(|tried| {
            tried.current = Some((input.llm.provider, input.llm.model.clone(), before));
        });
        let (result, streamed) = attempt(&step, input, live.as_ref(), spare.is_some()).await;
        let mut error = match result {
            Ok(output) => return Ok(output),
            Err(error) => error,
        };
        if let StepErrorKind::Llm(LlmError::Auth { fallback, .. }) = &mut error.kind {
            *fallback = on_fallback;
        }
        let Some(mut next_input) = spare else {
            return Err(error);
        };
        // Nothing shown yet, and time left for another model to answer.
        let left = next_input
            .deadline
            .saturating_duration_since(tokio::time::Instant::now());
        let next = match streamed || left < LEAST_TIME_LEFT {
            true => None,
            false => next_model(&error, &next_input.llm, &mut rest),
        };
        let Some(next) = next else {
            return Err(error);
        };
        // This model failed: its entry, and the chain goes on with the next.
        let usage = less(billed.get(), before);
        attempts.with(|tried| {
            if let Some((provider, model, _)) = tried.current.take() {
                tried.failed.push(FailedAttempt {
                    provider,
                    model,
                    usage,
                    error: Some(Box::new(without_spend(error))),
                });
            }
        });
        next_input.llm = next.llm;
        next_input.key = next.key;
        input = next_input;
        on_fallback = true;
    }
}

/// The error as a failed model's entry reports it: its usage is the entry's own.
fn without_spend(mut error: StepError) -> StepError {
    error.usage = None;
    error.context_report = None;
    error
}

/// One model's step. While a fallback is left, a streamed step's events pass through here, to
/// tell whether any output reached the client (then it cannot fall back).
async fn attempt<F, Fut>(
    step: &F,
    input: Box<StepInput>,
    live: Option<&LiveSender>,
    may_fall_back: bool,
) -> (Result<StepOutput, StepError>, bool)
where
    F: Fn(Box<StepInput>, Option<LiveSender>) -> Fut,
    Fut: Future<Output = Result<StepOutput, StepError>>,
{
    // Boxed: the loop's future would otherwise keep room for a whole step in each state.
    match live {
        Some(live) if may_fall_back => {
            let (sender, events) = tokio::sync::mpsc::channel(FORWARDED_EVENTS);
            let run = Box::pin(step(input, Some(sender)));
            futures_util::future::join(run, forward(events, live)).await
        }
        live => (Box::pin(step(input, live.cloned())).await, false),
    }
}

/// Passes one model's events on to the client; whether any was output (not the bare notice that
/// the provider accepted the call). A client gone ends the passing, and so that model's step.
async fn forward(mut events: tokio::sync::mpsc::Receiver<Live>, live: &LiveSender) -> bool {
    let mut streamed = false;
    while let Some(event) = events.recv().await {
        streamed |= !matches!(event, Live::Started);
        if live.send(event).await.is_err() {
            break;
        }
    }
    streamed
}

/// The model to try after `error` on `current`: the next one when any model may do better; for
/// a prompt too long, the next one whose prompt budget is bigger (those between are skipped:
/// they would refuse it too); none when no model can fix it.
fn next_model(
    error: &StepError,
    current: &LlmConfig,
    rest: &mut VecDeque<Fallback>,
) -> Option<Fallback> {
    match fixable(&error.kind)? {
        Fix::Any => rest.pop_front(),
        Fix::Bigger => {
            let budget = current.prompt_budget();
            while let Some(next) = rest.pop_front() {
                if next.llm.prompt_budget() > budget {
                    return Some(next);
                }
            }
            None
        }
    }
}

enum Fix {
    /// Any other model may answer.
    Any,
    /// Only a model with room for a longer prompt.
    Bigger,
}

/// Whether another model can fix the failure. A rejected key, a request refused as formed, a
/// model that does not exist, invalid output, the deadline and the service's own overload are
/// answered as they are.
fn fixable(kind: &StepErrorKind) -> Option<Fix> {
    match kind {
        StepErrorKind::ContextOverflow(_) | StepErrorKind::Llm(LlmError::ContextTooLong { .. }) => {
            Some(Fix::Bigger)
        }
        StepErrorKind::Llm(
            LlmError::RateLimited { .. }
            | LlmError::Unavailable { .. }
            | LlmError::Untrusted { .. }
            | LlmError::Timeout { .. }
            | LlmError::Refused { .. },
        ) => Some(Fix::Any),
        _ => None,
    }
}

/// A copy of the request for the next model: everything but the key (the next model brings its
/// own) and the fallbacks (the chain holds them).
fn spare(input: &StepInput) -> Box<StepInput> {
    Box::new(StepInput {
        session_id: input.session_id.clone(),
        user_query: input.user_query.clone(),
        history: input.history.clone(),
        context: input.context.clone(),
        unresolved: input.unresolved.clone(),
        tools_segment: input.tools_segment.clone(),
        llm: input.llm.clone(),
        key: None,
        iterations_left: input.iterations_left,
        mock_response: input.mock_response.clone(),
        received_at: input.received_at.clone(),
        context_order: input.context_order.clone(),
        max_observation_tokens: input.max_observation_tokens,
        history_strategy: input.history_strategy,
        conversation_summary: input.conversation_summary.clone(),
        dry_run: input.dry_run,
        project_id: input.project_id.clone(),
        settings: input.settings.clone(),
        workspace_read: input.workspace_read,
        react: input.react.clone(),
        tools: input.tools.clone(),
        deadline: input.deadline,
        // The request's own record: the next model's phases add to it.
        timings: input.timings.clone(),
        notices: Vec::new(),
        // Found again by the step that runs the copy.
        loop_notice: None,
        fallbacks: Vec::new(),
        falls_back: false,
        reading: input.reading,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Provider;

    fn config(token_limit: u32) -> LlmConfig {
        LlmConfig {
            provider: Provider::OPENAI,
            model: format!("m-{token_limit}"),
            token_limit,
            reserved_output_tokens: 100,
            temperature: None,
            tokenizer: None,
            tool_mode: super::super::input::ToolMode::Text,
            base_url: None,
            reasoning_effort: None,
            prompt_cache: true,
            prompt_cache_ttl: None,
            strict_tools: false,
        }
    }

    fn chain(limits: &[u32]) -> VecDeque<Fallback> {
        limits
            .iter()
            .map(|&l| Fallback {
                llm: config(l),
                key: None,
            })
            .collect()
    }

    fn error(kind: StepErrorKind) -> StepError {
        StepError::from(kind)
    }

    #[test]
    fn a_rate_limit_goes_to_the_next_model_whatever_its_window() {
        let mut rest = chain(&[1000, 9000]);
        let limited = error(StepErrorKind::Llm(LlmError::RateLimited {
            provider: Provider::OPENAI,
            message: "slow down".into(),
            retry_after: None,
            retryable: true,
        }));
        let next = next_model(&limited, &config(8000), &mut rest);
        assert_eq!(next.map(|n| n.llm.model).as_deref(), Some("m-1000"));
        assert_eq!(rest.len(), 1);
    }

    #[test]
    fn a_prompt_too_long_skips_to_the_first_bigger_window() {
        let mut rest = chain(&[1000, 8000, 9000, 500]);
        let overflow = error(StepErrorKind::ContextOverflow(
            super::super::context::budget::Overflow {
                budget: 7900,
                required: 8500,
            },
        ));
        let next = next_model(&overflow, &config(8000), &mut rest);
        assert_eq!(next.map(|n| n.llm.model).as_deref(), Some("m-9000"));
        assert_eq!(rest.len(), 1, "the smaller ones were skipped");
        let mut smaller = chain(&[1000]);
        assert!(next_model(&overflow, &config(8000), &mut smaller).is_none());
    }

    #[test]
    fn a_rejected_key_or_request_does_not_fall_back() {
        for kind in [
            StepErrorKind::Llm(LlmError::Auth {
                provider: Provider::OPENAI,
                status: 401,
                fallback: false,
            }),
            StepErrorKind::Llm(LlmError::Rejected {
                provider: Provider::OPENAI,
                status: 400,
                message: "bad".into(),
            }),
            StepErrorKind::InvalidOutput {
                why: "x".into(),
                raw_output: "y".into(),
            },
            StepErrorKind::Deadline(std::time::Duration::from_secs(1)),
        ] {
            let mut rest = chain(&[9000]);
            assert!(next_model(&error(kind), &config(8000), &mut rest).is_none());
            assert_eq!(rest.len(), 1);
        }
    }
}
