//! Fitting the prompt into the budget: the shape the tools leave to the messages, the build
//! (on the CPU pool unless the request is small, reading the workspace first), the summary that
//! stands for omitted turns, and the warnings about what was left out.

use super::answer_schema::FINAL_ANSWER_TOOL;
use super::context::budget::{self, Candidates, Overflow};
use super::context::clearing;
use super::context::tokens::TokenCounter;
use super::context::{self, ContextItem, ContextSource, Excluded};
use super::context::{prompt, summary, workspace};
use super::error::{StepError, StepErrorKind};
use super::input::{ConversationSummary, HistoryStrategy, StepInput};
use super::parse;
use super::usage::Billed;
use crate::llm::{LlmClients, Usage};
use crate::runtime::cpu;

/// What a prompt is fitted into, for one counter: whether the tools go natively, the budget
/// their definitions leave to the messages, and the room held for omitted turns.
pub(super) struct Shape {
    pub(super) native_tools: Vec<crate::llm::ToolSpec>,
    native: bool,
    pub(super) budget: u32,
    pub(super) tools_tokens: u32,
    messages_budget: u32,
    omission_reserve: u32,
}

impl Shape {
    /// Whether the tools go through the provider's own tool calling.
    pub(super) fn native(&self) -> bool {
        self.native
    }

    pub(super) fn of(input: &StepInput, counter: &TokenCounter) -> Result<Self, StepError> {
        let budget = input.llm.prompt_budget();
        let omission_reserve = match input.history_strategy {
            HistoryStrategy::Omit => budget::marker_reserve(counter),
            HistoryStrategy::Summarize => {
                summary::reserve(budget).max(budget::marker_reserve(counter))
            }
        };
        let native = input
            .llm
            .tool_mode
            .is_native(input.llm.provider, input.tools.callable_natively());
        let native_tools = if native {
            let mut specs = input.tools.specs();
            specs.extend(answer_tool(input));
            specs
        } else {
            Vec::new()
        };
        // Tool definitions sent beside the messages take their share of the budget first.
        let tools_tokens = native_tools_tokens(counter, &native_tools);
        let Some(messages_budget) = budget.checked_sub(tools_tokens) else {
            return Err(StepErrorKind::ContextOverflow(Overflow {
                budget,
                required: tools_tokens,
            })
            .into());
        };
        Ok(Self {
            native_tools,
            native,
            budget,
            tools_tokens,
            messages_budget,
            omission_reserve,
        })
    }
}

/// A prompt fitted into the budget, with what fitting it said and spent.
pub(super) struct Built {
    pub(super) prompt: budget::Prompt,
    pub(super) warnings: Vec<String>,
    pub(super) summary_usage: Option<Usage>,
    pub(super) conversation_summary: Option<ConversationSummary>,
}

/// A fitted prompt, or why it does not fit, with the input back either way; the outer error is
/// the CPU pool's, which keeps nothing.
pub(super) type Fitting = Result<(Box<StepInput>, Result<Built, StepError>), StepError>;

/// Fits the prompt (on the CPU pool unless it is small), summarising omitted turns when asked.
pub(super) async fn fit_prompt(
    input: Box<StepInput>,
    counter: &TokenCounter,
    shape: &Shape,
    keep_context: bool,
    llm: &LlmClients,
    billed: &Billed,
    earlier: Option<ConversationSummary>,
) -> Fitting {
    let traced = crate::telemetry::traces::phase(|| {
        tracing::trace_span!(target: crate::telemetry::traces::TARGET, "context fit",
            budget = i64::from(shape.budget), used = tracing::field::Empty)
    });
    let times = input.timings.clone();
    let fit_time = times.timer(crate::telemetry::timing::Phase::Fit);
    let (input, fitted) = fit_messages(input, counter, shape, keep_context).await?;
    drop(fit_time);
    let fitted = match fitted {
        Ok(fitted) => fitted,
        Err(o) => {
            let overflow = Overflow {
                budget: shape.budget,
                required: o.required + shape.tools_tokens,
            };
            return Ok((input, Err(StepErrorKind::ContextOverflow(overflow).into())));
        }
    };
    let mut warnings = budget_warnings(&fitted, &input.unresolved);
    warnings.extend(foreign_states(&input));
    let omitted = Omitted {
        turns: fitted.omitted_turns,
        room: fitted.omission_room(),
        reserve: shape.omission_reserve,
        earlier,
    };
    let summarized = summarize_omitted(llm, &input, counter, omitted, billed, &mut warnings);
    let (summary_usage, conversation_summary) = summarized.await;
    let mut prompt = fitted.finish(
        counter,
        conversation_summary.as_ref().map(|s| s.text.as_str()),
        counter.encoding(),
    );
    prompt.report.budget = shape.budget;
    prompt.report.used += shape.tools_tokens;
    traced.record("used", i64::from(prompt.report.used));
    let built = Built {
        prompt,
        warnings,
        summary_usage,
        conversation_summary,
    };
    Ok((input, Ok(built)))
}

