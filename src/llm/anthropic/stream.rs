//! Anthropic streams: `message_start` … `content_block_*` … `message_delta`, `message_stop`.

use super::wire::{finish, signed, BlockDelta, Event, StartBlock};
use crate::llm::stream_events::{PartialCall, Piece, Sofar, StreamDecoder};
use crate::llm::{layout_of, Slot, ThinkingBlock, Usage, WireError};

/// Reads Anthropic's events, noting where each text block stood among the others.
#[derive(Default)]
pub struct EventDecoder {
    text_blocks: std::collections::BTreeSet<u64>,
    /// Calls whose arguments are those their start gave: the first piece of them replaces it.
    started_whole: std::collections::BTreeSet<u64>,
}

impl StreamDecoder for EventDecoder {
    fn event(&mut self, data: &str, sofar: &mut Sofar) -> Result<Option<Piece>, WireError> {
        let event: Event =
            serde_json::from_str(data).map_err(|e| WireError::json("a stream event", &e))?;
        match event {
            Event::MessageStart { message } => sofar.usage = Some(Usage::from(message.usage)),
            Event::ContentBlockStart {
                index,
                content_block: StartBlock::ToolUse { id, name, input },
            } => self.call_started(
                index,
                PartialCall {
                    id,
                    name,
                    arguments: String::new(),
                },
                input,
                sofar,
            ),
            Event::ContentBlockStart {
                index,
                content_block: StartBlock::Thinking { thinking },
            } => {
                let block = ThinkingBlock::Thinking {
                    thinking: thinking.clone(),
                    signature: String::new(),
                };
                sofar.thinking_block(index, block)?;
                return Ok(Some(match self.after_text(index) {
                    true => Piece::LateReasoningPart(thinking),
                    false => Piece::ReasoningPart(thinking),
                }));
            }
            Event::ContentBlockStart {
                index,
                content_block: StartBlock::RedactedThinking { data },
            } => {
                sofar.thinking_block(index, ThinkingBlock::RedactedThinking { data })?;
            }
            Event::ContentBlockDelta { index, delta } => return self.delta(index, delta, sofar),
            Event::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    sofar.finish = Some(finish(delta.stop_reason.as_deref()));
                }
                if let (Some(sofar_usage), Some(usage)) = (sofar.usage.as_mut(), usage) {
                    sofar_usage.completion_tokens = usage.output_tokens;
                }
            }
            Event::MessageStop => {
                signed(sofar.thinking.values())?;
                sofar.layout = self.layout(sofar);
                sofar.done = true;
            }
            Event::Error => return Err(WireError::InStream(data.to_string())),
            Event::ContentBlockStart { .. } | Event::Other => {}
        }
        Ok(None)
    }
}

impl EventDecoder {
    /// A call begins. Its `input` is `{}` from Anthropic itself, the arguments following in
    /// pieces; a server that sends them whole here has them read, until a piece arrives.
    fn call_started(
        &mut self,
        index: u64,
        mut call: PartialCall,
        input: Option<serde_json::Value>,
        sofar: &mut Sofar,
    ) {
        let whole = input.filter(|i| i.as_object().is_none_or(|o| !o.is_empty()));
        if let Some(input) = whole {
            call.arguments = input.to_string();
            self.started_whole.insert(index);
        }
        if let Some(entry) = sofar.call(index) {
            *entry = call;
        }
    }

