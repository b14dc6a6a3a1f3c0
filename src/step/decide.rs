//! From parsed output to what the client gets: an action is proposed only for a tool that
//! exists, with arguments that match its schema; anything else is invalid, and the model gets a
//! repair round with the problem as its observation. Also the `/tool …` commands that need no
//! model call.

use serde_json::{Map, Value};

use super::parse::{self, thought_warnings, Decision, Parsed, Tags};
use super::tools::Catalog;
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
}

impl Default for ReactSettings {
    fn default() -> Self {
        Self {
            tags: Tags::default(),
            require_thought: true,
            min_thought_chars: 0,
            max_repair_attempts: 1,
            require_action: false,
        }
    }
}

/// A decision the client may act on.
#[derive(Debug, Clone, PartialEq)]
pub enum Valid {
    Action {
        tool_name: String,
        tool_args: Map<String, Value>,
        raw_action_string: String,
    },
    Answer(String),
}

/// The parsed output as a valid decision (with warnings about its thought), or why it is not one.
pub fn judge(
    parsed: &Parsed,
    catalog: &Catalog,
    settings: &ReactSettings,
) -> Result<(Valid, Vec<String>), String> {
    match &parsed.decision {
        Decision::Unreadable { why, .. } => Err(format!("the action could not be read: {why}")),
        Decision::Answer(_) if settings.require_action => Err(format!(
            "a tool call is required in this step, but the output was a direct answer; write a '{}:' line",
            settings.tags.action
        )),
        Decision::Answer(text) => Ok((Valid::Answer(text.clone()), Vec::new())),
        Decision::Action {
            tool_name,
            tool_args,
            raw_action_string,
        } => {
            let tool_args = catalog.check(tool_name, tool_args.clone())?;
            let warnings = thought_warnings(
                &parsed.thought,
                tool_name,
                settings.require_thought,
                settings.min_thought_chars,
            );
            Ok((
                Valid::Action {
                    tool_name: tool_name.clone(),
                    tool_args,
                    raw_action_string: raw_action_string.clone(),
                },
                warnings,
            ))
        }
    }
}

/// A reply that called a tool through the provider's tool calling: the thought is the text
/// written before the call, the action the first call.
pub fn native_parsed(text: &str, calls: &[NativeCall], tags: &Tags) -> Option<Parsed> {
    let call = calls.first()?;
    let mut warnings = Vec::new();
    if calls.len() > 1 {
        warnings.push(format!(
            "the model called {} tools at once; only the first, '{}', was used",
            calls.len(),
            call.name
        ));
    }
    let thought = parse::parse(text, tags)
        .map(|p| p.thought)
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| text.trim().to_string());
    let decision = match &call.arguments {
        Ok(args) => Decision::Action {
            tool_name: call.name.clone(),
            tool_args: args.clone(),
            raw_action_string: render_native(call),
        },
        Err(_) => Decision::Unreadable {
            why: format!(
                "the arguments of the call to '{}' are not a JSON object",
                call.name
            ),
            raw_action_string: render_native(call),
        },
    };
    Some(Parsed {
        thought,
        decision,
        warnings,
        structured: true,
    })
}

/// A native call as text: `name({"arg": …})`, or with the arguments as the model wrote them.
pub fn render_native(call: &NativeCall) -> String {
    match &call.arguments {
        Ok(args) => format!("{}({})", call.name, Value::Object(args.clone())),
        Err(raw) => format!("{}({raw})", call.name),
    }
}

/// What the model is told after an invalid output: its own output, then the problem as the
/// observation, with the format to answer in.
pub fn repair_messages(raw_output: &str, why: &str, tags: &Tags) -> [ChatMessage; 2] {
    [
        ChatMessage {
            role: ChatRole::Assistant,
            content: raw_output.to_string(),
        },
        ChatMessage {
            role: ChatRole::User,
            content: format!(
                "{}: Error: {why}. Answer again in the required format: '{}:' then either '{}: tool_name(…)' with one of the tools, or '{}: …'.",
                tags.observation, tags.thought, tags.action, tags.final_answer
            ),
        },
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
        tool_name: name.to_string(),
        tool_args,
        raw_action_string: query.trim().to_string(),
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
mod tests {
    use super::*;
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
            tool_name: name.into(),
            tool_args,
            raw_action_string: String::new(),
        })
    }

    fn strip_raw(v: Option<Valid>) -> Option<Valid> {
        v.map(|v| match v {
            Valid::Action {
                tool_name,
                tool_args,
                ..
            } => Valid::Action {
                tool_name,
                tool_args,
                raw_action_string: String::new(),
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
            warnings: Vec::new(),
            structured: true,
        };
        let settings = ReactSettings {
            require_action: true,
            ..ReactSettings::default()
        };
        assert!(judge(&parsed, &catalog(), &settings).is_err());
        assert!(judge(&parsed, &catalog(), &ReactSettings::default()).is_ok());
    }
}
