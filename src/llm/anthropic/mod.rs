//! Anthropic Messages API: `x-api-key` and `anthropic-version` headers, a top-level `system`,
//! a required `max_tokens`, `stop_sequences`, and content returned as typed blocks.

mod stream;
mod thinking;
mod wire;

use super::bounded::{MAX_BLOCKS, MAX_CALLS_PER_TURN};
use super::provider::{
    Capabilities, Counting, Facts, KeyHeader, Outgoing, ProviderApi, Target, Temperature,
};
use super::stream_events::StreamDecoder;
use super::ChatRole;
use super::{
    layout_of, ApiKey, ChatRequest, Completion, NativeCall, ReasoningState, Slot, ThinkingBlock,
    Usage, WireError,
};
use thinking::thinking;
use wire::{
    finish, signed, Block, Body, CacheControl, Content, Message, OutBlock, Reply, System,
    SystemBlock, Tool, ToolChoice, EPHEMERAL,
};

const API_VERSION: &str = "2023-06-01";

#[derive(Debug)]
pub struct Anthropic;

pub const ANTHROPIC: Anthropic = Anthropic;

const FACTS: Facts = Facts {
    name: "anthropic",
    default_base_url: "https://api.anthropic.com",
    model_prefixes: &["claude-"],
    key_prefixes: &["sk-ant-"],
    configured_headers: &[],
    capabilities: Capabilities {
        native_tools: true,
        native_by_default: true,
        parallel_tool_calls: true,
        prompt_caching: true,
        reasoning: true,
        counting: Counting::Margin,
        requires_key: true,
        retry_timeouts: true,
        max_temperature: Temperature(10),
    },
};

impl ProviderApi for Anthropic {
    fn facts(&self) -> &Facts {
        &FACTS
    }

    fn build(
        &self,
        target: &Target<'_>,
        request: &ChatRequest,
        key: Option<&ApiKey>,
        stream: bool,
    ) -> Result<Outgoing, WireError> {
        let mut body = body(request, true);
        body.stream = stream;
        let url = format!("{}/v1/messages", target.base_url.trim_end_matches('/'));
        let mut out = Outgoing::json(url, &body, request.text_bytes())?;
        if body.context_management.is_some() {
            out = out.with_header("anthropic-beta", wire::CONTEXT_MANAGEMENT_BETA);
        }
        out.with_header("anthropic-version", API_VERSION)
            .with_headers(target)
            .with_key(KeyHeader::Named("x-api-key"), key)
    }

    fn decode(&self, body: &[u8]) -> Result<Completion, WireError> {
        let reply: Reply =
            serde_json::from_slice(body).map_err(|e| WireError::json("the reply", &e))?;
        if reply.content.dropped > 0 {
            // Text or thinking past the bound would be lost: no step can be read from it.
            return Err(WireError::Shape(format!(
                "the reply holds more than {MAX_BLOCKS} content blocks"
            )));
        }
        let done = completion(reply);
        signed(&done.reasoning.blocks)?;
        Ok(done)
    }

    /// With thinking on, Anthropic refuses a forced tool choice and any temperature but 1.
    fn adjust(&self, request: &mut ChatRequest) -> Vec<String> {
        let strict = thinking::takes_strict(&request.model)
            .then_some(&crate::llm::strict_schema::ANTHROPIC_STRICT);
        let mut warnings = crate::llm::strict_schema::warnings(request, strict, FACTS.name);
        if thinking(request).is_none() {
            return warnings;
        }
        if thinking::last_call_unthought(&request.messages) {
            request.reasoning_effort = None;
            warnings.push(
                "thinking was not asked for in this step: the turn's last tool call went back without Claude's thinking (another provider or model made it, or its reasoning_state was not sent), and Anthropic refuses thinking on such a turn"
                    .to_string(),
            );
            return warnings;
        }
        if request.require_tool && !request.tools.is_empty() {
            request.require_tool = false;
            warnings.push(
                "with thinking on, Anthropic takes no forced tool choice: tool_choice was set to auto"
                    .to_string(),
            );
        }
        if let Some(t) = request.temperature.filter(|&t| t != 1.0) {
            request.temperature = None;
            warnings.push(format!(
                "with thinking on, Anthropic takes no temperature but 1: {t} was not sent"
            ));
        }
        warnings.extend(budget_cut(request));
        warnings
    }

