//! Ollama's native API (`/api/chat`). Its OpenAI-compatible `/v1` cannot set the context size, so
//! a prompt past the model's small default window loses its front (the instructions and the
//! tools) without a word; here `options.num_ctx` is the request's `tokenLimit`. Streams are JSON
//! lines; tool calls arrive whole, their arguments an object.

mod wire;

use super::provider::{
    Capabilities, Counting, Facts, Framing, KeyHeader, Outgoing, ProviderApi, Target, Temperature,
};
use super::stream_events::{PartialCall, Piece, Sofar, StreamDecoder};
use super::{ApiKey, ChatRequest, Completion, FinishReason, Usage, WireError};
use wire::{Body, ErrorLine, Message, Options, OutCall, OutFunction, Reply};

#[derive(Debug)]
pub struct Ollama;

pub const OLLAMA: Ollama = Ollama;

const FACTS: Facts = Facts {
    name: "ollama",
    default_base_url: "http://127.0.0.1:11434",
    model_prefixes: &[],
    key_prefixes: &[],
    configured_headers: &[],
    capabilities: Capabilities {
        native_tools: true,
        native_by_default: false,
        parallel_tool_calls: true,
        prompt_caching: false,
        reasoning: true,
        counting: Counting::Margin,
        requires_key: false,
        retry_timeouts: false,
        max_temperature: Temperature(20),
    },
};

impl ProviderApi for Ollama {
    fn facts(&self) -> &Facts {
        &FACTS
    }

    fn adjust(&self, request: &mut ChatRequest) -> Vec<String> {
        super::strict_schema::warnings(request, None, FACTS.name)
    }

    fn build(
        &self,
        target: &Target<'_>,
        request: &ChatRequest,
        key: Option<&ApiKey>,
        stream: bool,
    ) -> Result<Outgoing, WireError> {
        let url = format!("{}/api/chat", api_root(target.base_url));
        Outgoing::json(url, &body(request, stream), request.text_bytes())?
            .with_headers(target)
            .with_key(KeyHeader::Bearer, key)
    }

    fn decode(&self, body: &[u8]) -> Result<Completion, WireError> {
        let reply: Reply =
            serde_json::from_slice(body).map_err(|e| WireError::json("the reply", &e))?;
        // A whole reply is one line of the stream, read the same way.
        let mut sofar = Sofar::default();
        if let Some(Piece::Text(text)) = read(reply, &mut sofar) {
            sofar.text = text;
        }
        if !sofar.done {
            return Err(WireError::Shape("the reply is not done".into()));
        }
        Ok(sofar.into_completion())
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(LineDecoder)
    }

    fn tool_results_are_plain_text(&self) -> bool {
        true
    }

    fn framing(&self) -> Framing {
        Framing::JsonLines
    }
}

/// The server's root: a base URL configured for the `/v1` API works here too.
pub fn api_root(base: &str) -> &str {
    let base = base.trim_end_matches('/');
    base.strip_suffix("/v1").unwrap_or(base)
}

fn body(request: &ChatRequest, stream: bool) -> Body<'_> {
    let system = Message {
        role: "system",
        content: request.system.as_str().into(),
        tool_calls: Vec::new(),
    };
    // A tool's result is a `tool` message; Ollama pairs results with calls by order.
    let folded = crate::llm::in_turn_folded(&request.messages);
    let turns = folded.into_iter().map(|(m, more)| Message {
        role: m.role.as_str(),
        // Ollama has no failure flag: a failed tool's result says so in its text.
        content: match m.text_as_sent() {
            std::borrow::Cow::Borrowed(text) => crate::llm::with_appended(text, more),
            std::borrow::Cow::Owned(text) => {
                crate::llm::with_appended(&text, more).into_owned().into()
            }
        },
        tool_calls: m
            .calls
            .iter()
            .map(|c| OutCall {
                function: OutFunction {
                    name: &c.name,
                    arguments: &c.arguments,
                },
            })
            .collect(),
    });
    Body {
        model: &request.model,
        messages: std::iter::once(system).chain(turns).collect(),
        stream,
        tools: super::openai::wire::function_tools(&request.tools, false),
        think: request
            .reasoning_effort
            .map(|e| e != crate::llm::ReasoningEffort::None),
        options: Options {
            num_ctx: request.context_window,
            num_predict: request.max_output_tokens,
            temperature: request.temperature,
            stop: &request.stop,
        },
    }
}

