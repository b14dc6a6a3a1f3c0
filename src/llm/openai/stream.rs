//! Chat Completions streams: `data: {chat.completion.chunk}` … `data: [DONE]`.

use super::wire::{finish, Chunk, DeltaCall, ExtraContent};
use crate::llm::stream_events::{Piece, Sofar, StreamDecoder};
use crate::llm::{Usage, WireError};

pub struct ChunkDecoder;

impl StreamDecoder for ChunkDecoder {
    fn event(&mut self, data: &str, sofar: &mut Sofar) -> Result<Option<Piece>, WireError> {
        if data.trim() == "[DONE]" {
            sofar.done = true;
            return Ok(None);
        }
        let chunk: Chunk =
            serde_json::from_str(data).map_err(|e| WireError::json("a stream event", &e))?;
        if chunk.error.is_some() {
            return Err(WireError::InStream(data.to_string()));
        }
        if let Some(usage) = chunk.usage {
            sofar.usage = Some(Usage::from(usage));
        }
        let Some(choice) = chunk.choices.kept.into_iter().next() else {
            return Ok(None);
        };
        if choice.finish_reason.is_some() {
            sofar.finish = Some(finish(choice.finish_reason.as_deref()));
        }
        let Some(delta) = choice.delta else {
            return Ok(None);
        };
        let calls = delta.tool_calls.unwrap_or_default();
        sofar.dropped_calls += calls.dropped;
        for call in calls.kept {
            add_call_piece(call, sofar)?;
        }
        if let Some(refusal) = delta.refusal.filter(|r| !r.is_empty()) {
            // Held apart, not streamed: it is the reply only if no text comes.
            let bytes = sofar.refusal.len() + refusal.len();
            crate::llm::bounded::fits("refusal", bytes, crate::llm::bounded::MAX_TEXT_BYTES)?;
            sofar.refusal.push_str(&refusal);
        }
        let content = delta.content.unwrap_or_default();
        let thinking = Some(content.thinking).filter(|t| !t.is_empty());
        let reasoning = delta.reasoning_content.or(delta.reasoning).or(thinking);
        if let Some(reasoning) = reasoning.filter(|r| !r.is_empty()) {
            sofar.reasoning_content.push_str(&reasoning);
            // A chunk carries one or the other; should one carry both, the text is what counts.
            if content.text.is_empty() {
                return Ok(Some(Piece::Reasoning(reasoning)));
            }
        }
        Ok(Some(content.text)
            .filter(|t| !t.is_empty())
            .map(Piece::Text))
    }
}

/// Adds one streamed piece of a call to the call it belongs to.
fn add_call_piece(call: DeltaCall, sofar: &mut Sofar) -> Result<(), WireError> {
    let index = match call.index {
        Some(index) if !taken_by_another(&call, sofar, index) => index,
        _ => unindexed(&call, sofar)
            .ok_or_else(|| WireError::Shape("a tool call's index is out of range".into()))?,
    };
    let signature = call.extra_content.map(ExtraContent::signature);
    let Some(entry) = sofar.call(index) else {
        return Ok(());
    };
    if entry.id.is_none() {
        entry.id = call.id;
    }
    if let Some(function) = call.function {
        // A server that repeats the name with every piece of the call names it once.
        let name = function.name.as_deref().unwrap_or_default();
        if entry.name != name {
            entry.name.push_str(name);
        }
        if let Some(arguments) = function.arguments {
            entry.arguments.push_str(&arguments.0);
        }
    }
    if let Some(signature) = signature.transpose()?.flatten() {
        sofar.signatures.entry(index).or_insert(signature);
    }
    Ok(())
}

