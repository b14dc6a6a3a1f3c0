//! A streamed reply's events as a provider reads them: its [`StreamDecoder`] adds each event to
//! what the stream has said so far ([`Sofar`]) and returns the [`Piece`] of text or reasoning it
//! brings. The bytes are framed into events, and the pieces relayed, by `stream.rs`.

use std::collections::BTreeMap;

use super::bounded::{MAX_BLOCKS, MAX_CALLS_PER_TURN};
use super::{
    CallSignature, Completion, FinishReason, NativeCall, ReasoningState, Slot, ThinkingBlock,
    Usage, WireError,
};

/// What the events of a stream add up to so far.
#[derive(Debug, Default)]
pub struct Sofar {
    pub text: String,
    /// Tool calls by index: name and the argument fragments joined.
    pub calls: BTreeMap<u64, PartialCall>,
    /// Calls past [`MAX_CALLS_PER_TURN`], counted and never built.
    pub dropped_calls: usize,
    pub usage: Option<Usage>,
    pub finish: Option<FinishReason>,
    /// The provider said the reply is complete.
    pub done: bool,
    /// Events read, of any kind.
    pub events: u64,
    /// Reasoning text of an OpenAI-compatible server, joined.
    pub reasoning_content: String,
    /// Anthropic's thinking blocks by index, as their pieces arrive.
    pub thinking: BTreeMap<u64, ThinkingBlock>,
    /// Where an Anthropic reply's blocks stood, when not in the usual order.
    pub layout: Vec<Slot>,
    /// The Responses API's output items, whole, in order.
    pub items: Vec<serde_json::Value>,
    /// The reply is a preamble alone (see [`Completion::preamble_only`]).
    pub preamble_only: bool,
    /// See [`Completion::preamble`].
    pub preamble: String,
    /// The text is the model's refusal (the Responses API's, read from its whole items).
    pub refused: bool,
    /// OpenAI's `refusal` deltas, joined: the text, and a refusal, only when the model wrote no
    /// other text (as a whole reply is read).
    pub refusal: String,
    /// Gemini's thought signatures by the index of the call they came with.
    pub signatures: BTreeMap<u64, String>,
}

/// A piece of what the model writes, as it arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text of the reply.
    Text(String),
    /// Reasoning the model did before it (thinking, `reasoning_content`).
    Reasoning(String),
    /// Reasoning that begins a part of its own (a thinking block, a summary part): the step's
    /// thought sets parts apart with a blank line, and so does what streams of it.
    ReasoningPart(String),
    /// Text the model marked as a preamble (a Responses `commentary` message): thought, never
    /// the answer.
    Preamble(String),
    /// Reasoning that came after the reply's text began (thinking between text blocks, a
    /// reasoning item between messages): the step's thought puts it after what the model
    /// wrote (`ReasoningState::text_around_writing`), so it is told once the reply is over.
    LateReasoning(String),
    /// Such reasoning beginning a part of its own.
    LateReasoningPart(String),
}

impl Piece {
    pub fn is_reasoning(&self) -> bool {
        !matches!(self, Self::Text(_) | Self::Preamble(_))
    }

    pub fn text(&self) -> &str {
        match self {
            Self::Text(text)
            | Self::Reasoning(text)
            | Self::ReasoningPart(text)
            | Self::Preamble(text)
            | Self::LateReasoning(text)
            | Self::LateReasoningPart(text) => text,
        }
    }
}

/// A tool call whose pieces are still arriving.
#[derive(Debug, Default)]
pub struct PartialCall {
    pub id: Option<String>,
    pub name: String,
    pub arguments: String,
}

impl Sofar {
    /// The call at `index`, a new one while the turn has room for it; `None` (and the call
    /// counted as dropped) past [`MAX_CALLS_PER_TURN`].
    pub fn call(&mut self, index: u64) -> Option<&mut PartialCall> {
        if !self.calls.contains_key(&index) && self.calls.len() >= MAX_CALLS_PER_TURN {
            self.dropped_calls += 1;
            return None;
        }
        Some(self.calls.entry(index).or_default())
    }