/// Adds one reply or stream line to `sofar`; returns its text, or its thinking when it has no
/// text.
fn read(reply: Reply, sofar: &mut Sofar) -> Option<Piece> {
    let message = reply.message;
    if let Some(message) = &message {
        sofar.dropped_calls += message.tool_calls.dropped;
        for call in &message.tool_calls.kept {
            let index = sofar.calls.keys().next_back().map_or(0, |last| last + 1);
            let json = call
                .function
                .arguments
                .as_deref()
                .map_or("", |raw| raw.get());
            let arguments = match json.trim_start().starts_with('"') {
                true => serde_json::from_str::<String>(json).unwrap_or_else(|_| json.to_string()),
                false => json.to_string(),
            };
            if let Some(slot) = sofar.call(index) {
                *slot = PartialCall {
                    id: None,
                    name: call.function.name.clone(),
                    arguments,
                };
            }
        }
    }
    if reply.done {
        sofar.done = true;
        sofar.finish = Some(match reply.done_reason.as_deref() {
            Some("length") => FinishReason::Length,
            Some("stop") | None => FinishReason::Stop,
            Some(other) => FinishReason::Other(other.to_string()),
        });
        sofar.usage = reply
            .prompt_eval_count
            .zip(reply.eval_count)
            .map(|(prompt, completion)| Usage {
                prompt_tokens: prompt,
                completion_tokens: completion,
                ..Usage::default()
            });
    }
    let message = message?;
    let thinking = message.thinking.filter(|t| !t.is_empty());
    if let Some(thinking) = &thinking {
        sofar.reasoning_content.push_str(thinking);
    }
    if !message.content.is_empty() {
        return Some(Piece::Text(message.content));
    }
    thinking.map(Piece::Reasoning)
}

struct LineDecoder;

impl StreamDecoder for LineDecoder {
    fn event(&mut self, data: &str, sofar: &mut Sofar) -> Result<Option<Piece>, WireError> {
        if serde_json::from_str::<ErrorLine>(data).is_ok_and(|line| !line.error.is_null()) {
            return Err(WireError::InStream(data.to_string()));
        }
        let reply: Reply =
            serde_json::from_str(data).map_err(|e| WireError::json("a stream line", &e))?;
        Ok(read(reply, sofar))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ChatMessage, ChatRole};

    fn request() -> ChatRequest {
        let messages = vec![ChatMessage::text(ChatRole::User, "hi".into())];
        ChatRequest {
            temperature: Some(0.1),
            stop: vec!["\nObservation:".into()],
            context_window: Some(16000),
            ..ChatRequest::new("qwen2.5-coder:7b".into(), "sys".into(), messages, 300)
        }
    }

    #[test]
    fn the_context_window_and_output_cap_go_in_options() {
        let v = serde_json::to_value(body(&request(), false)).unwrap_or_default();
        assert_eq!(v["options"]["num_ctx"], 16000);
        assert_eq!(v["options"]["num_predict"], 300);
        assert_eq!(v["options"]["stop"][0], "\nObservation:");
        assert_eq!(v["stream"], false);
        assert_eq!(v["messages"][0]["role"], "system");
    }

    #[test]
    fn a_base_url_for_the_v1_api_is_the_same_server() {
        assert_eq!(api_root("http://h:11434/v1/"), "http://h:11434");
        assert_eq!(api_root("http://h:11434"), "http://h:11434");
    }

    #[test]
    fn a_reply_with_tool_calls_and_counts() {
        let done = OLLAMA
            .decode(br#"{"model":"m","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"read_file","arguments":{"path":"a.rs"}}}]},"done":true,"done_reason":"stop","prompt_eval_count":40,"eval_count":9}"#)
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(done.calls[0].name, "read_file");
        assert_eq!(
            done.calls[0].arguments,
            Ok(serde_json::json!({"path": "a.rs"})
                .as_object()
                .cloned()
                .unwrap_or_default())
        );
        assert_eq!(done.usage.map(|u| u.prompt_tokens), Some(40));
    }

    #[test]
    fn stream_lines_error_lines_and_drift() {
        let mut sofar = Sofar::default();
        let mut decoder = LineDecoder;
        let text = decoder
            .event(
                r#"{"message":{"role":"assistant","content":"Thou"},"done":false}"#,
                &mut sofar,
            )
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(text, Some(Piece::Text("Thou".into())));
        let thinking =
            r#"{"message":{"role":"assistant","content":"","thinking":"hm"},"done":false}"#;
        assert_eq!(
            decoder.event(thinking, &mut sofar).ok(),
            Some(Some(Piece::Reasoning("hm".into())))
        );
        assert_eq!(sofar.reasoning_content, "hm");
        let end = r#"{"message":{"role":"assistant","content":""},"done":true,"done_reason":"length","prompt_eval_count":3,"eval_count":2}"#;
        assert_eq!(decoder.event(end, &mut sofar).ok(), Some(None));
        assert!(sofar.done);
        assert_eq!(sofar.finish, Some(FinishReason::Length));
        assert!(matches!(
            decoder.event(
                r#"{"error":"model runner has unexpectedly stopped"}"#,
                &mut sofar
            ),
            Err(WireError::InStream(_))
        ));
        assert!(matches!(
            decoder.event(r#"{"message":{"content":5},"done":false}"#, &mut sofar),
            Err(WireError::Shape(_))
        ));
        assert!(matches!(
            decoder.event(r#"{"message":{"content":"a"}}"#, &mut sofar),
            Err(WireError::Shape(_))
        ));
    }
}
