//! A step the service failed in a way it says a retry can help (`error.retryable`: the model's
//! output stayed invalid after the service's own repair rounds, the provider was unavailable or
//! rate-limited past the service's own retries) is sent once more before the loop ends: a
//! sampled model may write a valid step the second time. The wait is the service's
//! `retry_after_seconds`, bounded, or a second.

use std::time::Duration;

use serde_json::Value;

/// Tries of a failed step after the first.
pub const STEP_RETRIES: u32 = 1;

/// The longest wait a service's `retry_after_seconds` is taken for: a longer one ends the loop.
const MAX_WAIT: Duration = Duration::from_secs(30);

/// How long to wait before the step is sent again, when the service's answer is an error it
/// says a retry can help with; `None` for anything else.
pub fn wait_before_retry(reply: &Result<Value, String>) -> Option<Duration> {
    let error = &reply.as_ref().ok()?["error"];
    if error["retryable"].as_bool() != Some(true) {
        return None;
    }
    match error["retry_after_seconds"].as_f64() {
        // `try_`: a wait past what a `Duration` holds (`1e20`) is no retry, not a panic.
        Some(secs) if secs.is_finite() && secs >= 0.0 => Duration::try_from_secs_f64(secs)
            .ok()
            .filter(|wait| *wait <= MAX_WAIT),
        _ => Some(Duration::from_secs(1)),
    }
}

/// The service answered the step: a call to run or an answer.
pub fn passed(reply: &Result<Value, String>) -> bool {
    reply.as_ref().is_ok_and(|body| {
        matches!(
            body["status"].as_str(),
            Some("action_proposed" | "direct_response_provided")
        )
    })
}

/// What the service's error says, for the report: `type: message`.
pub fn said(body: &Value) -> String {
    format!(
        "{}: {}",
        body["error"]["type"].as_str().unwrap_or("unknown"),
        body["error"]["message"].as_str().unwrap_or_default()
    )
}

/// What a failed step came to, for the report: the service's error, or why there was none.
pub fn described(reply: &Result<Value, String>) -> String {
    match reply {
        Ok(body) => said(body),
        Err(why) => why.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_a_retryable_error_is_tried_again_after_a_bounded_wait() {
        let error = |e: Value| Ok(json!({"status": "error", "error": e}));
        let invalid =
            error(json!({"type": "invalid_model_output", "message": "m", "retryable": true}));
        assert_eq!(wait_before_retry(&invalid), Some(Duration::from_secs(1)));
        let limited = error(
            json!({"type": "llm_rate_limited", "retryable": true, "retry_after_seconds": 2.5}),
        );
        assert_eq!(
            wait_before_retry(&limited),
            Some(Duration::from_millis(2500))
        );
        let long = error(
            json!({"type": "llm_rate_limited", "retryable": true, "retry_after_seconds": 3600}),
        );
        assert_eq!(
            wait_before_retry(&long),
            None,
            "an hour's wait ends the loop instead"
        );
        let endless = error(
            json!({"type": "llm_rate_limited", "retryable": true, "retry_after_seconds": 1e20}),
        );
        assert_eq!(wait_before_retry(&endless), None);
        let odd = error(json!({"type": "x", "retryable": true, "retry_after_seconds": -1}));
        assert_eq!(wait_before_retry(&odd), Some(Duration::from_secs(1)));
        let final_ = error(json!({"type": "llm_auth", "retryable": false}));
        assert_eq!(wait_before_retry(&final_), None);
        assert_eq!(wait_before_retry(&Err("the stream broke off".into())), None);
        let answered = Ok(json!({"status": "direct_response_provided"}));
        assert_eq!(wait_before_retry(&answered), None);
        assert_eq!(described(&invalid), "invalid_model_output: m");
        assert!(passed(&answered) && !passed(&invalid) && !passed(&Err("x".into())));
    }
}
