//! Reasoning models: how hard the model is asked to think, and what of its state must travel
//! with the conversation. Anthropic's thinking blocks (signed, some redacted), the
//! `reasoning_content` of OpenAI-compatible servers, Gemini's thought signatures and the Responses
//! API's output items come back in an opaque state the client keeps on the assistant turn and
//! sends back untouched. The state names the provider, wire and model that made it: it is only
//! valid there.

use serde::{Deserialize, Serialize};

/// `llm_config.reasoning_effort`.
/// From least to most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
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
#[serde(remote = "Self", deny_unknown_fields)]
pub struct ReasoningState {
    /// Anthropic's thinking blocks, in order, signatures intact.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<ThinkingBlock>,
    /// The `reasoning_content` of an OpenAI-compatible server (DeepSeek, vLLM, Qwen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Gemini's thought signatures, by the call they came with (only the first call of a
    /// parallel set has one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thought_signatures: Vec<CallSignature>,
    /// The Responses API's output items of the turn (reasoning with its encrypted content,
    /// messages with their `phase`, function calls), in order and as they came: they go back
    /// as they are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<serde_json::Value>,
    /// Who made the state: it goes back only to the same provider, wire and model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<StateOrigin>,
    /// Where an Anthropic reply's blocks stood, when thinking came between its text and calls
    /// (interleaved thinking): the turn goes back in that order, as the API wants it. Absent
    /// for the usual order, thinking first, then text, then calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layout: Vec<Slot>,
}

/// A block of an Anthropic reply, by kind, for [`ReasoningState::layout`]. In the order a turn
/// is rebuilt in when it has no layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Slot {
    /// A thinking block, redacted or not.
    Thinking,
    Text,
    ToolUse,
}

/// The layout worth keeping of a reply whose blocks came as `slots`: none when they came in
/// the usual order.
pub fn layout_of(slots: Vec<Slot>) -> Vec<Slot> {
    if slots.is_sorted() {
        Vec::new()
    } else {
        slots
    }
}

/// A thought signature and the call it came with.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct CallSignature {
    pub call_id: String,
    pub signature: String,
}

/// The provider, wire (`chat`, `responses`) and model a state was made by.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct StateOrigin {
    pub provider: String,
    pub api: String,
    pub model: String,
}

/// A thinking block as Anthropic sends it and wants it back.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(
    remote = "Self",
    tag = "type",
    rename_all = "snake_case",
    deny_unknown_fields
)]
pub enum ThinkingBlock {
    Thinking { thinking: String, signature: String },
    RedactedThinking { data: String },
}

impl ReasoningState {
    /// Whether there is nothing to send back (an origin alone is nothing).
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
            && self.reasoning_content.as_deref().is_none_or(str::is_empty)
            && self.thought_signatures.is_empty()
            && self.items.is_empty()
    }

    /// The signature that came with call `id`, if any.
    pub fn signature_of(&self, id: &str) -> Option<&str> {
        self.thought_signatures
            .iter()
            .find(|s| s.call_id == id)
            .map(|s| s.signature.as_str())
    }

    /// The reasoning a person can read: the thinking blocks' text, or the reasoning content, or
    /// the summaries of the Responses API's reasoning items.
    pub fn text(&self) -> String {
        thought_parts(self.readable_parts().into_iter().map(|(p, _)| p))
    }

    /// [`Self::text`] in two: what was reasoned before the reply's text began, and what after
    /// it (thinking between text blocks, a reasoning item between messages). The step's thought
    /// puts the second after what the model wrote, where it came, as its stream tells it.
    pub fn text_around_writing(&self) -> (String, String) {
        let (late, early): (Vec<_>, Vec<_>) = self.readable_parts().into_iter().partition(|p| p.1);
        let joined = |parts: Vec<(&str, bool)>| thought_parts(parts.into_iter().map(|(p, _)| p));
        (joined(early), joined(late))
    }

    /// Each part of the readable reasoning, trimmed, none blank (the reasoning content alone
    /// may be), and whether it came after the reply's text began.
    fn readable_parts(&self) -> Vec<(&str, bool)> {
        let early = self.thinking_before_text();
        let thinking: Vec<(&str, bool)> = (self.blocks.iter().enumerate())
            .filter_map(|(i, b)| match b {
                ThinkingBlock::Thinking { thinking, .. } => Some((thinking.trim(), i >= early)),
                ThinkingBlock::RedactedThinking { .. } => None,
            })
            .filter(|(t, _)| !t.is_empty())
            .collect();
        match (&self.reasoning_content, thinking.is_empty()) {
            (None, true) => self.summaries(),
            (Some(content), true) => vec![(content.trim(), false)],
            (_, false) => thinking,
        }
    }

    /// How many thinking blocks came before the first text block (all of them in the usual
    /// order, which keeps no layout).
    fn thinking_before_text(&self) -> usize {
        let Some(text) = self.layout.iter().position(|s| *s == Slot::Text) else {
            return self.blocks.len();
        };
        self.layout[..text]
            .iter()
            .filter(|s| **s == Slot::Thinking)
            .count()
    }

    /// The summaries of the Responses API's reasoning items, and whether each came after a
    /// message holding text.
    fn summaries(&self) -> Vec<(&str, bool)> {
        let mut wrote = false;
        let mut parts = Vec::new();
        for item in &self.items {
            match item["type"].as_str() {
                Some("reasoning") => parts.extend(
                    (summary_texts(item).map(str::trim))
                        .filter(|t| !t.is_empty())
                        .map(|t| (t, wrote)),
                ),
                Some("message") => wrote |= !message_text(item).is_empty(),
                _ => {}
            }
        }
        parts
    }

    /// The texts that go back with a turn and take room in the prompt: each block's thinking
    /// (a redacted block's data), the reasoning content, the signatures, and each reasoning
    /// item's summary and encrypted content (a message's or call's text is the turn's own).
    pub fn counted_parts(&self) -> impl Iterator<Item = &str> {
        let blocks = self.blocks.iter().map(|b| match b {
            ThinkingBlock::Thinking { thinking, .. } => thinking.as_str(),
            ThinkingBlock::RedactedThinking { data } => data.as_str(),
        });
        let signatures = self.thought_signatures.iter().map(|s| s.signature.as_str());
        blocks
            .chain(self.reasoning_content.as_deref())
            .chain(signatures)
            .chain(self.reasoning_items().flat_map(reasoning_item_texts))
    }

    /// The text of each of the Responses API's messages that holds some, in order, and whether
    /// it is marked `commentary`.
    pub fn messages(&self) -> Vec<(bool, String)> {
        let messages = self.items.iter().filter(|i| i["type"] == "message");
        let read = messages.map(|m| (m["phase"] == "commentary", message_text(m)));
        read.filter(|(_, text)| !text.is_empty()).collect()
    }

    /// The Responses API's reasoning items among the state's items.
    fn reasoning_items(&self) -> impl Iterator<Item = &serde_json::Value> {
        self.items.iter().filter(|i| i["type"] == "reasoning")
    }

    /// The bytes of what goes back with a turn.
    pub fn counted_len(&self) -> usize {
        self.counted_parts().map(str::len).sum()
    }
}

