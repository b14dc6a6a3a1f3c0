//! Anthropic Messages API: `x-api-key` and `anthropic-version` headers, a top-level `system`,
//! a required `max_tokens`, `stop_sequences`, and content returned as typed blocks.

mod stream;
mod wire;

use super::provider::{
    Capabilities, Counting, KeyHeader, Outgoing, ProviderApi, Target, Temperature,
};
use super::stream::StreamDecoder;
use super::ChatRole;
use super::{
    ApiKey, ChatRequest, Completion, FinishReason, NativeCall, ReasoningState, ThinkingBlock,
    Usage, WireError,
};
use wire::{Block, Body, Content, Message, OutBlock, Reply, Thinking, Tool, ToolChoice};

const API_VERSION: &str = "2023-06-01";

#[derive(Debug)]
pub struct Anthropic;

pub const ANTHROPIC: Anthropic = Anthropic;

impl ProviderApi for Anthropic {
    fn name(&self) -> &'static str {
        "anthropic"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            native_tools: true,
            native_by_default: true,
            parallel_tool_calls: true,
            prompt_caching: true,
            reasoning: true,
            counting: Counting::Margin,
            requires_key: true,
            retry_timeouts: true,
            max_temperature: Temperature(10),
        }
    }

    fn default_base_url(&self) -> &'static str {
        "https://api.anthropic.com"
    }

    fn model_prefixes(&self) -> &'static [&'static str] {
        &["claude-"]
    }

    fn build(
        &self,
        target: &Target<'_>,
        request: &ChatRequest,
        key: Option<&ApiKey>,
        stream: bool,
    ) -> Result<Outgoing, WireError> {
        let mut body = body(request);
        body.stream = stream;
        let url = format!("{}/v1/messages", target.base_url.trim_end_matches('/'));
        Outgoing::json(url, &body)?
            .with_header("anthropic-version", API_VERSION)
            .with_headers(target)
            .with_key(KeyHeader::Named("x-api-key"), key)
    }

    fn decode(&self, body: &[u8]) -> Result<Completion, WireError> {
        let reply: Reply =
            serde_json::from_slice(body).map_err(|e| WireError::json("the reply", &e))?;
        Ok(completion(reply))
    }

    /// With thinking on, Anthropic refuses a forced tool choice and any temperature but 1.
    fn adjust(&self, request: &mut ChatRequest) -> Vec<String> {
        let mut warnings = Vec::new();
        if thinking(request).is_none() {
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
        warnings
    }

    fn output_reserve(&self, effort: Option<crate::llm::ReasoningEffort>) -> u32 {
        effort.and_then(|e| e.thinking_budget()).unwrap_or(0)
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(stream::EventDecoder)
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
        let body = body(request);
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
        Some(Outgoing::json(url, &count).and_then(|out| {
            out.with_header("anthropic-version", API_VERSION)
                .with_headers(target)
                .with_key(KeyHeader::Named("x-api-key"), key)
        }))
    }

    fn decode_count(&self, body: &[u8]) -> Result<u64, WireError> {
        let counted: wire::Counted =
            serde_json::from_slice(body).map_err(|e| WireError::json("the count", &e))?;
        Ok(counted.input_tokens)
    }
}

/// The thinking the request's reasoning effort asks for, if any.
fn thinking(request: &ChatRequest) -> Option<Thinking> {
    let budget_tokens = request.reasoning_effort?.thinking_budget()?;
    Some(Thinking {
        kind: "enabled",
        budget_tokens,
    })
}

fn body(request: &ChatRequest) -> Body<'_> {
    let thinking = thinking(request);
    // The thinking budget comes on top of the room the answer was given.
    let thinking_tokens = thinking.map_or(0, |t| t.budget_tokens);
    Body {
        model: &request.model,
        max_tokens: request.max_output_tokens.saturating_add(thinking_tokens),
        system: &request.system,
        messages: messages(&request.messages, thinking.is_some()),
        temperature: request.temperature,
        stop_sequences: &request.stop,
        tools: request
            .tools
            .iter()
            .map(|t| Tool {
                name: &t.name,
                description: &t.description,
                input_schema: &t.parameters,
            })
            .collect(),
        tool_choice: tool_choice(request),
        thinking,
        stream: false,
    }
}

/// The conversation in Anthropic's structure: an assistant's calls as `tool_use` blocks, and
/// the results answering them as `tool_result` blocks, all of one turn in the next user message
/// and before any text of it (the API requires both). With thinking on, an assistant turn's
/// thinking blocks lead it, as they came.
fn messages(chat: &[crate::llm::ChatMessage], thinking: bool) -> Vec<Message<'_>> {
    let mut out: Vec<Message<'_>> = Vec::with_capacity(chat.len());
    for m in chat {
        let text = (!m.content.is_empty()).then(|| OutBlock::Text { text: &m.content });
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
                });
                let blocks = thought.into_iter().chain(text).chain(calls).collect();
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
                };
                match out.last_mut() {
                    Some(Message {
                        role: "user",
                        content: Content::Blocks(blocks),
                    }) => blocks.push(result),
                    _ => out.push(Message {
                        role: "user",
                        content: Content::Blocks(vec![result]),
                    }),
                }
            }
            ChatRole::User => match (out.last_mut(), text) {
                // Text after the results of a turn joins their message.
                (
                    Some(Message {
                        role: "user",
                        content: Content::Blocks(blocks),
                    }),
                    Some(text),
                ) => blocks.push(text),
                _ => out.push(Message {
                    role: "user",
                    content: Content::Text(&m.content),
                }),
            },
            ChatRole::Assistant => out.push(Message {
                role: "assistant",
                content: Content::Text(&m.content),
            }),
        }
    }
    out
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

/// The stop reason as the service reads it.
fn finish(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("end_turn" | "stop_sequence" | "tool_use") | None => FinishReason::Stop,
        Some("max_tokens") => FinishReason::Length,
        Some(other) => FinishReason::Other(other.to_string()),
    }
}

fn completion(reply: Reply) -> Completion {
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut reasoning = ReasoningState::default();
    for block in reply.content {
        match block {
            Block::Text { text: t } => text.push_str(&t),
            Block::ToolUse { id, name, input } => calls.push(NativeCall::new(id, name, input)),
            Block::Thinking {
                thinking,
                signature,
            } => reasoning.blocks.push(ThinkingBlock::Thinking {
                thinking,
                signature,
            }),
            Block::RedactedThinking { data } => {
                reasoning
                    .blocks
                    .push(ThinkingBlock::RedactedThinking { data });
            }
            Block::Other => {}
        }
    }
    Completion {
        text,
        finish: finish(reply.stop_reason.as_deref()),
        usage: reply.usage.map(Usage::from),
        calls,
        reasoning,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
