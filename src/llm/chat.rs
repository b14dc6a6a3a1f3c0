//! What a provider is asked: one chat completion in provider-neutral terms (the model, the
//! system prompt, the conversation, the tools and the settings), which each provider writes in
//! its own wire format.

use super::reasoning::{ReasoningEffort, ReasoningState};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatRole {
    User,
    Assistant,
    /// A tool's result answering a call (native tool calling only).
    Tool,
}

impl ChatRole {
    /// The role's name on OpenAI's wire (and in a dry run's prompt).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChatMessage {
    pub role: ChatRole,
    pub content: String,
    /// On an assistant message in native mode: the calls it made, in the provider's structure.
    pub calls: Vec<ToolUse>,
    /// On a tool message: the id of the call it answers.
    pub answers: Option<String>,
    /// On a tool message: the tool failed.
    pub is_error: bool,
    /// On an assistant message: its reasoning as the provider gave it, to go back untouched.
    pub reasoning: Option<ReasoningState>,
    /// Where in `content` what is new in this step begins (the prompt's last message): the
    /// place before it is the end of what a provider may cache.
    pub new_from: Option<usize>,
    /// On a user message right after tool results (native tool calling): it belongs to the
    /// turn those results continue, not to a new one. Each wire keeps it inside the turn
    /// (Anthropic: a text block after the `tool_result` blocks of that user message; Chat
    /// Completions, Ollama and Responses: appended to the last tool result's content).
    pub in_turn: bool,
}

/// A call an earlier assistant turn made, sent back as the provider's own structure.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolUse {
    pub id: String,
    pub name: String,
    pub arguments: serde_json::Map<String, serde_json::Value>,
}

impl ChatMessage {
    /// A message of text alone.
    pub fn text(role: ChatRole, content: String) -> Self {
        Self {
            role,
            content,
            calls: Vec::new(),
            answers: None,
            is_error: false,
            reasoning: None,
            new_from: None,
            in_turn: false,
        }
    }

    /// Whether the message is text alone (neighbours of that kind may be merged).
    pub fn is_plain(&self) -> bool {
        self.calls.is_empty()
            && self.answers.is_none()
            && self.role != ChatRole::Tool
            && self.reasoning.is_none()
    }

    /// The text as a wire that has no failure flag sends it: a failed tool's result says so
    /// first ([`FAILED_TOOL`]).
    pub fn text_as_sent(&self) -> std::borrow::Cow<'_, str> {
        match self.role == ChatRole::Tool && self.is_error {
            true => [FAILED_TOOL, &self.content].concat().into(),
            false => self.content.as_str().into(),
        }
    }

    /// What the budget counts for the message: its text (a failed tool's as
    /// [`Self::text_as_sent`], which errs on the side of room where a wire flags it instead),
    /// then each call as its id, name and JSON arguments (each call's framing is counted beside
    /// it, as a message's is). Reasoning sent back is counted as its text (redacted blocks as
    /// their data), which errs on the side of room: providers drop most of it from earlier turns.
    pub fn counted_text(&self) -> std::borrow::Cow<'_, str> {
        if self.calls.is_empty() && self.reasoning.is_none() {
            return self.text_as_sent();
        }
        let mut text = String::new();
        for part in self
            .reasoning
            .iter()
            .flat_map(ReasoningState::counted_parts)
        {
            text.push_str(part);
            text.push('\n');
        }
        text.push_str(&self.content);
        for call in &self.calls {
            text.push('\n');
            text.push_str(&call.id);
            text.push(' ');
            text.push_str(&call.name);
            text.push_str(&serde_json::Value::Object(call.arguments.clone()).to_string());
        }
        text.into()
    }
}

