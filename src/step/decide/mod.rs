//! From parsed output to what the client gets: an action is proposed only for a tool that
//! exists, with arguments that match its schema; anything else is invalid, and the model gets a
//! repair round with the problem as its observation.

mod command;
mod copied;
mod native;
mod valid;

pub use command::command;
pub use native::{native_parsed, render_native};
pub use valid::{Call, Valid};

use serde_json::{Map, Value};

use super::answer_schema::{AnswerSchema, FINAL_ANSWER_TOOL};
use super::context::clearing::ClearToolResults;
use super::context::prompt::TOOL_PLACEHOLDER;
use super::loop_guard::LoopGuard;
use super::parse::{self, thought_warnings, Decision, Parsed, Tags};
use super::tools::Catalog;
use crate::llm::{ChatMessage, ChatRole};
use copied::{copied, is_placeholder, signature_reason, written_as_values};

/// The client's `react` settings.
#[derive(Debug, Clone)]
pub struct ReactSettings {
    pub tags: Tags,
    pub require_thought: bool,
    pub min_thought_chars: usize,
    /// Repair rounds after an invalid action (default 1).
    pub max_repair_attempts: u32,
    /// Whether the step must end in a tool call.
    pub require_action: bool,
    /// Several calls of one turn are all proposed (`llm_config.parallel_tool_calls`).
    pub parallel_tool_calls: bool,
    /// The final answer must be JSON matching this schema (`react.final_answer_schema`).
    pub final_answer: Option<std::sync::Arc<AnswerSchema>>,
    /// Old tool results are sent as placeholders (`react.clear_tool_results`).
    pub clear_tool_results: Option<ClearToolResults>,
    /// When a repeating loop is warned of and stopped (`react.loop_guard`); `None`: never.
    pub loop_guard: Option<LoopGuard>,
    /// The step must end in the final answer: a call of a tool is invalid output, for the
    /// repair round (a plan or an evaluation step).
    pub answer_only: bool,
    /// The client's tool whose call is its loop's answer (`react.answer_tool`, a driver's
    /// `submit_answer`): on the last step a call of it is proposed, not summarised.
    pub answer_tool: Option<String>,
}

impl Default for ReactSettings {
    fn default() -> Self {
        Self {
            tags: Tags::default(),
            require_thought: true,
            min_thought_chars: 0,
            max_repair_attempts: 1,
            require_action: false,
            parallel_tool_calls: true,
            final_answer: None,
            clear_tool_results: None,
            loop_guard: Some(LoopGuard::default()),
            answer_only: false,
            answer_tool: None,
        }
    }
}

/// The parsed output as a valid decision (with warnings about its thought), or why it is not one.
pub fn judge(
    parsed: &Parsed,
    catalog: &Catalog,
    settings: &ReactSettings,
) -> Result<(Valid, Vec<String>), String> {
    match &parsed.decision {
        Decision::Unreadable { why, .. } => Err(format!("the action could not be read: {why}")),
        Decision::Answer(_) if settings.require_action => Err(
            "a tool call is required in this step, but the output was a direct answer".to_string(),
        ),
        Decision::Answer(text) if parsed.structured && text.trim().is_empty() => Err(
            "the final answer is empty: write the answer after the tag".to_string(),
        ),
        Decision::Answer(text) if is_placeholder(text) => Err(format!(
            "'{}' is the answer format's placeholder: write the real answer",
            text.trim()
        )),
        Decision::Answer(text) if answer_is_a_call(text, catalog) => Err(format!(
            "the final answer is a call of '{}' written as text: to call the tool, write the call after 'Action:'; to answer, write the answer itself after 'Final Answer:'",
            parse::answer_call::bare_call(text).unwrap_or_default()
        )),
        Decision::Answer(text) if text.contains(REPAIR_INSTRUCTION) => Err(
            "the answer repeats the service's own instructions; write the answer to the question"
                .to_string(),
        ),
        Decision::Answer(text) => match &settings.final_answer {
            Some(schema) => Ok((Valid::Answer(schema.read(text)?.to_string()), Vec::new())),
            None => Ok((Valid::Answer(text.clone()), Vec::new())),
        },
        Decision::Action { tool_name, .. }
            if settings.answer_only && !answers_by_tool(tool_name, catalog, settings) =>
        {
            Err(format!(
                "this step calls no tool ('{tool_name}' was called): give your answer as the final answer"
            ))
        }
        Decision::Action {
            tool_name,
            tool_args,
            ..
        } if answers_by_tool(tool_name, catalog, settings) => {
            let schema = settings.final_answer.as_deref();
            let value = schema.map(|s| s.read_call(tool_args)).transpose()?;
            Ok((
                Valid::Answer(value.unwrap_or_default().to_string()),
                Vec::new(),
            ))
        }
        Decision::Action {
            tool_name,
            tool_args,
            raw_action_string,
        } => {
            let (call, renamed) = checked(tool_name, tool_args, raw_action_string, catalog)?;
            let mut warnings = thought_warnings(
                &parsed.thought,
                &call.tool_name,
                settings.require_thought,
                settings.min_thought_chars,
            );
            warnings.extend(renamed);
            let parallel = further_calls(parsed, catalog, settings, &mut warnings);
            Ok((
                Valid::Action {
                    call: Call {
                        tool_call_id: parsed.call_ids.first().cloned().flatten(),
                        ..call
                    },
                    parallel,
                },
                warnings,
            ))
        }
    }
}

