//! OpenAI's Responses API, used statelessly: `store: false` on every request, and the state a
//! reasoning model needs (its encrypted reasoning, its messages' `phase`) carried by the client on
//! the assistant turn (`reasoning_state.items`) and sent back as it came. A provider serving it
//! is a [`Responses`] over its Chat Completions preset, whose facts, key header and model quirks
//! it shares: only the wire differs.

mod input;
mod stream;
mod wire;

use super::bounded::{MAX_BLOCKS, MAX_CALLS_PER_TURN};
use super::openai::{presets, ChatCompletions, PathForm, OPENAI};
use super::provider::{Facts, Outgoing, ProviderApi, Target};
use super::stream_events::StreamDecoder;
use super::{ApiKey, CacheTtl, ChatRequest, Completion, NativeCall, ReasoningState, WireError};
use super::{Usage, WireApi};
use wire::{Body, Output, Reply};

/// A provider's Responses API.
#[derive(Debug)]
pub struct Responses {
    /// The provider's Chat Completions preset: its facts, key header and model quirks.
    pub chat: &'static ChatCompletions,
    /// The prompt cache lifetimes it takes (`prompt_cache_retention`).
    pub cache_ttls: &'static [CacheTtl],
}

pub static OPENAI_RESPONSES: Responses = Responses {
    chat: &OPENAI,
    cache_ttls: &[CacheTtl::InMemory, CacheTtl::OneDay],
};

/// Azure's v1 API (`…/openai/v1`); its deployments form has none.
pub static AZURE_RESPONSES: Responses = Responses {
    chat: &presets::AZURE,
    cache_ttls: &[],
};

pub static XAI_RESPONSES: Responses = Responses {
    chat: &presets::XAI,
    cache_ttls: &[],
};

/// Amazon Bedrock's OpenAI-compatible endpoint (`…/openai/v1`) serves it too.
pub static BEDROCK_RESPONSES: Responses = Responses {
    chat: &presets::BEDROCK,
    cache_ttls: &[],
};

pub static OPENAI_COMPATIBLE_RESPONSES: Responses = Responses {
    chat: &presets::OPENAI_COMPATIBLE,
    cache_ttls: &[],
};

/// The Responses API of the provider named `name`, where it serves one.
pub fn of(name: &str) -> Option<&'static Responses> {
    [
        &OPENAI_RESPONSES,
        &AZURE_RESPONSES,
        &XAI_RESPONSES,
        &BEDROCK_RESPONSES,
        &OPENAI_COMPATIBLE_RESPONSES,
    ]
    .into_iter()
    .find(|r| r.chat.facts.name == name)
}

impl ProviderApi for Responses {
    fn facts(&self) -> &Facts {
        &self.chat.facts
    }

    fn build(
        &self,
        target: &Target<'_>,
        request: &ChatRequest,
        key: Option<&ApiKey>,
        stream: bool,
    ) -> Result<Outgoing, WireError> {
        let url = self.url(target.base_url)?;
        let body = Body {
            stream,
            ..self.body(request)
        };
        Outgoing::json(url, &body, request.text_bytes())?
            .with_headers(target)
            .with_key(self.chat.key_header, key)
    }

    fn decode(&self, body: &[u8]) -> Result<Completion, WireError> {
        let reply: Reply =
            serde_json::from_slice(body).map_err(|e| WireError::json("the reply", &e))?;
        if reply.output.dropped > 0 {
            return Err(too_many_items());
        }
        let mut output = Output::default();
        for raw in &reply.output.kept {
            output.push(raw.get())?;
        }
        let finish = match output.refused() {
            true => super::FinishReason::Other("refusal".into()),
            false => wire::finish(reply.status.as_deref(), reply.incomplete_details.as_ref()),
        };
        Ok(completion(output, finish, reply.usage.map(Usage::from)))
    }

    fn adjust(&self, request: &mut ChatRequest) -> Vec<String> {
        self.chat.adjust(request)
    }

