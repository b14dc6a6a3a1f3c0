//! OpenAI Chat Completions, and every server that speaks the same wire format: the vendors in
//! [`presets`] and any OpenAI-compatible local server. Each is a [`ChatCompletions`] value; what
//! differs between them (where it lives, how it takes the key, which parameters a model rejects)
//! is data in it, not code.

mod content;
pub mod efforts;
pub mod presets;
mod stream;
pub(super) mod wire;

use super::provider::{
    Capabilities, Counting, Facts, Framing, KeyHeader, Outgoing, ProviderApi, Target, Temperature,
};
use super::stream_events::StreamDecoder;
use super::{
    ApiKey, CallSignature, ChatRequest, Completion, NativeCall, ReasoningState, Usage, WireError,
};
use crate::llm::strict_schema;
use wire::{finish, Body, ExtraContent, Message, Reply, StreamOptions};

/// A server speaking Chat Completions.
#[derive(Debug)]
pub struct ChatCompletions {
    pub facts: Facts,
    pub key_header: KeyHeader,
    pub quirks: Quirks,
}

/// What a server or its models do differently from OpenAI's chat models.
#[derive(Debug, Clone, Copy)]
pub struct Quirks {
    /// Models that take OpenAI's reasoning-model parameters: `max_completion_tokens`, a
    /// `developer` message instead of `system`, and no `temperature` or `stop`.
    pub reasoning_model: fn(&str) -> bool,
    /// Models that reject `stop` (besides the reasoning models above).
    pub rejects_stop: fn(&str) -> bool,
    /// `tool_choice: "auto"` is sent with native tools: some servers read a missing
    /// `tool_choice` as "none". OpenAI documents "auto" as the default, so it gets none.
    pub explicit_auto_tool_choice: bool,
    /// Models that take `reasoning_effort`; for the others it is left out, with a warning.
    pub takes_reasoning_effort: fn(&str) -> bool,
    /// The efforts a model takes: another is sent as the nearest of them, with a warning.
    pub efforts: efforts::Efforts,
    /// An assistant turn that called tools goes back with its `reasoning_content` (DeepSeek
    /// refuses the turn without it).
    pub echoes_reasoning_content: bool,
    /// `prompt_cache_key` is sent to route a session's steps to the same cache (OpenAI's own;
    /// servers that validate strictly refuse fields they do not know).
    pub takes_prompt_cache_key: bool,
    /// Tools may be sent `strict: true` (OpenAI's own and Azure's): their arguments are then
    /// constrained to a schema in OpenAI's strict subset.
    pub strict_tools: bool,
    /// The calls of an assistant message go back with their thought signatures
    /// (`extra_content.google.thought_signature`), and the first call of a message without one
    /// with the documented stand-in: Gemini 3 refuses the turn's calls without them.
    pub signs_tool_calls: bool,
    /// Where the completions endpoint is under the base URL.
    pub path: PathForm,
    /// The call ids the server takes back.
    pub call_ids: crate::llm::call_ids::IdRule,
}

/// How the endpoint's URL is made from the base URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathForm {
    /// `{base}/chat/completions`.
    ChatCompletions,
    /// Azure OpenAI: `{base}/chat/completions` for the v1 API (`…/openai/v1`), or
    /// `{base}/deployments/{model}/chat/completions?api-version=…` for a base ending in `/openai`.
    Azure,
}

/// What a deployment name must have escaped to stay one path segment (RFC 3986's path
/// characters stay as they are).
const PATH_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'\\')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// The `api-version` of Azure's deployments form: the newest generally available one.
const AZURE_API_VERSION: &str = "2024-10-21";

/// No model of this server has the quirk.
pub fn none(_model: &str) -> bool {
    false
}

/// Every model of this server has it.
pub fn all(_model: &str) -> bool {
    true
}