/// The parts of a thought that say something, a blank line apart: what was reasoned, a
/// preamble, what the model wrote as its thought (the stream tells them so too).
pub fn thought_parts<'p>(parts: impl IntoIterator<Item = &'p str>) -> String {
    let parts: Vec<&str> = parts.into_iter().filter(|p| !p.is_empty()).collect();
    parts.join("\n\n")
}

/// A Responses message's text: its `output_text` parts (a refusal part does not stream as it
/// comes).
fn message_text(message: &serde_json::Value) -> String {
    let parts = message["content"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let texts = parts.iter().filter(|p| p["type"] == "output_text");
    texts.filter_map(|p| p["text"].as_str()).collect()
}

/// The readable summary of a Responses reasoning item.
fn summary_texts(item: &serde_json::Value) -> impl Iterator<Item = &str> {
    let parts = item["summary"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    parts.iter().filter_map(|p| p["text"].as_str())
}

/// What of a Responses reasoning item takes room when it goes back.
fn reasoning_item_texts(item: &serde_json::Value) -> impl Iterator<Item = &str> {
    summary_texts(item).chain(item["encrypted_content"].as_str())
}

crate::json::objects_only!(; both: ReasoningState, CallSignature, StateOrigin, ThinkingBlock);

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

    /// What came after the text began is told apart, by the layout of thinking blocks or the
    /// order of Responses items; a message of a refusal alone, or of no text, is not text.
    #[test]
    fn reasoning_after_the_text_is_told_apart() {
        let block = |t: &str| ThinkingBlock::Thinking {
            thinking: t.into(),
            signature: "s".into(),
        };
        let mut state = ReasoningState {
            blocks: vec![block("one"), block("two"), block(" three ")],
            layout: vec![Slot::Thinking, Slot::Text, Slot::Thinking, Slot::Thinking],
            ..ReasoningState::default()
        };
        let around = state.text_around_writing();
        assert_eq!(around, ("one".into(), "two\n\nthree".into()));
        assert_eq!(state.text(), "one\n\ntwo\n\nthree");
        state.layout.clear();
        assert_eq!(state.text_around_writing().1, "");
        let reasoning = |t: &str| serde_json::json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": t}]});
        let message =
            |part: serde_json::Value| serde_json::json!({"type": "message", "content": [part]});
        let state = ReasoningState {
            items: vec![
                reasoning("R1"),
                message(serde_json::json!({"type": "refusal", "refusal": "no"})),
                message(serde_json::json!({"type": "output_text", "text": ""})),
                reasoning("R2"),
                message(serde_json::json!({"type": "output_text", "text": "Hi"})),
                reasoning(" "),
                reasoning("R3"),
            ],
            ..ReasoningState::default()
        };
        assert_eq!(
            state.text_around_writing(),
            ("R1\n\nR2".into(), "R3".into())
        );
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