    fn output_reserve(&self, effort: Option<crate::llm::ReasoningEffort>) -> u32 {
        effort.and_then(|e| e.thinking_budget()).unwrap_or(0)
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(stream::EventDecoder::default())
    }

    /// `tool_use` ids match `^[a-zA-Z0-9_-]+$`.
    fn call_ids(&self) -> crate::llm::call_ids::IdRule {
        crate::llm::call_ids::IdRule::Word
    }

    fn cache_ttls(&self) -> &'static [crate::llm::CacheTtl] {
        &[
            crate::llm::CacheTtl::FiveMinutes,
            crate::llm::CacheTtl::OneHour,
        ]
    }

    fn clears_tool_results(&self) -> bool {
        true
    }

    fn counter_name(&self) -> Option<&'static str> {
        Some("anthropic_count_tokens")
    }

    fn count_request(
        &self,
        target: &Target<'_>,
        request: &ChatRequest,
        key: Option<&ApiKey>,
    ) -> Option<Result<Outgoing, WireError>> {
        // Breakpoints change no count: the count asks without them.
        let body = body(request, false);
        let count = wire::CountBody {
            model: body.model,
            system: body.system,
            messages: body.messages,
            tools: body.tools,
            tool_choice: body.tool_choice,
            thinking: body.thinking,
        };
        let url = format!(
            "{}/v1/messages/count_tokens",
            target.base_url.trim_end_matches('/')
        );
        Some(
            Outgoing::json(url, &count, request.text_bytes()).and_then(|out| {
                out.with_header("anthropic-version", API_VERSION)
                    .with_headers(target)
                    .with_key(KeyHeader::Named("x-api-key"), key)
            }),
        )
    }

    fn decode_count(&self, body: &[u8]) -> Result<u64, WireError> {
        let counted: wire::Counted =
            serde_json::from_slice(body).map_err(|e| WireError::json("the count", &e))?;
        Ok(counted.input_tokens)
    }
}

/// The system prompt, with a cache breakpoint after it (and the tools before it) when that part
/// is long enough for the model to cache.
fn system(request: &ChatRequest, min_cacheable: u32) -> System<'_> {
    let cached = request
        .prompt_cache
        .as_ref()
        .is_some_and(|c| c.system_tokens >= min_cacheable);
    if !cached || request.system.is_empty() {
        return System::Text(&request.system);
    }
    System::Blocks([SystemBlock {
        kind: "text",
        text: &request.system,
        cache_control: cache_control(request),
    }])
}

/// The fewest tokens a prompt prefix needs for the model to cache it (a shorter one is sent
/// without a breakpoint: the API would not cache it anyway). A family not listed gets 1,024:
/// a breakpoint on a prefix too short to cache costs nothing, one left out loses the cache.
fn min_cacheable(model: &str) -> u32 {
    let m = model.to_ascii_lowercase();
    if ["opus-4-5", "opus-4-6", "haiku-4-5"]
        .iter()
        .any(|p| m.contains(p))
    {
        4096
    } else if m.contains("opus-4-7") || m.contains("haiku") {
        2048
    } else {
        // Sonnet 4.x (4.6 included), Opus 4 and 4.1, and the families after these.
        1024
    }
}

#[cfg(test)]
mod min_cacheable_tests {
    #[test]
    fn each_family_has_its_documented_least_cacheable_prefix() {
        for (model, least) in [
            ("claude-opus-4-7", 2048),
            ("claude-opus-4-6", 4096),
            ("claude-opus-4-5-20251101", 4096),
            ("claude-haiku-4-5", 4096),
            ("claude-3-5-haiku-20241022", 2048),
            ("claude-sonnet-4-6", 1024),
            ("claude-sonnet-4-5-20250929", 1024),
            ("claude-opus-4-1-20250805", 1024),
        ] {
            assert_eq!(super::min_cacheable(model), least, "{model}");
        }
    }
}