/// OpenAI's reasoning models: the o-series and every gpt-5 (`gpt-5.1`, `gpt-5.2`,
/// `gpt-5.1-codex`, `gpt-5-mini` …), but not the chat models (`gpt-5-chat-latest`,
/// `gpt-5.1-chat-latest`), which take `temperature` and no `reasoning_effort`.
pub fn openai_reasoning(model: &str) -> bool {
    let m = model.to_ascii_lowercase();
    let m = m.strip_prefix("ft:").unwrap_or(&m);
    ["o1", "o3", "o4", "gpt-5"].iter().any(|p| m.starts_with(p)) && !gpt5_chat(m)
}

/// `gpt-5-chat…` or `gpt-5.N-chat…`.
fn gpt5_chat(m: &str) -> bool {
    m.strip_prefix("gpt-5").is_some_and(|rest| {
        let rest = rest.strip_prefix('.').map_or(rest, |minor| {
            minor.trim_start_matches(|c: char| c.is_ascii_digit())
        });
        rest.starts_with("-chat")
    })
}

pub const OPENAI: ChatCompletions = ChatCompletions {
    facts: Facts {
        name: "openai",
        default_base_url: "https://api.openai.com/v1",
        model_prefixes: &["gpt-", "chatgpt-", "o1", "o3", "o4", "ft:gpt-"],
        key_prefixes: &["sk-proj-", "sk-svcacct-", "sk-admin-"],
        configured_headers: &[],
        capabilities: Capabilities {
            native_tools: true,
            native_by_default: true,
            parallel_tool_calls: true,
            prompt_caching: true,
            reasoning: true,
            counting: Counting::OpenAiTokenizer,
            requires_key: true,
            retry_timeouts: true,
            max_temperature: Temperature(20),
        },
    },
    key_header: KeyHeader::Bearer,
    quirks: Quirks {
        reasoning_model: openai_reasoning,
        rejects_stop: none,
        explicit_auto_tool_choice: false,
        takes_reasoning_effort: openai_reasoning,
        efforts: efforts::openai,
        echoes_reasoning_content: false,
        takes_prompt_cache_key: true,
        strict_tools: true,
        signs_tool_calls: false,
        path: PathForm::ChatCompletions,
        // "Expected a string with maximum length 40".
        call_ids: crate::llm::call_ids::IdRule::AtMost(40),
    },
};

impl ProviderApi for ChatCompletions {
    fn facts(&self) -> &Facts {
        &self.facts
    }

    fn build(
        &self,
        target: &Target<'_>,
        request: &ChatRequest,
        key: Option<&ApiKey>,
        stream: bool,
    ) -> Result<Outgoing, WireError> {
        let mut body = self.body(request);
        if stream {
            body.stream = true;
            body.stream_options = Some(StreamOptions {
                include_usage: true,
            });
        }
        Outgoing::json(
            self.url(target.base_url, &request.model),
            &body,
            request.text_bytes(),
        )?
        .with_headers(target)
        .with_key(self.key_header, key)
    }

    fn decode(&self, body: &[u8]) -> Result<Completion, WireError> {
        let reply: Reply =
            serde_json::from_slice(body).map_err(|e| WireError::json("the reply", &e))?;
        completion(reply)
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(stream::ChunkDecoder)
    }

    fn framing(&self) -> Framing {
        Framing::Sse
    }

    fn call_ids(&self) -> crate::llm::call_ids::IdRule {
        self.quirks.call_ids
    }

    fn tool_results_are_plain_text(&self) -> bool {
        true
    }