    /// A piece of a block: text a blank line after the text of a block before thinking, a
    /// call's first piece of arguments in place of those its start gave.
    fn delta(
        &mut self,
        index: u64,
        delta: BlockDelta,
        sofar: &mut Sofar,
    ) -> Result<Option<Piece>, WireError> {
        let apart = match &delta {
            BlockDelta::TextDelta { text } if !text.is_empty() => self.text_apart(index, sofar),
            _ => false,
        };
        if matches!(delta, BlockDelta::TextDelta { .. }) {
            self.text_blocks.insert(index);
        }
        // Anthropic's own first piece is often empty: only one with something in it replaces.
        let arguments = matches!(&delta, BlockDelta::InputJsonDelta { partial_json } if !partial_json.trim().is_empty());
        if arguments && self.started_whole.remove(&index) {
            if let Some(call) = sofar.calls.get_mut(&index) {
                call.arguments.clear();
            }
        }
        Ok(match block_delta(index, delta, sofar)? {
            Some(Piece::Text(text)) if apart => {
                Some(Piece::Text(format!("{}{text}", super::TEXTS_APART)))
            }
            Some(Piece::Reasoning(text)) if self.after_text(index) => {
                Some(Piece::LateReasoning(text))
            }
            piece => piece,
        })
    }

    /// Whether the block at `index` comes after a text block, as the reply's layout will say.
    fn after_text(&self, index: u64) -> bool {
        self.text_blocks.first().is_some_and(|text| *text < index)
    }

    /// Whether the text block at `index` begins after thinking that followed earlier text, as
    /// the whole reply's reading sets such blocks apart.
    fn text_apart(&self, index: u64, sofar: &Sofar) -> bool {
        let Some(&last) = self.text_blocks.iter().next_back() else {
            return false;
        };
        // Checked first: a range that ends before it starts panics.
        if index <= last || sofar.text.is_empty() {
            return false;
        }
        sofar.thinking.range(last + 1..index).next().is_some()
    }

    /// Where the reply's blocks stood, by their indexes (`ReasoningState::layout`).
    fn layout(&self, sofar: &Sofar) -> Vec<Slot> {
        let mut slots: Vec<(u64, Slot)> = (sofar.thinking.keys().map(|i| (*i, Slot::Thinking)))
            .chain(self.text_blocks.iter().map(|i| (*i, Slot::Text)))
            .chain(sofar.calls.keys().map(|i| (*i, Slot::ToolUse)))
            .collect();
        slots.sort_unstable_by_key(|(index, _)| *index);
        layout_of(slots.into_iter().map(|(_, slot)| slot).collect())
    }
}

