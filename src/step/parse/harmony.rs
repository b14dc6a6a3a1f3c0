//! gpt-oss's harmony format, when a server passes it through as text: messages of the form
//! `<|start|>assistant<|channel|>analysis<|message|>…<|end|>`. The `analysis` channel (and a
//! `commentary` message that calls nothing) is the thought; a `commentary` message addressed
//! `to=functions.name` is a call, its text the JSON arguments; the `final` channel is the answer,
//! unless it opens with a ReAct step (a model shown the ReAct format writes it there): then it
//! is read as ReAct text, after the analysis thought.

use serde_json::{Map, Value};

use super::decision::{Decision, Parsed};
use super::tags::{Tag, TagNames, Tags};
use super::{markup, pythonic, work};

const CHANNEL: &str = "<|channel|>";
const MESSAGE: &str = "<|message|>";
/// What ends a message's text: the end of the message, of a call, of the turn, or a new one.
const MESSAGE_ENDS: [&str; 4] = ["<|end|>", "<|call|>", "<|return|>", "<|start|>"];

/// How a final channel's ReAct step is read: the text parser, handed in so that this module
/// does not depend on the one that calls it.
pub type ReadStep = fn(&str, &Tags) -> Option<Parsed>;

/// The output read as harmony messages, when it is written in them.
pub fn parse(text: &str, tags: &Tags, react: ReadStep) -> Option<Parsed> {
    work::add(text.len());
    // Harmony output starts with its first message; harmony text later on (a file being
    // written, an answer explaining the format) is content.
    let head = text.trim_start();
    if !(head.starts_with(CHANNEL) || head.starts_with("<|start|>")) || !text.contains(MESSAGE) {
        return stripped(text, tags, react);
    }
    let mut thought = Vec::new();
    let mut decision = None;
    let mut also = Vec::new();
    let mut warnings = vec![
        "the output was read as gpt-oss harmony messages the server passed through as text"
            .to_string(),
    ];
    let mut open_ended = false;
    for (header, body) in messages(text) {
        let channel = header
            .split(CHANNEL)
            .nth(1)
            .and_then(|c| c.split_whitespace().next())
            .unwrap_or_default();
        let recipient = header
            .split_whitespace()
            .find_map(|word| word.split(CHANNEL).next()?.strip_prefix("to="));
        let next = match (channel, recipient) {
            (_, Some(to)) => call(to, body, header),
            ("final", None) if decision.is_none() => match react_step(body, tags, react) {
                Some(step) => {
                    thought.push(step.thought.trim().to_string());
                    warnings.extend(step.warnings);
                    also.extend(step.also);
                    open_ended = step.open_ended;
                    step.decision
                }
                None => Decision::Answer(body.trim().to_string()),
            },
            ("final", None) => Decision::Answer(body.trim().to_string()),
            _ => {
                thought.push(body.trim().to_string());
                continue;
            }
        };
        if decision.is_none() {
            decision = Some(next);
        } else {
            also.push(next);
        }
    }
    // An answer beside a call: which one the model meant is for it to say.
    if let Some(Decision::Answer(_)) = &decision {
        if also.iter().any(|d| matches!(d, Decision::Action { .. })) {
            decision = Some(Decision::Unreadable {
                why: "the output holds a final answer and a tool call; write one of them".into(),
                raw_action_string: text.trim().to_string(),
            });
            also.clear();
        }
    }
    thought.retain(|t| !t.is_empty());
    let thought = thought.join("\n\n");
    let Some(decision) = decision else {
        // Analysis alone (stopped inside it): a thought, and no decision yet.
        return (!thought.is_empty()).then(|| thought_only(thought, warnings));
    };
    Some(Parsed {
        thought,
        decision,
        also,
        warnings,
        structured: true,
        open_ended,
        answer_left_out: false,
        call_ids: Vec::new(),
    })
}

/// A reading that is a thought alone, which the step sends back to the model to decide.
fn thought_only(thought: String, warnings: Vec<String>) -> Parsed {
    Parsed {
        decision: Decision::Answer(thought.clone()),
        thought,
        also: Vec::new(),
        warnings,
        structured: false,
        open_ended: false,
        answer_left_out: false,
        call_ids: Vec::new(),
    }
}

