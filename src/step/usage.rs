//! What the step's model calls billed: their sum, the service's own count when a provider
//! reports none, and the check of the approximate count against the provider's.

use super::context::tokens::TokenCounter;
use crate::llm::{Completion, Usage};

/// The usage of the calls a step has made so far, where the deadline that stops the step
/// cannot drop it.
#[derive(Default)]
pub(super) struct Billed(std::sync::Mutex<Option<Usage>>);

impl Billed {
    pub(super) fn add(&self, usage: Option<Usage>) {
        if let Ok(mut sum) = self.0.lock() {
            *sum = add_usage(*sum, usage);
        }
    }

    pub(super) fn get(&self) -> Option<Usage> {
        self.0.lock().ok().and_then(|sum| *sum)
    }
}

/// An approximate count that came out below the provider's own count of the same prompt means
/// the margin is too small for this model: the client is told, and the operator too.
pub(super) fn margin_check(
    counter: &TokenCounter,
    used: u32,
    usage: Option<&Usage>,
) -> Option<String> {
    let upstream = usage?.prompt_tokens;
    if !counter.is_approximate() || upstream <= u64::from(used) {
        return None;
    }
    tracing::warn!(
        counted = used,
        upstream,
        "the provider counted more prompt tokens than the approximate count; raise REACTSTEP_APPROXIMATION_MARGIN_PERCENT"
    );
    Some(format!(
        "the provider counted {upstream} prompt tokens where the approximate count was {used}: this model's prompts may need a larger margin"
    ))
}

/// The usage of a call the provider reported none for: the prompt as counted against the budget
/// and the output as the same counter reads it, marked approximate.
pub(super) fn own_count(counter: &TokenCounter, prompt: u32, completion: &Completion) -> Usage {
    let calls: u32 = completion
        .calls
        .iter()
        .map(|c| {
            let arguments = match &c.arguments {
                Ok(map) => serde_json::Value::Object(map.clone()).to_string(),
                Err(unread) => unread.shown().into_owned(),
            };
            counter.count(&c.name) + counter.count(&arguments)
        })
        .sum();
    Usage {
        prompt_tokens: prompt.into(),
        completion_tokens: u64::from(counter.count(&completion.text) + calls),
        approximate: true,
        ..Usage::default()
    }
}

/// A sum of figures either call may have left out.
fn add_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, b) => a.or(b),
    }
}

/// Both calls of a step are billed to the user: report their sum.
pub(super) fn add_usage(a: Option<Usage>, b: Option<Usage>) -> Option<Usage> {
    match (a, b) {
        (Some(a), Some(b)) => Some(Usage {
            prompt_tokens: a.prompt_tokens.saturating_add(b.prompt_tokens),
            completion_tokens: a.completion_tokens.saturating_add(b.completion_tokens),
            approximate: a.approximate || b.approximate,
            cached_prompt_tokens: add_some(a.cached_prompt_tokens, b.cached_prompt_tokens),
            cache_creation_prompt_tokens: add_some(
                a.cache_creation_prompt_tokens,
                b.cache_creation_prompt_tokens,
            ),
            reasoning_tokens: add_some(a.reasoning_tokens, b.reasoning_tokens),
        }),
        (a, b) => a.or(b),
    }
}

/// What `total` holds beyond `part` (the calls of one model, from the step's running sum).
pub(super) fn less(total: Option<Usage>, part: Option<Usage>) -> Option<Usage> {
    let (total, part) = match (total, part) {
        (Some(total), Some(part)) => (total, part),
        (total, _) => return total,
    };
    // A figure of none is left out, as the providers' zeros are.
    let beyond = |a: Option<u64>, b: Option<u64>| {
        a.map(|a| a.saturating_sub(b.unwrap_or(0)))
            .filter(|n| *n > 0)
    };
    let usage = Usage {
        prompt_tokens: total.prompt_tokens.saturating_sub(part.prompt_tokens),
        completion_tokens: total
            .completion_tokens
            .saturating_sub(part.completion_tokens),
        approximate: total.approximate,
        cached_prompt_tokens: beyond(total.cached_prompt_tokens, part.cached_prompt_tokens),
        cache_creation_prompt_tokens: beyond(
            total.cache_creation_prompt_tokens,
            part.cache_creation_prompt_tokens,
        ),
        reasoning_tokens: beyond(total.reasoning_tokens, part.reasoning_tokens),
    };
    // Nothing beyond: no call of its own was billed.
    (usage.prompt_tokens > 0 || usage.completion_tokens > 0).then_some(usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_one_model_billed_is_the_running_sum_less_what_came_before() {
        let before = Usage {
            prompt_tokens: 100,
            completion_tokens: 10,
            cached_prompt_tokens: Some(40),
            ..Usage::default()
        };
        let after = add_usage(
            Some(before),
            Some(Usage {
                prompt_tokens: 7,
                completion_tokens: 3,
                ..Usage::default()
            }),
        );
        let own = less(after, Some(before));
        assert_eq!(
            own.map(|u| (u.prompt_tokens, u.completion_tokens)),
            Some((7, 3))
        );
        assert_eq!(
            own.and_then(|u| u.cached_prompt_tokens),
            None,
            "none of its own"
        );
        assert_eq!(less(Some(before), Some(before)), None, "nothing of its own");
        assert_eq!(less(after, None), after);
    }
}
