//! Anthropic Messages API: `x-api-key` and `anthropic-version` headers, a top-level `system`,
//! a required `max_tokens`, `stop_sequences`, and content returned as typed blocks.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{
    decode, open_stream, send, ApiKey, ChatRequest, Completion, CompletionStream, FinishReason,
    LlmError, NativeCall, Provider, Usage,
};

const API_VERSION: &str = "2023-06-01";
const PROVIDER: Provider = Provider::Anthropic;

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    system: &'a str,
    messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
}

#[derive(Serialize)]
struct Tool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    input_schema: &'a serde_json::Value,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Deserialize)]
struct Reply {
    content: Vec<Block>,
    stop_reason: Option<String>,
    usage: Option<ReplyUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    ToolUse {
        name: String,
        #[serde(default)]
        input: serde_json::Value,
    },
    /// thinking and any later block type carry nothing for a step.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct ReplyUsage {
    input_tokens: u64,
    output_tokens: u64,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

pub async fn complete(
    http: &reqwest::Client,
    base_url: &str,
    timeout: Duration,
    request: &ChatRequest,
    key: Option<&ApiKey>,
) -> Result<Completion, LlmError> {
    let builder = prepare(http, base_url, &body(request), key)?;
    let raw = send(PROVIDER, builder, timeout, key).await?;
    completion(decode(PROVIDER, &raw)?)
}

/// The same call with `stream: true`.
pub async fn stream(
    http: &reqwest::Client,
    base_url: &str,
    timeout: Duration,
    request: &ChatRequest,
    key: Option<&ApiKey>,
) -> Result<CompletionStream, LlmError> {
    let mut body = body(request);
    body.stream = true;
    let builder = prepare(http, base_url, &body, key)?;
    let response = open_stream(PROVIDER, builder, timeout, key).await?;
    Ok(CompletionStream::new(PROVIDER, response, timeout))
}

fn prepare(
    http: &reqwest::Client,
    base_url: &str,
    body: &Body<'_>,
    key: Option<&ApiKey>,
) -> Result<reqwest::RequestBuilder, LlmError> {
    let url = format!("{}/v1/messages", base_url.trim_end_matches('/'));
    let mut builder = super::with_json(
        http.post(url).header("anthropic-version", API_VERSION),
        body,
    );
    if let Some(key) = key {
        let mut value =
            reqwest::header::HeaderValue::from_str(key.expose()).map_err(|_| LlmError::Auth {
                provider: PROVIDER,
                status: 401,
            })?;
        value.set_sensitive(true);
        builder = builder.header("x-api-key", value);
    }
    Ok(builder)
}

fn body(request: &ChatRequest) -> Body<'_> {
    Body {
        model: &request.model,
        max_tokens: request.max_output_tokens,
        system: &request.system,
        messages: request
            .messages
            .iter()
            .map(|m| Message {
                role: m.role.as_str(),
                content: &m.content,
            })
            .collect(),
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
        tool_choice: (request.require_tool && !request.tools.is_empty())
            .then(|| serde_json::json!({"type": "any"})),
        stream: false,
    }
}

fn completion(reply: Reply) -> Result<Completion, LlmError> {
    let mut text = String::new();
    let mut calls = Vec::new();
    for block in reply.content {
        match block {
            Block::Text { text: t } => text.push_str(&t),
            Block::ToolUse { name, input } => calls.push(NativeCall::new(name, input)),
            Block::Other => {}
        }
    }
    let finish = match reply.stop_reason.as_deref() {
        Some("end_turn" | "stop_sequence" | "tool_use") | None => FinishReason::Stop,
        Some("max_tokens") => FinishReason::Length,
        Some(other) => FinishReason::Other(other.to_string()),
    };
    Ok(Completion {
        text,
        finish,
        usage: reply.usage.map(|u| Usage {
            prompt_tokens: u.input_tokens
                + u.cache_creation_input_tokens.unwrap_or(0)
                + u.cache_read_input_tokens.unwrap_or(0),
            completion_tokens: u.output_tokens,
        }),
        calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_blocks_are_joined_and_other_blocks_skipped() {
        let reply: Reply = serde_json::from_str(
            r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x",
            "content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"Thought: a"},{"type":"text","text":"\nFinal Answer: b"}],
            "stop_reason":"end_turn","stop_sequence":null,
            "usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":3}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let done = completion(reply).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(done.text, "Thought: a\nFinal Answer: b");
        assert_eq!(
            done.usage,
            Some(Usage {
                prompt_tokens: 13,
                completion_tokens: 5
            })
        );
    }

    #[test]
    fn max_tokens_stop_reason_means_the_output_was_cut() {
        let reply: Reply = serde_json::from_str(
            r#"{"content":[{"type":"text","text":"Thought: long"}],"stop_reason":"max_tokens","usage":{"input_tokens":1,"output_tokens":1}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            completion(reply).map(|c| c.finish).ok(),
            Some(FinishReason::Length)
        );
    }
}
