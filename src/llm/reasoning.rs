//! Reasoning models: how hard the model is asked to think, and what of its thinking must travel
//! with the conversation. Anthropic's thinking blocks (signed, some redacted) and the
//! `reasoning_content` of OpenAI-compatible servers come back in an opaque state the client keeps
//! on the assistant turn and sends back untouched.

use serde::{Deserialize, Serialize};

/// `llm_config.reasoning_effort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    None,
    Minimal,
    Low,
    Medium,
    High,
}

impl ReasoningEffort {
    /// The name OpenAI's `reasoning_effort` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Minimal => "minimal",
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }

    /// Anthropic's `thinking.budget_tokens` for the effort (1,024 is the API's least), or `None`:
    /// no thinking.
    pub fn thinking_budget(self) -> Option<u32> {
        match self {
            Self::None => None,
            Self::Minimal => Some(1024),
            Self::Low => Some(2048),
            Self::Medium => Some(8192),
            Self::High => Some(16384),
        }
    }
}

/// What a reply's reasoning leaves for the next request: opaque to the client, which returns it
/// on the assistant turn (`reasoning_state`) as it got it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReasoningState {
    /// Anthropic's thinking blocks, in order, signatures intact.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<ThinkingBlock>,
    /// The `reasoning_content` of an OpenAI-compatible server (DeepSeek, vLLM, Qwen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

/// A thinking block as Anthropic sends it and wants it back.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ThinkingBlock {
    Thinking { thinking: String, signature: String },
    RedactedThinking { data: String },
}

impl ReasoningState {
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty() && self.reasoning_content.as_deref().is_none_or(str::is_empty)
    }

    /// The reasoning a person can read: the thinking blocks' text, or the reasoning content.
    pub fn text(&self) -> String {
        let thinking: Vec<&str> = self
            .blocks
            .iter()
            .filter_map(|b| match b {
                ThinkingBlock::Thinking { thinking, .. } => Some(thinking.trim()),
                ThinkingBlock::RedactedThinking { .. } => None,
            })
            .filter(|t| !t.is_empty())
            .collect();
        if thinking.is_empty() {
            return self
                .reasoning_content
                .as_deref()
                .unwrap_or_default()
                .trim()
                .to_string();
        }
        thinking.join("\n\n")
    }

    /// The texts that go back with a turn and take room in the prompt: each block's thinking
    /// (a redacted block's data), then the reasoning content.
    pub fn counted_parts(&self) -> impl Iterator<Item = &str> {
        let blocks = self.blocks.iter().map(|b| match b {
            ThinkingBlock::Thinking { thinking, .. } => thinking.as_str(),
            ThinkingBlock::RedactedThinking { data } => data.as_str(),
        });
        blocks.chain(self.reasoning_content.as_deref())
    }

    /// The bytes of what goes back with a turn.
    pub fn counted_len(&self) -> usize {
        self.counted_parts().map(str::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_round_trips_and_refuses_what_it_does_not_know() {
        let raw = r#"{"blocks":[{"type":"thinking","thinking":"hm","signature":"s1"},{"type":"redacted_thinking","data":"Enc"}]}"#;
        let state: ReasoningState = serde_json::from_str(raw).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(serde_json::to_string(&state).ok().as_deref(), Some(raw));
        assert_eq!(state.text(), "hm");
        for bad in [
            r#"{"blocks":[{"type":"thinking","thinking":"hm"}]}"#,
            r#"{"blocks":[{"type":"text","text":"hm"}]}"#,
            r#"{"other":1}"#,
            r#"{"blocks":[{"type":"redacted_thinking","data":"x","extra":1}]}"#,
        ] {
            assert!(
                serde_json::from_str::<ReasoningState>(bad).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn reasoning_content_is_the_text_when_there_are_no_blocks() {
        let state = ReasoningState {
            reasoning_content: Some(" think ".into()),
            ..ReasoningState::default()
        };
        assert_eq!(state.text(), "think");
        assert!(!state.is_empty());
        assert!(ReasoningState::default().is_empty());
    }
}
