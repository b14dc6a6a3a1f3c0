//! Running one proposed call: its per-loop limit, the answer of an identical read-only call made
//! a little earlier, and retries with exponential backoff for a read-only tool's errors that say
//! a retry can help (a write is never sent twice: one that timed out may have been done).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::registry::{ToolOutcome, ToolRegistry};

/// When a failed call is tried again.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub initial_delay: Duration,
    pub backoff_multiplier: f64,
    /// A failure whose message holds one of these (case aside) may pass if tried again.
    pub retryable_patterns: Vec<String>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 2,
            initial_delay: Duration::from_millis(200),
            backoff_multiplier: 2.0,
            retryable_patterns: ["timeout", "timed out", "temporarily", "try again", "busy"]
                .map(String::from)
                .to_vec(),
        }
    }
}

impl RetryPolicy {
    fn retryable(&self, error: &str) -> bool {
        let error = error.to_lowercase();
        self.retryable_patterns
            .iter()
            .any(|p| error.contains(&p.to_lowercase()))
    }
}

/// How long an identical read-only call is answered from the first.
const CACHE_FOR: Duration = Duration::from_secs(300);

/// What running a call came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Executed {
    pub outcome: ToolOutcome,
    /// Tries after the first.
    pub retries: u32,
    /// The last failure before a try that passed, when one did after failures.
    pub recovered_from: Option<String>,
}

impl Executed {
    fn once(outcome: ToolOutcome) -> Self {
        Self {
            outcome,
            retries: 0,
            recovered_from: None,
        }
    }
}

/// The state of a loop's calls: how many each tool made, and the answers kept.
#[derive(Default)]
pub struct Executor {
    pub limits: BTreeMap<String, u32>,
    pub retry: RetryPolicy,
    calls: HashMap<String, u32>,
    answered: HashMap<(String, String), (Instant, String)>,
}

impl Executor {
    pub fn new(limits: BTreeMap<String, u32>, retry: RetryPolicy) -> Self {
        Self {
            limits,
            retry,
            ..Self::default()
        }
    }

    pub async fn run(&mut self, registry: &ToolRegistry, tool: &str, args: &Value) -> Executed {
        let Some((runner, metadata)) = registry.get(tool) else {
            return Executed::once(ToolOutcome::Failed(format!(
                "there is no tool named {tool}"
            )));
        };
        let made = self.calls.entry(tool.to_string()).or_default();
        if let Some(&limit) = self.limits.get(tool) {
            if *made >= limit {
                return Executed::once(ToolOutcome::Failed(format!(
                    "{tool} may be called at most {limit} times in this loop; this call was refused"
                )));
            }
        }
        *made += 1;
        let key = (tool.to_string(), args.to_string());
        if let Some((at, text)) = self.answered.get(&key) {
            if metadata.read_only && at.elapsed() < CACHE_FOR {
                return Executed::once(ToolOutcome::Done(text.clone()));
            }
        }
        let empty = Map::new();
        let args = args.as_object().unwrap_or(&empty);
        let mut delay = self.retry.initial_delay;
        let mut retries = 0;
        let mut last_failure = None;
        let outcome = loop {
            match runner.call(args).await {
                // Only a read is tried again: a write that timed out may have been done.
                ToolOutcome::Failed(why)
                    if metadata.read_only
                        && retries < self.retry.max_retries
                        && self.retry.retryable(&why) =>
                {
                    last_failure = Some(why);
                    retries += 1;
                    tokio::time::sleep(delay).await;
                    delay = delay.mul_f64(self.retry.backoff_multiplier.max(1.0));
                }
                outcome => break outcome,
            }
        };
        if let (true, ToolOutcome::Done(text)) = (metadata.read_only, &outcome) {
            self.answered.insert(key, (Instant::now(), text.clone()));
        }
        let passed = !matches!(outcome, ToolOutcome::Failed(_));
        Executed {
            outcome,
            retries,
            recovered_from: last_failure.filter(|_| passed),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::driver::registry::ToolMetadata;

    fn metadata(read_only: bool) -> ToolMetadata {
        ToolMetadata {
            description: String::new(),
            category: "test".into(),
            parameters: json!({"type": "object"}),
            examples: Vec::new(),
            read_only,
            destructive: false,
        }
    }

    /// A tool that fails `failures` times with `why`, then answers how often it was called.
    fn flaky(
        registry: &mut ToolRegistry,
        name: &str,
        failures: u32,
        why: &'static str,
    ) -> Arc<AtomicU32> {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        registry.register(
            name,
            move |_: &Map<String, Value>| {
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                if n <= failures {
                    ToolOutcome::Failed(why.into())
                } else {
                    ToolOutcome::Done(format!("call {n}"))
                }
            },
            metadata(true),
        );
        calls
    }

    fn quick() -> RetryPolicy {
        RetryPolicy {
            initial_delay: Duration::from_millis(1),
            ..RetryPolicy::default()
        }
    }

    #[tokio::test]
    async fn a_failure_that_says_try_again_is_retried_with_backoff_until_it_passes() {
        let mut registry = ToolRegistry::default();
        let calls = flaky(&mut registry, "net", 2, "service temporarily unavailable");
        let mut executor = Executor::new(BTreeMap::new(), quick());
        let done = executor.run(&registry, "net", &json!({})).await;
        assert_eq!(done.outcome, ToolOutcome::Done("call 3".into()));
        assert_eq!(done.retries, 2);
        assert_eq!(
            done.recovered_from.as_deref(),
            Some("service temporarily unavailable")
        );
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn retries_end_and_other_failures_are_not_retried() {
        let mut registry = ToolRegistry::default();
        flaky(&mut registry, "down", 9, "timed out");
        let no_retry = flaky(&mut registry, "bad", 9, "no such file");
        let mut executor = Executor::new(BTreeMap::new(), quick());
        let done = executor.run(&registry, "down", &json!({})).await;
        assert_eq!((done.retries, done.recovered_from), (2, None));
        assert!(matches!(done.outcome, ToolOutcome::Failed(_)));
        executor.run(&registry, "bad", &json!({})).await;
        assert_eq!(no_retry.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_write_that_timed_out_is_not_sent_again() {
        let mut registry = ToolRegistry::default();
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        registry.register(
            "write",
            move |_: &Map<String, Value>| {
                counted.fetch_add(1, Ordering::SeqCst);
                ToolOutcome::Failed("the server timed out".into())
            },
            metadata(false),
        );
        let mut executor = Executor::new(BTreeMap::new(), quick());
        let done = executor.run(&registry, "write", &json!({})).await;
        assert_eq!((done.retries, calls.load(Ordering::SeqCst)), (0, 1));
    }

    #[tokio::test]
    async fn a_limit_refuses_further_calls_and_a_repeated_read_is_answered_from_before() {
        let mut registry = ToolRegistry::default();
        let calls = flaky(&mut registry, "read", 0, "");
        let limits = BTreeMap::from([("read".to_string(), 2)]);
        let mut executor = Executor::new(limits, quick());
        let first = executor.run(&registry, "read", &json!({"p": 1})).await;
        let again = executor.run(&registry, "read", &json!({"p": 1})).await;
        assert_eq!(first.outcome, again.outcome, "answered from before");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let refused = executor.run(&registry, "read", &json!({"p": 2})).await;
        assert!(
            matches!(&refused.outcome, ToolOutcome::Failed(w) if w.contains("at most 2 times")),
            "{refused:?}"
        );
    }
}