/// A piece of a content block: text and thinking are returned as they stream; a signature or a
/// call's arguments are added to their block.
fn block_delta(
    index: u64,
    delta: BlockDelta,
    sofar: &mut Sofar,
) -> Result<Option<Piece>, WireError> {
    match delta {
        BlockDelta::TextDelta { text } => return Ok(Some(Piece::Text(text))),
        BlockDelta::ThinkingDelta { thinking } => {
            // Thinking for no thinking block would stream as thought yet be kept nowhere.
            let Some(ThinkingBlock::Thinking {
                thinking: sofar, ..
            }) = sofar.thinking.get_mut(&index)
            else {
                return Err(WireError::Shape(
                    "thinking arrived for a block that is not a thinking block".into(),
                ));
            };
            sofar.push_str(&thinking);
            return Ok(Some(Piece::Reasoning(thinking)));
        }
        BlockDelta::SignatureDelta { signature } => {
            if let Some(ThinkingBlock::Thinking {
                signature: sofar, ..
            }) = sofar.thinking.get_mut(&index)
            {
                sofar.push_str(&signature);
            }
        }
        BlockDelta::InputJsonDelta { partial_json } => {
            if let Some(call) = sofar.calls.get_mut(&index) {
                call.arguments.push_str(&partial_json);
            }
        }
        BlockDelta::Other => {}
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(events: &[&str]) -> Result<(Sofar, String), WireError> {
        let mut sofar = Sofar::default();
        let mut text = String::new();
        for data in events {
            if let Some(Piece::Text(t)) = EventDecoder::default().event(data, &mut sofar)? {
                text.push_str(&t);
            }
        }
        Ok((sofar, text))
    }

    #[test]
    fn a_whole_stream_is_read() {
        let (sofar, text) = read(&[
            r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"model":"claude","usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":1}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"ping"}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Thought: a"}}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"read","input":{}}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"p\":"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"1}"}}"#,
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"thinking","thinking":""}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"signature_delta","signature":"sig"}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":7}}"#,
            r#"{"type":"message_stop"}"#,
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(text, "Thought: a");
        assert!(sofar.done);
        assert_eq!(sofar.calls[&1].arguments, "{\"p\":1}");
        assert_eq!(sofar.calls[&1].id.as_deref(), Some("t"));
        assert_eq!(sofar.finish, Some(crate::llm::FinishReason::Length));
        assert_eq!(
            sofar.usage,
            Some(Usage {
                prompt_tokens: 15,
                completion_tokens: 7,
                cached_prompt_tokens: Some(5),
                ..Usage::default()
            })
        );
    }

    /// A server that sends a call's input whole in its start, with no pieces after it: those
    /// are its arguments (they were `{}`). Pieces after a start that had some replace them.
    #[test]
    fn a_calls_input_whole_in_its_start_is_its_arguments() {
        let start = r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"read","input":{"p":1}}}"#;
        let piece = r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"p\":2}"}}"#;
        let empty = r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":" "}}"#;
        for (events, expected) in [
            (vec![start], r#"{"p":1}"#),
            (vec![start, empty], r#"{"p":1} "#),
            (vec![start, empty, piece], r#"{"p":2}"#),
        ] {
            let (mut decoder, mut sofar) = (EventDecoder::default(), Sofar::default());
            for data in events {
                decoder
                    .event(data, &mut sofar)
                    .unwrap_or_else(|e| panic!("{e:?}"));
            }
            assert_eq!(sofar.calls[&0].arguments, expected);
        }
    }

    #[test]
    fn thinking_must_belong_to_a_thinking_block_and_end_signed() {
        let start = r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#;
        let think = r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}"#;
        let stop = r#"{"type":"message_stop"}"#;
        assert!(matches!(read(&[think]), Err(WireError::Shape(_))));
        assert!(matches!(
            read(&[start, think, stop]),
            Err(WireError::Shape(_))
        ));
    }

    #[test]
    fn text_blocks_thinking_stood_between_stream_apart_as_the_reply_reads_them() {
        let think = |i: u32| {
            [
                format!(
                    r#"{{"type":"content_block_start","index":{i},"content_block":{{"type":"thinking","thinking":""}}}}"#
                ),
                format!(
                    r#"{{"type":"content_block_delta","index":{i},"delta":{{"type":"signature_delta","signature":"s"}}}}"#
                ),
            ]
        };
        let text = |i: u32, t: &str| {
            [
                format!(
                    r#"{{"type":"content_block_start","index":{i},"content_block":{{"type":"text","text":""}}}}"#
                ),
                format!(
                    r#"{{"type":"content_block_delta","index":{i},"delta":{{"type":"text_delta","text":"{t}"}}}}"#
                ),
            ]
        };
        let mut events = Vec::new();
        events.extend(think(0));
        events.extend(text(1, "Thought: a"));
        events.extend(text(2, " and b"));
        events.extend(think(3));
        events.extend(text(4, "Final Answer: c"));
        let mut decoder = EventDecoder::default();
        let mut sofar = Sofar::default();
        for data in &events {
            if let Some(Piece::Text(t)) = decoder
                .event(data, &mut sofar)
                .unwrap_or_else(|e| panic!("{e:?}"))
            {
                sofar.text.push_str(&t);
            }
        }
        // Blocks side by side (citations split text so) stay joined.
        assert_eq!(sofar.text, "Thought: a and b\n\nFinal Answer: c");
    }

    #[test]
    fn drifted_events_are_errors() {
        for data in [
            r#"{"type":"message_start","message":{"usage":{}}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":5}}"#,
            r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"a"}}"#,
            r#"{"no_type":1}"#,
        ] {
            assert!(matches!(read(&[data]), Err(WireError::Shape(_))), "{data}");
        }
        assert!(matches!(
            read(&[
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            ]),
            Err(WireError::InStream(_))
        ));
    }
}