/// A turn whose answer through the `final_answer` tool is not its first call. On the last step
/// (no call runs there) the answer is the decision; before it, the calls are proposed and the
/// answer left out, since the model gave it before their results, as a text answer written after
/// a call is (`answer_left_out`). Otherwise the answer was dropped as a call of no tool.
pub fn answer_among_calls(
    mut parsed: Parsed,
    catalog: &Catalog,
    settings: &ReactSettings,
    last_step: bool,
) -> Parsed {
    let answers = |d: &Decision| matches!(d, Decision::Action { tool_name, .. } if answers_by_tool(tool_name, catalog, settings));
    if answers(&parsed.decision) {
        return parsed;
    }
    let Some(at) = parsed.also.iter().position(answers) else {
        return parsed;
    };
    let answer = parsed.also.remove(at);
    let id = match parsed.call_ids.len() > at + 1 {
        true => parsed.call_ids.remove(at + 1),
        false => None,
    };
    if last_step {
        parsed.decision = answer;
        parsed.also.clear();
        parsed.call_ids = vec![id];
    } else {
        parsed.answer_left_out = true;
    }
    parsed
}

/// Whether a call is the final answer given through the `final_answer` tool (offered with a
/// final answer schema, unless the client declared a tool of that name itself).
fn answers_by_tool(tool_name: &str, catalog: &Catalog, settings: &ReactSettings) -> bool {
    settings.final_answer.is_some() && tool_name == FINAL_ANSWER_TOOL && !catalog.has(tool_name)
}

/// A call checked against its tool: its name resolved to the declared one (with a warning when
/// it was written otherwise) and its arguments against the schema; why not, when it is no call.
fn checked(
    tool_name: &str,
    tool_args: &Map<String, Value>,
    raw_action_string: &str,
    catalog: &Catalog,
) -> Result<(Call, Option<String>), String> {
    copied(tool_name, tool_args, raw_action_string, catalog)?;
    if let Some(why) = crate::step::history::too_deep(tool_args) {
        return Err(why);
    }
    let (tool_name, renamed) = catalog
        .resolve(tool_name)
        .unwrap_or_else(|| (tool_name.to_string(), None));
    let tool_args = catalog.check(&tool_name, tool_args.clone())?;
    if catalog.values_are_type_names(&tool_name, &tool_args)
        && !written_as_values(&tool_args, raw_action_string)
    {
        return Err(signature_reason(&tool_name));
    }
    let call = Call {
        tool_name,
        tool_args,
        raw_action_string: raw_action_string.to_string(),
        tool_call_id: None,
    };
    Ok((call, renamed))
}

/// The turn's calls after the first, each checked as the first was: one that fails is left
/// out with a warning, never proposed. With parallel calls off, only the first is proposed.
fn further_calls(
    parsed: &Parsed,
    catalog: &Catalog,
    settings: &ReactSettings,
    warnings: &mut Vec<String>,
) -> Vec<Call> {
    let also = &parsed.also;
    if also.is_empty() {
        return Vec::new();
    }
    if !settings.parallel_tool_calls {
        warnings.push(format!(
            "the model wrote {} tool calls in one turn; with parallel_tool_calls off, the first is proposed",
            also.len() + 1
        ));
        return Vec::new();
    }
    let mut calls = Vec::new();
    for (i, decision) in also.iter().enumerate() {
        let why = match decision {
            Decision::Action {
                tool_name,
                tool_args,
                raw_action_string,
            } => match checked(tool_name, tool_args, raw_action_string, catalog) {
                Ok((mut call, renamed)) => {
                    warnings.extend(renamed);
                    call.tool_call_id = parsed.call_ids.get(i + 1).cloned().flatten();
                    calls.push(call);
                    continue;
                }
                Err(why) => why,
            },
            Decision::Unreadable { why, .. } => format!("the action could not be read: {why}"),
            Decision::Answer(_) => "it is not a call".to_string(),
        };
        warnings.push(format!("call {} of the turn was left out: {why}", i + 2));
    }
    calls
}

