//! Parser throughput on realistic 4 KB outputs in several dialects, and on the hostile shapes
//! that once made it quadratic, at 100 KB and 1 MB.
//! Run with `cargo bench --bench parser`; figures are in docs/benchmarks.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use reactstep::step::parse::live::LiveParser;
use reactstep::step::parse::{parse, Tags};

/// About `bytes` of reasoning prose.
fn prose(bytes: usize) -> String {
    let sentence = "The handler reads the session cookie, looks the user up and returns 401 when the token has expired; the refresh path lives in middleware/auth.ts. ";
    sentence.repeat(bytes / sentence.len() + 1)[..bytes].to_string()
}

fn outputs() -> Vec<(&'static str, String)> {
    let thought = prose(3_600);
    let code = "export function refresh(req, res) {\n  const token = req.cookies.session;\n  if (!token) return res.status(401).end();\n}\n".repeat(4);
    vec![
        (
            "call style with think tags",
            format!("<think>{thought}</think>\nThought: Read the middleware next.\nAction: write_file(path=\"src/middleware/auth.ts\", content=\"\"\"{code}\"\"\")"),
        ),
        (
            "langchain",
            format!("Thought: {thought}\nAction: code_search\nAction Input: {{\"query\": \"refresh token middleware\", \"limit\": 5}}"),
        ),
        (
            "fenced json",
            format!("Thought: {thought}\n```json\n{{\"action\": \"read_file\", \"action_input\": {{\"path\": \"src/middleware/auth.ts\"}}}}\n```"),
        ),
        (
            "final answer with code",
            format!("Thought: {}\nFinal Answer: Here is the fix:\n```ts\n{code}```\n{}", prose(1_500), prose(1_800)),
        ),
        ("no structure (fallback)", prose(4_096)),
    ]
}

fn parsing(c: &mut Criterion) {
    let tags = Tags::default();
    let mut group = c.benchmark_group("parse 4 KB output");
    for (name, text) in outputs() {
        assert!(parse(&text, &tags).is_some());
        eprintln!("{name}: {} bytes", text.len());
        group.bench_function(name, |b| b.iter(|| parse(black_box(&text), &tags)));
    }
    group.finish();
}

/// `unit` repeated to `bytes`.
fn repeated(unit: &str, bytes: usize) -> String {
    unit.repeat(bytes / unit.len() + 1)[..bytes].to_string()
}

/// The live parser fed `text` in pieces of 7 bytes, as a slow stream would arrive.
fn stream(text: &str, tags: &Tags) -> usize {
    let mut parser = LiveParser::new(tags);
    let mut deltas = 0;
    for piece in text.as_bytes().chunks(7) {
        // The shapes are ASCII, so every 7-byte piece is text.
        deltas += parser.push(std::str::from_utf8(piece).unwrap()).len();
    }
    deltas + parser.finish().len()
}

/// Model output (or a `mock_response`) built to be slow: every line opens a JSON object that
/// never closes; and, for the live parser, one line of spaces that may still become a tag.
fn hostile(c: &mut Criterion) {
    let tags = Tags::default();
    let mut group = c.benchmark_group("hostile output");
    group.sample_size(10);
    for (size, bytes) in [("100 KB", 100_000), ("1 MB", 1_000_000)] {
        let braces = repeated("{ x\n", bytes);
        group.bench_function(format!("parse: unclosed {{ on every line, {size}"), |b| {
            b.iter(|| parse(black_box(&braces), &tags))
        });
        let spaces = format!("Thought: x\n{}", repeated(" ", bytes));
        group.bench_function(
            format!("live, 7-byte pieces: a line of spaces, {size}"),
            |b| b.iter(|| stream(black_box(&spaces), &tags)),
        );
    }
    group.finish();
}

criterion_group!(benches, parsing, hostile);
criterion_main!(benches);