fn body(request: &ChatRequest, breakpoints: bool) -> Body<'_> {
    let min_cacheable = if breakpoints {
        min_cacheable(&request.model)
    } else {
        u32::MAX
    };
    let (thinking, output_config) = thinking(request).unzip();
    let breakpoint = request
        .prompt_cache
        .as_ref()
        .filter(|c| c.prefix_tokens >= min_cacheable)
        .map(|_| cache_control(request));
    // The thinking budget comes on top of the room the answer was given.
    // Adaptive thinking has no budget of its own: it gets the room the effort's budget would.
    let thinking_tokens = request
        .reasoning_effort
        .filter(|_| thinking.is_some())
        .and_then(|e| e.thinking_budget())
        .unwrap_or(0);
    let cap = thinking::max_output_tokens(&request.model);
    let (max_tokens, budget) =
        thinking::within_cap(request.max_output_tokens, thinking_tokens, cap);
    let mut thinking = thinking;
    if let Some(t) = thinking.as_mut().filter(|t| t.budget_tokens.is_some()) {
        t.budget_tokens = Some(budget);
    }
    Body {
        model: &request.model,
        max_tokens,
        system: system(request, min_cacheable),
        messages: messages(&request.messages, thinking.is_some(), breakpoint),
        temperature: request.temperature,
        stop_sequences: &request.stop,
        tools: request
            .tools
            .iter()
            .map(|t| Tool {
                name: &t.name,
                description: &t.description,
                input_schema: &t.parameters,
                strict: request.strict_tools
                    && crate::llm::strict_schema::anthropic_strict_misfit(&t.parameters).is_none(),
            })
            .collect(),
        tool_choice: tool_choice(request),
        thinking,
        output_config: output_config.flatten(),
        context_management: request
            .clear_tool_uses
            .map(wire::ContextManagement::keeping),
        stream: false,
    }
}

/// The conversation in Anthropic's structure: an assistant's calls as `tool_use` blocks, and
/// the results answering them as `tool_result` blocks, all of one turn in the next user message
/// and before any text of it (the API requires both). With thinking on, an assistant turn's
/// thinking blocks lead it, as they came. With `breakpoint`, the block before what is new in the
/// step (or the last block, when nothing is) carries a cache breakpoint, and user text goes as
/// blocks (as it must where a message is split there), the same bytes at every step.
fn messages(
    chat: &[crate::llm::ChatMessage],
    thinking: bool,
    breakpoint: Option<CacheControl>,
) -> Vec<Message<'_>> {
    let mut out: Vec<Message<'_>> = Vec::with_capacity(chat.len());
    let mut marked = breakpoint.is_none();
    let control = breakpoint.unwrap_or(EPHEMERAL);
    let breakpoint = breakpoint.is_some();
    for m in chat {
        let thought = m
            .reasoning
            .as_ref()
            .filter(|_| thinking)
            .map(|r| r.blocks.iter().map(thinking_block).collect::<Vec<_>>())
            .unwrap_or_default();
        match m.role {
            ChatRole::Assistant if !m.calls.is_empty() || !thought.is_empty() => {
                let calls = m.calls.iter().map(|c| OutBlock::ToolUse {
                    id: &c.id,
                    name: &c.name,
                    input: &c.arguments,
                    cache_control: None,
                });
                let layout = m.reasoning.as_ref().map_or(&[][..], |r| &r.layout[..]);
                let blocks = laid_out(layout, thought, text_block(&m.content), calls.collect());
                out.push(Message {
                    role: "assistant",
                    content: Content::Blocks(blocks),
                });
            }
            ChatRole::Tool => {
                let result = OutBlock::ToolResult {
                    tool_use_id: m.answers.as_deref().unwrap_or_default(),
                    content: &m.content,
                    is_error: m.is_error,
                    cache_control: None,
                };
                push_user_block(&mut out, result);
            }
            ChatRole::User => {
                let (before, new) = split_new(m);
                push_user_text(&mut out, before, breakpoint);
                if let Some(new) = new {
                    // What came before is what the next step sends again.
                    marked = marked || mark_last(&mut out, control);
                    push_user_text(&mut out, new, breakpoint);
                }
            }
            // Anthropic refuses empty text; an empty turn says nothing to keep.
            ChatRole::Assistant if m.content.trim().is_empty() => {}
            ChatRole::Assistant => out.push(Message {
                role: "assistant",
                content: Content::Text(&m.content),
            }),
        }
    }
    if !marked {
        mark_last(&mut out, control);
    }
    out
}

fn text_block(text: &str) -> Option<OutBlock<'_>> {
    (!text.trim().is_empty()).then_some(OutBlock::Text {
        text,
        cache_control: None,
    })
}

