//! What goes back to the service of a tool's observation. The service refuses a body over its
//! limit (413; `REACTSTEP_MAX_BODY_BYTES`, 8 MiB by default) and shows the model no more than
//! `max_observation_tokens` of the latest observation (2,000 by default), so an observation goes
//! back cut to [`MAX_SENT_BYTES`], with a line saying how much was cut; the run's report keeps it
//! whole. The history grows with every step: when a request would pass the body limit, the
//! oldest observations in it are cut further, to [`OLDER_BYTES`], then the strings of the oldest
//! calls' arguments, until it fits.

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
///
/// When cutting every older observation is not enough (a model that writes files of hundreds of
/// KB through a tool's arguments), the strings in older calls' arguments are cut the same way,
/// oldest first: the calls stay, with what they were given cut, and the report keeps them whole.
pub fn fit(body: &mut Value, limit: usize) -> Vec<u8> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let Some(over) = bytes.len().checked_sub(limit).filter(|n| *n > 0) else {
        return bytes;
    };
    let Some(turns) = body["conversation_history"].as_array_mut() else {
        return bytes;
    };
    let over = cut_observations(turns, over);
    if over > 0 {
        cut_arguments(turns, over);
    }
    serde_json::to_vec(body).unwrap_or_default()
}

/// Cuts the observations of `turns`, oldest first, until `over` bytes are saved; what is left.
fn cut_observations(turns: &mut [Value], mut over: usize) -> usize {
    for turn in turns {
        if turn["role"] != "tool_observation" {
            continue;
        }
        if let Some(content) = turn.get_mut("content") {
            over = over.saturating_sub(cut_string(content));
        }
        if over == 0 {
            break;
        }
    }
    over
}

/// Cuts the strings in the arguments of the calls of `turns`, oldest first, until `over` bytes
/// are saved.
fn cut_arguments(turns: &mut [Value], mut over: usize) {
    for turn in turns {
        if turn["role"] != "assistant" {
            continue;
        }
        if let Some(call) = turn.get_mut("toolCall") {
            over = over.saturating_sub(cut_strings(&mut call["parameters"]));
        }
        if let Some(calls) = turn.get_mut("toolCalls").and_then(Value::as_array_mut) {
            for call in calls {
                over = over.saturating_sub(cut_strings(&mut call["parameters"]));
            }
        }
        if over == 0 {
            return;
        }
    }
}

/// Cuts every string in `value` (at any depth) to [`OLDER_BYTES`]; the bytes saved.
fn cut_strings(value: &mut Value) -> usize {
    let mut saved = 0;
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::String(_) => saved += cut_string(value),
            Value::Array(items) => stack.extend(items.iter_mut()),
            Value::Object(map) => stack.extend(map.values_mut()),
            _ => {}
        }
    }
    saved
}

/// Cuts `value`, when it is a string, to [`OLDER_BYTES`]; the bytes saved in JSON.
fn cut_string(value: &mut Value) -> usize {
    let Some(text) = value.as_str() else {
        return 0;
    };
    let shorter = cut(text, OLDER_BYTES);
    let saved = json_len(text).saturating_sub(json_len(&shorter));
    if saved > 0 {
        *value = Value::String(shorter.into_owned());
    }
    saved
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

    /// Calls that carry hundreds of KB (a file written through a tool) fill the history too:
    /// once every observation is cut, the oldest calls' strings are, and the body fits.
    #[test]
    fn large_arguments_of_older_calls_are_cut_once_observations_are_not_enough() {
        let text = "w".repeat(300_000);
        let mut turns = Vec::new();
        for i in 0..12 {
            turns.push(json!({"role": "assistant", "content": "t",
                "toolCall": {"id": format!("c{i}"), "name": "write",
                    "parameters": {"path": "a.txt", "text": text, "more": [{"deep": text}]}}}));
            turns.push(json!({"role": "tool_observation", "content": "ok", "tool_call_id": format!("c{i}")}));
        }
        let mut body = json!({"user_query": "", "conversation_history": turns});
        // 7.2 MB of arguments, against a limit of 4 MiB.
        let limit = 4 * 1024 * 1024;
        let sent = fit(&mut body, limit);
        assert!(sent.len() <= limit, "{} > {limit}", sent.len());
        let history = body["conversation_history"]
            .as_array()
            .unwrap_or(&Vec::new())
            .clone();
        let text_of = |i: usize| {
            history[2 * i]["toolCall"]["parameters"]["text"]
                .as_str()
                .unwrap_or_default()
                .len()
        };
        assert!(text_of(0) < 2_000, "the oldest call is cut");
        assert_eq!(text_of(11), 300_000, "the newest is whole");
        assert_eq!(history[0]["toolCall"]["parameters"]["path"], "a.txt");
        assert!(history[0]["toolCall"]["parameters"]["more"][0]["deep"]
            .as_str()
            .is_some_and(|d| d.contains("[cut:")));
        assert_eq!(history[1]["content"], "ok");
    }

    #[test]
    fn a_body_under_the_limit_is_sent_as_it_is() {
        let mut small = body(&["x".repeat(5_000)]);
        let before = small.clone();
        let sent = fit(&mut small, 1 << 20);
        assert_eq!(sent, serde_json::to_vec(&before).unwrap_or_default());
    }
}
