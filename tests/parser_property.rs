//! Properties of the parser: it never panics, whatever the input, and an action rendered in any
//! dialect the parser claims to read comes back as the same tool and arguments.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use reactstep::step::parse::live::{LiveDelta, LiveParser};
use reactstep::step::parse::{parse, Decision, Tags};
use serde_json::{json, Map, Value};

/// Text built from the pieces that steer the parser: tags, brackets, quotes, fences, JSON
/// openers, think tags, multi-byte characters and line breaks.
fn steering_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("Thought:".to_string()),
        Just("Action:".to_string()),
        Just("Action Input:".to_string()),
        Just("Final Answer:".to_string()),
        Just("Observation:".to_string()),
        Just("Thought 3:".to_string()),
        Just("**Action:**".to_string()),
        Just("**Final Answer**\n".to_string()),
        Just("## Final Answer".to_string()),
        Just("<think>".to_string()),
        Just("</think>".to_string()),
        Just("```".to_string()),
        Just("```json\n".to_string()),
        Just("{\"action\": ".to_string()),
        Just("{\"tool_name\": \"t\", \"parameters\": {".to_string()),
        Just("\"\"\"".to_string()),
        Just("Search[".to_string()),
        Just("Finish[".to_string()),
        "[a-z_]{1,8}".prop_map(|s| format!("{s}(")),
        Just("(".to_string()),
        Just(")".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just("\"".to_string()),
        Just("'".to_string()),
        Just("\\".to_string()),
        Just(",".to_string()),
        Just("=".to_string()),
        Just("\n".to_string()),
        Just(" ".to_string()),
        Just("é日😀".to_string()),
        "\\PC{0,12}",
    ];
    proptest::collection::vec(piece, 0..60).prop_map(|p| p.concat())
}

/// A tool call's arguments: strings with quotes, brackets, tags and newlines inside, numbers,
/// booleans, null and nested JSON.
fn arguments() -> impl Strategy<Value = Map<String, Value>> {
    let value = prop_oneof![
        "[a-zA-Z0-9 _./()\\[\\]{},:;!?'\"\\\\-]{0,30}".prop_map(Value::String),
        "[a-z ]{0,10}(\nThought: x\n|\nAction: y\n)?[a-z ]{0,10}".prop_map(Value::String),
        (-1_000_000i64..1_000_000).prop_map(Value::from),
        any::<bool>().prop_map(Value::Bool),
        Just(Value::Null),
        Just(json!(["a", 1, {"b": [true]}])),
        Just(json!({"nested": {"deep": "x"}})),
    ];
    proptest::collection::btree_map("[a-z][a-z0-9_]{0,10}", value, 0..5)
        .prop_map(|m| m.into_iter().collect())
}

fn tool_name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_]{0,15}".prop_filter("not a final-answer name", |n| {
        !matches!(n.as_str(), "finish" | "final_answer")
    })
}

/// `key=value` with JSON-quoted strings, as the service's own prompt asks.
fn call_style(name: &str, args: &Map<String, Value>) -> String {
    let args: Vec<String> = args.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("Thought: go\nAction: {name}({})", args.join(", "))
}

fn langchain(name: &str, args: &Map<String, Value>) -> String {
    format!(
        "Thought: go\nAction: {name}\nAction Input: {}",
        Value::Object(args.clone())
    )
}

fn json_fenced(name: &str, args: &Map<String, Value>) -> String {
    let action = json!({"action": name, "action_input": args});
    format!(
        "Thought: go\n```json\n{}\n```",
        serde_json::to_string_pretty(&action).unwrap()
    )
}

fn seed_json(name: &str, args: &Map<String, Value>) -> String {
    json!({"thought": "go", "tool_name": name, "parameters": args}).to_string()
}

fn function_json(name: &str, args: &Map<String, Value>) -> String {
    let arguments = Value::Object(args.clone()).to_string();
    format!(
        "<think>go</think>\n{}",
        json!({"name": name, "arguments": arguments})
    )
}

fn nemotron(name: &str, args: &Map<String, Value>) -> String {
    let call = json!([{"name": name, "arguments": args}]);
    format!("<think>go</think>\n<TOOLCALL>{call}</TOOLCALL>")
}

fn mistral_v11_with_id(name: &str, args: &Map<String, Value>) -> String {
    let args = Value::Object(args.clone());
    format!("go[TOOL_CALLS]{name}[CALL_ID]a1B2c3D4e[ARGS]{args}")
}