    /// Starts the thinking block at `index`. Each must go back whole, so one past
    /// [`MAX_BLOCKS`] is an error, not dropped.
    pub fn thinking_block(&mut self, index: u64, block: ThinkingBlock) -> Result<(), WireError> {
        if !self.thinking.contains_key(&index) && self.thinking.len() >= MAX_BLOCKS {
            return Err(WireError::Shape(format!(
                "the reply holds more than {MAX_BLOCKS} thinking blocks"
            )));
        }
        self.thinking.insert(index, block);
        Ok(())
    }

    /// What the pieces add up to, whole or not.
    /// The index of the call of `id`.
    pub fn call_of_id(&self, id: &str) -> Option<u64> {
        let mut calls = self.calls.iter();
        calls
            .find(|(_, c)| c.id.as_deref() == Some(id))
            .map(|(&index, _)| index)
    }

    /// The index of the first call without a thought signature (Gemini signs the first call of
    /// a parallel set).
    pub fn first_unsigned(&self) -> Option<u64> {
        let mut indexes = self.calls.keys();
        indexes
            .find(|index| !self.signatures.contains_key(index))
            .copied()
    }

    /// A "call" that holds only a thought signature (Gemini's late piece, at an index no call
    /// has) is not a call: its signature is that of the call of its id, or else of the first
    /// call without one (Gemini signs the first of a parallel set); left over, it is dropped.
    /// Those naming their call go first, so one without an id never takes a named one's place;
    /// an empty id names no call.
    fn fold_signature_carriers(&mut self) {
        let is_carrier = |index: &u64, c: &PartialCall| {
            c.name.is_empty()
                && c.arguments.trim().is_empty()
                && self.signatures.contains_key(index)
        };
        let carriers: Vec<u64> = (self.calls.iter())
            .filter(|(index, c)| is_carrier(index, c))
            .map(|(&index, _)| index)
            .collect();
        let carriers: Vec<(Option<String>, String)> = carriers
            .into_iter()
            .filter_map(|index| {
                let id = self.calls.remove(&index)?.id.filter(|id| !id.is_empty());
                Some((id, self.signatures.remove(&index)?))
            })
            .collect();
        let (named, unnamed): (Vec<_>, Vec<_>) =
            carriers.into_iter().partition(|(id, _)| id.is_some());
        for (id, signature) in named.into_iter().chain(unnamed) {
            let of_id = id.as_deref().and_then(|id| self.call_of_id(id));
            if let Some(owner) = of_id.or_else(|| self.first_unsigned()) {
                // A call's own signature is never replaced.
                self.signatures.entry(owner).or_insert(signature);
            }
        }
    }

    pub fn into_completion(mut self) -> Completion {
        self.fold_signature_carriers();
        let mut signatures = self.signatures;
        let mut seen = std::collections::HashSet::new();
        for (index, call) in &mut self.calls {
            let signed = signatures.contains_key(index);
            call.id = super::call_ids::of_signed_call(call.id.take(), signed, &mut seen);
        }
        let thought_signatures = self
            .calls
            .iter()
            .filter_map(|(index, c)| {
                Some(CallSignature {
                    call_id: c.id.clone()?,
                    signature: signatures.remove(index)?,
                })
            })
            .collect();
        let calls = self
            .calls
            .into_values()
            .map(|c| NativeCall::from_text(c.id, c.name, &c.arguments))
            .collect();
        let reasoning = ReasoningState {
            blocks: self.thinking.into_values().collect(),
            reasoning_content: Some(self.reasoning_content).filter(|r| !r.is_empty()),
            items: self.items,
            thought_signatures,
            layout: self.layout,
            ..ReasoningState::default()
        };
        let declined = self.text.trim().is_empty() && !self.refusal.trim().is_empty();
        let finish = match self.refused || declined {
            true => FinishReason::Other("refusal".into()),
            false => self.finish.unwrap_or(FinishReason::Stop),
        };
        Completion {
            text: match declined {
                true => self.refusal,
                false => self.text,
            },
            finish,
            usage: self.usage,
            calls,
            dropped_calls: self.dropped_calls,
            reasoning,
            preamble_only: self.preamble_only,
            preamble: self.preamble,
        }
    }
}

/// What one provider's stream events mean.
pub trait StreamDecoder: Send {
    /// Reads one event's data into `sofar`; returns the text or reasoning it adds, if any.
    fn event(&mut self, data: &str, sofar: &mut Sofar) -> Result<Option<Piece>, WireError>;
}