/// A user message's text before and from where what is new in the step begins (the join
/// between them left out).
fn split_new(m: &crate::llm::ChatMessage) -> (&str, Option<&str>) {
    match m.new_from {
        Some(at) if m.content.is_char_boundary(at) => {
            let before = &m.content[..at];
            let before = before
                .strip_suffix(crate::llm::MESSAGE_JOIN)
                .unwrap_or(before);
            (before, Some(&m.content[at..]))
        }
        _ => (&m.content, None),
    }
}

/// Adds a block to the conversation's last user message, or opens one.
fn push_user_block<'a>(out: &mut Vec<Message<'a>>, block: OutBlock<'a>) {
    match out.last_mut() {
        Some(Message {
            role: "user",
            content,
        }) => content.push(block),
        _ => out.push(Message {
            role: "user",
            content: Content::Blocks(vec![block]),
        }),
    }
}

/// User text: a message of its own, or a block of the last one when that is the user's too.
/// `blocks`: a message of its own is a text block too, as it is when the step after splits it
/// (the same bytes at every step, for the cache).
fn push_user_text<'a>(out: &mut Vec<Message<'a>>, text: &'a str, blocks: bool) {
    if text.trim().is_empty() {
        return;
    }
    let block = OutBlock::Text {
        text,
        cache_control: None,
    };
    match out.last() {
        Some(Message { role: "user", .. }) => push_user_block(out, block),
        _ if blocks => out.push(Message {
            role: "user",
            content: Content::Blocks(vec![block]),
        }),
        _ => out.push(Message {
            role: "user",
            content: Content::Text(text),
        }),
    }
}

/// Puts a cache breakpoint on the conversation's last block; whether there was one to mark.
fn mark_last(out: &mut [Message<'_>], control: CacheControl) -> bool {
    let Some(last) = out.last_mut() else {
        return false;
    };
    last.content
        .blocks_mut()
        .last_mut()
        .is_some_and(|block| block.mark(control))
}

/// The breakpoints' cache control, with the lifetime the request asked for.
/// The warning for a thinking budget cut to keep the output within the model's cap.
fn budget_cut(request: &ChatRequest) -> Option<String> {
    let (
        wire::Thinking {
            budget_tokens: Some(budget),
            ..
        },
        _,
    ) = thinking(request)?
    else {
        return None;
    };
    let cap = thinking::max_output_tokens(&request.model);
    let (max_tokens, cut) = thinking::within_cap(request.max_output_tokens, budget, cap);
    (cut < budget).then(|| {
        format!(
            "the thinking budget was cut from {budget} to {cut} tokens: with reservedOutputTokens {} the output would pass {}'s {max_tokens}",
            request.max_output_tokens, request.model
        )
    })
}

fn cache_control(request: &ChatRequest) -> CacheControl {
    let ttl = request.prompt_cache.as_ref().and_then(|c| c.ttl);
    CacheControl {
        ttl: ttl.map(crate::llm::CacheTtl::as_str),
        ..EPHEMERAL
    }
}

/// An assistant turn's blocks in the order its reply had them (`layout`), or thinking first,
/// then text, then calls: also when the layout does not fit what the turn holds now.
fn laid_out<'a>(
    layout: &[Slot],
    thought: Vec<OutBlock<'a>>,
    text: Option<OutBlock<'a>>,
    calls: Vec<OutBlock<'a>>,
) -> Vec<OutBlock<'a>> {
    let count = |slot| layout.iter().filter(|s| **s == slot).count();
    let fits = count(Slot::Thinking) == thought.len()
        && count(Slot::ToolUse) == calls.len()
        && (text.is_none() || count(Slot::Text) > 0);
    if !fits {
        return thought.into_iter().chain(text).chain(calls).collect();
    }
    let (mut thought, mut text, mut calls) = (thought.into_iter(), text, calls.into_iter());
    // Text blocks are kept joined: the turn's text goes where the first stood.
    layout
        .iter()
        .filter_map(|slot| match slot {
            Slot::Thinking => thought.next(),
            Slot::Text => text.take(),
            Slot::ToolUse => calls.next(),
        })
        .collect()
}

fn thinking_block(block: &ThinkingBlock) -> OutBlock<'_> {
    match block {
        ThinkingBlock::Thinking {
            thinking,
            signature,
        } => OutBlock::Thinking {
            thinking,
            signature,
        },
        ThinkingBlock::RedactedThinking { data } => OutBlock::RedactedThinking { data },
    }
}

