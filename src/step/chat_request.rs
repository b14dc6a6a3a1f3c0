//! The chat request for a fitted prompt, its tool names and call ids as the provider takes
//! them, and what the provider needs to cache its stable part.

use super::context::budget;
use super::context::prompt;
use super::fit::Shape;
use super::input::StepInput;
use crate::llm::wire_names::WireNames;
use crate::llm::{ChatMessage, ChatRequest, PromptCache};

/// The chat request for a fitted prompt's system text and messages.
pub(super) fn chat_request(
    input: &StepInput,
    system: String,
    messages: Vec<ChatMessage>,
    shape: &Shape,
    prompt_cache: Option<PromptCache>,
) -> ChatRequest {
    let model = input.llm.model.clone();
    let mut request = ChatRequest {
        temperature: input.llm.temperature,
        stop: vec![prompt::observation_stop(&input.react.tags)],
        tools: shape.native_tools.clone(),
        require_tool: input.react.require_action,
        parallel_tool_calls: input.react.parallel_tool_calls,
        base_url: input.llm.base_url.clone(),
        context_window: Some(input.llm.token_limit),
        reasoning_effort: input.llm.reasoning_effort,
        prompt_cache,
        strict_tools: input.llm.strict_tools,
        clear_tool_uses: input
            .react
            .clear_tool_results
            .filter(|_| super::fit::provider_clears(input))
            .map(|s| u32::try_from(s.keep_last_steps).unwrap_or(u32::MAX)),
        // With a model left to fall back to, that model is the retry of a timed-out call.
        retry_timeouts: !input.falls_back,
        ..ChatRequest::new(model, system, messages, input.llm.reserved_output_tokens)
    };
    // The names the prompt's notices use too (`fit::sent_names`), so the two agree.
    let renamed = match request.tools.is_empty() {
        true => WireNames::default(),
        false => super::fit::sent_names(input),
    };
    renamed.apply(&mut request);
    request.renamed_tools = renamed.into_pairs();
    crate::llm::call_ids::apply(&mut request, input.llm.provider.api().call_ids());
    request
}

/// What the provider needs to cache the prompt's stable part, unless the request turned caching
/// off. The tool definitions come before the system prompt in what providers cache.
pub(super) fn prompt_cache(
    input: &StepInput,
    prompt: &budget::Prompt,
    shape: &Shape,
) -> Option<PromptCache> {
    input.llm.prompt_cache.then(|| PromptCache {
        key: prompt_cache_key(&input.session_id),
        system_tokens: shape.tools_tokens + prompt.system_tokens,
        prefix_tokens: shape.tools_tokens + prompt.prefix_tokens,
        ttl: input.llm.prompt_cache_ttl,
    })
}

/// The session's cache key (a SHA-256 of its id), the same at every step of a loop, so worked
/// out once per worker.
fn prompt_cache_key(session_id: &str) -> String {
    thread_local! {
        static KEYS: std::cell::RefCell<crate::runtime::memo::Memo<String>> =
            const { std::cell::RefCell::new(crate::runtime::memo::Memo::new()) };
    }
    crate::runtime::memo::remembered(&KEYS, &[session_id], || PromptCache::key_for(session_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remembered_cache_key_is_the_sessions_own() {
        for _ in 0..2 {
            for session in ["s-1", "s-2", "", "s-1 "] {
                assert_eq!(prompt_cache_key(session), PromptCache::key_for(session));
            }
        }
    }
}
