//! Retries of one upstream call: exponential backoff with full jitter, the provider's own
//! `Retry-After` honoured (capped), and a deadline for the whole step that no wait or attempt
//! may pass. Only failures that another attempt can fix are retried: connection errors,
//! timeouts, 429 (unless the quota is exhausted), 5xx and Anthropic's 529.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::{LlmError, Provider};

#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Attempts after the first.
    pub retries: u32,
    pub base: Duration,
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            retries: 3,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(8),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry `n` (1-based): the provider's figure when it gave one, otherwise a
    /// random time up to `base · 2^(n−1)`; never more than `cap`.
    pub fn delay(&self, n: u32, hint: Option<Duration>) -> Duration {
        if let Some(hint) = hint {
            return hint.min(self.cap);
        }
        let ceiling = self
            .base
            .saturating_mul(2u32.saturating_pow(n.saturating_sub(1)))
            .min(self.cap);
        let millis = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(fastrand::u64(0..=millis))
    }

    /// Runs `attempt` (given the time it may take, and which retry it is: 0 for the first try)
    /// until it succeeds, fails for good, runs out of retries, or the deadline leaves no room for
    /// another try. A timed-out attempt is retried only where the provider allows it and
    /// `retry_timeouts` says so.
    pub async fn run<T, F, Fut>(
        &self,
        (provider, retry_timeouts): (Provider, bool),
        per_attempt: Duration,
        deadline: Instant,
        mut attempt: F,
    ) -> Result<T, LlmError>
    where
        F: FnMut(Duration, u32) -> Fut,
        Fut: Future<Output = Result<T, LlmError>>,
    {
        let mut retry = 0;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(LlmError::Timeout {
                    provider,
                    timeout: per_attempt,
                });
            }
            let started = std::time::Instant::now();
            let metrics = crate::telemetry::metrics::global();
            let labels = crate::telemetry::metrics::ProviderLabels {
                provider: std::borrow::Cow::Borrowed(provider.name()),
            };
            // In a block: the outcome's room is then not kept through the wait below.
            let err = {
                let outcome = attempt(per_attempt.min(left), retry).await;
                metrics
                    .upstream_seconds
                    .get_or_create(&labels)
                    .observe(started.elapsed().as_secs_f64());
                match outcome {
                    Ok(value) => return Ok(value),
                    Err(err) => err,
                }
            };
            let timeout_not_retried = matches!(err, LlmError::Timeout { .. })
                && !(retry_timeouts && provider.capabilities().retry_timeouts);
            if retry >= self.retries || !err.is_worth_retrying() || timeout_not_retried {
                return Err(err);
            }
            retry += 1;
            metrics.retries.get_or_create(&labels).inc();
            let wait = self.delay(retry, err.retry_after());
            if Instant::now() + wait >= deadline {
                return Err(err);
            }
            tracing::warn!(%provider, retry, wait_ms = wait.as_millis() as u64, error = %err, "retrying the upstream call");
            drop((err, labels));
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn fast() -> RetryPolicy {
        RetryPolicy {
            retries: 3,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(4),
        }
    }

    fn unavailable() -> LlmError {
        LlmError::Unavailable {
            provider: Provider::OPENAI,
            message: "HTTP 503".into(),
        }
    }

    #[test]
    fn backoff_grows_is_jittered_and_capped() {
        let p = RetryPolicy::default();
        for n in 1..=6 {
            let ceiling = (p.base * 2u32.pow(n - 1)).min(p.cap);
            for _ in 0..50 {
                assert!(p.delay(n, None) <= ceiling);
            }
        }
        let spread: std::collections::HashSet<_> = (0..50).map(|_| p.delay(4, None)).collect();
        assert!(spread.len() > 10, "full jitter spreads the waits");
        assert_eq!(p.delay(1, Some(Duration::from_secs(60))), p.cap);
        assert_eq!(
            p.delay(1, Some(Duration::from_millis(20))),
            Duration::from_millis(20)
        );
    }

    #[tokio::test]
    async fn transient_failures_are_retried_until_success() {
        let calls = AtomicU32::new(0);
        let far = Instant::now() + Duration::from_secs(5);
        let result = fast()
            .run(
                (Provider::OPENAI, true),
                Duration::from_secs(1),
                far,
                |_, retry| {
                    let call = calls.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(retry, call, "each attempt is told which retry it is");
                    async move {
                        match call {
                            0 | 1 => Err(unavailable()),
                            _ => Ok("done"),
                        }
                    }
                },
            )
            .await;
        assert_eq!(result.ok(), Some("done"));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn permanent_failures_and_spent_retries_end_it() {
        let calls = AtomicU32::new(0);
        let far = Instant::now() + Duration::from_secs(5);
        let denied = fast()
            .run(
                (Provider::OPENAI, true),
                Duration::from_secs(1),
                far,
                |_, _| async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Err::<(), _>(LlmError::Auth {
                        provider: Provider::OPENAI,
                        status: 401,
                        fallback: false,
                    })
                },
            )
            .await;
        assert!(matches!(denied, Err(LlmError::Auth { .. })));
        assert_eq!(calls.swap(0, Ordering::SeqCst), 1);
        let down = fast()
            .run(
                (Provider::OPENAI, true),
                Duration::from_secs(1),
                far,
                |_, _| async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Err::<(), _>(unavailable())
                },
            )
            .await;
        assert!(down.is_err());
        assert_eq!(
            calls.load(Ordering::SeqCst),
            4,
            "the first attempt and 3 retries"
        );
    }

    #[tokio::test]
    async fn no_attempt_or_wait_passes_the_deadline() {
        let slow = RetryPolicy {
            retries: 3,
            base: Duration::from_secs(10),
            cap: Duration::from_secs(10),
        };
        let calls = AtomicU32::new(0);
        let soon = Instant::now() + Duration::from_millis(50);
        let result = slow
            .run(
                (Provider::OPENAI, true),
                Duration::from_secs(60),
                soon,
                |timeout, _| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async move {
                        assert!(timeout <= Duration::from_millis(50));
                        Err::<(), _>(LlmError::RateLimited {
                            provider: Provider::OPENAI,
                            message: "slow down".into(),
                            retry_after: Some(Duration::from_secs(5)),
                            retryable: true,
                        })
                    }
                },
            )
            .await;
        assert!(matches!(result, Err(LlmError::RateLimited { .. })));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "a 5 s wait does not fit in 50 ms"
        );
    }

    #[tokio::test]
    async fn a_timeout_is_not_retried_when_told_so() {
        for (retry_timeouts, expected) in [(true, 4), (false, 1)] {
            let calls = AtomicU32::new(0);
            let far = Instant::now() + Duration::from_secs(5);
            let result = fast()
                .run(
                    (Provider::OPENAI, retry_timeouts),
                    Duration::from_secs(1),
                    far,
                    |timeout, _| {
                        calls.fetch_add(1, Ordering::SeqCst);
                        async move {
                            Err::<(), _>(LlmError::Timeout {
                                provider: Provider::OPENAI,
                                timeout,
                            })
                        }
                    },
                )
                .await;
            assert!(matches!(result, Err(LlmError::Timeout { .. })));
            assert_eq!(calls.load(Ordering::SeqCst), expected, "{retry_timeouts}");
        }
    }
}