    /// OpenAI's own lifetimes (`prompt_cache_retention`), where the server takes its cache key.
    fn cache_ttls(&self) -> &'static [crate::llm::CacheTtl] {
        match self.quirks.takes_prompt_cache_key {
            true => &[crate::llm::CacheTtl::InMemory, crate::llm::CacheTtl::OneDay],
            false => &[],
        }
    }

    fn adjust(&self, request: &mut ChatRequest) -> Vec<String> {
        let strict = self
            .quirks
            .strict_tools
            .then_some(&strict_schema::OPENAI_STRICT);
        let mut warnings = strict_schema::warnings(request, strict, self.facts.name);
        match request.reasoning_effort {
            Some(effort) if !(self.quirks.takes_reasoning_effort)(&request.model) => {
                request.reasoning_effort = None;
                warnings.push(format!(
                    "reasoning_effort \"{}\" was not sent: {} takes none for {}",
                    effort.as_str(),
                    self.facts.name,
                    request.model
                ));
            }
            Some(wanted) => {
                let sent = efforts::nearest(wanted, (self.quirks.efforts)(&request.model));
                if sent != wanted {
                    request.reasoning_effort = Some(sent);
                    warnings.push(format!(
                        "reasoning_effort \"{}\" was sent as \"{}\": {} takes no \"{}\" for {}",
                        wanted.as_str(),
                        sent.as_str(),
                        self.facts.name,
                        wanted.as_str(),
                        request.model
                    ));
                }
            }
            _ => {}
        }
        warnings
    }
}

impl ChatCompletions {
    fn url(&self, base: &str, model: &str) -> String {
        let base = base.trim_end_matches('/');
        match self.quirks.path {
            PathForm::Azure if base.ends_with("/openai") => format!(
                "{base}/deployments/{}/chat/completions?api-version={AZURE_API_VERSION}",
                percent_encoding::utf8_percent_encode(model, PATH_SEGMENT)
            ),
            PathForm::Azure | PathForm::ChatCompletions => format!("{base}/chat/completions"),
        }
    }

    fn body<'a>(&self, request: &'a ChatRequest) -> Body<'a> {
        let reasoning = (self.quirks.reasoning_model)(&request.model);
        let system = Message::text(
            if reasoning { "developer" } else { "system" },
            &request.system,
        );
        let echo = self.quirks.echoes_reasoning_content;
        let signs = self.quirks.signs_tool_calls;
        let folded = crate::llm::in_turn_folded(&request.messages);
        let turns = folded.into_iter().map(|(m, more)| match signs {
            true => Message::of(m, more, echo).signed(m),
            false => Message::of(m, more, echo),
        });
        let takes_stop = !reasoning && !(self.quirks.rejects_stop)(&request.model);
        let has_tools = !request.tools.is_empty();
        let tool_choice = match (has_tools, request.require_tool) {
            (true, true) => Some("required"),
            (true, false) if self.quirks.explicit_auto_tool_choice => Some("auto"),
            _ => None,
        };
        Body {
            model: &request.model,
            messages: std::iter::once(system).chain(turns).collect(),
            max_tokens: (!reasoning).then_some(request.max_output_tokens),
            max_completion_tokens: reasoning.then_some(request.max_output_tokens),
            temperature: if reasoning { None } else { request.temperature },
            stop: (takes_stop && !request.stop.is_empty()).then_some(&request.stop[..]),
            tools: wire::function_tools(&request.tools, request.strict_tools),
            tool_choice,
            parallel_tool_calls: (has_tools && !request.parallel_tool_calls).then_some(false),
            reasoning_effort: request.reasoning_effort.map(|e| e.as_str()),
            prompt_cache_key: request
                .prompt_cache
                .as_ref()
                .filter(|_| self.quirks.takes_prompt_cache_key)
                .map(|c| c.key.as_str()),
            prompt_cache_retention: request
                .prompt_cache
                .as_ref()
                .and_then(|c| c.ttl)
                .filter(|_| self.quirks.takes_prompt_cache_key)
                .map(crate::llm::CacheTtl::as_str),
            stream: false,
            stream_options: None,
        }
    }
}