/// The call a piece without an index belongs to (servers that send none: mistral.rs, SGLang,
/// Ollama's `/v1`). One with nothing of a call (Gemini's late piece holding only a signature)
/// belongs to the call of its id, or else to the first without a signature (Gemini signs the
/// first call of a parallel set). Otherwise a piece with a call's id goes on with that call, one
/// that names a tool begins a call, and one that names neither goes on with the call before it.
fn unindexed(call: &DeltaCall, sofar: &Sofar) -> Option<u64> {
    if call.signature_only() {
        if let Some(index) = signed_call(sofar, call.id.as_deref()) {
            return Some(index);
        }
    }
    // A piece naming another tool under the same id is another call (some servers number ids
    // per turn, or send them empty).
    let id = call.id.as_deref().filter(|id| !id.is_empty());
    let name = call.function.as_ref().and_then(|f| f.name.as_deref());
    let of_id = id.and_then(|id| {
        let mut calls = sofar.calls.iter().rev();
        calls.find(|(_, c)| {
            c.id.as_deref() == Some(id)
                && name.is_none_or(|n| n.is_empty() || n == c.name && !begins_anew(call, c))
        })
    });
    if let Some((&index, _)) = of_id {
        return Some(index);
    }
    match sofar.calls.last_key_value() {
        Some((&index, _)) if id.is_none() && !call.named() => Some(index),
        Some((&index, _)) => index.checked_add(1),
        None => Some(0),
    }
}

/// Whether a piece naming the tool of `held` again begins another call of it: its arguments
/// open an object after the held call's arguments were whole. (Read only for such a piece, so
/// a server that names the tool with every piece does not have the arguments read each time.)
fn begins_anew(call: &DeltaCall, held: &crate::llm::stream_events::PartialCall) -> bool {
    let opens = call
        .function
        .as_ref()
        .and_then(|f| f.arguments.as_ref())
        .is_some_and(|a| a.0.trim_start().starts_with('{'));
    opens && serde_json::from_str::<serde::de::IgnoredAny>(&held.arguments).is_ok()
}

/// Whether the call at `index` has another id than the piece's: servers that number every call
/// of a parallel set 0 (Ollama's `/v1`, LiteLLM's bridge) start each with a new id there.
fn taken_by_another(call: &DeltaCall, sofar: &Sofar, index: u64) -> bool {
    let id = call.id.as_deref().filter(|id| !id.is_empty());
    let held = sofar.calls.get(&index).and_then(|c| c.id.as_deref());
    matches!((id, held), (Some(id), Some(held)) if !held.is_empty() && id != held)
}

