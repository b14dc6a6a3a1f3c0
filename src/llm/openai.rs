//! OpenAI Chat Completions, and the OpenAI-compatible servers (Ollama, llama.cpp, vLLM) that
//! speak the same wire format with their own quirks.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{
    decode, open_stream, send, ApiKey, ChatRequest, Completion, CompletionStream, FinishReason,
    LlmError, NativeCall, Provider, Usage,
};

/// Which flavour of the wire format the server at the base URL speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// api.openai.com (or a proxy of it): model-specific parameter rules apply.
    OpenAi,
    /// An OpenAI-compatible local server: always `max_tokens` (Ollama silently drops
    /// `max_completion_tokens`, leaving the output uncapped).
    Compatible,
}

/// Reasoning models (o-series, gpt-5) take `max_completion_tokens`, a `developer` message instead
/// of `system`, and reject `temperature` and (o3, o4-mini) `stop`.
fn is_reasoning_model(model: &str) -> bool {
    let m = model.to_ascii_lowercase();
    let m = m.strip_prefix("ft:").unwrap_or(&m);
    ["o1", "o3", "o4", "gpt-5"].iter().any(|p| m.starts_with(p)) && !m.starts_with("gpt-5-chat")
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct Tool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    parameters: &'a serde_json::Value,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Deserialize)]
struct Reply {
    choices: Vec<Choice>,
    usage: Option<ReplyUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: ReplyMessage,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ReplyMessage {
    content: Option<String>,
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ReplyToolCall>>,
}

#[derive(Deserialize)]
struct ReplyToolCall {
    function: ReplyFunction,
}

#[derive(Deserialize)]
struct ReplyFunction {
    name: String,
    #[serde(default)]
    arguments: serde_json::Value,
}

#[derive(Deserialize)]
struct ReplyUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
}

pub struct Call<'a> {
    provider: Provider,
    base_url: &'a str,
    dialect: Dialect,
    timeout: Duration,
}

impl<'a> Call<'a> {
    pub fn new(provider: Provider, base_url: &'a str, dialect: Dialect, timeout: Duration) -> Self {
        Self {
            provider,
            base_url,
            dialect,
            timeout,
        }
    }

    pub async fn complete(
        &self,
        http: &reqwest::Client,
        request: &ChatRequest,
        key: Option<&ApiKey>,
    ) -> Result<Completion, LlmError> {
        let url = format!("{}/chat/completions", self.base_url.trim_end_matches('/'));
        let mut builder = super::with_json(http.post(url), &body(self.dialect, request));
        if let Some(key) = key {
            builder = builder.bearer_auth(key.expose());
        }
        let raw = send(self.provider, builder, self.timeout, key).await?;
        completion(self.provider, decode(self.provider, &raw)?)
    }

    /// The same call with `stream: true` (and the usage in the last chunk).
    pub async fn stream(
        &self,
        http: &reqwest::Client,
        request: &ChatRequest,
        key: Option<&ApiKey>,
    ) -> Result<CompletionStream, LlmError> {
        let url = format!("{}/chat/completions", self.base_url.trim_end_matches('/'));
        let mut body = body(self.dialect, request);
        body.stream = true;
        body.stream_options = Some(StreamOptions {
            include_usage: true,
        });
        let mut builder = super::with_json(http.post(url), &body);
        if let Some(key) = key {
            builder = builder.bearer_auth(key.expose());
        }
        let response = open_stream(self.provider, builder, self.timeout, key).await?;
        Ok(CompletionStream::new(self.provider, response, self.timeout))
    }
}

fn body(dialect: Dialect, request: &ChatRequest) -> Body<'_> {
    let reasoning = dialect == Dialect::OpenAi && is_reasoning_model(&request.model);
    let system = Message {
        role: if reasoning { "developer" } else { "system" },
        content: &request.system,
    };
    let turns = request.messages.iter().map(|m| Message {
        role: m.role.as_str(),
        content: &m.content,
    });
    let stop = (!reasoning && !request.stop.is_empty()).then_some(&request.stop[..]);
    Body {
        model: &request.model,
        messages: std::iter::once(system).chain(turns).collect(),
        max_tokens: (!reasoning).then_some(request.max_output_tokens),
        max_completion_tokens: reasoning.then_some(request.max_output_tokens),
        temperature: if reasoning { None } else { request.temperature },
        stop,
        tools: request
            .tools
            .iter()
            .map(|t| Tool {
                kind: "function",
                function: Function {
                    name: &t.name,
                    description: &t.description,
                    parameters: &t.parameters,
                },
            })
            .collect(),
        // Ollama does not take tool_choice; other compatible servers vary.
        tool_choice: (request.require_tool
            && !request.tools.is_empty()
            && dialect == Dialect::OpenAi)
            .then_some("required"),
        stream: false,
        stream_options: None,
    }
}

