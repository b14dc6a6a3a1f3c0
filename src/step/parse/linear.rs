//! The parser's work grows linearly with the output, for `parse` and for the live parser fed in
//! small pieces, on the shapes of output that once made it quadratic. Work is the count of
//! bytes looked at (`work.rs`), never a time: doubling the output must about double it.

use proptest::prelude::*;

use super::live::LiveParser;
use super::{parse, work, Tags};

/// Output shapes built to be slow, each made `bytes` long.
fn hostile(bytes: usize) -> Vec<(&'static str, String)> {
    [
        brackets(bytes),
        tags(bytes),
        dialects(bytes),
        long_runs(bytes),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Brackets and quotes that never close, one on each line.
fn brackets(bytes: usize) -> Vec<(&'static str, String)> {
    let lines = |unit: &str| unit.repeat(bytes / unit.len() + 1);
    vec![
        ("unclosed { lines", lines("{ x\n")),
        ("unclosed [ lines", lines("[ x\n")),
        ("unclosed ( lines", lines("( x\n")),
        ("unclosed \" lines", lines("\" x\n")),
        ("{ and a quote on each line", lines("{\"a\n")),
        ("{ and an apostrophe on each line", lines("{'a\n")),
        ("{ and a triple quote on each line", lines("{\"\"\"a\n")),
        ("{ and an escaped quote on each line", lines("{\"\\\"\n")),
        // Proptest found it: a line's object opens at a backslash, its quote never closes.
        ("{ a backslash and a quote on each line", lines("{\\\"\n")),
        ("nested JSON objects, one per line", {
            let k = bytes / 7;
            format!("{}{}", "{\"a\":\n".repeat(k), "}".repeat(k))
        }),
    ]
}

/// The answer format's tags and what wraps them, repeated or never closed.
fn tags(bytes: usize) -> Vec<(&'static str, String)> {
    let lines = |unit: &str| unit.repeat(bytes / unit.len() + 1);
    vec![
        ("Action: with an unclosed call", lines("Action: f(\n")),
        ("Action: with an unclosed object", lines("Action: {\n")),
        ("Action: with an unclosed bracket", lines("Action: S[\n")),
        (
            "Action: and Action Input:",
            lines("Action: f\nAction Input: {\n"),
        ),
        ("<think> never closed", lines("<think>\n")),
        ("<think> blocks on one line", lines("<think>a</think>")),
        (
            "</thinker near-closers",
            format!("<think>{}", lines("</thinker")),
        ),
        (
            "a step drafted in a <think> never closed",
            format!("<think>\nAction: f(\n{}", lines("x </thin\n")),
        ),
        (
            "a tag's number that never ends, in a <think>",
            format!("<think>\nThought {}", "1".repeat(bytes)),
        ),
        (
            "markup openings on each line, in a <think>",
            format!("<think>\n{}", lines("a <tool_\n")),
        ),
        ("code fences", lines("```json\n")),
        ("Observation lines", lines("Observation: x\n")),
        ("answer headings", lines("**Final Answer**\n")),
        ("headings that go on as prose", lines("## Final Answer x\n")),
        (
            "a heading's stars that never end",
            format!("**Final Answer{}", "*".repeat(bytes)),
        ),
    ]
}

/// Calls and answers as models write them, repeated or never closed.
fn dialects(bytes: usize) -> Vec<(&'static str, String)> {
    let lines = |unit: &str| unit.repeat(bytes / unit.len() + 1);
    vec![
        ("tool_call blocks never closed", lines("<tool_call>{\"a\n")),
        (
            "GLM argument keys",
            lines("<tool_call>f<arg_key>k</arg_key><arg_value>"),
        ),
        (
            "unescaped quotes in call strings",
            format!("Thought: t\nAction: f({})", lines("a=\"x\"y, ")),
        ),
        (
            "keys written twice",
            format!("Action: f\nAction Input: {{{}}}", lines("\"k\": 1, ")),
        ),
        (
            "fences in a thought",
            format!("Thought: t\n{}", lines("```\nAction: x\n")),
        ),
        (
            "answer aliases in an answer",
            format!("Final Answer: a\n{}", lines("Answer: b\n")),
        ),
        ("function blocks", lines("<function=f><parameter=p>\n")),
        ("[TOOL_CALLS] without [ARGS]", lines("[TOOL_CALLS]f{\n")),
        ("call lists that do not close", lines("[f(\n")),
        ("call lists that are not calls", lines("[f(1) x]\n")),
        (
            "harmony messages",
            lines("<|channel|>analysis<|message|>x<|end|>"),
        ),
        (
            "harmony finals holding ReAct steps",
            lines("<|channel|>final<|message|>Thought: t\nAction: f(\n<|end|>"),
        ),
        (
            "stripped harmony finals holding ReAct steps",
            format!(
                "analysis{}",
                lines("assistantfinalThought: x\nAction: f(\n")
            ),
        ),
        (
            "MiniMax invokes never closed",
            lines("<minimax:tool_call><invoke name=\"f\"><parameter name=\"k\">"),
        ),
        ("Nemotron calls never closed", lines("<TOOLCALL>[{\"a\n")),
        (
            "Mistral calls with ids",
            lines("[TOOL_CALLS]f[CALL_ID]x[ARGS]{\n"),
        ),
        ("Olmo calls never closed", lines("<function_calls>f(\n")),
        (
            "FunctionGemma strings never closed",
            lines("<start_function_call>call:f{a:<escape>"),
        ),
        ("Gemma 4 nested values", lines("<|tool_call>call:f{a:[{b:")),
        (
            "Gemma 4 calls one after another",
            lines("<|tool_call>call:f{a:1}<tool_call|>"),
        ),
        (
            "Kimi calls",
            lines("<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{"),
        ),
        (
            "DeepSeek calls",
            lines("<｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a"),
        ),
    ]
}

/// Long runs of one thing: lines, brackets, characters.
fn long_runs(bytes: usize) -> Vec<(&'static str, String)> {
    let lines = |unit: &str| unit.repeat(bytes / unit.len() + 1);
    let half = bytes / 2;
    vec![
        ("Thought lines", lines("Thought: a\n")),
        ("deep brackets in a call", {
            let open = "[".repeat(half);
            format!("Thought: t\nAction: f(x={open}{})", "]".repeat(half))
        }),
        (
            "deep braces",
            format!("{}{}", "{".repeat(half), "}".repeat(half)),
        ),
        ("one long line", "x".repeat(bytes)),
        (
            "an answer of one long word, which may still open a call",
            format!("Thought: done\nFinal Answer: {}", "abcd".repeat(bytes / 4)),
        ),
        (
            "a thought of one long word",
            format!("Thought: {}", "abcd".repeat(bytes / 4)),
        ),
        (
            "a line of spaces",
            format!("Thought: x\n{}", " ".repeat(bytes)),
        ),
        ("a line of stars", "*".repeat(bytes)),
        (
            "a step number that never ends",
            format!("Thought {}", "1".repeat(bytes)),
        ),
        (
            "stars after a tag's colon",
            format!("**Thought:{}", "*".repeat(bytes)),
        ),
        (
            "spaces, then the start of <think>",
            format!("{}<thi", " ".repeat(bytes)),
        ),
        (
            "many lines in a <think> block",
            format!("<think>{}", lines("a\n")),
        ),
    ]
}

/// The bytes looked at by `parse`, by the live parser fed 7-byte pieces, and by the live parser
/// fed the whole output as one piece.
fn work_for(text: &str) -> [usize; 3] {
    let tags = Tags::default();
    work::take();
    let _ = parse(text, &tags);
    let parsed = work::take();
    let mut live = LiveParser::new(&tags);
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = 7.min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        live.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    live.finish();
    let pieces = work::take();
    let mut live = LiveParser::new(&tags);
    live.push(text);
    live.finish();
    [parsed, pieces, work::take()]
}

/// Doubling the output at most 2.5 times the work (quadratic work would be 4 times), from 10 KB
/// to 20 KB to 40 KB.
fn assert_linear(name: &str, make: impl Fn(usize) -> String) {
    let sizes = [10_000, 20_000, 40_000];
    let work: Vec<[usize; 3]> = sizes.iter().map(|&n| work_for(&make(n))).collect();
    for (pair, sizes) in work.windows(2).zip(sizes.windows(2)) {
        for (way, (small, large)) in ["parse", "live, 7-byte pieces", "live, one piece"]
            .iter()
            .zip(pair[0].iter().zip(pair[1].iter()))
        {
            assert!(
                *large * 2 <= *small * 5 + 2 * 1024,
                "{name}, {way}: {small} bytes looked at for {} bytes of output, {large} for {}",
                sizes[0],
                sizes[1]
            );
        }
    }
}

#[test]
fn the_work_grows_linearly_for_every_hostile_shape() {
    let names: Vec<&str> = hostile(0).into_iter().map(|(name, _)| name).collect();
    for (i, name) in names.into_iter().enumerate() {
        assert_linear(name, |n| hostile(n).swap_remove(i).1);
    }
}

#[test]
fn the_count_sees_quadratic_work() {
    // The check above must be able to fail: the old way of finding a JSON object, one full scan
    // from each line start, counted here as a scan would be.
    let old_way = |n: usize| {
        let text = "{ x\n".repeat(n / 4);
        work::take();
        for start in (0..text.len()).step_by(4) {
            work::add(text.len() - start);
        }
        work::take()
    };
    assert!(old_way(20_000) * 2 > old_way(10_000) * 5 + 2 * 1024);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any short line of steering pieces, repeated, costs linear work too.
    #[test]
    fn any_repeated_line_costs_linear_work(
        unit in proptest::collection::vec(
            prop_oneof![
                Just("{"), Just("["), Just("("), Just("}"), Just("\""), Just("'"),
                Just("\"\"\""), Just("\\"), Just("Action:"), Just("Thought:"),
                Just("Action Input:"), Just("Observation:"), Just("<think>"), Just("</think>"),
                Just("```"), Just("f("), Just("Search["), Just(" "), Just("*"), Just("1"),
                Just("\n"), Just("x"), Just("{\"action\": \"a\""),
            ],
            1..8,
        ).prop_map(|pieces| pieces.concat())
    ) {
        assert_linear(&format!("{unit:?} repeated"), |n| unit.repeat(n / unit.len() + 1));
    }
}