/// Harmony with its special tokens dropped by the server, as some front ends show it:
/// `analysis…assistantfinal…`. Only the final answer is read from it: a call's recipient
/// cannot be told from its text once the tokens are gone.
fn stripped(text: &str, tags: &Tags, react: ReadStep) -> Option<Parsed> {
    let rest = text.trim_start().strip_prefix("analysis")?;
    let warning =
        "the output was read as gpt-oss harmony messages whose special tokens the server dropped";
    let (thought, decision) = match rest.split_once("assistantfinal") {
        Some((thought, answer)) => match react_step(answer, tags, react) {
            Some(mut step) => {
                step.thought = join(thought.trim(), step.thought.trim());
                step.warnings.insert(0, warning.to_string());
                return Some(step);
            }
            None => (thought, Decision::Answer(answer.trim().to_string())),
        },
        None => {
            // `assistantcommentary to=functions.name json{…}`: the recipient survives as text.
            let (thought, call) = rest.split_once("assistantcommentary to=")?;
            let (to, body) = call.split_once(char::is_whitespace)?;
            let body = body.trim_start();
            let body = body.strip_prefix("json").unwrap_or(body);
            (
                thought,
                self::call(to, body, &format!("commentary to={to}")),
            )
        }
    };
    Some(Parsed {
        thought: thought.trim().to_string(),
        decision,
        also: Vec::new(),
        warnings: vec![warning.to_string()],
        structured: true,
        open_ended: false,
        answer_left_out: false,
        call_ids: Vec::new(),
    })
}

/// The final channel's text read as a ReAct step, when it opens with one: a tag (`Thought:`,
/// `Action:`, `Final Answer:`) or tool-call markup on its first line. An answer that only
/// mentions the format later on, or quotes it in a fence, stays the answer.
fn react_step(body: &str, tags: &Tags, react: ReadStep) -> Option<Parsed> {
    let first = body.trim_start().lines().next().unwrap_or_default();
    let tagged = TagNames::new(tags)
        .at(first)
        .is_some_and(|(tag, _)| tag != Tag::Observation);
    let block = markup::opener_at(first) == Some(0) || pythonic::opens_a_list(first);
    if !(tagged || block) {
        return None;
    }
    let mut step = react(body, tags)?;
    step.warnings.push(
        "the final channel held a ReAct step; it was read as one, after the analysis thought"
            .to_string(),
    );
    step.structured.then_some(step)
}

/// The analysis thought, then the step's own.
fn join(analysis: &str, thought: &str) -> String {
    match (analysis.is_empty(), thought.is_empty()) {
        (_, true) => analysis.to_string(),
        (true, false) => thought.to_string(),
        (false, false) => format!("{analysis}\n\n{thought}"),
    }
}

/// Each message's header (between its start and `<|message|>`) and its text.
fn messages(text: &str) -> Vec<(&str, &str)> {
    let parts: Vec<&str> = text.split(MESSAGE).collect();
    parts
        .windows(2)
        .map(|pair| {
            // The header is the end of the text before `<|message|>`, after the last message end.
            let before = pair[0];
            let header_start = MESSAGE_ENDS
                .iter()
                .filter_map(|e| before.rfind(e).map(|i| i + e.len()))
                .max()
                .unwrap_or(0);
            let body = pair[1];
            let body_end = MESSAGE_ENDS
                .iter()
                .filter_map(|e| body.find(e))
                .min()
                .unwrap_or(body.len());
            work::add(before.len() + body.len());
            (&before[header_start..], &body[..body_end])
        })
        .collect()
}

