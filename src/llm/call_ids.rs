//! Call ids as each provider takes them back. A history carries the ids whichever model made
//! its calls (Kimi's `functions.read_file:0`, a client's own, up to 256 characters), but
//! Anthropic takes only letters, digits, `_` and `-`, OpenAI's Chat Completions at most 40
//! characters and its Responses API 64, and Mistral exactly nine letters and digits: each
//! refuses the whole request otherwise, and one holding an id twice. An id outside the
//! provider's rule, or another turn's, goes rewritten, the same way in the call and in the
//! result that answers it, so the pair still matches. Only the request is rewritten: a
//! provider's reply carries its own ids, which fit its rule.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use super::ChatRequest;

/// What a provider takes as a call's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdRule {
    /// Any id the contract takes (1 to 256 printable ASCII characters).
    Any,
    /// At most this many characters.
    AtMost(usize),
    /// Letters, digits, `_` and `-`.
    Word,
    /// Exactly nine letters and digits.
    NineAlphanumerics,
}

impl IdRule {
    fn fits(self, id: &str) -> bool {
        let word = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-');
        match self {
            Self::Any => true,
            Self::AtMost(most) => id.len() <= most,
            Self::Word => !id.is_empty() && id.bytes().all(word),
            Self::NineAlphanumerics => {
                id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric())
            }
        }
    }

    /// The `attempt`th id that may stand for `id` on the wire: derived from all of it, so two
    /// ids stay apart, and the same at every step of a loop, so the prompt's cached prefix
    /// stays the same.
    fn rewritten(self, id: &str, attempt: u32) -> String {
        let mut hasher = std::hash::DefaultHasher::new();
        (id, attempt).hash(&mut hasher);
        let digits = base62(hasher.finish());
        match self {
            Self::NineAlphanumerics => digits.chars().cycle().take(9).collect(),
            _ => format!("call_{digits}"),
        }
    }
}

/// The ids given in place of others, none of them an id the request holds as it came nor one
/// given for another: a client's history may hold any id, `call_…` ones included.
struct Rewriter {
    rule: IdRule,
    given: HashMap<String, String>,
    /// The ids the request holds as it came, and those given.
    taken: HashSet<String>,
}

impl Rewriter {
    fn new(rule: IdRule, request: &ChatRequest) -> Self {
        let taken = request
            .messages
            .iter()
            .flat_map(|m| m.calls.iter().map(|c| &c.id).chain(&m.answers))
            .cloned()
            .collect();
        Self {
            rule,
            given: HashMap::new(),
            taken,
        }
    }

    /// The id that stands for `source`: the same each time it is asked for.
    fn id(&mut self, source: &str) -> String {
        if let Some(id) = self.given.get(source) {
            return id.clone();
        }
        let id = (0..)
            .map(|attempt| self.rule.rewritten(source, attempt))
            .find(|id| !self.taken.contains(id))
            .unwrap_or_default();
        self.taken.insert(id.clone());
        self.given.insert(source.to_string(), id.clone());
        id
    }
}

/// Rewrites the request's call ids (each call's and the result's that answers it) that `rule`
/// refuses, and a call's id that an earlier turn's call had too (providers refuse a request
/// holding one id twice; a result answers the latest call of its id); returns how many ids it
/// rewrote.
pub fn apply(request: &mut ChatRequest, rule: IdRule) -> usize {
    let mut ids = Rewriter::new(rule, request);
    let mut rewritten = 0;
    let mut earlier: HashSet<String> = HashSet::new();
    // The id each repeated id now goes by, for the results that follow its latest call.
    let mut latest: HashMap<String, String> = HashMap::new();
    for message in &mut request.messages {
        let mut own = Vec::new();
        for call in &mut message.calls {
            if earlier.contains(&call.id) {
                // A line break is in no id (printable ASCII), so no id sent stands for this one.
                let again = ids.id(&format!("{}\n{}", call.id, earlier.len()));
                latest.insert(call.id.clone(), again.clone());
                call.id = again;
                rewritten += 1;
            } else {
                latest.remove(&call.id);
            }
            own.push(call.id.clone());
        }
        if let Some(answers) = &mut message.answers {
            if let Some(again) = latest.get(answers.as_str()) {
                *answers = again.clone();
                rewritten += 1;
            }
        }
        earlier.extend(own);
        let own_ids = message.calls.iter_mut().map(|c| &mut c.id);
        for id in own_ids.chain(message.answers.as_mut()) {
            if !rule.fits(id) {
                *id = ids.id(id);
                rewritten += 1;
            }
        }
    }
    rewritten
}

/// The id a call of a reply goes by, `seen` the ids of the reply's calls before it: its own, or,
/// when it is signed (a Gemini thought signature, which goes back by the call's id) and came
/// without one, with an empty one or with another call's, one given now (the second call's
/// signature went back on the first).
pub fn of_signed_call(
    id: Option<String>,
    signed: bool,
    seen: &mut HashSet<String>,
) -> Option<String> {
    let taken = id
        .as_ref()
        .is_none_or(|id| id.is_empty() || seen.contains(id));
    let id = match signed && taken {
        true => Some(fresh()),
        false => id,
    };
    seen.extend(id.clone());
    id
}

