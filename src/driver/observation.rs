//! What goes back to the service of a tool's observation. The service refuses a body over its
//! limit (413; `REACTSTEP_MAX_BODY_BYTES`, 8 MiB by default) and shows the model no more than
//! `max_observation_tokens` of the latest observation (2,000 by default), so an observation goes
//! back cut to [`MAX_SENT_BYTES`], with a line saying how much was cut; the run's report keeps it
//! whole. The history grows with every step: when a request would pass the body limit, the
//! oldest observations in it are cut further, to [`OLDER_BYTES`], until it fits.

use std::borrow::Cow;

use serde_json::Value;

/// The most of one observation sent back: some 16,000 tokens, eight times what the service
/// shows the model of the latest one by default.
pub const MAX_SENT_BYTES: usize = 64 * 1024;
/// What is left of an older observation when the history must shrink to fit the body limit.
const OLDER_BYTES: usize = 1024;

/// `text` when it is at most `max` bytes; else its first `max` bytes (at a character boundary)
/// and a line that says how much was cut and where the whole is.
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!(
        "{}\n[cut: {} of {} bytes left out; the whole observation is in the run's report]",
        &text[..end],
        text.len() - end,
        text.len()
    ))
}

/// The request body as bytes, at most `limit` of them when cutting the history's older
/// observations can make it so. Newer observations are cut last: the model needs them most.
pub fn fit(body: &mut Value, limit: usize) -> Vec<u8> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let Some(mut over) = bytes.len().checked_sub(limit).filter(|n| *n > 0) else {
        return bytes;
    };
    let Some(turns) = body["conversation_history"].as_array_mut() else {
        return bytes;
    };
    for turn in turns {
        if turn["role"] != "tool_observation" {
            continue;
        }
        let Some(content) = turn["content"].as_str() else {
            continue;
        };
        let shorter = cut(content, OLDER_BYTES);
        let saved = json_len(content).saturating_sub(json_len(&shorter));
        if saved == 0 {
            continue;
        }
        turn["content"] = Value::String(shorter.into_owned());
        over = over.saturating_sub(saved);
        if over == 0 {
            break;
        }
    }
    serde_json::to_vec(body).unwrap_or_default()
}

/// The bytes a string takes in JSON, escapes and quotes included.
pub(crate) fn json_len(text: &str) -> usize {
    serde_json::to_string(text).map_or(text.len(), |s| s.len())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_long_text_is_cut_at_a_character_and_says_how_much() {
        assert_eq!(cut("short", 10), "short");
        let text = "é".repeat(10); // 20 bytes
        let out = cut(&text, 5);
        assert!(
            out.starts_with("éé\n[cut: 16 of 20 bytes left out"),
            "{out}"
        );
        assert!(out.contains("the run's report"));
    }

    fn body(observations: &[String]) -> Value {
        let turns: Vec<Value> = observations
            .iter()
            .map(|o| json!({"role": "tool_observation", "content": o, "tool_call_id": "c"}))
            .collect();
        json!({"user_query": "", "conversation_history": turns})
    }

    #[test]
    fn a_body_over_the_limit_loses_its_oldest_observations_first() {
        // Quotes and newlines count as JSON escapes them: 20,000 × `"` is 40,000 bytes.
        let observations: Vec<String> = (0..10).map(|_| "\"".repeat(20_000)).collect();
        let mut big = body(&observations);
        let whole = serde_json::to_vec(&big).unwrap_or_default().len();
        let limit = whole - 100_000;
        let sent = fit(&mut big, limit);
        assert!(sent.len() <= limit, "{} > {limit}", sent.len());
        let sent: Value = serde_json::from_slice(&sent).unwrap_or_default();
        let cut_turns: Vec<bool> = sent["conversation_history"]
            .as_array()
            .map(|t| {
                t.iter()
                    .map(|t| t["content"].as_str().is_some_and(|c| c.contains("[cut:")))
                    .collect()
            })
            .unwrap_or_default();
        // 40 KB saved per cut observation: the three oldest go, the newest stay whole.
        assert_eq!(
            cut_turns,
            [true, true, true, false, false, false, false, false, false, false]
        );
        assert_eq!(sent, big, "what is sent is the body as cut");
    }

    #[test]
    fn a_body_under_the_limit_is_sent_as_it_is() {
        let mut small = body(&["x".repeat(5_000)]);
        let before = small.clone();
        let sent = fit(&mut small, 1 << 20);
        assert_eq!(sent, serde_json::to_vec(&before).unwrap_or_default());
    }
}