/// Reads the workspace and fits the prompt's messages into the shape's budget, on the CPU pool
/// unless the request is small.
async fn fit_messages(
    input: Box<StepInput>,
    counter: &TokenCounter,
    shape: &Shape,
    keep_context: bool,
) -> Result<(Box<StepInput>, Result<budget::Fitted, Overflow>), StepError> {
    // Tokenising megabytes of context is CPU work: off the async workers, one build per core.
    // Each thread that tokenises keeps its own regex cache (hundreds of KiB), so thousands of
    // steps in flight must not mean thousands of threads.
    let input_size = PromptInput::of(&input);
    let build = {
        let counter = *counter;
        let (native, messages_budget) = (shape.native, shape.messages_budget);
        let omission_reserve = shape.omission_reserve;
        move || {
            let how = BuildHow {
                native,
                messages_budget,
                omission_reserve,
                keep_context,
            };
            build_prompt(input, counter, how)
        }
    };
    // A small request without a workspace to read builds in microseconds once its counts are
    // cached: the hop to the CPU pool (two thread wake-ups) would cost more than the build.
    Ok(if inline_build(&input_size) {
        build()
    } else {
        cpu::run(build).await.map_err(StepErrorKind::Internal)?
    })
}

/// The turns a fitted prompt left out, and what may stand for them.
struct Omitted {
    turns: usize,
    /// The room the prompt kept for what stands for them.
    room: u32,
    reserve: u32,
    /// The summary made by an earlier fit of this step, if any.
    earlier: Option<ConversationSummary>,
}

/// The summary that stands for the omitted turns, and what making it billed, when the request
/// asks for one (`history_strategy: "summarize"`); when none can be made the turns are marked,
/// with a warning.
async fn summarize_omitted(
    llm: &LlmClients,
    input: &StepInput,
    counter: &TokenCounter,
    omitted: Omitted,
    billed: &Billed,
    warnings: &mut Vec<String>,
) -> (Option<Usage>, Option<ConversationSummary>) {
    let summarize = omitted.earlier.is_none()
        && omitted.room > 0
        && input.history_strategy == HistoryStrategy::Summarize;
    if !summarize {
        return (None, omitted.earlier);
    }
    if input.mock_response.is_some() || input.dry_run {
        warnings.push("history_strategy summarize makes a model call; with mock_response or dry_run the omitted turns are marked instead".into());
        return (None, None);
    }
    // Boxed, like the streaming calls below: a future holds room for its largest state,
    // and thousands of plain steps wait on the upstream at once.
    let summarize = summary::summarize(llm, input, counter, omitted.turns, omitted.reserve);
    match Box::pin(summarize).await {
        Ok((made, usage)) => {
            billed.add(usage);
            (usage, Some(made))
        }
        Err(e) => {
            warnings.push(format!("the earlier conversation could not be summarised ({e}); the omitted turns are marked instead"));
            (None, None)
        }
    }
}

/// What decides where a prompt is built: how much text it tokenizes, and whether it reads files.
struct PromptInput {
    bytes: usize,
    reads_files: bool,
}

impl PromptInput {
    pub(super) fn of(input: &StepInput) -> Self {
        let context: usize = input.context.iter().map(|i| i.content.len()).sum();
        let history: usize = input.history.iter().map(|t| t.content.len()).sum();
        Self {
            bytes: context + history + input.tools_segment.len() + input.user_query.len(),
            reads_files: input.settings.workspace.is_some() && !input.workspace_read,
        }
    }
}

/// The old tool results to send as placeholders, unless none are asked for or the provider
/// clears them itself (`server_side`, where it can).
fn cleared_results(input: &StepInput, counter: &TokenCounter) -> Vec<clearing::Cleared> {
    match input.react.clear_tool_results {
        Some(settings) if !provider_clears(input) => {
            clearing::cleared(&input.history, settings, counter, prompt::tool_output)
        }
        _ => Vec::new(),
    }
}

/// Whether the provider clears old tool results itself, as the request asked: Anthropic's
/// context editing.
pub(super) fn provider_clears(input: &StepInput) -> bool {
    input
        .react
        .clear_tool_results
        .is_some_and(|s| s.server_side && input.llm.provider.api().clears_tool_results())
}

/// The `final_answer` tool a native step offers with a final answer schema, unless the client
/// declared a tool of that name itself.
fn answer_tool(input: &StepInput) -> Option<crate::llm::ToolSpec> {
    let schema = input.react.final_answer.as_ref()?;
    (!input.tools.has(FINAL_ANSWER_TOOL)).then(|| schema.tool())
}

