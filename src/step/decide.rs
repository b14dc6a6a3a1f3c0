//! From parsed output to what the client gets: an action is proposed only for a tool that
//! exists, with arguments that match its schema; anything else is invalid, and the model gets a
//! repair round with the problem as its observation. Also the `/tool …` commands that need no
//! model call.

use serde_json::{Map, Value};

use super::answer_schema::{AnswerSchema, FINAL_ANSWER_TOOL};
use super::context::clearing::ClearToolResults;
use super::context::prompt::{ARGUMENT_PLACEHOLDER, TOOL_PLACEHOLDER, VALUE_PLACEHOLDER};
use super::loop_guard::LoopGuard;
use super::parse::{self, thought_warnings, Decision, Parsed, Tags};
use super::tools::{type_name_of, Catalog};
use crate::llm::bounded::Unread;
use crate::llm::{ChatMessage, ChatRole, NativeCall};

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

/// A decision the client may act on.
#[derive(Debug, Clone, PartialEq)]
pub enum Valid {
    Action {
        /// The turn's first call. Its id is the provider's for a native call; a text call gets
        /// one of the service's.
        call: Call,
        /// The turn's further calls, each checked as the first was.
        parallel: Vec<Call>,
    },
    Answer(String),
}

/// One call of a turn with several.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub tool_name: String,
    pub tool_args: Map<String, Value>,
    pub raw_action_string: String,
    pub tool_call_id: Option<String>,
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
        Decision::Answer(text) if is_placeholder(text) => Err(format!(
            "'{}' is the answer format's placeholder: write the real answer",
            text.trim()
        )),
        Decision::Answer(text) if answer_is_a_call(text, catalog) => Err(format!(
            "the final answer is a call of '{}' written as text: to call the tool, write the call after 'Action:'; to answer, write the answer itself after 'Final Answer:'",
            parse::bare_call(text).unwrap_or_default()
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

/// Why an action is a copy of the prompt rather than a call, if it is: the format example's
/// placeholders (today's, or the `tool_name(param="value", other_param=2)` small models still
/// reproduce from older prompts) or a tool's signature from the tool list. Either would run
/// something the model never meant, so it is refused even when no tool is known by name.
fn copied(
    tool: &str,
    args: &Map<String, Value>,
    raw: &str,
    catalog: &Catalog,
) -> Result<(), String> {
    if let Some(why) = placeholder(tool, args, catalog) {
        return Err(why);
    }
    if signature_in(raw) {
        return Err(signature_reason(tool));
    }
    Ok(())
}

/// Names of the format example, old and new, that are placeholders unless the request
/// declares them.
const EXAMPLE_TOOLS: [&str; 2] = ["tool_name", TOOL_PLACEHOLDER];
const EXAMPLE_ARGUMENTS: [&str; 3] = ["param", "other_param", ARGUMENT_PLACEHOLDER];

/// Why the action repeats the format example's placeholders, if it does.
fn placeholder(tool: &str, args: &Map<String, Value>, catalog: &Catalog) -> Option<String> {
    let example = "the answer format's placeholder";
    if EXAMPLE_TOOLS.contains(&tool) && !catalog.has(tool) {
        return Some(format!(
            "'{tool}' is {example}, not a tool: call one of the tools listed under Tools"
        ));
    }
    if let Some(key) = args
        .keys()
        .find(|k| EXAMPLE_ARGUMENTS.contains(&k.as_str()) && !catalog.declares(tool, k))
    {
        return Some(format!(
            "'{key}' is {example}, not an argument of '{tool}': write only the tool's own arguments"
        ));
    }
    // The example's `<value>` in any case, alone or in a longer value (`<value>/src/app.py`),
    // unless its closing tag is there too (a search for the markup, `<value>.*</value>`).
    if let Some((key, _)) = args.iter().find(|(_, v)| {
        v.as_str().is_some_and(|v| {
            let v = v.to_lowercase();
            v.contains(VALUE_PLACEHOLDER) && !v.contains("</value>")
        })
    }) {
        return Some(format!(
            "the value of '{key}' is {example} '{VALUE_PLACEHOLDER}': write the real value"
        ));
    }
    // `read_file(path="<path>")`: the argument's own name in angle brackets, the example's
    // shape with the name put in.
    let (key, value) = args.iter().find(|(k, v)| {
        v.as_str()
            .and_then(|v| v.strip_prefix('<')?.strip_suffix('>'))
            .is_some_and(|name| {
                name == k.as_str()
                    || k.as_str() == "input" && catalog.declares(tool, name)
                    || describes(name, k)
            })
    })?;
    Some(format!(
        "the value of '{key}' is a placeholder, {value}: write the real value"
    ))
}

/// Whether the words in angle brackets describe the argument `key` rather than being a value
/// of it: words only (letters, digits, spaces, `_`, `-`), more than one of them or the key's
/// own words among them (`<file path>`, `<file_path>`, `<your search query>` for `query`). One
/// word unrelated to the key (`<title>`, `<body>`) is markup a search may look for.
fn describes(inner: &str, key: &str) -> bool {
    const WORDS: [&str; 4] = ["your", "value", "argument", "here"];
    let plain = !inner.is_empty()
        && inner
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, ' ' | '_' | '-'));
    if !plain {
        return false;
    }
    let lower = inner.to_lowercase();
    let words: Vec<&str> = lower
        .split([' ', '_', '-'])
        .filter(|w| !w.is_empty())
        .collect();
    let key = key.to_lowercase();
    let key_words: Vec<&str> = key.split('_').filter(|w| !w.is_empty()).collect();
    words
        .iter()
        .any(|w| WORDS.contains(w) || key_words.contains(w))
        && (words.len() > 1 || inner.contains(' '))
}

