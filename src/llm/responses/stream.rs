//! Responses API streams: named events (`response.created`, `response.output_item.added`, the
//! deltas, `response.output_item.done`, `response.completed`), each with its `type` in its data.
//! Text and reasoning summaries stream as they come; each output item is taken whole from its
//! `.done` event (the `.added` copy may lack the encrypted content), and the reply ends with
//! `response.completed` (or `response.incomplete`). An event of another type is skipped.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::wire::{finish, Incomplete, Output, ReplyUsage};
use crate::llm::bounded::{MAX_BLOCKS, MAX_CALLS_PER_TURN};
use crate::llm::stream_events::{Piece, Sofar, StreamDecoder};
use crate::llm::{Usage, WireError};

/// The output items of the stream so far.
#[derive(Default)]
pub struct EventDecoder {
    output: Output,
    items: usize,
    /// The output indexes of messages marked `commentary`: their text streams as thought.
    commentary: BTreeSet<u64>,
    /// The message the last text of each kind came from (the answer's, a preamble's): the next
    /// message's text of that kind streams a blank line after it, as the whole items join them,
    /// whatever came between (the step puts that line between a preamble and the text itself).
    last_text: [Option<u64>; 2],
    /// A message's text has come: reasoning after it is late (`Piece::LateReasoning`).
    wrote: bool,
}

/// What the service reads of an event.
#[derive(Deserialize)]
struct Event<'e> {
    #[serde(rename = "type")]
    kind: String,
    delta: Option<String>,
    output_index: Option<u64>,
    item: Option<Box<RawValue>>,
    #[serde(borrow)]
    response: Option<Final<'e>>,
}

/// What the service reads of an item as it is added: whether it is a preamble.
#[derive(Deserialize)]
struct Added {
    #[serde(rename = "type")]
    kind: String,
    phase: Option<String>,
}

/// The response a `response.completed`, `.incomplete` or `.failed` event carries.
#[derive(Deserialize)]
struct Final<'e> {
    /// The items, whole: read only when the `output_item.done` events gave fewer, so borrowed
    /// from the event rather than copied (every streamed reply ends with them all).
    #[serde(borrow)]
    output: Option<Vec<&'e RawValue>>,
    status: Option<String>,
    incomplete_details: Option<Incomplete>,
    usage: Option<ReplyUsage>,
    error: Option<Box<RawValue>>,
}

impl StreamDecoder for EventDecoder {
    fn event(&mut self, data: &str, sofar: &mut Sofar) -> Result<Option<Piece>, WireError> {
        let event: Event =
            serde_json::from_str(data).map_err(|e| WireError::json("a stream event", &e))?;
        match event.kind.as_str() {
            "response.output_text.delta" => {
                let preamble = event
                    .output_index
                    .is_some_and(|i| self.commentary.contains(&i));
                let delta = event.delta;
                let delta = delta.map(|text| self.apart(event.output_index, preamble, text));
                Ok(delta.map(match preamble {
                    true => Piece::Preamble,
                    false => Piece::Text,
                }))
            }
            // Not streamed: a refusal is the reply only when no text comes, which the whole
            // items tell (`Output::texts`), as in a reply that came whole.
            "response.refusal.delta" => Ok(None),
            "response.output_item.added" => {
                self.added(event.output_index, event.item.as_deref());
                Ok(None)
            }
            "response.reasoning_summary_text.delta" => Ok(event.delta.map(match self.wrote {
                true => Piece::LateReasoning,
                false => Piece::Reasoning,
            })),
            "response.reasoning_summary_part.added" => Ok(Some(match self.wrote {
                true => Piece::LateReasoningPart(String::new()),
                false => Piece::ReasoningPart(String::new()),
            })),
            "response.output_item.done" => {
                let item = event.item.ok_or_else(|| missing("item"))?;
                self.item(item.get())?;
                Ok(None)
            }
            "response.completed" | "response.incomplete" => {
                let mut response = event.response.ok_or_else(|| missing("response"))?;
                // A server that sent not every item whole before the end: the response's own
                // list, when it holds more.
                let listed = response.output.take().unwrap_or_default();
                if listed.len() > self.items {
                    (self.output, self.items) = (Output::default(), 0);
                    for item in listed {
                        self.item(item.get())?;
                    }
                }
                self.end(response, sofar);
                Ok(None)
            }
            "response.failed" => {
                let error = event.response.and_then(|r| r.error);
                let error = error.as_deref().map_or("null", RawValue::get);
                Err(WireError::InStream(format!("{{\"error\":{error}}}")))
            }
            "error" => Err(WireError::InStream(data.to_string())),
            _ => Ok(None),
        }
    }
}

impl EventDecoder {
    /// `text`, a blank line after the text of another message of its kind.
    fn apart(&mut self, index: Option<u64>, preamble: bool, text: String) -> String {
        let (Some(index), false) = (index, text.is_empty()) else {
            return text;
        };
        self.wrote = true;
        match self.last_text[usize::from(preamble)].replace(index) {
            Some(before) if before != index => [super::wire::MESSAGES_APART, &text].concat(),
            _ => text,
        }
    }