/// The tools a native request sends renamed: the client's, then the answer tool.
pub(super) fn sent_names(input: &StepInput) -> crate::llm::wire_names::WireNames {
    let service = answer_tool(input).map(|_| FINAL_ANSWER_TOOL);
    let names: Vec<&str> = input.tools.declared_names().chain(service).collect();
    crate::llm::wire_names::WireNames::of(names.iter().copied())
}

/// Prompts under this many bytes of text are built on the HTTP worker: at most a millisecond or
/// two when nothing is cached, microseconds when it is.
const INLINE_PROMPT_BYTES: usize = 32 * 1024;

fn inline_build(size: &PromptInput) -> bool {
    !size.reads_files && size.bytes <= INLINE_PROMPT_BYTES
}

/// How one build fits the prompt.
struct BuildHow {
    native: bool,
    messages_budget: u32,
    omission_reserve: u32,
    /// The context stays in the input for a second fit.
    keep_context: bool,
}

/// Reads the workspace's files into the input, then fits the prompt into the budget. The input
/// goes along and comes back: the build may run on the CPU pool, which must own what it reads.
fn build_prompt(
    mut input: Box<StepInput>,
    counter: TokenCounter,
    how: BuildHow,
) -> (Box<StepInput>, Result<budget::Fitted, budget::Overflow>) {
    // Once: a second fit must not read the files again.
    if !std::mem::replace(&mut input.workspace_read, true) {
        let settings = input.settings.clone();
        if let Some(ws) = &settings.workspace {
            resolve_from_workspace(ws, &mut input);
        }
    }
    let mut head = system_head(&input.tools_segment, &input.react.tags, how.native);
    if let Some(schema) = &input.react.final_answer {
        head = format!(
            "{head}{}",
            schema.prompt_section(&input.react.tags.final_answer)
        )
        .into();
    }
    let origin = input.llm.state_origin();
    let cleared = cleared_results(&input, &counter);
    // Only the last step has the notice (made there: with an answer tool it is a format),
    // naming the answer tool as the model sees it.
    let last_step = (input.iterations_left == 1).then(|| {
        let tool = input.react.answer_tool.as_deref();
        let renamed = match how.native {
            true => sent_names(&input),
            false => Default::default(),
        };
        prompt::last_step(tool.map(|t| renamed.seen(t)))
    });
    let candidates = Candidates {
        head: &head,
        items: &input.context,
        unresolved: &input.unresolved,
        history: &input.history,
        query: &input.user_query,
        order: &input.context_order,
        max_observation_tokens: input.max_observation_tokens,
        omission_reserve: how.omission_reserve,
        tags: &input.react.tags,
        native: how.native,
        notice: match &last_step {
            Some(notice) => Some(notice),
            None => input.loop_notice.as_deref(),
        },
        state_origin: Some(&origin),
        cleared: &cleared,
    };
    let fitted = budget::fit(&counter, how.messages_budget, &candidates);
    // The prompt now holds what fitted; unless it may be fitted again, the step need not keep
    // the context (up to the body limit) a second time while it waits on the model.
    if !how.keep_context {
        input.context = Vec::new();
        input.tools_segment = String::new();
    }
    (input, fitted)
}

/// The system prompt's head: the same at every step of a loop, so worked out once per worker.
fn system_head(tools_segment: &str, tags: &parse::Tags, native: bool) -> std::sync::Arc<str> {
    thread_local! {
        static HEADS: std::cell::RefCell<crate::runtime::memo::Memo<std::sync::Arc<str>>> =
            const { std::cell::RefCell::new(crate::runtime::memo::Memo::new()) };
    }
    let key = [
        tools_segment,
        &tags.thought,
        &tags.action,
        &tags.observation,
        &tags.final_answer,
        if native { "native" } else { "text" },
    ];
    crate::runtime::memo::remembered(&HEADS, &key, || {
        prompt::system_head(tools_segment, tags, native).into()
    })
}

/// Tokens the tool definitions sent through native tool calling take. Providers render them into
/// the prompt in their own way, which is not published: the JSON of each definition plus a few
/// tokens of framing is the estimate. A model whose count is approximate (a local server's
/// chat template, a hosted vendor's) also gets the instructions its template writes around the
/// tools: Qwen's adds about 130 tokens, which made the count 0.8× the server's.
fn native_tools_tokens(counter: &TokenCounter, tools: &[crate::llm::ToolSpec]) -> u32 {
    const PER_TOOL_FRAMING: u32 = 10;
    const TEMPLATE_INSTRUCTIONS: u32 = 150;
    let template = match !tools.is_empty() && counter.is_approximate() {
        true => TEMPLATE_INSTRUCTIONS,
        false => 0,
    };
    template
        + tools
            .iter()
            .map(|t| {
                counter.count(&t.name)
                    + counter.count(&t.description)
                    + counter.count(&t.parameters.to_string())
                    + PER_TOOL_FRAMING
            })
            .sum::<u32>()
}