fn signature_reason(tool: &str) -> String {
    format!(
        "this is the signature of '{tool}' copied from the tool list, not a call: write each \
argument's value, not its type"
    )
}

/// Whether the call's argument list is a signature: some argument written `name: type` or
/// `name?: type` with an unquoted JSON Schema or Python type name (`path: string`,
/// `limit?: integer`, `items: list[str]`, `x: int = 0`).
fn signature_in(raw: &str) -> bool {
    let Some(open) = raw.find('(') else {
        return false;
    };
    let inner = &raw[open + 1..];
    let inner = &inner[..inner.find(')').unwrap_or(inner.len())];
    inner.split(',').any(|piece| {
        let Some((name, ty)) = piece.split_once(':') else {
            return false;
        };
        let name = name.trim().trim_end_matches('?');
        let ty = ty.trim_start();
        let word_len = ty
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(ty.len());
        let (word, after) = (&ty[..word_len], ty[word_len..].trim_start());
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && (type_name_of(word).is_some() || is_generic(word) && after.starts_with('['))
            && after
                .chars()
                .next()
                .is_none_or(|c| matches!(c, '[' | '|' | '=' | '<'))
    })
}

/// Python's `typing` generics, a type only when followed by `[` (`Optional[str]`).
fn is_generic(word: &str) -> bool {
    matches!(
        word,
        "Optional" | "Union" | "List" | "Dict" | "Tuple" | "Sequence" | "Literal"
    )
}

/// An answer that is nothing but a call of a declared tool (`read_file(path="a.py")`): the
/// model meant the call or copied one, and which is for it to say.
fn answer_is_a_call(text: &str, catalog: &Catalog) -> bool {
    parse::bare_call(text).is_some_and(|name| catalog.resolve(name).is_some())
}

