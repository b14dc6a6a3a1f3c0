//! Writing text as a JSON string, as the upstream request and the answer write the prompt and the
//! history: real source code (this crate's own, escapes every few dozen bytes), prose (few), and
//! text dense in escapes, each beside serde_json's writer of the same string.
//! Run with `cargo bench --bench json_escape`; figures are in docs/benchmarks.md.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn texts() -> Vec<(&'static str, String)> {
    let source = [
        include_str!("../src/step/fit.rs"),
        include_str!("../src/llm/sse.rs"),
    ]
    .concat();
    let prose = "The handler reads the session cookie, looks the user up and returns 401 when the token has expired; the refresh path lives in middleware/auth.ts. ".repeat(130);
    let dense = "{\"a\":\"b\\\\c\"}\n\t".repeat(1_500);
    vec![
        ("source code", source),
        ("prose", prose),
        ("dense escapes", dense),
    ]
}

fn escape(c: &mut Criterion) {
    let mut group = c.benchmark_group("json string");
    for (name, text) in texts() {
        group.throughput(Throughput::Bytes(text.len() as u64));
        let mut out = Vec::with_capacity(text.len() * 2);
        group.bench_function(format!("{name}, ours"), |b| {
            b.iter(|| {
                out.clear();
                reactstep::json::write_str(&mut out, black_box(&text));
                black_box(out.len())
            })
        });
        group.bench_function(format!("{name}, serde_json"), |b| {
            b.iter(|| {
                out.clear();
                serde_json::to_writer(&mut out, black_box(&text)).ok();
                black_box(out.len())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, escape);
criterion_main!(benches);