/// `any` when a tool is required, `auto` when only parallel use is to be turned off, and
/// nothing (Anthropic's default, auto) otherwise; never without tools.
fn tool_choice(request: &ChatRequest) -> Option<ToolChoice> {
    if request.tools.is_empty() {
        return None;
    }
    let disable_parallel_tool_use = !request.parallel_tool_calls;
    let kind = if request.require_tool { "any" } else { "auto" };
    (request.require_tool || disable_parallel_tool_use).then_some(ToolChoice {
        kind,
        disable_parallel_tool_use,
    })
}

/// What sets two text blocks apart when thinking stood between them (interleaved thinking): the
/// model wrote them as two, and read as one they ran together (`Thought: aFinal Answer: b`).
pub(super) const TEXTS_APART: &str = "\n\n";

/// Whether a thinking block came after the last text block of `slots`.
fn thought_between(slots: &[Slot]) -> bool {
    let after_text = slots.iter().rev().take_while(|s| **s != Slot::Text);
    after_text.into_iter().any(|s| *s == Slot::Thinking)
}

fn completion(reply: Reply) -> Completion {
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut dropped_calls = 0;
    let mut reasoning = ReasoningState::default();
    let mut slots = Vec::new();
    for block in reply.content.kept {
        match block {
            Block::Text { text: t } => {
                if !t.is_empty() && !text.is_empty() && thought_between(&slots) {
                    text.push_str(TEXTS_APART);
                }
                text.push_str(&t);
                slots.push(Slot::Text);
            }
            Block::ToolUse { .. } if calls.len() >= MAX_CALLS_PER_TURN => dropped_calls += 1,
            Block::ToolUse { id, name, input } => {
                let json = input.as_deref().map_or("", |raw| raw.get());
                calls.push(NativeCall::new(id, name, json));
                slots.push(Slot::ToolUse);
            }
            Block::Thinking {
                thinking,
                signature,
            } => {
                reasoning.blocks.push(ThinkingBlock::Thinking {
                    thinking,
                    signature,
                });
                slots.push(Slot::Thinking);
            }
            Block::RedactedThinking { data } => {
                reasoning
                    .blocks
                    .push(ThinkingBlock::RedactedThinking { data });
                slots.push(Slot::Thinking);
            }
            Block::Other => {}
        }
    }
    reasoning.layout = layout_of(slots);
    Completion {
        text,
        finish: finish(reply.stop_reason.as_deref()),
        usage: reply.usage.map(Usage::from),
        calls,
        dropped_calls,
        preamble_only: false,
        preamble: String::new(),
        reasoning,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::FinishReason;

    #[test]
    fn text_blocks_thinking_stood_between_are_set_apart() {
        let done = ANTHROPIC.decode(
            br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x",
            "content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"Thought: a"},
                       {"type":"text","text":" and b"},{"type":"thinking","thinking":"so","signature":"t"},
                       {"type":"text","text":"Final Answer: c"}],
            "stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5}}"#,
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(done.text, "Thought: a and b\n\nFinal Answer: c");
    }

    #[test]
    fn text_blocks_are_joined_and_other_blocks_skipped() {
        let done = ANTHROPIC.decode(
            br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x",
            "content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"Thought: a"},{"type":"text","text":"\nFinal Answer: b"}],
            "stop_reason":"end_turn","stop_sequence":null,
            "usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":3}}"#,
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(done.text, "Thought: a\nFinal Answer: b");
        assert_eq!(
            done.usage,
            Some(Usage {
                prompt_tokens: 13,
                completion_tokens: 5,
                cached_prompt_tokens: Some(3),
                ..Usage::default()
            })
        );
    }

    #[test]
    fn max_tokens_stop_reason_means_the_output_was_cut() {
        let done = ANTHROPIC.decode(
            br#"{"content":[{"type":"text","text":"Thought: long"}],"stop_reason":"max_tokens","usage":{"input_tokens":1,"output_tokens":1}}"#,
        );
        assert_eq!(done.map(|c| c.finish).ok(), Some(FinishReason::Length));
    }

    /// A layout that no longer fits the turn (a call or a thinking block more or fewer, text
    /// where it had none) is not followed: the usual order is.
    #[test]
    fn a_layout_is_followed_only_where_it_fits_the_turn() {
        // Thinking blocks, the text, calls (stood for by redacted blocks of their own names).
        let blocks = |thinking: usize, text: bool, calls: usize| {
            let named = |data, n| {
                (0..n)
                    .map(|_| OutBlock::RedactedThinking { data })
                    .collect()
            };
            let (thought, call): (Vec<_>, Vec<_>) =
                (named("thinking", thinking), named("call", calls));
            (
                thought,
                text.then_some(OutBlock::RedactedThinking { data: "text" }),
                call,
            )
        };
        let order = |layout: &[Slot], (thought, text, calls)| -> Vec<String> {
            laid_out(layout, thought, text, calls)
                .iter()
                .map(|b| serde_json::to_value(b).unwrap_or_default()["data"].to_string())
                .collect()
        };
        let interleaved = [Slot::Thinking, Slot::Text, Slot::Thinking, Slot::ToolUse];
        let usual = r#"["thinking", "thinking", "text", "call"]"#;
        let shown = |v: Vec<String>| format!("[{}]", v.join(", "));
        assert_eq!(
            shown(order(&interleaved, blocks(2, true, 1))),
            r#"["thinking", "text", "thinking", "call"]"#
        );
        assert_eq!(shown(order(&[], blocks(2, true, 1))), usual);
        // A call more, a thinking block fewer, text with no place: the usual order.
        assert_eq!(
            shown(order(&interleaved, blocks(2, true, 2))),
            r#"["thinking", "thinking", "text", "call", "call"]"#
        );
        assert_eq!(
            shown(order(&interleaved, blocks(1, true, 1))),
            r#"["thinking", "text", "call"]"#
        );
        let no_text = [Slot::Thinking, Slot::ToolUse, Slot::Thinking];
        assert_eq!(shown(order(&no_text, blocks(2, true, 1))), usual);
    }

    #[test]
    fn a_drifted_reply_is_an_error_not_zeros() {
        for body in [
            r#"{"content":"hi"}"#,
            r#"{"content":[{"type":"text"}]}"#,
            r#"{"content":[],"usage":{"output_tokens":1}}"#,
        ] {
            assert!(
                matches!(ANTHROPIC.decode(body.as_bytes()), Err(WireError::Shape(_))),
                "{body}"
            );
        }
    }

    fn cached_request(system_tokens: u32, prefix_tokens: u32) -> ChatRequest {
        let mut history = crate::llm::ChatMessage::text(
            ChatRole::User,
            "Observation: 40 lines\n\nWhat now?".into(),
        );
        history.new_from = Some("Observation: 40 lines\n\n".len());
        let messages = vec![
            crate::llm::ChatMessage::text(ChatRole::User, "Why?".into()),
            crate::llm::ChatMessage::text(ChatRole::Assistant, "Thought: look".into()),
            history,
        ];
        ChatRequest {
            prompt_cache: Some(crate::llm::PromptCache {
                key: "k".into(),
                system_tokens,
                prefix_tokens,
                ttl: None,
            }),
            ..ChatRequest::new("claude-sonnet-4-5".into(), "sys".into(), messages, 100)
        }
    }

    #[test]
    fn breakpoints_follow_the_system_and_the_history_when_long_enough() {
        let json = |r: &ChatRequest, b| serde_json::to_value(body(r, b)).unwrap_or_default();
        let long = json(&cached_request(1500, 3000), true);
        assert_eq!(long["system"][0]["cache_control"]["type"], "ephemeral");
        let last = &long["messages"][2]["content"];
        assert_eq!(last[0]["text"], "Observation: 40 lines");
        assert_eq!(last[0]["cache_control"]["type"], "ephemeral");
        assert_eq!(
            last[1],
            serde_json::json!({"type": "text", "text": "What now?"})
        );
        let short = json(&cached_request(500, 900), true);
        assert!(short["system"].is_string());
        assert!(!short.to_string().contains("cache_control"));
        let history_only = json(&cached_request(500, 1100), true);
        assert!(history_only["system"].is_string());
        assert_eq!(history_only.to_string().matches("cache_control").count(), 1);
        assert!(!json(&cached_request(1500, 3000), false)
            .to_string()
            .contains("cache_control"));
        let mut off = cached_request(1500, 3000);
        off.prompt_cache = None;
        assert!(!json(&off, true).to_string().contains("cache_control"));
        let mut opus = cached_request(3000, 3000);
        opus.model = "claude-opus-4-5".into();
        assert!(!json(&opus, true).to_string().contains("cache_control"));
    }
}
