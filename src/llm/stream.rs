//! A streamed completion: each provider's SSE events become text deltas as they arrive, and the
//! whole [`Completion`] at the end. A stream that ends before the provider said it was done is an
//! error, never a silently partial answer.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::sse::{SseDecoder, SseEvent};
use super::{ApiKey, Completion, FinishReason, LlmError, NativeCall, Provider, Usage};

/// What the events of a stream add up to so far.
#[derive(Debug, Default)]
struct Sofar {
    text: String,
    /// Tool calls by index: name and the argument fragments joined.
    calls: BTreeMap<u64, (String, String)>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
    done: bool,
}

impl Sofar {
    fn completion(self, provider: Provider) -> Result<Completion, LlmError> {
        if !self.done {
            return Err(LlmError::BadResponse {
                provider,
                message: "the stream ended before the model finished (truncated)".into(),
            });
        }
        let calls = self
            .calls
            .into_values()
            .map(|(name, arguments)| NativeCall::new(name, Value::String(arguments)))
            .collect();
        Ok(Completion {
            text: self.text,
            finish: self.finish.unwrap_or(FinishReason::Stop),
            usage: self.usage,
            calls,
        })
    }
}

/// Which provider's events the stream carries.
#[derive(Debug, Clone, Copy)]
enum Format {
    OpenAi,
    Anthropic,
}

pub struct CompletionStream {
    provider: Provider,
    format: Format,
    response: reqwest::Response,
    decoder: SseDecoder,
    sofar: Sofar,
    pending: std::collections::VecDeque<String>,
    timeout: Duration,
}

impl CompletionStream {
    pub(crate) fn new(provider: Provider, response: reqwest::Response, timeout: Duration) -> Self {
        let format = match provider {
            Provider::Anthropic => Format::Anthropic,
            Provider::OpenAi | Provider::Ollama => Format::OpenAi,
        };
        Self {
            provider,
            format,
            response,
            decoder: SseDecoder::default(),
            sofar: Sofar::default(),
            pending: Default::default(),
            timeout,
        }
    }

    /// The next piece of text the model wrote, or `None` once the stream has ended. `key` is
    /// scrubbed from any error the provider reports inside the stream.
    pub async fn next_text(&mut self, key: Option<&ApiKey>) -> Result<Option<String>, LlmError> {
        loop {
            if let Some(text) = self.pending.pop_front() {
                return Ok(Some(text));
            }
            if self.sofar.done {
                return Ok(None);
            }
            let chunk = self
                .response
                .chunk()
                .await
                .map_err(|e| LlmError::from_transport(self.provider, &e, self.timeout))?;
            let Some(chunk) = chunk else {
                return Ok(None);
            };
            let events = self
                .decoder
                .push(&chunk)
                .map_err(|_| LlmError::BadResponse {
                    provider: self.provider,
                    message: "the stream is not UTF-8 text".into(),
                })?;
            for event in events {
                let text = match self.format {
                    Format::OpenAi => self.openai(&event, key)?,
                    Format::Anthropic => self.anthropic(&event, key)?,
                };
                if let Some(text) = text.filter(|t| !t.is_empty()) {
                    self.sofar.text.push_str(&text);
                    self.pending.push_back(text);
                }
            }
        }
    }

    /// The whole completion, once [`Self::next_text`] has returned `None`.
    pub fn finish(self) -> Result<Completion, LlmError> {
        self.sofar.completion(self.provider)
    }

    fn json(&self, data: &str) -> Result<Value, LlmError> {
        serde_json::from_str(data).map_err(|e| LlmError::BadResponse {
            provider: self.provider,
            message: format!(
                "a stream event is not the documented JSON ({})",
                crate::scrub::json_error(&e)
            ),
        })
    }

    /// OpenAI chunks: `data: {chat.completion.chunk}` … `data: [DONE]`.
    fn openai(
        &mut self,
        event: &SseEvent,
        key: Option<&ApiKey>,
    ) -> Result<Option<String>, LlmError> {
        if event.data.trim() == "[DONE]" {
            self.sofar.done = true;
            return Ok(None);
        }
        let chunk = self.json(&event.data)?;
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            return Err(LlmError::in_stream(
                self.provider,
                event.data.as_bytes(),
                key,
            ));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            self.sofar.usage = Some(Usage {
                prompt_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
                completion_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
            });
        }
        let Some(choice) = chunk["choices"].get(0) else {
            return Ok(None);
        };
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.sofar.finish = Some(match reason {
                "stop" | "tool_calls" => FinishReason::Stop,
                "length" => FinishReason::Length,
                other => FinishReason::Other(other.to_string()),
            });
        }
        let delta = &choice["delta"];
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap_or(0);
            let entry = self.sofar.calls.entry(index).or_default();
            if let Some(name) = call["function"]["name"].as_str() {
                entry.0.push_str(name);
            }
            if let Some(arguments) = call["function"]["arguments"].as_str() {
                entry.1.push_str(arguments);
            }
        }
        Ok(delta["content"].as_str().map(str::to_string))
    }

    /// Anthropic events: `message_start` … `content_block_*` … `message_delta`, `message_stop`.
    fn anthropic(
        &mut self,
        event: &SseEvent,
        key: Option<&ApiKey>,
    ) -> Result<Option<String>, LlmError> {
        let data = self.json(&event.data)?;
        let kind = data["type"].as_str().unwrap_or_default();
        match kind {
            "message_start" => {
                let usage = &data["message"]["usage"];
                let input = [
                    "input_tokens",
                    "cache_creation_input_tokens",
                    "cache_read_input_tokens",
                ]
                .iter()
                .filter_map(|k| usage[*k].as_u64())
                .sum();
                self.sofar.usage = Some(Usage {
                    prompt_tokens: input,
                    completion_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
                });
            }
            "content_block_start" => {
                let block = &data["content_block"];
                if block["type"] == "tool_use" {
                    let index = data["index"].as_u64().unwrap_or(0);
                    let name = block["name"].as_str().unwrap_or_default().to_string();
                    self.sofar.calls.insert(index, (name, String::new()));
                }
            }
            "content_block_delta" => {
                let delta = &data["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => return Ok(delta["text"].as_str().map(str::to_string)),
                    Some("input_json_delta") => {
                        let index = data["index"].as_u64().unwrap_or(0);
                        if let (Some(call), Some(part)) = (
                            self.sofar.calls.get_mut(&index),
                            delta["partial_json"].as_str(),
                        ) {
                            call.1.push_str(part);
                        }
                    }
                    // thinking, signature and citation deltas carry nothing for a step.
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = data["delta"]["stop_reason"].as_str() {
                    self.sofar.finish = Some(match reason {
                        "end_turn" | "stop_sequence" | "tool_use" => FinishReason::Stop,
                        "max_tokens" => FinishReason::Length,
                        other => FinishReason::Other(other.to_string()),
                    });
                }
                if let (Some(usage), Some(out)) = (
                    self.sofar.usage.as_mut(),
                    data["usage"]["output_tokens"].as_u64(),
                ) {
                    usage.completion_tokens = out;
                }
            }
            "message_stop" => self.sofar.done = true,
            "error" => {
                return Err(LlmError::in_stream(
                    self.provider,
                    event.data.as_bytes(),
                    key,
                ))
            }
            // ping, content_block_stop, and event types added later.
            _ => {}
        }
        Ok(None)
    }
}