fn completion(reply: Reply) -> Result<Completion, WireError> {
    let Some(choice) = reply.choices.kept.into_iter().next() else {
        return Err(WireError::Shape("the reply has no choices".into()));
    };
    let mut message = choice.message;
    let tool_calls = message.tool_calls.take().unwrap_or_default();
    let mut thought_signatures = Vec::new();
    let mut calls = Vec::with_capacity(tool_calls.kept.len());
    let mut seen = std::collections::HashSet::new();
    for c in tool_calls.kept {
        let signature = c.extra_content.map(ExtraContent::signature).transpose()?;
        let signature = signature.flatten();
        let id = crate::llm::call_ids::of_signed_call(c.id, signature.is_some(), &mut seen);
        if let (Some(call_id), Some(signature)) = (id.clone(), signature) {
            thought_signatures.push(CallSignature { call_id, signature });
        }
        let json = c.function.arguments.as_deref().map_or("", |raw| raw.get());
        calls.push(NativeCall::new(id, c.function.name, json));
    }
    let content = message.content.unwrap_or_default();
    let reasoning = ReasoningState {
        blocks: Vec::new(),
        reasoning_content: message
            .reasoning_content
            .or(message.reasoning)
            .or(Some(content.thinking))
            .filter(|r| !r.is_empty()),
        thought_signatures,
        ..ReasoningState::default()
    };
    let text = Some(content.text).filter(|c| !c.trim().is_empty());
    // A refusal in place of the text is the model declining, whatever the finish reason says.
    let refused = text.is_none()
        && message
            .refusal
            .as_deref()
            .is_some_and(|r| !r.trim().is_empty());
    let finish = match refused {
        true => crate::llm::FinishReason::Other("refusal".into()),
        false => finish(choice.finish_reason.as_deref()),
    };
    Ok(Completion {
        text: text.or(message.refusal).unwrap_or_default(),
        finish,
        usage: reply.usage.map(Usage::from),
        calls,
        dropped_calls: tool_calls.dropped,
        reasoning,
        preamble_only: false,
        preamble: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::FinishReason;
    use crate::llm::{ChatMessage, ChatRole};

    pub(super) fn request(model: &str) -> ChatRequest {
        let messages = vec![ChatMessage::text(ChatRole::User, "hi".into())];
        ChatRequest {
            temperature: Some(0.2),
            stop: vec!["\nObservation:".into()],
            ..ChatRequest::new(model.into(), "sys".into(), messages, 100)
        }
    }

    fn json(api: &ChatCompletions, model: &str) -> serde_json::Value {
        serde_json::to_value(api.body(&request(model))).unwrap_or_default()
    }

    #[test]
    fn deepseek_gets_every_calling_turns_reasoning_content_back_empty_when_another_made_it() {
        let mut r = request("deepseek-reasoner");
        let mut own = ChatMessage::text(ChatRole::Assistant, String::new());
        own.calls = vec![crate::llm::ToolUse {
            id: "c1".into(),
            name: "read_file".into(),
            arguments: serde_json::Map::new(),
        }];
        let mut foreign = own.clone();
        own.reasoning = Some(crate::llm::ReasoningState {
            reasoning_content: Some("Read it first.".into()),
            ..crate::llm::ReasoningState::default()
        });
        let said = ChatMessage::text(ChatRole::Assistant, "Hello.".into());
        foreign.calls[0].id = "c2".into();
        r.messages.extend([own, foreign, said]);
        let v = serde_json::to_value(presets::DEEPSEEK.body(&r)).unwrap_or_default();
        assert_eq!(v["messages"][2]["reasoning_content"], "Read it first.");
        assert_eq!(v["messages"][3]["reasoning_content"], "");
        assert!(v["messages"][4].get("reasoning_content").is_none());
    }

    #[test]
    fn chat_models_get_max_tokens_temperature_and_stop() {
        let v = json(&OPENAI, "gpt-4o");
        assert_eq!(v["max_tokens"], 100);
        assert_eq!(v["temperature"], 0.2);
        assert_eq!(v["stop"][0], "\nObservation:");
        assert_eq!(v["messages"][0]["role"], "system");
        assert!(v.get("max_completion_tokens").is_none());
    }

    #[test]
    fn reasoning_models_get_max_completion_tokens_and_no_temperature_or_stop() {
        for model in ["o1", "o3-mini", "o4-mini", "gpt-5", "gpt-5-mini"] {
            let v = json(&OPENAI, model);
            assert_eq!(v["max_completion_tokens"], 100, "{model}");
            assert_eq!(v["messages"][0]["role"], "developer", "{model}");
            for absent in ["max_tokens", "temperature", "stop"] {
                assert!(v.get(absent).is_none(), "{model} must not get {absent}");
            }
        }
    }

    #[test]
    fn gpt_5_point_releases_are_reasoning_models_and_their_chat_models_are_not() {
        for model in [
            "gpt-5.1",
            "gpt-5.2",
            "gpt-5.1-codex",
            "gpt-5.1-codex-max",
            "gpt-5.2-pro",
            "gpt-5-nano",
            "ft:gpt-5.1-2025-11-13:org::abc",
            "o3-pro",
        ] {
            assert!(openai_reasoning(model), "{model}");
            assert!(OPENAI.adjust(&mut effort(model)).is_empty(), "{model}");
        }
        for model in [
            "gpt-5-chat-latest",
            "gpt-5.1-chat-latest",
            "gpt-5.2-chat-latest",
            "gpt-4.1",
            "gpt-4o",
        ] {
            assert!(!openai_reasoning(model), "{model}");
            let v = json(&OPENAI, model);
            assert_eq!(v["temperature"], 0.2, "{model}");
            assert_eq!(OPENAI.adjust(&mut effort(model)).len(), 1, "{model}");
        }
    }

    fn effort(model: &str) -> ChatRequest {
        ChatRequest {
            reasoning_effort: Some(crate::llm::ReasoningEffort::Low),
            ..request(model)
        }
    }

    #[test]
    fn gemini_3_models_take_reasoning_effort() {
        for model in [
            "gemini-3-pro-preview",
            "gemini-3-flash-preview",
            "gemini-2.5-pro",
        ] {
            let mut r = effort(model);
            assert!(presets::GEMINI.adjust(&mut r).is_empty(), "{model}");
            let v = serde_json::to_value(presets::GEMINI.body(&r)).unwrap_or_default();
            assert_eq!(v["reasoning_effort"], "low", "{model}");
            assert_eq!(v["max_tokens"], 100, "{model}");
        }
    }

    #[test]
    fn compatible_servers_always_get_max_tokens() {
        let v = json(&presets::OPENAI_COMPATIBLE, "o3-like-local-model");
        assert_eq!(v["max_tokens"], 100);
        assert!(v.get("max_completion_tokens").is_none());
    }

    #[test]
    fn a_refusal_becomes_the_text_when_content_is_null() {
        let done = OPENAI
            .decode(br#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]}"#)
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(done.text, "I can't help with that.");
        assert_eq!(
            done.finish,
            crate::llm::FinishReason::Other("refusal".into())
        );
        assert!(done.usage.is_none());
    }

    #[test]
    fn tool_choice_is_required_when_forced_and_auto_where_leaving_it_out_means_none() {
        let mut r = request("gpt-4o");
        r.tools = vec![crate::llm::ToolSpec {
            name: "read_file".into(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
        }];
        let openai = serde_json::to_value(OPENAI.body(&r)).unwrap_or_default();
        assert_eq!(openai["tools"][0]["type"], "function");
        assert!(openai["tools"][0]["function"].get("description").is_none());
        assert!(openai.get("tool_choice").is_none());
        let local = serde_json::to_value(presets::OPENAI_COMPATIBLE.body(&r)).unwrap_or_default();
        assert_eq!(local["tools"][0]["function"]["name"], "read_file");
        assert_eq!(local["tool_choice"], "auto");
        r.require_tool = true;
        for api in [&OPENAI, &presets::OPENAI_COMPATIBLE] {
            let v = serde_json::to_value(api.body(&r)).unwrap_or_default();
            assert_eq!(v["tool_choice"], "required", "{}", api.facts.name);
        }
    }

    #[test]
    fn tool_calls_are_read_with_string_or_broken_arguments() {
        let done = OPENAI
            .decode(
                br#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[
                {"id":"call_1","type":"function","function":{"name":"a","arguments":"{\"x\":1}"}},
                {"id":"call_2","type":"function","function":{"name":"b","arguments":"{\"x\":"}}]},
              "finish_reason":"tool_calls"}]}"#,
            )
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(done.finish, FinishReason::Stop);
        assert_eq!(done.calls.len(), 2);
        assert!(done.calls[0].arguments.is_ok());
        assert_eq!(
            done.calls[1].arguments,
            Err(crate::llm::bounded::Unread::NotAnObject(
                "{\"x\":".to_string()
            ))
        );
    }

    #[test]
    fn a_drifted_reply_is_an_error_not_zeros() {
        for body in [
            r#"{"choices":"none"}"#,
            r#"{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":"many","completion_tokens":1}}"#,
            r#"{"choices":[{"message":{"content":"hi"}}],"usage":{"completion_tokens":1}}"#,
            r#"{"choices":[]}"#,
        ] {
            assert!(
                matches!(OPENAI.decode(body.as_bytes()), Err(WireError::Shape(_))),
                "{body}"
            );
        }
    }

    #[test]
    fn mistral_content_chunks_are_the_text_and_the_reasoning() {
        let body = r#"{"choices":[{"message":{"role":"assistant","content":[
            {"type":"thinking","thinking":[{"type":"text","text":"Look it up."}]},
            {"type":"text","text":"Final Answer: 4"}]},"finish_reason":"stop"}]}"#;
        let done = OPENAI
            .decode(body.as_bytes())
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(done.text, "Final Answer: 4");
        assert_eq!(done.reasoning.text(), "Look it up.");
    }

    #[test]
    fn thought_signatures_are_read_by_call_and_an_oversize_one_is_refused() {
        let reply = |signature: &str| {
            format!(
                r#"{{"choices":[{{"index":0,"message":{{"role":"assistant","content":null,"tool_calls":[
                {{"id":"c1","type":"function","function":{{"name":"a","arguments":"{{}}"}},"extra_content":{{"google":{{"thought_signature":"{signature}"}}}}}},
                {{"id":"c2","type":"function","function":{{"name":"b","arguments":"{{}}"}}}}]}},
              "finish_reason":"tool_calls"}}]}}"#
            )
        };
        let done = presets::GEMINI
            .decode(reply("Q2lnbmVk").as_bytes())
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(done.reasoning.signature_of("c1"), Some("Q2lnbmVk"));
        assert_eq!(done.reasoning.signature_of("c2"), None);
        assert_eq!(done.reasoning.thought_signatures.len(), 1);
        let huge = "A".repeat(crate::llm::bounded::MAX_SIGNATURE_BYTES + 1);
        assert!(matches!(
            presets::GEMINI.decode(reply(&huge).as_bytes()),
            Err(WireError::Shape(m)) if m.contains("thought signature")
        ));
    }

    #[test]
    fn each_signature_goes_with_its_call_though_they_share_an_id() {
        // Two calls of one id, or of an empty one: a signature was filed under the id, and the
        // second's went back on the first.
        let call = |id: &str, path: &str, signature: Option<&str>| {
            let mut c = serde_json::json!({"id": id, "type": "function",
                "function": {"name": "read_file", "arguments": serde_json::json!({"path": path}).to_string()}});
            if let Some(s) = signature {
                c["extra_content"] = serde_json::json!({"google": {"thought_signature": s}});
            }
            c
        };
        for calls in [
            vec![call("d", "a", Some("SA")), call("d", "b", Some("SB"))],
            vec![call("", "a", None), call("", "b", Some("SB"))],
            vec![call("d", "a", None), call("d", "b", Some("SB"))],
        ] {
            let reply = serde_json::json!({"choices": [{"index": 0, "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": null, "tool_calls": calls.clone()}}]});
            let done = presets::GEMINI
                .decode(reply.to_string().as_bytes())
                .unwrap_or_else(|e| panic!("{e:?}"));
            for (sent, read) in calls.iter().zip(&done.calls) {
                let id = read.id.clone().unwrap_or_default();
                let signature = sent["extra_content"]["google"]["thought_signature"].as_str();
                assert_eq!(done.reasoning.signature_of(&id), signature, "{calls:?}");
            }
            let ids: std::collections::HashSet<_> = done
                .reasoning
                .thought_signatures
                .iter()
                .map(|s| &s.call_id)
                .collect();
            assert_eq!(ids.len(), done.reasoning.thought_signatures.len());
        }
    }

    fn with_calls(model: &str, ids: &[&str], signed: &[(&str, &str)]) -> ChatRequest {
        let mut r = request(model);
        let mut turn = crate::llm::ChatMessage::text(ChatRole::Assistant, String::new());
        turn.calls = ids
            .iter()
            .map(|id| crate::llm::ToolUse {
                id: (*id).into(),
                name: "read_file".into(),
                arguments: serde_json::Map::new(),
            })
            .collect();
        if !signed.is_empty() {
            turn.reasoning = Some(ReasoningState {
                thought_signatures: signed
                    .iter()
                    .map(|(id, s)| CallSignature {
                        call_id: (*id).into(),
                        signature: (*s).into(),
                    })
                    .collect(),
                ..ReasoningState::default()
            });
        }
        r.messages.push(turn);
        r
    }

    fn signatures(api: &ChatCompletions, r: &ChatRequest) -> Vec<serde_json::Value> {
        let v = serde_json::to_value(api.body(r)).unwrap_or_default();
        v["messages"][2]["tool_calls"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|c| c.get("extra_content").cloned().unwrap_or_default())
            .collect()
    }

    #[test]
    fn gemini_gets_each_calls_signature_back_and_the_stand_in_where_there_is_none() {
        let signed = with_calls("gemini-3-pro-preview", &["c1", "c2"], &[("c1", "sig1")]);
        let sent = signatures(&presets::GEMINI, &signed);
        assert_eq!(sent[0]["google"]["thought_signature"], "sig1");
        assert!(
            sent[1].is_null(),
            "only the first of a parallel set: {sent:?}"
        );
        let unsigned = with_calls("gemini-3-pro-preview", &["c1", "c2"], &[]);
        let sent = signatures(&presets::GEMINI, &unsigned);
        assert_eq!(
            sent[0]["google"]["thought_signature"],
            "skip_thought_signature_validator"
        );
        assert!(sent[1].is_null());
        for api in [&OPENAI, &presets::OPENROUTER, &presets::OPENAI_COMPATIBLE] {
            let sent = signatures(api, &signed);
            assert!(sent.iter().all(serde_json::Value::is_null), "{sent:?}");
        }
    }

    #[test]
    fn azure_takes_the_v1_path_or_the_deployments_form() {
        let azure = &presets::AZURE;
        assert_eq!(
            azure.url("https://r.openai.azure.com/openai/v1/", "dep"),
            "https://r.openai.azure.com/openai/v1/chat/completions"
        );
        assert_eq!(
            azure.url("https://r.openai.azure.com/openai", "my dep/x"),
            "https://r.openai.azure.com/openai/deployments/my%20dep%2Fx/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(
            azure.url("https://r.openai.azure.com/openai", "gpt-4o_prod.2"),
            "https://r.openai.azure.com/openai/deployments/gpt-4o_prod.2/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(
            OPENAI.url("https://api.openai.com/v1", "gpt-4o"),
            "https://api.openai.com/v1/chat/completions"
        );
    }
}