/// The messages as a wire sends them that keeps text inside a turn in its last tool result:
/// a user message that continues the turn of the results before it (`in_turn`) is not sent on
/// its own, but comes as the text to append to the last of them.
pub fn in_turn_folded(messages: &[ChatMessage]) -> Vec<(&ChatMessage, Option<&str>)> {
    let mut out: Vec<(&ChatMessage, Option<&str>)> = Vec::with_capacity(messages.len());
    for m in messages {
        if m.in_turn && m.role == ChatRole::User {
            if let Some((last, appended @ None)) = out.last_mut() {
                if last.role == ChatRole::Tool {
                    *appended = Some(&m.content);
                    continue;
                }
            }
        }
        out.push((m, None));
    }
    out
}

/// A tool result's text with what continues its turn after it.
pub fn with_appended<'a>(content: &'a str, appended: Option<&str>) -> std::borrow::Cow<'a, str> {
    match appended {
        Some(more) => [content, MESSAGE_JOIN, more].concat().into(),
        None => content.into(),
    }
}

/// What a failed tool's result opens with where the wire has no flag for a failure.
pub const FAILED_TOOL: &str = "[the tool failed] ";

/// What joins neighbours of one role merged into one message; a provider that sends a message
/// as blocks leaves it out where it splits one (`ChatMessage::new_from`).
pub const MESSAGE_JOIN: &str = "\n\n";

/// One chat completion, in provider-neutral terms.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    pub model: String,
    pub system: String,
    pub messages: Vec<ChatMessage>,
    pub max_output_tokens: u32,
    pub temperature: Option<f64>,
    /// Stop sequences wanted; a provider drops them for models that reject them.
    pub stop: Vec<String>,
    /// Tools offered through the provider's own tool calling (empty in text mode).
    pub tools: Vec<ToolSpec>,
    /// With tools: the model must call one.
    pub require_tool: bool,
    /// With tools: the model may call several in one turn.
    pub parallel_tool_calls: bool,
    /// Instead of the operator's base URL for the provider (already checked against the
    /// operator's allowlist).
    pub base_url: Option<String>,
    /// The model's context window (`tokenLimit`), for servers that must be told it (Ollama).
    pub context_window: Option<u32>,
    /// How hard a reasoning model is asked to think; `None`: the provider's default.
    pub reasoning_effort: Option<ReasoningEffort>,
    /// The provider's prompt cache is asked for (`llm_config.prompt_cache`, on by default).
    pub prompt_cache: Option<PromptCache>,
    /// Tools are sent strict where the provider has it (`llm_config.strict_tools`): their
    /// arguments are constrained to the schema.
    pub strict_tools: bool,
    /// The provider clears old tool results itself, keeping this many of the latest tool uses
    /// (Anthropic's context editing; `react.clear_tool_results` with `server_side`).
    pub clear_tool_uses: Option<u32>,
    /// A timed-out attempt may be retried (where the provider's capabilities allow it); not
    /// while the step has another model to fall back to, which is then the retry.
    pub retry_timeouts: bool,
    /// The tools sent under another name than their own, `(given, wire)`: the model's calls
    /// of them are given their own back (see `wire_names.rs`).
    pub renamed_tools: Vec<(String, String)>,
}

impl ChatRequest {
    /// A request for `model`: the system prompt and the conversation, the answer capped at
    /// `max_output_tokens`, and the rest as a provider takes it when nothing is said (no
    /// temperature, stop sequences or tools; several calls a turn allowed; the operator's base
    /// URL; no context window; the provider's own reasoning effort; no prompt cache). The others
    /// are set by name: `ChatRequest { tools, ..ChatRequest::new(…) }`.
    pub fn new(
        model: String,
        system: String,
        messages: Vec<ChatMessage>,
        max_output_tokens: u32,
    ) -> Self {
        Self {
            model,
            system,
            messages,
            max_output_tokens,
            temperature: None,
            stop: Vec::new(),
            tools: Vec::new(),
            require_tool: false,
            parallel_tool_calls: true,
            base_url: None,
            context_window: None,
            reasoning_effort: None,
            prompt_cache: None,
            strict_tools: false,
            clear_tool_uses: None,
            retry_timeouts: true,
            renamed_tools: Vec::new(),
        }
    }

