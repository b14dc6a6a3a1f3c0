//! What a model leaves at the end of its output that is not part of it: end-of-turn tokens a
//! local server passed through as text (`<|im_end|>`, `<|eot_id|>`, `</s>`, …), and the start of
//! an observation tag when the server ignored or split the stop sequence (`\nObs`,
//! `\nObservation` without its colon). Neither may end up inside an argument or an answer.

use super::work;

/// End-of-turn and end-of-message tokens of the chat templates in use (ChatML, Llama 3,
/// Mistral, Phi, gpt-oss harmony, DeepSeek, Gemma, GLM).
pub const END_TOKENS: [&str; 15] = [
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|endoftext|>",
    "</s>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<｜end▁of▁sentence｜>",
    "<end_of_turn>",
    "<|user|>",
    "<|observation|>",
    "<|python_end|>",
    "<eos>",
];

/// Tokens that begin a new turn of the chat template.
const TURN_STARTS: [&str; 5] = [
    "<|start_header_id|>",
    "<|im_start|>",
    "<|start|>",
    "<start_of_turn>",
    "<｜User｜>",
];

/// `text` up to an end token followed by the start of a new turn: a server that did not stop
/// at the end of the turn lets the model invent the next one (a user message, a tool result),
/// and none of that is this output. A turn start that opens the output (`<|im_start|>assistant`)
/// is dropped too.
pub fn cut_invented_turn(text: &str) -> &str {
    let mut text = text.trim_start();
    for start in TURN_STARTS {
        if let Some(rest) = text.strip_prefix(start) {
            let rest = rest.trim_start();
            text = rest.strip_prefix("assistant").unwrap_or(rest).trim_start();
        }
    }
    let cut = invented_turn_at(text).or_else(|| {
        // An end token with nothing after it ends the output too.
        let trimmed = strip_end_tokens(text);
        (trimmed.len() < text.trim_end().len()).then_some(trimmed.len())
    });
    cut.map_or(text, |i| &text[..i])
}

/// Where an end token followed by the start of a new turn is in `text`.
pub fn invented_turn_at(text: &str) -> Option<usize> {
    work::add(text.len() * END_TOKENS.len());
    // Every end token opens with '<', which most outputs do not hold: one vector search then
    // spares a search per token.
    memchr::memchr(b'<', text.as_bytes())?;
    END_TOKENS
        .iter()
        .flat_map(|token| {
            text.match_indices(token)
                .map(move |(i, _)| (i, token.len()))
        })
        .filter(|&(i, len)| starts_a_turn(text[i + len..].trim_start()))
        .map(|(i, _)| i)
        .min()
}

pub fn starts_a_turn(text: &str) -> bool {
    TURN_STARTS.iter().any(|s| text.starts_with(s))
}

/// The longest end of `text` that is the start of a turn-start token.
pub fn turn_start_prefix_len(text: &str) -> usize {
    held_prefix_len(text, TURN_STARTS.iter().copied())
}

