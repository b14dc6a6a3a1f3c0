//! Prompt building: a typical IDE step and a large one, each beside the baseline of
//! tokenising the text that ends up in the prompt once, plus counting a pathological blob.
//! Run with `cargo bench --bench context`; figures are in docs/benchmarks.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use reactstep::llm::Provider;
use reactstep::step::context::budget::{fit, marker_reserve, Candidates, DEFAULT_ORDER};
use reactstep::step::context::prompt::system_head;
use reactstep::step::context::tokens::TokenCounter;
use reactstep::step::context::{ContextItem, ContextSource};
use reactstep::step::history::{Role, Turn};

/// Realistic source text of about `bytes` bytes.
fn code(bytes: usize, seed: usize) -> String {
    let mut out = String::with_capacity(bytes + 100);
    let mut i = seed;
    while out.len() < bytes {
        out.push_str(&format!(
            "export function handler{i}(request, response) {{\n  const user = await db.users.find({{ id: request.params.id{i} }});\n  if (!user) return response.status(404).json({{ error: 'not found' }});\n  return response.json(user);\n}}\n\n"
        ));
        i += 1;
    }
    out
}

fn item(source: ContextSource, n: usize, bytes: usize) -> ContextItem {
    let path = format!("src/module{n}.js");
    ContextItem {
        source,
        id: path.clone(),
        path: Some(path),
        content: code(bytes, n * 1000),
        score: None,
        lines: None,
        cursor_line: None,
    }
}

fn turns(n: usize, bytes: usize) -> Vec<Turn> {
    (0..n)
        .map(|i| {
            let role = [Role::User, Role::Assistant, Role::ToolObservation][i % 3];
            Turn::new(role, code(bytes, i), "2024-01-01T00:00:00.000Z".into())
        })
        .collect()
}

struct Case {
    items: Vec<ContextItem>,
    history: Vec<Turn>,
    budget: u32,
}

fn typical() -> Case {
    let mut items: Vec<ContextItem> = (0..3)
        .map(|n| item(ContextSource::Explicit, n, 20_000))
        .collect();
    items.extend((0..5).map(|n| item(ContextSource::VectorSearch, 10 + n, 1_500)));
    Case {
        items,
        history: turns(10, 600),
        budget: 8_000,
    }
}

fn large() -> Case {
    let mut items: Vec<ContextItem> = (0..20)
        .map(|n| item(ContextSource::Explicit, n, 60_000))
        .collect();
    items.extend((0..40).map(|n| item(ContextSource::VectorSearch, 100 + n, 20_000)));
    Case {
        items,
        history: turns(100, 1_500),
        budget: 128_000,
    }
}

fn bench_case(c: &mut Criterion, name: &str, case: &Case) {
    let counter = TokenCounter::for_model(Provider::OPENAI, "gpt-4o");
    let head = system_head(
        "- code_search(query) - search the code\n- read_file(path) - read a file",
        &reactstep::step::parse::Tags::default(),
        false,
    );
    let candidates = Candidates {
        head: &head,
        items: &case.items,
        unresolved: &[],
        history: &case.history,
        query: "How is the user handler protected against missing ids?",
        order: &DEFAULT_ORDER,
        max_observation_tokens: 2000,
        omission_reserve: marker_reserve(&counter),
        tags: &reactstep::step::parse::Tags::default(),
        native: false,
        state_origin: None,
        cleared: &[],
        notice: None,
    };
    let prompt =
        fit(&counter, case.budget, &candidates)
            .unwrap()
            .finish(&counter, None, "o200k_base");
    let sent: Vec<&str> = std::iter::once(prompt.system.as_str())
        .chain(prompt.messages.iter().map(|m| m.content.as_str()))
        .collect();
    let candidate_bytes: usize = case.items.iter().map(|i| i.content.len()).sum::<usize>()
        + case.history.iter().map(|t| t.content.len()).sum::<usize>();
    eprintln!(
        "{name}: {candidate_bytes} candidate bytes, {} sent bytes, {} of {} tokens used",
        sent.iter().map(|s| s.len()).sum::<usize>(),
        prompt.report.used,
        case.budget
    );

    let mut group = c.benchmark_group(name);
    let build = || {
        fit(&counter, case.budget, black_box(&candidates))
            .unwrap()
            .finish(&counter, None, "o200k_base")
    };
    // Text never seen before: the count cache is emptied before each build.
    group.bench_function("fit, cold", |b| {
        b.iter_batched(clear_cache, |()| build(), BatchSize::PerIteration)
    });
    // The same request again, as in a loop or a steady load: counts come from the cache.
    group.bench_function("fit, steady state", |b| b.iter(build));
    group.bench_function("baseline: one tokenizer pass over the sent text", |b| {
        let tokenizer = bpe_openai::o200k_base();
        b.iter(|| {
            sent.iter()
                .map(|s| tokenizer.count(*black_box(s)))
                .sum::<usize>()
        })
    });
    group.finish();
}

fn clear_cache() {
    if let Some(cache) = reactstep::step::context::token_cache::global() {
        cache.clear();
    }
}

