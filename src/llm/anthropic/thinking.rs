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

/// Whether the model has strict tool use: Claude Opus 4.1, the 4.5 models and every later one;
/// not Claude 4.0, 3 or older, nor a name without a version.
pub fn takes_strict(model: &str) -> bool {
    let opus = model.to_ascii_lowercase().contains("opus");
    claude_version(model).is_some_and(|v| v >= (4, 5) || (opus && v == (4, 1)))
}

/// The most output tokens (thinking included) the model writes, where the service knows it:
/// Anthropic refuses a `max_tokens` past it. None for the models after 4.5, whose caps grow.
pub fn max_output_tokens(model: &str) -> Option<u32> {
    let opus = model.to_ascii_lowercase().contains("opus");
    match claude_version(model)? {
        (3, 7) | (4, 5) => Some(64_000),
        (4, 0 | 1) if opus => Some(32_000),
        (4, 0) => Some(64_000),
        (3, 5) => Some(8_192),
        (3, _) => Some(4_096),
        _ => None,
    }
}

/// `max_tokens` and the thinking budget for `answer` tokens of room and a `budget`, within the
/// model's cap: the budget gives way first, down to Anthropic's least (1,024), then the answer.
pub fn within_cap(answer: u32, budget: u32, cap: Option<u32>) -> (u32, u32) {
    const LEAST_BUDGET: u32 = 1024;
    let wanted = answer.saturating_add(budget);
    match cap {
        Some(cap) if wanted > cap && budget > 0 => {
            let budget = cap.saturating_sub(answer).max(LEAST_BUDGET).min(budget);
            (cap, budget)
        }
        _ => (wanted, budget),
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
    fn strict_tool_use_is_for_opus_4_1_the_4_5_models_and_later() {
        for model in [
            "claude-sonnet-4-5",
            "claude-opus-4-1-20250805",
            "claude-haiku-4-5",
            "claude-opus-4-7",
            "claude-sonnet-5",
            "Claude-Opus-4-6",
        ] {
            assert!(takes_strict(model), "{model}");
        }
        for model in [
            "claude-sonnet-4-20250514",
            "claude-sonnet-4-0",
            "claude-opus-4-0",
            "claude-3-5-haiku-latest",
            "claude-3-7-sonnet-20250219",
            "claude-2.1",
            "gpt-4o",
            "claude-sonnet-latest",
        ] {
            assert!(!takes_strict(model), "{model}");
        }
    }

    #[test]
    fn the_thinking_budget_gives_way_to_the_models_cap_first() {
        assert_eq!(max_output_tokens("claude-sonnet-4-5"), Some(64_000));
        assert_eq!(max_output_tokens("claude-opus-4-1-20250805"), Some(32_000));
        assert_eq!(max_output_tokens("claude-opus-4-7"), None);
        // 60,000 of room and a high budget: the budget is what is left.
        assert_eq!(within_cap(60_000, 16_384, Some(64_000)), (64_000, 4_000));
        // No room left for a budget: Anthropic's least, the answer's room made smaller.
        assert_eq!(within_cap(63_900, 16_384, Some(64_000)), (64_000, 1_024));
        assert_eq!(within_cap(1_000, 16_384, Some(64_000)), (17_384, 16_384));
        assert_eq!(within_cap(60_000, 16_384, None), (76_384, 16_384));
        assert_eq!(within_cap(70_000, 0, Some(64_000)), (70_000, 0));
    }

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