/// Writes a tool call in one dialect.
type Render = fn(&str, &Map<String, Value>) -> String;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_parser_never_panics(text in steering_text()) {
        let _ = parse(&text, &Tags::default());
    }

    #[test]
    fn the_parser_never_panics_on_any_unicode(text in "\\PC{0,400}") {
        let _ = parse(&text, &Tags::default());
    }

    #[test]
    fn every_dialect_round_trips(name in tool_name(), args in arguments()) {
        let renderers: [(&str, Render); 7] = [
            ("call", call_style),
            ("langchain", langchain),
            ("json fenced", json_fenced),
            ("seed json", seed_json),
            ("function json", function_json),
            ("nemotron", nemotron),
            ("mistral v11 with a call id", mistral_v11_with_id),
        ];
        for (dialect, render) in renderers {
            let text = render(&name, &args);
            let parsed = parse(&text, &Tags::default());
            let Some(parsed) = parsed else {
                return Err(TestCaseError::fail(format!("{dialect}: nothing parsed from {text:?}")));
            };
            match parsed.decision {
                Decision::Action { tool_name, tool_args, .. } => {
                    prop_assert_eq!(&tool_name, &name, "{}: {:?}", dialect, text);
                    prop_assert_eq!(&tool_args, &args, "{}: {:?}", dialect, text);
                }
                other => return Err(TestCaseError::fail(format!("{dialect}: {other:?} from {text:?}"))),
            }
            prop_assert_eq!(parsed.thought.as_str(), "go", "{}", dialect);
        }
    }
}

/// What the live parser hands out for `text` read in pieces of `size` bytes.
fn streamed(text: &str, size: usize) -> (String, String) {
    let mut parser = LiveParser::new(&Tags::default());
    let mut deltas = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = size.min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        deltas.extend(parser.push(&rest[..cut]));
        rest = &rest[cut..];
    }
    deltas.extend(parser.finish());
    let (mut thought, mut answer) = (String::new(), String::new());
    for delta in deltas {
        match delta {
            LiveDelta::Thought(t) => thought.push_str(&t),
            LiveDelta::Answer(a) => answer.push_str(&a),
        }
    }
    (thought, answer)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// However the network cuts the output, the streamed thought and answer are the same.
    #[test]
    fn the_live_parser_gives_the_same_text_for_any_cuts(text in steering_text(), size in 1usize..24) {
        prop_assert_eq!(streamed(&text, size), streamed(&text, text.len().max(1)));
    }

    /// The streamed answer of a tagged final answer is the parsed answer, unless it opens like
    /// a bare call (`name(`, in backticks or not): that one may be read as the call, so the
    /// live parser holds all of it for the `step` event.
    #[test]
    fn a_streamed_final_answer_is_the_parsed_one(
        thought in "[A-Za-z ,.]{1,40}",
        answer in "[A-Za-z0-9 ,.`()\n]{1,80}",
        size in 1usize..16,
    ) {
        let text = format!("Thought: {thought}\nFinal Answer: {answer}");
        let parsed = parse(&text, &Tags::default()).unwrap();
        let (live_thought, live_answer) = streamed(&text, size);
        prop_assert_eq!(live_thought, parsed.thought);
        let opening = answer.trim_start();
        let opening = opening.strip_prefix('`').unwrap_or(opening);
        let name = opening.find(|c: char| !(c.is_ascii_alphanumeric() || ".-_".contains(c)))
            .unwrap_or(opening.len());
        if opening.starts_with(|c: char| c.is_ascii_alphabetic()) && opening[name..].starts_with('(') {
            prop_assert_eq!(live_answer, "");
        } else {
            prop_assert_eq!(Decision::Answer(live_answer), parsed.decision);
        }
    }
}

#[test]
fn huge_and_deeply_nested_inputs_are_read_without_trouble() {
    let deep = format!(
        "Thought: t\nAction: f(x={}{})",
        "[".repeat(50_000),
        "]".repeat(50_000)
    );
    let _ = parse(&deep, &Tags::default());
    let deep_json = format!("{}{}", "{\"a\":".repeat(20_000), "}".repeat(20_000));
    let _ = parse(&deep_json, &Tags::default());
    let huge = "Thought: t\n".repeat(100_000) + "Action: f(\"" + &"x".repeat(1_000_000) + "\")";
    let parsed = parse(&huge, &Tags::default()).unwrap();
    assert!(matches!(parsed.decision, Decision::Action { .. }));
}