/// The longest end of `text` that is a proper start of one of `tokens`: what a stream must hold
/// back until the next piece shows whether the token is whole.
pub fn held_prefix_len<'t>(text: &str, tokens: impl Iterator<Item = &'t str>) -> usize {
    tokens
        .map(|t| {
            (1..t.len().min(text.len() + 1))
                .rev()
                .filter(|&n| t.is_char_boundary(n) && text.is_char_boundary(text.len() - n))
                .find(|&n| text.ends_with(&t[..n]))
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0)
}

/// The shortest start of the observation tag taken for a remnant of it: one letter is too
/// likely to be a real last line.
const REMNANT_MIN_CHARS: usize = 2;

/// `text` without the end tokens (and the space between them) at its end.
pub fn strip_end_tokens(text: &str) -> &str {
    let mut rest = text.trim_end();
    while let Some(token) = END_TOKENS.iter().find(|t| rest.ends_with(**t)) {
        work::add(token.len());
        rest = rest[..rest.len() - token.len()].trim_end();
    }
    rest
}

/// Whether `line` is the observation tag without its colon, or the start of it, as a split
/// stop sequence leaves it: `Obs`, `observ`, `**Observation`, `Observation 3`.
pub fn is_observation_remnant(line: &str, observation: &str) -> bool {
    let line = line
        .trim()
        .trim_start_matches(['*', '#', '>', ' '])
        .trim_end_matches(['*', ':', ' '])
        .trim_end_matches(|c: char| c.is_ascii_digit())
        .trim_end();
    work::add(line.len() + 1);
    line.chars().count() >= REMNANT_MIN_CHARS
        && line.len() <= observation.len()
        && observation
            .get(..line.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(line))
}

/// `text` without a last line that is the start of the observation tag.
pub fn strip_observation_remnant<'t>(text: &'t str, observation: &str) -> &'t str {
    let trimmed = text.trim_end();
    let line_start = trimmed.rfind('\n').map_or(0, |i| i + 1);
    if line_start > 0 && is_observation_remnant(&trimmed[line_start..], observation) {
        trimmed[..line_start].trim_end()
    } else {
        text
    }
}

/// Both: the end tokens, then a remnant before them, then end tokens before that.
pub fn strip<'t>(text: &'t str, observation: &str) -> &'t str {
    strip_end_tokens(strip_observation_remnant(
        strip_end_tokens(text),
        observation,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_end_token_opens_with_the_byte_searched_first() {
        for token in END_TOKENS {
            assert!(token.starts_with('<'), "{token}");
            let text = format!("done.{token}<|im_start|>user\nmore");
            assert_eq!(invented_turn_at(&text), Some(5), "{token}");
        }
        assert_eq!(invented_turn_at("no tokens here\n<|im_start|>user"), None);
    }

    #[test]
    fn end_tokens_at_the_end_are_dropped_and_elsewhere_kept() {
        assert_eq!(
            strip_end_tokens("Final Answer: yes<|im_end|>"),
            "Final Answer: yes"
        );
        assert_eq!(strip_end_tokens("done </s>\n<|eot_id|>\n"), "done");
        assert_eq!(strip_end_tokens("a <s>b</s> c"), "a <s>b</s> c");
    }

    #[test]
    fn the_start_of_the_observation_tag_is_a_remnant_in_any_case() {
        for line in [
            "Obs",
            "observ",
            "OBSERVATION",
            "Observation",
            "**Observation",
            "Observation 3",
        ] {
            assert!(is_observation_remnant(line, "Observation"), "{line}");
        }
        for line in ["O", "Observations", "Obstacle", "Done", ""] {
            assert!(!is_observation_remnant(line, "Observation"), "{line}");
        }
    }

    #[test]
    fn an_invented_next_turn_is_cut_off() {
        assert_eq!(
            cut_invented_turn("Action Input: src/main.rs<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\nfn main"),
            "Action Input: src/main.rs"
        );
        assert_eq!(
            cut_invented_turn(
                "<|im_start|>assistant\nFinal Answer: a<|im_end|>\n<|im_start|>user\nthanks"
            ),
            "Final Answer: a"
        );
        assert_eq!(
            cut_invented_turn("content=\"a <|im_end|> b\""),
            "content=\"a <|im_end|> b\""
        );
    }

    #[test]
    fn only_a_last_line_of_its_own_is_stripped() {
        assert_eq!(
            strip("Action Input: src/app.py\nObserv", "Observation"),
            "Action Input: src/app.py"
        );
        assert_eq!(
            strip("Final Answer: 4\nobs<|im_end|>", "Observation"),
            "Final Answer: 4"
        );
        assert_eq!(strip("Obs", "Observation"), "Obs");
        assert_eq!(strip("Obs\nmore", "Observation"), "Obs\nmore");
    }
}