    /// Notes a message marked `commentary` as it is added (as many as a reply may hold items).
    fn added(&mut self, index: Option<u64>, item: Option<&RawValue>) {
        let Some((index, item)) = index.zip(item) else {
            return;
        };
        let Ok(added) = serde_json::from_str::<Added>(item.get()) else {
            return;
        };
        let commentary = added.kind == "message" && added.phase.as_deref() == Some("commentary");
        if commentary && self.commentary.len() < MAX_BLOCKS {
            self.commentary.insert(index);
        }
    }

    /// One output item, whole.
    fn item(&mut self, item: &str) -> Result<(), WireError> {
        self.items += 1;
        if self.items > MAX_BLOCKS {
            return Err(WireError::Shape(format!(
                "the reply holds more than {MAX_BLOCKS} output items, more than a step can carry back"
            )));
        }
        self.output.push(item)
    }

    /// The reply is over: its usage, why it ended, and its items whole.
    fn end(&mut self, response: Final<'_>, sofar: &mut Sofar) {
        sofar.usage = response.usage.map(Usage::from);
        sofar.finish = Some(finish(
            response.status.as_deref(),
            response.incomplete_details.as_ref(),
        ));
        let mut output = std::mem::take(&mut self.output);
        sofar.refused = output.refused();
        sofar.preamble_only = output.preamble_only();
        if !output.text.is_empty() || !output.refusal.is_empty() {
            // The text as the JSON reply's: the preamble apart from the answer, messages a blank
            // line apart (the items are whole).
            (sofar.text, sofar.preamble) = output.texts();
        }
        for (index, (id, name, arguments)) in output.calls.drain(..).enumerate() {
            if index >= MAX_CALLS_PER_TURN {
                sofar.dropped_calls += 1;
                continue;
            }
            if let Some(call) = sofar.call(index as u64) {
                call.id = id;
                call.name = name;
                call.arguments = arguments;
            }
        }
        sofar.items = output.items;
        sofar.done = true;
    }
}