/// A call to `functions.name` (or a built-in's `browser.search`) with `body` as its arguments.
fn call(to: &str, body: &str, header: &str) -> Decision {
    let name = to.strip_prefix("functions.").unwrap_or(to).to_string();
    let raw = format!("{}{MESSAGE}{}", header.trim(), body.trim());
    let body = body.trim();
    let args = if body.is_empty() {
        Ok(Map::new())
    } else {
        match serde_json::from_str::<Value>(body) {
            Ok(Value::Object(map)) => Ok(map),
            _ => Err(()),
        }
    };
    match args {
        Ok(tool_args) if !name.is_empty() => Decision::Action {
            tool_name: name,
            tool_args,
            raw_action_string: raw,
        },
        _ => Decision::Unreadable {
            why: format!("the arguments of the call to '{name}' are not a JSON object"),
            raw_action_string: raw,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(text: &str) -> Option<Parsed> {
        parse(text, &Tags::default(), crate::step::parse::react)
    }

    fn call_of(p: &Parsed) -> (&str, Value) {
        match &p.decision {
            Decision::Action {
                tool_name,
                tool_args,
                ..
            } => (tool_name, Value::Object(tool_args.clone())),
            other => panic!("expected a call, got {other:?}"),
        }
    }

    const ANALYSIS: &str = "<|channel|>analysis<|message|>The user wants login. I should search.<|end|><|start|>assistant<|channel|>final<|message|>";

    #[test]
    fn a_final_channel_that_opens_with_a_react_step_is_read_as_one() {
        for step in [
            "Thought: I should search the code for login.\nAction: code_search(query=\"login\")",
            "Thought: I should search the code for login.\nAction: code_search\nAction Input: {\"query\": \"login\"}",
        ] {
            let p = read(&format!("{ANALYSIS}{step}<|return|>"))
                .unwrap_or_else(|| panic!("not read: {step}"));
            assert_eq!(call_of(&p), ("code_search", json!({"query": "login"})), "{step}");
            assert_eq!(
                p.thought,
                "The user wants login. I should search.\n\nI should search the code for login."
            );
        }
        let p = read(&format!(
            "{ANALYSIS}Thought: I know it.\nFinal Answer: It is in auth.js.<|return|>"
        ))
        .unwrap_or_else(|| panic!("not read"));
        assert_eq!(p.decision, Decision::Answer("It is in auth.js.".into()));
        // With the special tokens dropped by the server.
        let p = read("analysisThe user wants login.assistantfinalThought: Search it.\nAction: code_search(query=\"login\")")
            .unwrap_or_else(|| panic!("not read"));
        assert_eq!(call_of(&p).0, "code_search");
        assert_eq!(p.thought, "The user wants login.\n\nSearch it.");
        let p = read("analysisEasy.assistantfinalThought: I know.\nFinal Answer: It is 4.")
            .unwrap_or_else(|| panic!("not read"));
        assert_eq!(p.decision, Decision::Answer("It is 4.".into()));
    }

    #[test]
    fn a_final_answer_that_only_mentions_the_format_stays_the_answer() {
        for answer in [
            "Write your step like this:\nThought: …\nAction: code_search(query=\"login\")",
            "```\nThought: x\nAction: code_search(query=\"login\")\n```",
            "Use <tool_call>{\"name\": \"code_search\", \"arguments\": {}}</tool_call> to call it.",
            "The action items are done.",
        ] {
            let p = read(&format!("{ANALYSIS}{answer}<|return|>"))
                .unwrap_or_else(|| panic!("not read: {answer}"));
            assert_eq!(p.decision, Decision::Answer(answer.into()), "{answer}");
        }
        // A final channel that holds harmony again is read once, as text.
        let nested = format!("analysis{}", "assistantfinalanalysis".repeat(3));
        assert!(read(&nested).is_some());
    }

    #[test]
    fn analysis_is_the_thought_and_a_commentary_call_the_action() {
        let p = read("<|channel|>analysis<|message|>Need to read the file.<|end|><|start|>assistant<|channel|>commentary to=functions.read_file <|constrain|>json<|message|>{\"path\": \"a.py\"}<|call|>")
            .unwrap_or_else(|| panic!("not read"));
        assert_eq!(p.thought, "Need to read the file.");
        match p.decision {
            Decision::Action {
                tool_name,
                tool_args,
                ..
            } => assert_eq!(
                (tool_name.as_str(), Value::Object(tool_args)),
                ("read_file", json!({"path": "a.py"}))
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_recipient_may_come_before_the_channel() {
        let p = read(
            "<|start|>assistant to=functions.ls<|channel|>commentary json<|message|>{}<|call|>",
        )
        .unwrap_or_else(|| panic!("not read"));
        assert!(matches!(p.decision, Decision::Action { ref tool_name, .. } if tool_name == "ls"));
    }

    #[test]
    fn the_final_channel_is_the_answer() {
        let p = read("<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.<|return|>")
            .unwrap_or_else(|| panic!("not read"));
        assert_eq!(p.decision, Decision::Answer("It is 4.".into()));
        assert_eq!(p.thought, "Simple.");
    }

    #[test]
    fn harmony_with_its_tokens_dropped_gives_its_final_answer() {
        let p = read(
            "analysisThe user asks. Tests are in tests/.assistantfinalThe tests live in tests/.",
        )
        .unwrap_or_else(|| panic!("not read"));
        assert_eq!(
            p.decision,
            Decision::Answer("The tests live in tests/.".into())
        );
        assert!(read("analysis of the code shows no bug").is_none());
    }

    #[test]
    fn text_without_channels_is_not_harmony() {
        assert!(read("Thought: x\nFinal Answer: y").is_none());
        assert!(read(
            "Final Answer: e.g. `<|channel|>commentary to=functions.ls<|message|>{}<|call|>`"
        )
        .is_none());
    }
}