/// An answer that is nothing but a call of a declared tool (`read_file(path="a.py")`): the
/// model meant the call or copied one, and which is for it to say.
fn answer_is_a_call(text: &str, catalog: &Catalog) -> bool {
    parse::answer_call::bare_call(text).is_some_and(|name| catalog.resolve(name).is_some())
}

/// In native mode, where the prompt shows no `Action:` format, an answer that is itself a call
/// to a known tool (written as JSON, markup or an `Action:` line after `Final Answer:`): the
/// call, with a warning, to be checked as any action is. Anything else is left as it was read.
pub fn answer_as_call(parsed: Parsed, catalog: &Catalog, tags: &Tags) -> Parsed {
    let text = match &parsed.decision {
        Decision::Answer(text) => text,
        // A call after `Final Answer:` in markup or with a tag is read as no decision.
        Decision::Unreadable {
            raw_action_string, ..
        } => raw_action_string,
        Decision::Action { .. } => return parsed,
    };
    let Some(call) = parse::answer_call::call_in_answer(text, tags) else {
        return parsed;
    };
    let Decision::Action { tool_name, .. } = &call.decision else {
        return parsed;
    };
    if catalog.resolve(tool_name).is_none() {
        return parsed;
    }
    let mut warnings = parsed.warnings;
    warnings.extend(call.warnings);
    warnings.push(format!(
        "the final answer was a call to {tool_name} written as text, not through the tool-calling interface; it was read as the call"
    ));
    Parsed {
        thought: parsed.thought,
        decision: call.decision,
        also: call.also,
        warnings,
        structured: true,
        open_ended: call.open_ended,
        answer_left_out: false,
        call_ids: Vec::new(),
    }
}

/// The words of the repair message a model sometimes repeats as its answer.
const REPAIR_INSTRUCTION: &str = "Answer again in the required format";