fn missing(what: &str) -> WireError {
    WireError::Shape(format!("a stream event has no {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(events: &[serde_json::Value]) -> Result<(Sofar, Vec<Piece>), WireError> {
        let mut decoder = EventDecoder::default();
        let mut sofar = Sofar::default();
        let mut pieces = Vec::new();
        for e in events {
            pieces.extend(decoder.event(&e.to_string(), &mut sofar)?);
        }
        Ok((sofar, pieces))
    }

    #[test]
    fn items_come_whole_from_their_done_event_and_the_end_is_read() {
        let reasoning = json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "SECRET", "summary": [{"type": "summary_text", "text": "hm"}]});
        let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file", "arguments": "{\"path\":\"a\"}", "status": "completed"});
        let (sofar, pieces) = read(&[
            json!({"type": "response.created", "response": {"status": "in_progress"}}),
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
            json!({"type": "response.reasoning_summary_text.delta", "delta": "hm"}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": reasoning}),
            json!({"type": "response.output_item.added", "output_index": 1, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file", "arguments": ""}}),
            json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{\"path\""}),
            json!({"type": "response.output_item.done", "output_index": 1, "item": call}),
            json!({"type": "response.something_new", "x": 1}),
            json!({"type": "response.completed", "response": {"status": "completed", "usage": {"input_tokens": 9, "output_tokens": 4, "input_tokens_details": {"cached_tokens": 8}, "output_tokens_details": {"reasoning_tokens": 3}}}}),
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(pieces, [Piece::Reasoning("hm".into())]);
        assert!(sofar.done && !sofar.preamble_only);
        assert_eq!(sofar.items, [reasoning, call]);
        assert_eq!(sofar.calls[&0].id.as_deref(), Some("call_1"));
        assert_eq!(sofar.calls[&0].arguments, "{\"path\":\"a\"}");
        let usage = sofar.usage.unwrap_or_default();
        assert_eq!(usage.cached_prompt_tokens, Some(8));
        assert_eq!(usage.reasoning_tokens, Some(3));
    }

    #[test]
    fn a_commentary_streams_as_a_preamble_and_stays_apart_from_the_answer() {
        let message = |id: &str, phase: &str, text: &str| {
            json!({"type": "message", "id": id, "role": "assistant", "phase": phase,
                "content": [{"type": "output_text", "text": text}]})
        };
        let mut events = Vec::new();
        for (index, (id, phase, text)) in [
            ("m1", "commentary", "Let me see."),
            ("m2", "final_answer", "Done."),
        ]
        .into_iter()
        .enumerate()
        {
            let added = json!({"type": "message", "id": id, "role": "assistant", "phase": phase, "content": []});
            events.push(
                json!({"type": "response.output_item.added", "output_index": index, "item": added}),
            );
            events.push(
                json!({"type": "response.output_text.delta", "output_index": index, "delta": text}),
            );
            events.push(json!({"type": "response.output_item.done", "output_index": index, "item": message(id, phase, text)}));
        }
        events.push(json!({"type": "response.completed", "response": {"status": "completed"}}));
        let (sofar, pieces) = read(&events).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            pieces,
            [
                Piece::Preamble("Let me see.".into()),
                Piece::Text("Done.".into())
            ]
        );
        assert_eq!(
            (sofar.text.as_str(), sofar.preamble.as_str()),
            ("Done.", "Let me see.")
        );
    }

    #[test]
    fn messages_of_one_kind_stream_a_blank_line_apart_as_the_whole_items_join_them() {
        let message = |id: &str, text: &str| {
            json!({"type": "message", "id": id, "role": "assistant",
                "content": [{"type": "output_text", "text": text}]})
        };
        let mut events = Vec::new();
        for (index, (id, deltas)) in [("m1", ["Let ", "me."]), ("m2", ["", "Then."])]
            .into_iter()
            .enumerate()
        {
            for delta in deltas {
                events.push(json!({"type": "response.output_text.delta", "output_index": index, "delta": delta}));
            }
            events.push(json!({"type": "response.output_item.done", "output_index": index, "item": message(id, &deltas.concat())}));
        }
        events.push(json!({"type": "response.completed", "response": {"status": "completed"}}));
        let (sofar, pieces) = read(&events).unwrap_or_else(|e| panic!("{e:?}"));
        let streamed: String = pieces.iter().map(Piece::text).collect();
        assert_eq!(streamed, "Let me.\n\nThen.");
        assert_eq!(sofar.text, streamed);
    }

    /// A refusal part is not streamed: beside text it is left out, alone it is the reply, as a
    /// whole reply reads them. It was streamed as text and run into the answer.
    #[test]
    fn a_refusal_part_is_the_reply_only_without_text() {
        for (text, expected) in [
            ("Final Answer: auth.py", "Final Answer: auth.py"),
            ("", "No."),
        ] {
            let mut parts = vec![json!({"type": "refusal", "refusal": "No."})];
            let mut events = Vec::new();
            if !text.is_empty() {
                parts.insert(0, json!({"type": "output_text", "text": text}));
                events.push(
                    json!({"type": "response.output_text.delta", "output_index": 0, "delta": text}),
                );
            }
            events
                .push(json!({"type": "response.refusal.delta", "output_index": 0, "delta": "No."}));
            let item =
                json!({"type": "message", "id": "m1", "role": "assistant", "content": parts});
            events.push(
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            );
            events.push(json!({"type": "response.completed", "response": {"status": "completed"}}));
            let (sofar, pieces) = read(&events).unwrap_or_else(|e| panic!("{e:?}"));
            let streamed: String = pieces.iter().map(Piece::text).collect();
            assert_eq!(streamed, text);
            assert_eq!(sofar.text, expected);
            assert_eq!(sofar.refused, text.is_empty());
        }
    }

    /// A server that streams the text but gives the items only in the end's response: the
    /// call and the text are read from there (the call was lost, the text taken for an answer).
    #[test]
    fn items_given_only_at_the_end_are_read() {
        let message = json!({"type": "message", "id": "m1", "role": "assistant",
            "content": [{"type": "output_text", "text": "Checking."}]});
        let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1",
            "name": "read_file", "arguments": "{\"path\":\"a.rs\"}"});
        let events = [
            json!({"type": "response.output_text.delta", "output_index": 0, "delta": "Checking."}),
            json!({"type": "response.completed", "response": {"status": "completed", "output": [message, call]}}),
        ];
        let (sofar, _) = read(&events).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(sofar.text, "Checking.");
        assert_eq!(sofar.calls[&0].name, "read_file");
        assert_eq!(sofar.calls[&0].arguments, "{\"path\":\"a.rs\"}");
        assert_eq!(sofar.items.len(), 2);
        // The message given whole, the call only in the end's list: both, once each.
        let done = json!({"type": "response.output_item.done", "output_index": 0, "item": message});
        let events = [events[0].clone(), done, events[1].clone()];
        let (sofar, _) = read(&events).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!((sofar.text.as_str(), sofar.items.len()), ("Checking.", 2));
        assert_eq!(sofar.calls[&0].name, "read_file");
    }

    #[test]
    fn a_failed_response_and_an_error_event_are_in_stream_errors() {
        for event in [
            json!({"type": "response.failed", "response": {"status": "failed", "error": {"code": "server_error", "message": "boom"}}}),
            json!({"type": "error", "code": "server_error", "message": "boom"}),
        ] {
            match read(&[event]) {
                Err(WireError::InStream(data)) => assert!(data.contains("boom"), "{data}"),
                other => panic!("{:?}", other.map(|_| ())),
            }
        }
        assert!(matches!(
            read(&[json!({"type": 7})]),
            Err(WireError::Shape(_))
        ));
    }
}