/// A recorded 10-step loop: the same files and tools at every step, the history growing by a
/// call and its observation. Each step k is measured after steps 1..k-1 ran on an empty cache,
/// as the service sees them in a session.
fn loop_steps(c: &mut Criterion) {
    let counter = TokenCounter::for_model(Provider::OPENAI, "gpt-4o");
    let head = system_head(
        "- code_search(query) - search the code\n- read_file(path) - read a file",
        &reactstep::step::parse::Tags::default(),
        false,
    );
    let items: Vec<ContextItem> = (0..3)
        .map(|n| item(ContextSource::Explicit, n, 5_000))
        .collect();
    let histories: Vec<Vec<Turn>> = (0..10)
        .map(|step| {
            let mut history = turns(10, 600);
            for k in 0..step {
                history.push(Turn::new(
                    Role::Assistant,
                    format!("Thought: step {k}.\nAction: read_file(path=\"src/step{k}.js\")"),
                    "2024-01-01T00:00:00.000Z".into(),
                ));
                history.push(Turn::new(
                    Role::ToolObservation,
                    code(1_500, 5_000 + k),
                    "2024-01-01T00:00:00.000Z".into(),
                ));
            }
            history
        })
        .collect();
    let tags = reactstep::step::parse::Tags::default();
    let run = |step: usize| {
        let candidates = Candidates {
            head: &head,
            items: &items,
            unresolved: &[],
            history: &histories[step],
            query: "Why does the login handler return 404 for existing users?",
            order: &DEFAULT_ORDER,
            max_observation_tokens: 2000,
            omission_reserve: marker_reserve(&counter),
            tags: &tags,
            native: false,
            state_origin: None,
            cleared: &[],
            notice: None,
        };
        fit(&counter, 16_000, black_box(&candidates))
            .unwrap()
            .finish(&counter, None, "o200k_base")
    };
    let mut group = c.benchmark_group("10-step loop, context phase");
    for step in [0, 1, 4, 9] {
        group.bench_function(format!("step {}", step + 1), |b| {
            b.iter_batched(
                || {
                    clear_cache();
                    (0..step).for_each(|k| {
                        run(k);
                    });
                },
                |()| run(step),
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

fn prompt_building(c: &mut Criterion) {
    bench_case(
        c,
        "typical step (10 turns, 3 x 20 KB, 5 hits, 8k)",
        &typical(),
    );
    bench_case(c, "large step (2 MB, 100 turns, 128k)", &large());
}

fn counting(c: &mut Criterion) {
    let counter = TokenCounter::for_model(Provider::OPENAI, "gpt-4o");
    let blob = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo".repeat(30_000);
    let mut group = c.benchmark_group("token counting");
    group.sample_size(10);
    group.bench_function("1 MB unbroken base64-like run", |b| {
        b.iter(|| counter.count(black_box(&blob)))
    });
    let source = code(1_000_000, 0);
    group.bench_function("1 MB of source code", |b| {
        b.iter(|| counter.count(black_box(&source)))
    });
    group.finish();

    // An observation over the latest observation's 2,000 tokens, in a loop's history: every step
    // asks whether it fits. Seen first, it is counted up to the limit; the bound is remembered
    // (token_cache.rs), so later steps are answered by a lookup, where before every step
    // counted it up to the limit again, as at first sight.
    let observation = code(30_000, 7);
    let mut group = c.benchmark_group("30 KB observation over a 2,000-token limit");
    group.bench_function(
        "first sight (and every step, before the bound was kept)",
        |b| {
            b.iter_batched(
                clear_cache,
                |()| counter.count_within(black_box(&observation), 2_000),
                BatchSize::PerIteration,
            )
        },
    );
    group.bench_function("seen at an earlier step", |b| {
        clear_cache();
        assert_eq!(counter.count_within(&observation, 2_000), None);
        b.iter(|| counter.count_within(black_box(&observation), 2_000))
    });
    group.finish();
}

/// A warm step's lookups (a dozen texts, every count in the cache) made by N threads at once,
/// each thread one round per iteration and its own texts (N loops' steps): with no contention,
/// an iteration takes as long on N threads as on one. Beside it, the floor: the same rounds of
/// the two hashes that make a lookup's key, which share nothing, so what slows them as threads
/// are added is the machine's (cores that share a physical core, a lower clock). Threads past
/// the machine's cores are not measured: they would only wait.
fn concurrent_lookups(c: &mut Criterion) {
    use std::hash::BuildHasher;
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let loops: Vec<Vec<String>> = (0..16)
        .map(|l| (0..12).map(|i| code(1_500, 100 * i + 10_000 * l)).collect())
        .collect();
    let counter = TokenCounter::for_model(Provider::OPENAI, "gpt-4o");
    for text in loops.iter().flatten() {
        counter.count(text);
    }
    let lookup = |text: &str| u64::from(counter.count(text));
    let (first, second) = (
        foldhash::fast::FixedState::with_seed(1),
        foldhash::fast::FixedState::with_seed(2),
    );
    let hashes = |text: &str| first.hash_one(text) ^ second.hash_one(text);
    let mut group = c.benchmark_group("token cache, a warm step's 12 lookups on every thread");
    for threads in [1, 2, 4, 8, 16].into_iter().filter(|&n| n <= cores) {
        group.bench_function(format!("{threads} threads"), |b| {
            b.iter_custom(|iters| rounds(&loops[..threads], iters, &lookup))
        });
        group.bench_function(format!("{threads} threads, the hashes alone"), |b| {
            b.iter_custom(|iters| rounds(&loops[..threads], iters, &hashes))
        });
    }
    group.finish();
}

/// The time `iters` rounds of `work` over its texts take on each of `loops`' threads, all
/// started at once.
fn rounds(
    loops: &[Vec<String>],
    iters: u64,
    work: &(impl Fn(&str) -> u64 + Sync),
) -> std::time::Duration {
    let start = &std::sync::Barrier::new(loops.len() + 1);
    std::thread::scope(|scope| {
        for texts in loops {
            scope.spawn(move || {
                start.wait();
                for _ in 0..iters {
                    for text in texts {
                        black_box(work(black_box(text)));
                    }
                }
            });
        }
        start.wait();
        let began = std::time::Instant::now();
        // The scope joins every thread before it returns.
        began
    })
    .elapsed()
}

criterion_group!(
    benches,
    prompt_building,
    loop_steps,
    counting,
    concurrent_lookups
);
criterion_main!(benches);