    /// A call's `call_id`: at most 64 characters.
    fn call_ids(&self) -> crate::llm::call_ids::IdRule {
        crate::llm::call_ids::IdRule::AtMost(64)
    }

    fn cache_ttls(&self) -> &'static [CacheTtl] {
        self.cache_ttls
    }

    fn tool_results_are_plain_text(&self) -> bool {
        true
    }

    fn wire_api(&self) -> WireApi {
        WireApi::Responses
    }

    fn base_url_refusal(&self, base_url: &str) -> Option<String> {
        match self.url(base_url) {
            Err(WireError::Shape(why)) => Some(
                why.trim_start_matches("the request was not sent: ")
                    .to_string(),
            ),
            _ => None,
        }
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(stream::EventDecoder::default())
    }
}

impl Responses {
    fn url(&self, base: &str) -> Result<String, WireError> {
        let base = base.trim_end_matches('/');
        if self.chat.quirks.path == PathForm::Azure && base.ends_with("/openai") {
            return Err(WireError::Shape(
                "the request was not sent: Azure's deployments form (a base URL ending in /openai) has no Responses API; use the v1 base URL (https://{resource}.openai.azure.com/openai/v1)".into(),
            ));
        }
        Ok(format!("{base}/responses"))
    }

    fn body<'a>(&self, request: &'a ChatRequest) -> Body<'a> {
        let quirks = &self.chat.quirks;
        let reasoning = (quirks.reasoning_model)(&request.model);
        let has_tools = !request.tools.is_empty();
        let cache = request.prompt_cache.as_ref();
        Body {
            model: &request.model,
            instructions: &request.system,
            input: input::items(&request.messages, request.tools.is_empty()),
            max_output_tokens: request.max_output_tokens,
            temperature: if reasoning { None } else { request.temperature },
            store: false,
            // xAI's reasoning models are those that refuse `stop` (its preset marks no model as
            // taking OpenAI's reasoning parameters): their reasoning must travel too.
            include: match reasoning || (quirks.rejects_stop)(&request.model) {
                true => vec!["reasoning.encrypted_content"],
                false => Vec::new(),
            },
            reasoning: request
                .reasoning_effort
                .map(|e| wire::Reasoning { effort: e.as_str() }),
            tools: wire::tools(&request.tools, request.strict_tools),
            tool_choice: (has_tools && request.require_tool).then_some("required"),
            parallel_tool_calls: (has_tools && !request.parallel_tool_calls).then_some(false),
            prompt_cache_key: cache
                .filter(|_| quirks.takes_prompt_cache_key)
                .map(|c| c.key.as_str()),
            prompt_cache_retention: cache
                .and_then(|c| c.ttl)
                .filter(|t| self.cache_ttls.contains(t))
                .map(CacheTtl::as_str),
            stream: false,
        }
    }
}

/// Every item goes back with the turn, so a reply of more than a turn may hold is refused, not
/// cut.
fn too_many_items() -> WireError {
    WireError::Shape(format!(
        "the reply holds more than {MAX_BLOCKS} output items, more than a step can carry back"
    ))
}