/// What the model is told after an invalid output: its own output, then the problem as the
/// observation, with the format to answer in: the mode's own (in native mode, a call through
/// the tool-calling interface, as the system prompt says, never an `Action:` line).
pub fn repair_messages(raw_output: &str, why: &str, tags: &Tags, native: bool) -> [ChatMessage; 2] {
    let format = match native {
        true => format!(
            "'{}: …', then either call one of the tools through the tool-calling interface, or write '{}: …'",
            tags.thought, tags.final_answer
        ),
        false => format!(
            "'{}:' then either '{}: {TOOL_PLACEHOLDER}(…)' with one of the tools, or '{}: …'",
            tags.thought, tags.action, tags.final_answer
        ),
    };
    [
        ChatMessage::text(ChatRole::Assistant, raw_output.to_string()),
        ChatMessage::text(
            ChatRole::User,
            format!(
                "{}: Error: {why}. {REPAIR_INSTRUCTION}: {format}.",
                tags.observation
            ),
        ),
    ]
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use super::*;
    use crate::step::history::MAX_ARGUMENT_DEPTH;
    use crate::step::tools::ToolSpec;
    use serde_json::json;

    pub(super) fn catalog() -> Catalog {
        Catalog::new(
            vec![
                ToolSpec {
                    name: "read_file".into(),
                    description: String::new(),
                    parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
                },
                ToolSpec {
                    name: "code_search".into(),
                    description: String::new(),
                    parameters: json!({"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["query"]}),
                },
            ],
            "",
        )
        .unwrap_or_else(|e| panic!("{e:?}"))
    }

    pub(super) fn action(name: &str, args: Value) -> Option<Valid> {
        let Value::Object(tool_args) = args else {
            return None;
        };
        Some(Valid::Action {
            call: Call {
                tool_name: name.into(),
                tool_args,
                raw_action_string: String::new(),
                tool_call_id: None,
            },
            parallel: Vec::new(),
        })
    }

    pub(super) fn strip_raw(v: Option<Valid>) -> Option<Valid> {
        v.map(|v| match v {
            Valid::Action { call, .. } => Valid::Action {
                call: Call {
                    raw_action_string: String::new(),
                    tool_call_id: None,
                    ..call
                },
                parallel: Vec::new(),
            },
            other => other,
        })
    }

    #[test]
    fn an_answer_is_invalid_when_an_action_is_required() {
        let parsed = Parsed {
            thought: "t".into(),
            decision: Decision::Answer("done".into()),
            also: Vec::new(),
            warnings: Vec::new(),
            structured: true,
            open_ended: false,
            answer_left_out: false,
            call_ids: Vec::new(),
        };
        let settings = ReactSettings {
            require_action: true,
            ..ReactSettings::default()
        };
        assert!(judge(&parsed, &catalog(), &settings).is_err());
        assert!(judge(&parsed, &catalog(), &ReactSettings::default()).is_ok());
    }

    /// The verdict on a model output, with its error when refused.
    fn verdict(output: &str, c: &Catalog) -> Result<Valid, String> {
        let parsed = parse::parse(output, &Tags::default()).unwrap();
        judge(&parsed, c, &ReactSettings::default()).map(|(v, _)| v)
    }

    fn no_names() -> Catalog {
        Catalog::new(Vec::new(), "Tools are described elsewhere.").unwrap()
    }

    /// What is proposed must go back in the conversation: arguments that nest past what a
    /// body can carry there are refused (a repair round), at the first level too deep.
    #[test]
    fn arguments_too_deep_to_send_back_are_refused() {
        // The object written in the parentheses is the tool's `input`, the first level: the
        // arguments nest `levels` deep.
        let nested = |levels: usize| {
            let inner = format!("{}1{}", "[".repeat(levels - 2), "]".repeat(levels - 2));
            format!("Thought: t\nAction: no_schema({{\"query\": {inner}}})")
        };
        let any = Catalog::new(
            vec![ToolSpec {
                name: "no_schema".into(),
                description: String::new(),
                parameters: json!({}),
            }],
            "",
        )
        .unwrap();
        let ok = verdict(&nested(MAX_ARGUMENT_DEPTH), &any);
        assert!(ok.is_ok(), "{ok:?}");
        for levels in [MAX_ARGUMENT_DEPTH + 1, 123] {
            let why = verdict(&nested(levels), &any).unwrap_err();
            assert!(why.contains("nest more than 64 levels"), "{why}");
        }
    }

    #[test]
    fn the_copied_format_example_is_refused_even_with_no_tool_known() {
        let old = "Thought: t\nAction: tool_name(param=\"value\", other_param=2)";
        for c in [catalog(), no_names()] {
            let why = verdict(old, &c).unwrap_err();
            assert!(
                why.contains("'tool_name' is the answer format's placeholder"),
                "{why}"
            );
        }
        let added = "Thought: t\nAction: code_search(query=\"x\", other_param=2)";
        let why = verdict(added, &no_names()).unwrap_err();
        assert!(
            why.contains("'other_param' is the answer format's placeholder"),
            "{why}"
        );
        let new = "Thought: t\nAction: read_file(path=\"<value>\")";
        let why = verdict(new, &catalog()).unwrap_err();
        assert!(why.contains("the value of 'path'"), "{why}");
        let bare = "Thought: t\nAction: <tool name>(<argument>=\"<value>\")";
        assert!(verdict(bare, &no_names()).is_err());
        let named = "Thought: t\nAction: read_file(path=\"<path>\")";
        let why = verdict(named, &catalog()).unwrap_err();
        assert!(why.contains("is a placeholder, \"<path>\""), "{why}");
        let positional = "Thought: t\nAction: read_file[<path>]";
        assert!(verdict(positional, &catalog()).is_err());
        let markup = "Thought: t\nAction: read_file(path=\"<body>\")";
        assert!(verdict(markup, &catalog()).is_ok());
    }

    #[test]
    fn a_tool_or_argument_truly_named_like_the_old_example_works() {
        let c = Catalog::new(
            vec![ToolSpec {
                name: "tool_name".into(),
                description: String::new(),
                parameters: json!({"type": "object", "properties": {"param": {"type": "string"}, "other_param": {"type": "integer"}}}),
            }],
            "",
        )
        .unwrap();
        let call = "Thought: t\nAction: tool_name(param=\"value\", other_param=2)";
        assert_eq!(
            strip_raw(verdict(call, &c).ok()),
            action("tool_name", json!({"param": "value", "other_param": 2}))
        );
    }

    #[test]
    fn a_copied_signature_is_refused() {
        let c = catalog();
        for output in [
            "Thought: t\nAction: read_file(path: string) — Read a file of the project.",
            "Thought: t\nAction: code_search(query: str, limit?: integer)",
            "Thought: t\nAction: code_search(query: Optional[str] = None)",
            "Thought: t\nAction: {\"action\": \"read_file\", \"action_input\": {\"path\": \"string\"}}",
        ] {
            let why = verdict(output, &c).unwrap_err();
            assert!(why.contains("signature of '"), "{output}: {why}");
        }
        let why = verdict("Thought: t\nAction: search(query: string)", &no_names()).unwrap_err();
        assert!(why.contains("signature of 'search'"), "{why}");
    }

    #[test]
    fn a_real_value_that_is_a_type_name_is_a_call() {
        let c = catalog();
        for output in [
            "Thought: t\nAction: code_search(query=\"string\")",
            "Thought: t\nAction: code_search('string')",
            "Thought: t\nAction: code_search(query=\"x: string\")",
            "Thought: t\nAction: read_file(path=\"a.rs\")",
        ] {
            assert!(verdict(output, &c).is_ok(), "{output}");
        }
    }
}
