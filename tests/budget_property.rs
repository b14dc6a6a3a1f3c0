//! Property: for any request shape and size, the prompt sent upstream never exceeds
//! `tokenLimit - reservedOutputTokens`, and the reported count is the prompt's real count.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use reactstep::llm::Provider;
use reactstep::step::context::budget::{fit, marker_reserve, Candidates, DEFAULT_ORDER};
use reactstep::step::context::prompt::system_head;
use reactstep::step::context::tokens::{TokenCounter, PER_MESSAGE_OVERHEAD, REPLY_PRIMING};
use reactstep::step::context::{ContextItem, ContextSource};
use reactstep::step::history::{Role, Turn};

/// Code-like text, arbitrary Unicode, and long unbroken runs.
fn text(max: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::string::string_regex(&format!("[a-zA-Z0-9 _(){{}};.=\n\t]{{0,{max}}}")).unwrap(),
        proptest::string::string_regex(&format!("\\PC{{0,{}}}", max / 4)).unwrap(),
        (0..max).prop_map(|n| "x".repeat(n)),
        (0..max / 20).prop_map(|n| "fn f() {\n    let a = 1;\n}\n".repeat(n)),
    ]
}

fn source() -> impl Strategy<Value = ContextSource> {
    prop_oneof![
        Just(ContextSource::Explicit),
        Just(ContextSource::Pinned),
        Just(ContextSource::Implicit),
        Just(ContextSource::VectorSearch),
    ]
}

fn item() -> impl Strategy<Value = ContextItem> {
    (
        source(),
        "[a-z/]{1,20}\\.(rs|js|py|md)",
        text(6000),
        proptest::option::of(1u32..500),
    )
        .prop_map(|(source, path, content, cursor_line)| ContextItem {
            source,
            id: path.clone(),
            path: Some(path),
            content,
            score: None,
            lines: None,
            cursor_line,
        })
}

fn turn() -> impl Strategy<Value = Turn> {
    let role = prop_oneof![
        Just(Role::User),
        Just(Role::Assistant),
        Just(Role::ToolObservation)
    ];
    (role, text(3000))
        .prop_map(|(role, content)| Turn::new(role, content, "2024-01-01T00:00:00.000Z".into()))
}

fn provider() -> impl Strategy<Value = (Provider, &'static str)> {
    prop_oneof![
        Just((Provider::OPENAI, "gpt-4o")),
        Just((Provider::OPENAI, "gpt-4")),
        Just((Provider::ANTHROPIC, "claude-sonnet-4-5")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn the_prompt_never_exceeds_the_budget(
        (provider, model) in provider(),
        tools in text(800),
        items in proptest::collection::vec(item(), 0..8),
        history in proptest::collection::vec(turn(), 0..12),
        query in text(1500),
        budget in 50u32..12_000,
        max_observation_tokens in 16u32..3000,
        order in proptest::sample::subsequence(DEFAULT_ORDER.to_vec(), 0..=5).prop_shuffle(),
        last_step in any::<bool>(),
        summary in proptest::option::of(text(3000)),
    ) {
        let counter = TokenCounter::for_model(provider, model);
        let head = system_head(&tools, &reactstep::step::parse::Tags::default(), false);
        let reserve = if summary.is_some() { 200 } else { marker_reserve(&counter) };
        let candidates = Candidates {
            head: &head,
            items: &items,
            unresolved: &[],
            history: &history,
            query: &query,
            order: &order,
            max_observation_tokens,
            omission_reserve: reserve,
            tags: &reactstep::step::parse::Tags::default(),
            native: false,
            state_origin: None,
            cleared: &[],
            notice: last_step.then_some(reactstep::step::context::prompt::LAST_STEP),
        };
        match fit(&counter, budget, &candidates) {
            Ok(fitted) => {
                let prompt = fitted.finish(&counter, summary.as_deref(), counter.encoding());
                let real = REPLY_PRIMING
                    + counter.count(&prompt.system) + PER_MESSAGE_OVERHEAD
                    + prompt.messages.iter().map(|m| counter.count_message(&m.content)).sum::<u32>();
                prop_assert!(real <= budget, "sent {real} tokens over a budget of {budget}");
                prop_assert!(prompt.report.used <= budget);
                if counter.is_approximate() {
                    // Counted in parts with a margin rounded up in each: never below the real count.
                    prop_assert!(prompt.report.used >= real);
                } else {
                    prop_assert_eq!(prompt.report.used, real, "the report must give the real count");
                }
            }
            Err(overflow) => {
                prop_assert!(overflow.required > budget);
                prop_assert_eq!(overflow.budget, budget);
            }
        }
    }
}
