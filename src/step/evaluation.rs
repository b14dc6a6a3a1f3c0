//! An evaluation step (`POST /api/agent/evaluate`): the model scores a candidate answer to the
//! task — completeness and quality, integers 0 to 10 — lists what is missing and what would
//! improve it, and says whether the loop should try again. Whether it does is not left to the
//! model: a completeness under 7 is a retry and 8 or more is done whatever the model said, and
//! a loop that has run past its plan's `estimated_iterations + 2` steps is not sent round again.

use serde_json::{json, Value};

use super::answer_schema::{whole_number, AnswerSchema, Meets};
use super::history::{Role, Turn};

/// Under this completeness the answer is tried again.
pub const RETRY_BELOW: u64 = 7;
/// From this completeness the answer is done.
pub const DONE_FROM: u64 = 8;
/// Steps a loop may take past its plan's estimate before evaluation stops sending it round.
pub const STEPS_PAST_ESTIMATE: u64 = 2;

/// What an evaluation request asks beyond a step's fields.
#[derive(Debug, Clone, Default)]
pub struct EvaluateAsk {
    /// The answer to score (`candidate_answer`).
    pub candidate_answer: String,
    /// The plan the loop followed, if it had one.
    pub plan: Option<Value>,
}

/// The JSON Schema of a `QualityEvaluation` as the model is asked for it.
pub fn schema() -> Value {
    let score = json!({"type": "integer", "minimum": 0, "maximum": 10});
    let texts = json!({"type": "array", "items": {"type": "string"}, "maxItems": 32});
    json!({
        "type": "object",
        "required": ["completeness_score", "quality_score", "needs_retry"],
        "properties": {
            "completeness_score": score,
            "quality_score": score,
            "missing_info": texts,
            "suggestions": texts,
            "needs_retry": {"type": "boolean"}
        }
    })
}

/// The evaluation's schema; what passes it is answered in full form.
pub fn answer_schema_for() -> Result<AnswerSchema, String> {
    let meets: Meets = Box::new(|value| Ok(full_form(value)));
    Ok(AnswerSchema::new(schema())?.meeting(meets))
}

/// The task as the evaluation step puts it to the model.
pub fn framed_query(task: &str, ask: &EvaluateAsk) -> String {
    let mut text = String::from(
        "Evaluate the candidate answer below to the task, taking the steps in the conversation \
         so far as the evidence it rests on; do not call a tool. Score its completeness (does it \
         fully answer the task?) and its quality (is it accurate and well formed?), each an \
         integer from 0 to 10; list the information it is missing and your suggestions; say \
         whether it needs another try. Give the evaluation as your final answer.\n\n",
    );
    if let Some(plan) = &ask.plan {
        text.push_str("The plan the work followed:\n");
        text.push_str(&plan.to_string());
        text.push_str("\n\n");
    }
    text.push_str("Task: ");
    text.push_str(task);
    text.push_str("\n\nCandidate answer:\n");
    text.push_str(&ask.candidate_answer);
    text
}

/// The loop's steps so far: the model's turns in the history.
pub fn steps_taken(history: &[Turn]) -> u64 {
    history.iter().filter(|t| t.role == Role::Assistant).count() as u64
}

/// The most steps the plan allows before evaluation stops the loop, if it has an estimate.
pub fn step_limit(plan: Option<&Value>) -> Option<u64> {
    let estimate = whole_number(plan?.get("estimated_iterations")?)?;
    Some(estimate.saturating_add(STEPS_PAST_ESTIMATE))
}