/// Reads the items that arrived without content from the workspace; what cannot be read stays
/// unresolved with the reason.
fn resolve_from_workspace(ws: &workspace::Workspace, input: &mut StepInput) {
    let project = input.project_id.clone();
    let mut still = Vec::new();
    for mut ex in std::mem::take(&mut input.unresolved) {
        let read = match (ex.fate, ex.source) {
            (context::Fate::Unresolved, ContextSource::Pinned) => {
                ws.read_pinned(project.as_deref(), &ex.id)
            }
            (context::Fate::Unresolved, ContextSource::Explicit | ContextSource::Implicit) => {
                ws.read(project.as_deref(), &ex.id)
            }
            _ => {
                still.push(ex);
                continue;
            }
        };
        match read {
            Ok(content) => input.context.push(ContextItem {
                source: ex.source,
                path: (ex.source != ContextSource::Pinned).then(|| ex.id.clone()),
                id: ex.id,
                content,
                score: None,
                lines: None,
                cursor_line: ex.cursor_line,
            }),
            Err(why) => {
                ex.reason = format!("not read from the workspace: {why}");
                still.push(ex);
            }
        }
    }
    let (items, duplicates) = context::dedupe(std::mem::take(&mut input.context));
    input.context = items;
    still.extend(duplicates);
    input.unresolved = still;
}

/// A warning for each history turn whose state another provider, wire or model made: it is not
/// sent (it would be refused, or mislead), and the turn goes as its text and calls.
fn foreign_states(input: &StepInput) -> Vec<String> {
    let here = input.llm.state_origin();
    input
        .history
        .iter()
        .enumerate()
        .filter_map(|(i, turn)| {
            let state = turn.reasoning_state.as_ref()?;
            let from = state.origin.as_ref().filter(|_| !budget::belongs(state, Some(&here)))?;
            Some(format!(
                "conversation_history[{i}]: its reasoning_state was made by {} ({} API, model {}), not by this step's {} ({} API, model {}): it was not sent",
                from.provider, from.api, from.model, here.provider, here.api, here.model
            ))
        })
        .collect()
}

fn budget_warnings(fitted: &budget::Fitted, excluded: &[Excluded]) -> Vec<String> {
    let mut warnings = Vec::new();
    if fitted.left_out() > 0 {
        warnings.push(format!(
            "{} oldest conversation turn(s) did not fit in the token budget and were left out of the prompt (see context_report)",
            fitted.left_out()
        ));
    }
    if fitted.truncated_items > 0 {
        warnings.push(format!(
            "{} item(s) were cut to fit the token budget (see context_report)",
            fitted.truncated_items
        ));
    }
    if fitted.dropped_items > 0 {
        warnings.push(format!(
            "{} context item(s) did not fit in the token budget and were left out of the prompt (see context_report)",
            fitted.dropped_items
        ));
    }
    let unresolved = excluded
        .iter()
        .filter(|e| e.fate == context::Fate::Unresolved)
        .count();
    if unresolved > 0 {
        warnings.push(format!(
            "{unresolved} context item(s) could not be resolved and were not used (see context_report)"
        ));
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remembered_head_is_the_one_its_inputs_make() {
        let tags = parse::Tags::default();
        let other = parse::Tags {
            action: "Act".into(),
            ..parse::Tags::default()
        };
        let tools = "- read_file: reads a file\n- run_tests(path): runs them";
        // Each input changed alone, each asked twice: always what building it again gives.
        for _ in 0..2 {
            for (segment, tags, native) in [
                (tools, &tags, false),
                (tools, &tags, true),
                (tools, &other, false),
                ("- read_files: reads files", &tags, false),
                ("", &tags, false),
            ] {
                assert_eq!(
                    &*system_head(segment, tags, native),
                    prompt::system_head(segment, tags, native)
                );
            }
        }
    }

    #[test]
    fn an_approximate_count_of_native_tools_holds_the_templates_instructions() {
        let tools = vec![crate::llm::ToolSpec {
            name: "read_file".into(),
            description: "Read a file.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }];
        let exact = TokenCounter::new(crate::llm::Provider::OPENAI, "gpt-4o", None);
        let local = TokenCounter::new(crate::llm::Provider::OLLAMA, "qwen2.5-coder:1.5b", None);
        assert!(local.is_approximate() && !exact.is_approximate());
        let exact_tokens = native_tools_tokens(&exact, &tools);
        let local_tokens = native_tools_tokens(&local, &tools);
        assert!(
            local_tokens >= exact_tokens + 150,
            "{local_tokens} vs {exact_tokens}"
        );
        assert_eq!(native_tools_tokens(&local, &[]), 0);
    }
}