    /// About how many bytes of text the request carries: what its body is sized for.
    pub fn text_bytes(&self) -> usize {
        self.system.len()
            + self
                .messages
                .iter()
                .map(|m| m.content.len() + m.calls.len() * 256)
                .sum::<usize>()
            + self.tools.len() * 512
    }
}

/// What a provider needs to cache the prompt's stable part.
#[derive(Debug, Clone)]
pub struct PromptCache {
    /// The same for every step of a session and saying nothing of its id (OpenAI's
    /// `prompt_cache_key`).
    pub key: String,
    /// Tokens of the tools and the system prompt.
    pub system_tokens: u32,
    /// Tokens of everything before what is new in the step (`ChatMessage::new_from`).
    pub prefix_tokens: u32,
    /// How long the provider keeps it (`llm_config.prompt_cache_ttl`); `None`: its default.
    pub ttl: Option<CacheTtl>,
}

/// `llm_config.prompt_cache_ttl`: the provider's own cache lifetimes. Anthropic has `5m` and
/// `1h` (its cache-control `ttl`), OpenAI `in_memory` and `24h` (its
/// `prompt_cache_retention`); each provider says which it takes (`ProviderApi::cache_ttls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub enum CacheTtl {
    #[serde(rename = "5m")]
    FiveMinutes,
    #[serde(rename = "1h")]
    OneHour,
    #[serde(rename = "in_memory")]
    InMemory,
    #[serde(rename = "24h")]
    OneDay,
}

impl CacheTtl {
    /// The value as the provider spells it (and the request did).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FiveMinutes => "5m",
            Self::OneHour => "1h",
            Self::InMemory => "in_memory",
            Self::OneDay => "24h",
        }
    }
}

impl PromptCache {
    /// The key for a session: a SHA-256 of its id, so the provider learns nothing of it.
    pub fn key_for(session_id: &str) -> String {
        use sha2::{Digest, Sha256};
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut hasher = Sha256::new();
        hasher.update(b"reactstep-prompt-cache:");
        hasher.update(session_id.as_bytes());
        let mut key = String::with_capacity(3 + 32);
        key.push_str("rs-");
        for b in hasher.finalize().iter().take(16) {
            key.push(char::from(HEX[usize::from(b >> 4)]));
            key.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        key
    }
}

/// A tool as the client declared it: a name, what it does, and a JSON Schema for its arguments.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::{in_turn_folded, ChatMessage, ChatRole, PromptCache};

    #[test]
    fn text_inside_a_turn_goes_with_the_last_result_and_a_new_turn_stays_one() {
        let mut result = ChatMessage::text(ChatRole::Tool, "42 lines".into());
        result.answers = Some("c1".into());
        let mut inside = ChatMessage::text(ChatRole::User, "focused file".into());
        inside.in_turn = true;
        let asked = ChatMessage::text(ChatRole::User, "and now?".into());
        let messages = [result.clone(), inside.clone(), asked.clone()];
        let folded = in_turn_folded(&messages);
        assert_eq!(folded.len(), 2);
        assert_eq!(folded[0], (&result, Some("focused file")));
        assert_eq!(folded[1], (&asked, None));
        // Only right after a result: anywhere else it is a user message like any other.
        let messages = [asked.clone(), inside.clone()];
        assert_eq!(in_turn_folded(&messages).len(), 2);
        // And only one: a second has no result right before it.
        let messages = [result.clone(), inside.clone(), inside.clone()];
        assert_eq!(in_turn_folded(&messages).len(), 2);
    }

    use sha2::{Digest, Sha256};

    #[test]
    fn a_prompt_cache_key_is_the_first_half_of_the_sessions_digest_in_hex() {
        for session in ["", "s-1", "é😀 \"x\"", &"long".repeat(100)] {
            let digest = Sha256::digest(format!("reactstep-prompt-cache:{session}"));
            let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
            assert_eq!(PromptCache::key_for(session), format!("rs-{hex}"));
        }
        assert_ne!(PromptCache::key_for("a"), PromptCache::key_for("b"));
    }
}
