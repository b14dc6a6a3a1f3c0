//! What a rate limit answers when a request may not go on.

use std::time::Duration;

/// Why a request may not go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Over the limit: it would pass after this long.
    Wait(Duration),
    /// The shared limiter did not answer, and the operator chose to fail closed.
    Unavailable,
}