/// The completion the output items make.
fn completion(mut output: Output, finish: super::FinishReason, usage: Option<Usage>) -> Completion {
    let preamble_only = output.preamble_only();
    let (text, preamble) = output.texts();
    let dropped_calls = output.calls.len().saturating_sub(MAX_CALLS_PER_TURN);
    let calls = output
        .calls
        .into_iter()
        .take(MAX_CALLS_PER_TURN)
        .map(|(id, name, arguments)| NativeCall::from_text(id, name, &arguments))
        .collect();
    Completion {
        text,
        finish,
        usage,
        calls,
        dropped_calls,
        reasoning: ReasoningState {
            items: output.items,
            ..ReasoningState::default()
        },
        preamble_only,
        preamble,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ChatMessage, ChatRole, FinishReason, PromptCache, ToolSpec};
    use serde_json::json;

    fn request(model: &str) -> ChatRequest {
        let messages = vec![ChatMessage::text(ChatRole::User, "hi".into())];
        ChatRequest {
            temperature: Some(0.2),
            stop: vec!["\nObservation:".into()],
            tools: vec![ToolSpec {
                name: "read_file".into(),
                description: "Read.".into(),
                parameters: json!({"type": "object"}),
            }],
            require_tool: true,
            parallel_tool_calls: false,
            prompt_cache: Some(PromptCache {
                key: "rs-k".into(),
                system_tokens: 0,
                prefix_tokens: 0,
                ttl: Some(CacheTtl::OneDay),
            }),
            ..ChatRequest::new(model.into(), "sys".into(), messages, 100)
        }
    }

    fn json_of(api: &Responses, r: &ChatRequest) -> serde_json::Value {
        serde_json::to_value(api.body(r)).unwrap_or_default()
    }

    #[test]
    fn the_body_is_stateless_and_says_what_the_model_takes() {
        let v = json_of(&OPENAI_RESPONSES, &request("gpt-4o"));
        assert_eq!(v["store"], false);
        assert_eq!(v["instructions"], "sys");
        assert_eq!(v["input"], json!([{"role": "user", "content": "hi"}]));
        assert_eq!(v["max_output_tokens"], 100);
        assert_eq!(v["temperature"], 0.2);
        assert_eq!(
            v["tools"],
            json!([{"type": "function", "name": "read_file", "description": "Read.", "parameters": {"type": "object"}}])
        );
        assert_eq!(v["tool_choice"], "required");
        assert_eq!(v["parallel_tool_calls"], false);
        assert_eq!(v["prompt_cache_key"], "rs-k");
        assert_eq!(v["prompt_cache_retention"], "24h");
        for absent in ["stop", "include", "reasoning", "stream"] {
            assert!(v.get(absent).is_none(), "{absent}: {v}");
        }
        let mut r = request("gpt-5");
        r.reasoning_effort = Some(crate::llm::ReasoningEffort::Low);
        let v = json_of(&OPENAI_RESPONSES, &r);
        assert!(v.get("temperature").is_none());
        assert_eq!(v["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(v["reasoning"], json!({"effort": "low"}));
        // A provider without the lifetime sends none (the request was refused before).
        assert!(json_of(&XAI_RESPONSES, &r)
            .get("prompt_cache_retention")
            .is_none());
        // xAI's reasoning models get their reasoning back too; its others need none.
        let grok = json_of(&XAI_RESPONSES, &request("grok-4"));
        assert_eq!(grok["include"], json!(["reasoning.encrypted_content"]));
        assert!(json_of(&XAI_RESPONSES, &request("grok-3"))
            .get("include")
            .is_none());
    }

    #[test]
    fn azure_takes_the_v1_path_only() {
        assert_eq!(
            AZURE_RESPONSES
                .url("https://r.openai.azure.com/openai/v1/")
                .ok(),
            Some("https://r.openai.azure.com/openai/v1/responses".to_string())
        );
        let refused = AZURE_RESPONSES.url("https://r.openai.azure.com/openai");
        assert!(matches!(refused, Err(WireError::Shape(m)) if m.contains("/openai/v1")));
        assert_eq!(
            OPENAI_RESPONSES.url("https://api.openai.com/v1").ok(),
            Some("https://api.openai.com/v1/responses".to_string())
        );
    }

    fn decoded(body: serde_json::Value) -> Completion {
        OPENAI_RESPONSES
            .decode(body.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn output_items_become_text_calls_and_the_state_as_they_came() {
        let items = json!([
            {"type": "reasoning", "id": "rs_1", "encrypted_content": "E", "summary": [{"type": "summary_text", "text": "Look first."}]},
            {"type": "message", "id": "msg_1", "role": "assistant", "phase": "commentary", "status": "completed",
             "content": [{"type": "output_text", "text": "Reading a.js.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file", "arguments": "{\"path\":\"a.js\"}", "status": "completed"}
        ]);
        let done = decoded(
            json!({"id": "resp_1", "status": "completed", "output": items,
            "usage": {"input_tokens": 10, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 6},
                      "output_tokens_details": {"reasoning_tokens": 2}}}),
        );
        assert_eq!(done.text, "Reading a.js.");
        assert!(!done.preamble_only);
        assert_eq!(done.calls.len(), 1);
        assert_eq!(done.calls[0].id.as_deref(), Some("call_1"));
        assert_eq!(
            done.reasoning.items,
            items.as_array().cloned().unwrap_or_default()
        );
        assert_eq!(done.reasoning.text(), "Look first.");
        let usage = done.usage.unwrap_or_default();
        assert_eq!((usage.prompt_tokens, usage.completion_tokens), (10, 5));
        assert_eq!(usage.cached_prompt_tokens, Some(6));
        assert_eq!(usage.reasoning_tokens, Some(2));
        assert_eq!(done.finish, FinishReason::Stop);
    }

    #[test]
    fn a_commentary_alone_is_a_preamble_and_a_cut_reply_says_so() {
        let message = |phase: Option<&str>| {
            json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
                "output": [{"type": "message", "id": "m", "role": "assistant", "phase": phase,
                            "content": [{"type": "output_text", "text": "Let me look."}]}]})
        };
        let preamble = decoded(message(Some("commentary")));
        assert!(preamble.preamble_only);
        assert_eq!(preamble.text, "Let me look.");
        assert_eq!(preamble.finish, FinishReason::Length);
        assert!(!decoded(message(Some("final_answer"))).preamble_only);
        assert!(!decoded(message(None)).preamble_only);
    }

    #[test]
    fn a_preamble_before_an_answer_is_kept_apart_and_one_before_calls_is_the_text() {
        let message = |phase: &str, text: &str| {
            json!({"type": "message", "role": "assistant", "phase": phase,
                "content": [{"type": "output_text", "text": text}]})
        };
        let call = json!({"type": "function_call", "call_id": "c", "name": "a", "arguments": "{}"});
        let answered = decoded(
            json!({"output": [message("commentary", "First."), message("final_answer", "Done.")]}),
        );
        assert_eq!(
            (answered.text.as_str(), answered.preamble.as_str()),
            ("Done.", "First.")
        );
        assert!(!answered.preamble_only);
        let calling = decoded(json!({"output": [message("commentary", "First."), call.clone()]}));
        assert_eq!(
            (calling.text.as_str(), calling.preamble.as_str()),
            ("First.", "")
        );
        // Two messages are two paragraphs, before a call and in a preamble alike; a blank one
        // adds no break.
        let two = [
            message("commentary", "First."),
            message("final_answer", "Then."),
        ];
        let calling = decoded(json!({"output": [two[0], message("x", ""), two[1], call]}));
        assert_eq!(calling.text, "First.\n\nThen.");
        let preambles = [message("commentary", "One."), message("commentary", "Two.")];
        let answered = decoded(json!({"output": [preambles[0], preambles[1], two[1]]}));
        assert_eq!(
            (answered.text.as_str(), answered.preamble.as_str()),
            ("Then.", "One.\n\nTwo.")
        );
        let blank = decoded(
            json!({"output": [message("commentary", "First."), message("final_answer", " \n")]}),
        );
        assert!(blank.preamble_only, "a blank final answer is none");
    }

    #[test]
    fn drifted_or_oversized_replies_are_errors() {
        let many = format!(
            "{{\"output\":[{}{{\"type\":\"x\"}}]}}",
            "{\"type\":\"x\"},".repeat(MAX_BLOCKS)
        );
        let huge =
            json!({"output": [{"type": "reasoning", "encrypted_content": "e".repeat(3 << 20)}]});
        for body in [
            r#"{"output":"none"}"#.to_string(),
            r#"{"output":[{"type":7}]}"#.to_string(),
            r#"{"output":[],"usage":{"input_tokens":"x","output_tokens":1}}"#.to_string(),
            many,
            huge.to_string(),
        ] {
            assert!(
                matches!(
                    OPENAI_RESPONSES.decode(body.as_bytes()),
                    Err(WireError::Shape(_))
                ),
                "{}",
                &body[..body.len().min(80)]
            );
        }
    }
}