/// Whether every argument that looks like a type name was written as a quoted value of a call
/// (`query="string"`, `code_search('string')`): a real value the model chose, not a signature.
fn written_as_values(args: &Map<String, Value>, raw: &str) -> bool {
    let compact: String = raw.chars().filter(|c| !c.is_whitespace()).collect();
    args.iter().all(|(key, value)| {
        let v = value.as_str().unwrap_or_default();
        ["=", "(", ","].iter().any(|before| {
            compact.contains(&format!("{before}\"{v}\""))
                && (*before != "=" || compact.contains(&format!("{key}=\"{v}\"")))
                || compact.contains(&format!("{before}'{v}'"))
        })
    })
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
    let Some(call) = parse::call_in_answer(text, tags) else {
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

/// A reply that called a tool through the provider's tool calling: the thought is the text
/// written before the call, the action the first call.
pub fn native_parsed(text: &str, calls: &[NativeCall], tags: &Tags) -> Option<Parsed> {
    calls.first()?;
    let warnings = Vec::new();
    let thought = parse::parse(text, tags)
        .map(|p| p.thought)
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| text.trim().to_string());
    let mut decisions = calls.iter().map(native_decision);
    Some(Parsed {
        thought,
        decision: decisions.next()?,
        also: decisions.collect(),
        warnings,
        structured: true,
        open_ended: false,
        answer_left_out: false,
        call_ids: calls.iter().map(|c| c.id.clone()).collect(),
    })
}

fn native_decision(call: &NativeCall) -> Decision {
    match &call.arguments {
        Ok(args) => Decision::Action {
            tool_name: call.name.clone(),
            tool_args: args.clone(),
            raw_action_string: render_native(call),
        },
        Err(Unread::PastBound(note)) => Decision::Unreadable {
            why: format!(
                "the arguments of the call to '{}' are past a bound: {note}",
                call.name
            ),
            raw_action_string: render_native(call),
        },
        Err(Unread::NotAnObject(_)) => Decision::Unreadable {
            why: format!(
                "the arguments of the call to '{}' are not a JSON object",
                call.name
            ),
            raw_action_string: render_native(call),
        },
    }
}

/// A native call as text: `name({"arg": …})`, or with the arguments as the model wrote them.
pub fn render_native(call: &NativeCall) -> String {
    match &call.arguments {
        Ok(args) => format!("{}({})", call.name, Value::Object(args.clone())),
        Err(unread) => format!("{}({})", call.name, unread.shown()),
    }
}

/// Words in angle brackets, as the answer format writes its placeholders
/// (`<your complete answer to the user>`); a tag such as `<br>` has no space in it.
fn is_placeholder(text: &str) -> bool {
    let text = text.trim();
    text.strip_prefix('<')
        .and_then(|t| t.strip_suffix('>'))
        .is_some_and(|inner| inner.contains(' ') && !inner.contains(['<', '>']))
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

/// A query such as `/read_file src/auth.js` or `/code_search query="login"` that names a known
/// tool: the action, without a model call. Any other `/…` is `None` and goes to the model.
pub fn command(query: &str, catalog: &Catalog) -> Option<Valid> {
    let rest = query.trim().strip_prefix('/')?;
    let name_len = rest
        .find(|c: char| c.is_whitespace() || c == '(')
        .unwrap_or(rest.len());
    let name = &rest[..name_len];
    if name.is_empty() || !catalog.has(name) {
        return None;
    }
    let input = rest[name_len..].trim();
    let args = if let Some(inner) = input.strip_prefix('(').and_then(|i| i.strip_suffix(')')) {
        parse::parse_args(inner).ok()?
    } else if looks_like_keywords(input) {
        parse::parse_args(input).ok()?
    } else {
        let mut args = Map::new();
        let value = input.trim_matches(|c| c == '"' || c == '\'');
        if !value.is_empty() {
            args.insert("input".into(), Value::String(value.to_string()));
        }
        args
    };
    let tool_args = catalog.check(name, args).ok()?;
    Some(Valid::Action {
        call: Call {
            tool_name: name.to_string(),
            tool_args,
            raw_action_string: query.trim().to_string(),
            tool_call_id: None,
        },
        parallel: Vec::new(),
    })
}

/// `key=value …` rather than free text.
fn looks_like_keywords(input: &str) -> bool {
    let key_len = input
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(input.len());
    key_len > 0 && input[key_len..].trim_start().starts_with('=')
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use super::*;
    use crate::step::history::MAX_ARGUMENT_DEPTH;
    use crate::step::tools::ToolSpec;
    use serde_json::json;

    fn catalog() -> Catalog {
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

    fn action(name: &str, args: Value) -> Option<Valid> {
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

    fn strip_raw(v: Option<Valid>) -> Option<Valid> {
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
    fn commands_for_declared_tools_need_no_model() {
        let c = catalog();
        assert_eq!(
            strip_raw(command("/read_file src/auth.js", &c)),
            action("read_file", json!({"path": "src/auth.js"}))
        );
        assert_eq!(
            strip_raw(command("/code_search query=\"login\" limit=3", &c)),
            action("code_search", json!({"query": "login", "limit": 3}))
        );
        assert_eq!(
            strip_raw(command("/code_search(\"login form\")", &c)),
            action("code_search", json!({"query": "login form"}))
        );
    }

    #[test]
    fn other_slashes_go_to_the_model() {
        let c = catalog();
        assert_eq!(command("/help", &c), None);
        assert_eq!(
            command("/read_file", &c),
            None,
            "a required argument is missing"
        );
        assert_eq!(command("read_file a.rs", &c), None);
        assert_eq!(command("/ read_file", &c), None);
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

    /// A native call whose arguments the reply's reader left unread (past its bounds) is told
    /// as such, not as "not a JSON object".
    #[test]
    fn a_native_call_past_the_readers_bounds_says_which() {
        let text = format!("{{\"q\": {}1{}}}", "[".repeat(40), "]".repeat(40));
        let call = crate::llm::NativeCall {
            id: None,
            name: "read_file".into(),
            arguments: crate::llm::bounded::arguments(&text),
        };
        let Decision::Unreadable { why, .. } = native_decision(&call) else {
            panic!("no call is read");
        };
        assert!(
            why.contains("past a bound") && why.contains("nested more than 32"),
            "{why}"
        );
        // Past the bytes a call may hold: told as such, and the text is never written back.
        let huge = format!(
            "{{\"q\": \"{}\"}}",
            "x".repeat(crate::llm::bounded::MAX_ARGUMENT_BYTES)
        );
        let call = crate::llm::NativeCall {
            arguments: crate::llm::bounded::arguments(&huge),
            ..call
        };
        let Decision::Unreadable {
            why,
            raw_action_string,
        } = native_decision(&call)
        else {
            panic!("no call is read");
        };
        assert!(
            why.contains("past a bound")
                && why.contains("bytes of arguments, more than the 1048576"),
            "{why}"
        );
        assert!(raw_action_string.len() < 200, "{raw_action_string}");
        let call = crate::llm::NativeCall {
            arguments: Err(crate::llm::bounded::Unread::NotAnObject("[1, 2]".into())),
            ..call
        };
        let Decision::Unreadable { why, .. } = native_decision(&call) else {
            panic!("no call is read");
        };
        assert!(why.contains("not a JSON object"), "{why}");
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