/// The call a late signature piece belongs to: the one of `id`, or the first unsigned.
fn signed_call(sofar: &Sofar, id: Option<&str>) -> Option<u64> {
    match id {
        Some(id) => sofar.call_of_id(id),
        None => sofar.first_unsigned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(events: &[&str]) -> Result<(Sofar, String), WireError> {
        let mut sofar = Sofar::default();
        let mut text = String::new();
        for data in events {
            sofar.events += 1;
            if let Some(Piece::Text(t)) = ChunkDecoder.event(data, &mut sofar)? {
                // As the stream does with each piece of text.
                sofar.text.push_str(&t);
                text.push_str(&t);
            }
        }
        Ok((sofar, text))
    }

    #[test]
    fn text_calls_usage_and_the_end_are_read() {
        let (sofar, text) = read(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Thought: "}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"go"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"read","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"p\":1}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}"#,
            "[DONE]",
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(text, "Thought: go");
        assert!(sofar.done);
        assert_eq!(sofar.calls[&0].name, "read");
        assert_eq!(
            sofar.calls[&0].id.as_deref(),
            Some("c"),
            "the id of the first piece"
        );
        assert_eq!(sofar.calls[&0].arguments, "{\"p\":1}");
        assert_eq!(sofar.usage.map(|u| u.prompt_tokens), Some(9));
    }

    #[test]
    fn reasoning_streams_apart_from_the_text_and_is_kept() {
        let mut sofar = Sofar::default();
        let mut pieces = Vec::new();
        for data in [
            r#"{"choices":[{"delta":{"role":"assistant","content":null,"reasoning_content":"2+2"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning":" is 4"}}]}"#,
            r#"{"choices":[{"delta":{"content":"Final Answer: 4"}}]}"#,
        ] {
            pieces.push(ChunkDecoder.event(data, &mut sofar).ok().flatten());
        }
        assert_eq!(
            pieces,
            [
                Some(Piece::Reasoning("2+2".into())),
                Some(Piece::Reasoning(" is 4".into())),
                Some(Piece::Text("Final Answer: 4".into()))
            ]
        );
        assert_eq!(sofar.reasoning_content, "2+2 is 4");
    }

    #[test]
    fn a_calls_thought_signature_is_read_from_its_first_piece() {
        let (sofar, _) = read(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"a","arguments":""},"extra_content":{"google":{"thought_signature":"U2ln"}}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"c2","type":"function","function":{"name":"b","arguments":"{}"}}]}}]}"#,
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        let done = sofar.into_completion();
        assert_eq!(done.reasoning.signature_of("c1"), Some("U2ln"));
        assert_eq!(done.reasoning.thought_signatures.len(), 1);
        let huge = "A".repeat(crate::llm::bounded::MAX_SIGNATURE_BYTES + 1);
        let event = format!(
            r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":0,"id":"c1","function":{{"name":"a"}},"extra_content":{{"google":{{"thought_signature":"{huge}"}}}}}}]}}}}]}}"#
        );
        assert!(matches!(read(&[&event]), Err(WireError::Shape(_))));
    }

    #[test]
    fn each_streamed_signature_goes_with_its_call_though_they_share_an_id() {
        let (sofar, _) = read(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"d","function":{"name":"a","arguments":"{}"},"extra_content":{"google":{"thought_signature":"SA"}}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"d","function":{"name":"b","arguments":"{}"},"extra_content":{"google":{"thought_signature":"SB"}}}]}}]}"#,
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        let done = sofar.into_completion();
        let ids: Vec<String> = done.calls.iter().filter_map(|c| c.id.clone()).collect();
        assert_eq!(ids.len(), 2);
        assert_ne!(ids[0], ids[1]);
        assert_eq!(done.reasoning.signature_of(&ids[0]), Some("SA"));
        assert_eq!(done.reasoning.signature_of(&ids[1]), Some("SB"));
    }

    #[test]
    fn calls_sent_whole_without_an_index_stay_apart() {
        let (sofar, _) = read(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"a","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"b","arguments":"{}"}}]}}]}"#,
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        let names: Vec<&str> = sofar.calls.values().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn mistral_thinking_chunks_stream_as_reasoning_and_text_chunks_as_text() {
        let mut sofar = Sofar::default();
        let mut pieces = Vec::new();
        for data in [
            r#"{"choices":[{"delta":{"role":"assistant","content":[{"type":"thinking","thinking":[{"type":"text","text":"Search "}]}]}}]}"#,
            r#"{"choices":[{"delta":{"content":[{"type":"thinking","thinking":[{"type":"text","text":"first."}]}]}}]}"#,
            r#"{"choices":[{"delta":{"content":[{"type":"text","text":"Final Answer: 4"}]}}]}"#,
            r#"{"choices":[{"delta":{"content":""}}]}"#,
        ] {
            pieces.push(
                ChunkDecoder
                    .event(data, &mut sofar)
                    .unwrap_or_else(|e| panic!("{e:?}")),
            );
        }
        assert_eq!(
            pieces,
            [
                Some(Piece::Reasoning("Search ".into())),
                Some(Piece::Reasoning("first.".into())),
                Some(Piece::Text("Final Answer: 4".into())),
                None
            ]
        );
        assert_eq!(sofar.reasoning_content, "Search first.");
    }

    #[test]
    fn arguments_streamed_as_an_object_and_a_late_signature_join_their_call() {
        let (sofar, _) = read(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"c1","type":"function","function":{"name":"a","arguments":{"path":"x"}}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"extra_content":{"google":{"thought_signature":"U2ln"}}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"c1","function":{"name":""},"extra_content":{"google":{"thought_signature":"late"}}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"c2","function":{"name":"b","arguments":"{}"}}]}}]}"#,
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        let names: Vec<&str> = sofar.calls.values().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(sofar.calls[&0].arguments, r#"{"path":"x"}"#);
        let done = sofar.into_completion();
        assert_eq!(done.reasoning.signature_of("c1"), Some("U2ln"));
        // Parallel calls, then the signature: the first call's, as Gemini signs a set.
        let (parallel, _) = read(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"c1","function":{"name":"a","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"c2","function":{"name":"b","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"extra_content":{"google":{"thought_signature":"U2ln"}}}]}}]}"#,
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(parallel.calls.len(), 2);
        let done = parallel.into_completion();
        assert_eq!(done.reasoning.signature_of("c1"), Some("U2ln"));
    }

    #[test]
    fn a_signature_alone_at_an_index_no_call_has_is_not_a_call() {
        let signed_later = |late: &str| {
            let (sofar, _) = read(&[
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"a","arguments":"{}"}}]}}]}"#,
                late,
            ])
            .unwrap_or_else(|e| panic!("{e:?}"));
            sofar.into_completion()
        };
        // At the next index: the first unsigned call's, as Gemini signs a set.
        let done = signed_later(
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"extra_content":{"google":{"thought_signature":"U2ln"}}}]}}]}"#,
        );
        assert_eq!(done.calls.len(), 1);
        assert_eq!(done.reasoning.signature_of("c1"), Some("U2ln"));
        // With an id no call has, and every call signed: dropped, not a call.
        let (sofar, _) = read(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"a","arguments":"{}"},"extra_content":{"google":{"thought_signature":"A"}}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":7,"id":"zz","extra_content":{"google":{"thought_signature":"B"}}}]}}]}"#,
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        let done = sofar.into_completion();
        assert_eq!(done.calls.len(), 1);
        assert_eq!(done.reasoning.signature_of("c1"), Some("A"));
        assert_eq!(done.reasoning.thought_signatures.len(), 1);
        // A signature first, then the call at its index: the call's own.
        let (sofar, _) = read(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"extra_content":{"google":{"thought_signature":"S"}}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"a","arguments":"{}"}}]}}]}"#,
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        let done = sofar.into_completion();
        assert_eq!(done.calls.len(), 1);
        assert_eq!(done.reasoning.signature_of("c1"), Some("S"));
    }

    #[test]
    fn signatures_that_name_their_call_go_first_and_an_empty_id_names_none() {
        let calls_then = |late: &[&str]| {
            let mut events = vec![
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"a","arguments":"{}"}}]}}]}"#,
                r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"c2","function":{"name":"b","arguments":"{}"}}]}}]}"#,
            ];
            events.extend(late);
            let (sofar, _) = read(&events).unwrap_or_else(|e| panic!("{e:?}"));
            sofar.into_completion()
        };
        // The one without an id came first: it does not take c1's place.
        let done = calls_then(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":2,"extra_content":{"google":{"thought_signature":"S_NOID"}}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":3,"id":"c1","extra_content":{"google":{"thought_signature":"S_FOR_C1"}}}]}}]}"#,
        ]);
        assert_eq!(done.calls.len(), 2);
        assert_eq!(done.reasoning.signature_of("c1"), Some("S_FOR_C1"));
        assert_eq!(done.reasoning.signature_of("c2"), Some("S_NOID"));
        // Empty ids (Gemini sends them): the late signature is the unsigned call's.
        let (sofar, _) = read(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"","function":{"name":"a","arguments":"{}"},"extra_content":{"google":{"thought_signature":"SA"}}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"","function":{"name":"b","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":2,"id":"","extra_content":{"google":{"thought_signature":"SB"}}}]}}]}"#,
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        let done = sofar.into_completion();
        let signed: Vec<(&str, &str)> = done
            .reasoning
            .thought_signatures
            .iter()
            .map(|s| (s.call_id.as_str(), s.signature.as_str()))
            .collect();
        let ids: Vec<&str> = done.calls.iter().filter_map(|c| c.id.as_deref()).collect();
        assert_eq!(signed, [(ids[0], "SA"), (ids[1], "SB")]);
    }

    /// mistral.rs, SGLang and Ollama's `/v1` send no index: the pieces after the one naming a
    /// tool are its arguments (they were calls of their own, without a name), and a piece that
    /// names a tool begins the next call.
    #[test]
    fn pieces_without_an_index_go_on_with_the_call_they_follow() {
        let (sofar, _) = read(&[
            r#"{"choices":[{"delta":{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"code_search","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{\"query\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":null,"id":"a","function":{"arguments":"\"login\"}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","type":"function","function":{"name":"read_file","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"c","function":{"arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        let calls: Vec<(Option<String>, String, String)> = sofar
            .calls
            .values()
            .map(|c| (c.id.clone(), c.name.clone(), c.arguments.clone()))
            .collect();
        let call = |id: &str, name: &str, arguments: &str| {
            (
                Some(id.to_string()),
                name.to_string(),
                arguments.to_string(),
            )
        };
        assert_eq!(
            calls,
            [
                call("a", "code_search", r#"{"query":"login"}"#),
                call("b", "read_file", "{}"),
                // A new id, without a name: a call of its own, as before.
                call("c", "", "{}"),
            ]
        );
    }

    /// Pieces without an index that repeat their call's id and name, or carry only the id of
    /// an earlier call: each goes on with the call of its id (they were calls of their own).
    #[test]
    fn pieces_without_an_index_go_on_with_the_call_of_their_id() {
        let (sofar, _) = read(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","type":"function","function":{"name":"code_search","arguments":"{\"query\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","type":"function","function":{"name":"read_file","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"code_search","arguments":"\"login\"}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        let calls: Vec<(String, String)> = sofar
            .calls
            .values()
            .map(|c| (c.name.clone(), c.arguments.clone()))
            .collect();
        assert_eq!(
            calls,
            [
                ("code_search".into(), r#"{"query":"login"}"#.into()),
                ("read_file".into(), "{}".into()),
            ]
        );
    }

    /// Every call of a parallel set at index 0 with its own id (Ollama's `/v1`), and pieces
    /// without an index that reuse one id (or an empty one) for another tool: each a call (they
    /// were run together, `code_searchread_file`).
    #[test]
    fn calls_that_share_an_index_or_an_id_stay_apart() {
        let piece = |index: &str, id: &str, name: &str, arguments: &str| {
            format!(
                r#"{{"choices":[{{"delta":{{"tool_calls":[{{{index}"id":"{id}","type":"function","function":{{"name":"{name}","arguments":"{arguments}"}}}}]}}}}]}}"#
            )
        };
        for (index, first, second, tool) in [
            (r#""index":0,"#, "A", "B", "read_file"),
            ("", "A", "A", "read_file"),
            ("", "", "", "read_file"),
            ("", "A", "A", "code_search"),
        ] {
            let events = [
                piece(index, first, "code_search", "{}"),
                piece(index, second, tool, "{}"),
                r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#.to_string(),
            ];
            let events: Vec<&str> = events.iter().map(String::as_str).collect();
            let (sofar, _) = read(&events).unwrap_or_else(|e| panic!("{e:?}"));
            let names: Vec<&str> = sofar.calls.values().map(|c| c.name.as_str()).collect();
            assert_eq!(names, ["code_search", tool], "{index} {first} {second}");
        }
    }

    #[test]
    fn a_streamed_refusal_is_the_text_and_ends_as_one() {
        let (sofar, text) = read(&[
            r#"{"choices":[{"delta":{"role":"assistant","content":null,"refusal":"I can't "}}]}"#,
            r#"{"choices":[{"delta":{"refusal":"help."}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(text, "", "a refusal is not streamed as text");
        let done = sofar.into_completion();
        assert_eq!(done.text, "I can't help.");
        assert_eq!(
            done.finish,
            crate::llm::FinishReason::Other("refusal".into())
        );
    }

    /// Text beside a refusal is the reply, as in a whole one: the refusal mixed into it once
    /// made the step a refusal.
    #[test]
    fn text_beside_a_streamed_refusal_is_the_reply() {
        let (sofar, text) = read(&[
            r#"{"choices":[{"delta":{"role":"assistant","content":"Final Answer: ","refusal":"I can't "}}]}"#,
            r#"{"choices":[{"delta":{"content":"42"}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(text, "Final Answer: 42");
        let done = sofar.into_completion();
        assert_eq!(done.text, "Final Answer: 42");
        assert_eq!(done.finish, crate::llm::FinishReason::Stop);
    }

    #[test]
    fn drifted_events_are_errors_and_in_stream_errors_are_reported() {
        for data in [
            r#"{"choices":[{"delta":{"content":7}}]}"#,
            r#"{"choices":{"delta":{}}}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":"x","completion_tokens":1}}"#,
            "not json",
        ] {
            assert!(matches!(read(&[data]), Err(WireError::Shape(_))), "{data}");
        }
        assert!(matches!(
            read(&[r#"{"error":{"message":"overloaded"}}"#]),
            Err(WireError::InStream(_))
        ));
    }
}