/// The rules applied to the model's evaluation: `needs_retry` as the scores and the steps
/// taken decide, with a warning for each decision that overrode the model's.
pub fn ruled(
    mut evaluation: Value,
    steps: u64,
    limit: Option<u64>,
    warnings: &mut Vec<String>,
) -> Value {
    let completeness = whole_number(&evaluation["completeness_score"]).unwrap_or(0);
    let said = evaluation["needs_retry"].as_bool().unwrap_or(false);
    let mut retry = match completeness {
        c if c < RETRY_BELOW => true,
        c if c >= DONE_FROM => false,
        _ => said,
    };
    if retry != said {
        warnings.push(format!(
            "needs_retry is {retry}, not the model's {said}: a completeness of {completeness} is {} (under {RETRY_BELOW}: retry; {DONE_FROM} or more: done)",
            if retry { "a retry" } else { "done" }
        ));
    }
    if let Some(limit) = limit.filter(|&limit| retry && steps > limit) {
        retry = false;
        warnings.push(format!(
            "needs_retry is false: the loop has taken {steps} steps, more than the plan's estimated_iterations + {STEPS_PAST_ESTIMATE} ({limit}), so it stops here"
        ));
    }
    evaluation["needs_retry"] = Value::Bool(retry);
    evaluation
}

/// Every field present, in the contract's order.
fn full_form(value: Value) -> Value {
    let list = |key: &str| match value.get(key) {
        Some(Value::Array(items)) => Value::Array(items.clone()),
        _ => json!([]),
    };
    let score = |key: &str| whole_number(&value[key]).map_or(Value::Null, Value::from);
    json!({
        "completeness_score": score("completeness_score"),
        "quality_score": score("quality_score"),
        "missing_info": list("missing_info"),
        "suggestions": list("suggestions"),
        "needs_retry": value["needs_retry"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evaluation(completeness: u64, retry: bool) -> Value {
        json!({"completeness_score": completeness, "quality_score": 5,
               "missing_info": [], "suggestions": [], "needs_retry": retry})
    }

    #[test]
    fn the_scores_decide_a_retry_not_the_model() {
        for (completeness, said, ruled_retry) in [
            (6, false, true),
            (0, false, true),
            (8, true, false),
            (10, true, false),
            (7, true, true),
            (7, false, false),
        ] {
            let mut warnings = Vec::new();
            let out = ruled(evaluation(completeness, said), 1, None, &mut warnings);
            assert_eq!(out["needs_retry"], ruled_retry, "{completeness} {said}");
            assert_eq!(warnings.is_empty(), said == ruled_retry);
        }
    }

    #[test]
    fn a_loop_past_its_estimate_and_two_is_not_sent_round_again() {
        let plan = json!({"estimated_iterations": 3});
        let limit = step_limit(Some(&plan));
        assert_eq!(limit, Some(5));
        let mut warnings = Vec::new();
        let at = ruled(evaluation(3, true), 5, limit, &mut warnings);
        assert_eq!(at["needs_retry"], true);
        let past = ruled(evaluation(3, true), 6, limit, &mut warnings);
        assert_eq!(past["needs_retry"], false);
        assert!(warnings.iter().any(|w| w.contains("6 steps")));
    }

    #[test]
    fn a_score_written_as_a_whole_decimal_is_the_integer_and_ruled_as_one() {
        let schema = answer_schema_for().unwrap_or_else(|e| panic!("{e}"));
        let read = schema
            .read(r#"{"completeness_score": 9.0, "quality_score": 1e1, "needs_retry": true}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read["completeness_score"], json!(9));
        assert!(read["completeness_score"].is_u64());
        assert_eq!(read["quality_score"], json!(10));
        let mut warnings = Vec::new();
        assert_eq!(ruled(read, 1, None, &mut warnings)["needs_retry"], false);
        assert_eq!(
            step_limit(Some(&json!({"estimated_iterations": 3.0}))),
            Some(5)
        );
    }

    #[test]
    fn scores_outside_zero_to_ten_are_refused() {
        let schema = answer_schema_for().unwrap_or_else(|e| panic!("{e}"));
        for bad in [
            json!({"completeness_score": 11, "quality_score": 5, "needs_retry": false}),
            json!({"completeness_score": -1, "quality_score": 5, "needs_retry": false}),
            json!({"completeness_score": 5, "quality_score": 7.5, "needs_retry": false}),
            json!({"completeness_score": 5, "quality_score": 5}),
        ] {
            assert!(schema.read(&bad.to_string()).is_err(), "{bad}");
        }
        let good = schema
            .read(r#"{"completeness_score": 9, "quality_score": 8, "needs_retry": false}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(good["missing_info"], json!([]));
    }
}