/// An id for a call the provider gave none (a text-mode call, Ollama): `call_` and 24 letters
/// and digits, as OpenAI's look.
pub fn fresh() -> String {
    let mut id = String::with_capacity(29);
    id.push_str("call_");
    id.extend(std::iter::repeat_with(fastrand::alphanumeric).take(24));
    id
}

/// `n` in letters and digits (11 of them at most).
fn base62(mut n: u64) -> String {
    const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::with_capacity(11);
    loop {
        out.push(DIGITS[(n % 62) as usize]);
        n /= 62;
        if n == 0 {
            break;
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ChatMessage, ChatRole, ToolUse};

    fn request(ids: &[&str]) -> ChatRequest {
        let mut call = ChatMessage::text(ChatRole::Assistant, String::new());
        call.calls = ids
            .iter()
            .map(|id| ToolUse {
                id: id.to_string(),
                name: "read_file".into(),
                arguments: serde_json::Map::new(),
            })
            .collect();
        let mut messages = vec![call];
        for id in ids {
            let mut result = ChatMessage::text(ChatRole::Tool, "ok".into());
            result.answers = Some(id.to_string());
            messages.push(result);
        }
        ChatRequest::new("m".into(), String::new(), messages, 100)
    }

    fn ids(request: &ChatRequest) -> (Vec<String>, Vec<String>) {
        let calls = request.messages[0]
            .calls
            .iter()
            .map(|c| c.id.clone())
            .collect();
        let answers = request.messages[1..]
            .iter()
            .filter_map(|m| m.answers.clone())
            .collect();
        (calls, answers)
    }

    #[test]
    fn ids_a_provider_refuses_are_rewritten_alike_in_the_call_and_its_result() {
        let long = "x".repeat(41);
        let given = [
            "functions.read_file:0",
            "functions.read_file:1",
            "call_ok",
            long.as_str(),
        ];
        for rule in [IdRule::Word, IdRule::AtMost(40), IdRule::NineAlphanumerics] {
            let mut sent = request(&given);
            let count = apply(&mut sent, rule);
            let (calls, answers) = ids(&sent);
            assert_eq!(
                calls, answers,
                "{rule:?}: each result still answers its call"
            );
            assert!(calls.iter().all(|id| rule.fits(id)), "{rule:?}: {calls:?}");
            let apart: std::collections::HashSet<&String> = calls.iter().collect();
            assert_eq!(apart.len(), given.len(), "{rule:?}: {calls:?}");
            // Each id stands in a call and in its result.
            let expected = match rule {
                IdRule::Word => 2,
                IdRule::AtMost(_) => 1,
                _ => 4,
            };
            assert_eq!(count, 2 * expected, "{rule:?}");
        }
        let mut sent = request(&given);
        assert_eq!(apply(&mut sent, IdRule::Any), 0);
        assert_eq!(ids(&sent).0, given);
    }

    #[test]
    fn an_id_given_in_place_of_another_is_none_the_request_holds() {
        // A client's history may hold any id, the very one the service would give.
        for rule in [IdRule::Word, IdRule::AtMost(40), IdRule::NineAlphanumerics] {
            let would_be = rule.rewritten("functions.read_file:0", 0);
            let repeat = rule.rewritten("call_0\n1", 0);
            let given = ["functions.read_file:0", would_be.as_str(), repeat.as_str()];
            let mut sent = request(&given);
            let again = request(&["call_0"]);
            sent.messages.extend(again.messages.clone());
            sent.messages.extend(again.messages);
            apply(&mut sent, rule);
            let mut all: Vec<&str> = Vec::new();
            for m in &sent.messages {
                all.extend(m.calls.iter().map(|c| c.id.as_str()));
            }
            let apart: std::collections::HashSet<&&str> = all.iter().collect();
            assert_eq!(apart.len(), all.len(), "{rule:?}: {all:?}");
            let m = &sent.messages;
            let answer = |i: usize| m[i].answers.clone().unwrap_or_default();
            assert_eq!(all[..3], [answer(1), answer(2), answer(3)], "{rule:?}");
            assert_eq!((all[3], all[4]), (answer(5).as_str(), answer(7).as_str()));
        }
    }

    #[test]
    fn an_id_an_earlier_turn_had_goes_apart_with_the_results_that_follow_it() {
        // Two turns numbered from `call_0` by their server, each answered.
        let mut sent = request(&["call_0"]);
        let second = request(&["call_0"]);
        sent.messages.extend(second.messages);
        apply(&mut sent, IdRule::Any);
        let m = &sent.messages;
        assert_eq!(m[0].calls[0].id, "call_0");
        assert_eq!(m[1].answers.as_deref(), Some("call_0"));
        assert_ne!(m[2].calls[0].id, "call_0");
        assert_eq!(m[3].answers.as_deref(), Some(m[2].calls[0].id.as_str()));
    }
}