fn completion(provider: Provider, reply: Reply) -> Result<Completion, LlmError> {
    let Some(choice) = reply.choices.into_iter().next() else {
        return Err(LlmError::BadResponse {
            provider,
            message: "the reply has no choices".into(),
        });
    };
    let finish = match choice.finish_reason.as_deref() {
        Some("stop" | "tool_calls") | None => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some(other) => FinishReason::Other(other.to_string()),
    };
    let calls = choice
        .message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(|c| NativeCall::new(c.function.name, c.function.arguments))
        .collect();
    let text = choice
        .message
        .content
        .filter(|c| !c.trim().is_empty())
        .or(choice.message.refusal)
        .unwrap_or_default();
    Ok(Completion {
        text,
        finish,
        usage: reply.usage.map(|u| Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
        }),
        calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ChatMessage, ChatRole};

    fn request(model: &str) -> ChatRequest {
        ChatRequest {
            model: model.into(),
            system: "sys".into(),
            messages: vec![ChatMessage {
                role: ChatRole::User,
                content: "hi".into(),
            }],
            max_output_tokens: 100,
            temperature: Some(0.2),
            stop: vec!["\nObservation:".into()],
            tools: Vec::new(),
            require_tool: false,
            base_url: None,
        }
    }

    fn json(dialect: Dialect, model: &str) -> serde_json::Value {
        serde_json::to_value(body(dialect, &request(model))).unwrap_or_default()
    }

    #[test]
    fn chat_models_get_max_tokens_temperature_and_stop() {
        let v = json(Dialect::OpenAi, "gpt-4o");
        assert_eq!(v["max_tokens"], 100);
        assert_eq!(v["temperature"], 0.2);
        assert_eq!(v["stop"][0], "\nObservation:");
        assert_eq!(v["messages"][0]["role"], "system");
        assert!(v.get("max_completion_tokens").is_none());
    }

    #[test]
    fn reasoning_models_get_max_completion_tokens_and_no_temperature_or_stop() {
        for model in ["o1", "o3-mini", "o4-mini", "gpt-5", "gpt-5-mini"] {
            let v = json(Dialect::OpenAi, model);
            assert_eq!(v["max_completion_tokens"], 100, "{model}");
            assert_eq!(v["messages"][0]["role"], "developer", "{model}");
            for absent in ["max_tokens", "temperature", "stop"] {
                assert!(v.get(absent).is_none(), "{model} must not get {absent}");
            }
        }
    }

    #[test]
    fn compatible_servers_always_get_max_tokens() {
        let v = json(Dialect::Compatible, "o3-like-local-model");
        assert_eq!(v["max_tokens"], 100);
        assert!(v.get("max_completion_tokens").is_none());
    }

    #[test]
    fn a_refusal_becomes_the_text_when_content_is_null() {
        let reply: Reply = serde_json::from_str(
            r#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let done = completion(Provider::OpenAi, reply).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(done.text, "I can't help with that.");
        assert!(done.usage.is_none());
    }

    #[test]
    fn tools_go_to_every_server_and_tool_choice_only_to_openai() {
        let mut r = request("gpt-4o");
        r.tools = vec![crate::llm::ToolSpec {
            name: "read_file".into(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
        }];
        r.require_tool = true;
        let openai = serde_json::to_value(body(Dialect::OpenAi, &r)).unwrap_or_default();
        assert_eq!(openai["tools"][0]["type"], "function");
        assert!(openai["tools"][0]["function"].get("description").is_none());
        assert_eq!(openai["tool_choice"], "required");
        let local = serde_json::to_value(body(Dialect::Compatible, &r)).unwrap_or_default();
        assert_eq!(local["tools"][0]["function"]["name"], "read_file");
        assert!(local.get("tool_choice").is_none());
    }

    #[test]
    fn tool_calls_are_read_with_string_or_broken_arguments() {
        let reply: Reply = serde_json::from_str(
            r#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[
                {"id":"call_1","type":"function","function":{"name":"a","arguments":"{\"x\":1}"}},
                {"id":"call_2","type":"function","function":{"name":"b","arguments":"{\"x\":"}}]},
              "finish_reason":"tool_calls"}]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let done = completion(Provider::OpenAi, reply).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(done.finish, FinishReason::Stop);
        assert_eq!(done.calls.len(), 2);
        assert!(done.calls[0].arguments.is_ok());
        assert_eq!(done.calls[1].arguments, Err("{\"x\":".to_string()));
    }
}
