//! Which thinking a Claude model is asked for. Claude 4.5 and earlier take only extended
//! thinking with a token budget; from 4.6 on, adaptive thinking (`{"type": "adaptive"}` with
//! `output_config.effort`) is the form Anthropic documents (the budget form is deprecated on
//! 4.6 and refused from Opus 4.7 and the Claude 5 family on).

use super::wire::{OutputConfig, Thinking};
use crate::llm::{ChatMessage, ChatRequest, ChatRole, ReasoningEffort};

/// The thinking the request's reasoning effort asks for, if any, and its effort setting.
pub fn thinking(request: &ChatRequest) -> Option<(Thinking, Option<OutputConfig>)> {
    let effort = request.reasoning_effort?;
    let budget_tokens = effort.thinking_budget()?;
    if adaptive(&request.model) {
        let thinking = Thinking {
            kind: "adaptive",
            budget_tokens: None,
        };
        return Some((
            thinking,
            Some(OutputConfig {
                effort: effort_name(effort),
            }),
        ));
    }
    let thinking = Thinking {
        kind: "enabled",
        budget_tokens: Some(budget_tokens),
    };
    Some((thinking, None))
}

/// Whether the conversation's last tool call went back without Claude's thinking before it:
/// another provider or model made it, its state was not sent (made elsewhere) or the client
/// kept none. Anthropic refuses thinking on such a turn ("a final assistant message must start
/// with a thinking block").
pub fn last_call_unthought(messages: &[ChatMessage]) -> bool {
    let last_call = messages
        .iter()
        .rev()
        .find(|m| m.role == ChatRole::Assistant && !m.calls.is_empty());
    last_call.is_some_and(|m| m.reasoning.as_ref().is_none_or(|r| r.blocks.is_empty()))
}

/// `output_config.effort` for a reasoning effort (Anthropic has no `minimal`).
fn effort_name(effort: ReasoningEffort) -> &'static str {
    match effort {
        ReasoningEffort::None | ReasoningEffort::Minimal | ReasoningEffort::Low => "low",
        ReasoningEffort::Medium => "medium",
        ReasoningEffort::High => "high",
    }
}

/// Whether the model takes adaptive thinking: Claude 4.6 and later. A name without a version
/// keeps the budget form.
pub fn adaptive(model: &str) -> bool {
    claude_version(model).is_some_and(|v| v >= (4, 6))
}

/// A Claude model's version from its id, whichever side of the family it is written on
/// (`claude-opus-4-7`, `claude-sonnet-5`, `claude-3-7-sonnet-20250219`): the first short number
/// is the major version, a short number right after it the minor; a date is no version.
fn claude_version(model: &str) -> Option<(u32, u32)> {
    let lower = model.to_ascii_lowercase();
    let (_, name) = lower.split_once("claude")?;
    let mut parts = name
        .split(['-', '.', '@', ':'])
        .skip_while(|p| !is_version_number(p));
    let major = parts.next()?.parse().ok()?;
    let minor = parts
        .next()
        .filter(|p| is_version_number(p))
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    Some((major, minor))
}

fn is_version_number(part: &str) -> bool {
    (1..=2).contains(&part.len()) && part.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_on_either_side_of_the_family() {
        for (model, version) in [
            ("claude-opus-4-7", Some((4, 7))),
            ("claude-sonnet-4-6", Some((4, 6))),
            ("claude-opus-4-6-v1", Some((4, 6))),
            ("claude-sonnet-5", Some((5, 0))),
            ("claude-opus-5-20260301", Some((5, 0))),
            ("claude-haiku-4-5-20251001", Some((4, 5))),
            ("claude-3-7-sonnet-20250219", Some((3, 7))),
            ("claude-3-5-haiku-latest", Some((3, 5))),
            ("anthropic.claude-sonnet-4-6", Some((4, 6))),
            ("claude-sonnet-latest", None),
            ("gpt-4o", None),
        ] {
            assert_eq!(claude_version(model), version, "{model}");
        }
    }

    #[test]
    fn models_from_4_6_on_think_adaptively_and_older_ones_by_budget() {
        for model in [
            "claude-opus-4-7",
            "claude-sonnet-4-6",
            "claude-sonnet-5",
            "claude-opus-4-6",
        ] {
            assert!(adaptive(model), "{model}");
        }
        for model in [
            "claude-sonnet-4-5",
            "claude-opus-4-5-20251101",
            "claude-haiku-4-5",
            "claude-3-7-sonnet-latest",
            "claude-sonnet-4-20250514",
            "claude-unversioned",
        ] {
            assert!(!adaptive(model), "{model}");
        }
    }

    #[test]
    fn the_effort_maps_to_anthropics_levels() {
        let request = |model: &str, effort| ChatRequest {
            reasoning_effort: Some(effort),
            ..ChatRequest::new(model.into(), String::new(), Vec::new(), 100)
        };
        let json = |model, effort| {
            thinking(&request(model, effort)).map(|(t, o)| {
                (
                    serde_json::to_value(t).unwrap_or_default(),
                    serde_json::to_value(o).unwrap_or_default(),
                )
            })
        };
        let (t, o) = json("claude-opus-4-7", ReasoningEffort::Medium).unwrap_or_default();
        assert_eq!(t, serde_json::json!({"type": "adaptive"}));
        assert_eq!(o, serde_json::json!({"effort": "medium"}));
        let (_, o) = json("claude-opus-4-7", ReasoningEffort::Minimal).unwrap_or_default();
        assert_eq!(o["effort"], "low");
        let (t, o) = json("claude-sonnet-4-5", ReasoningEffort::High).unwrap_or_default();
        assert_eq!(
            t,
            serde_json::json!({"type": "enabled", "budget_tokens": 16384})
        );
        assert!(o.is_null());
        assert!(json("claude-opus-4-7", ReasoningEffort::None).is_none());
    }
}
