//! What a step is asked to do: the ReAct step itself, or a plan or an evaluation, each made on a
//! step of its own (`plan.rs`, `evaluation.rs`): the same budget, providers, repair round and
//! errors, with the task framed for the model and its answer read as a plan or an evaluation.

use std::sync::Arc;

use super::error::{StepError, StepErrorKind};
use super::evaluation::{self, EvaluateAsk};
use super::input::StepInput;
use super::output::{Outcome, StepOutput};
use super::plan::{self, PlanAsk};
use super::structured::{Reading, Structured};

/// The task a request names by its endpoint.
#[derive(Debug, Clone, Default)]
pub enum Task {
    #[default]
    React,
    Plan(PlanAsk),
    Evaluate(EvaluateAsk),
}

impl Task {
    /// The input set for the task: its query framed, its answer's schema, one iteration (the
    /// model is told to answer, not to call a tool). A field the task cannot take is refused
    /// with its name.
    pub fn shape(self, input: &mut StepInput) -> Result<(), (&'static str, String)> {
        let schema = match self {
            Task::React => return Ok(()),
            Task::Plan(ask) => {
                input.user_query = plan::framed_query(&input.user_query, &ask);
                input.reading = Reading::Plan;
                plan::answer_schema_for(input.tools.clone())
            }
            Task::Evaluate(ask) => {
                input.user_query = evaluation::framed_query(&input.user_query, &ask);
                input.reading = Reading::Evaluation {
                    steps: evaluation::steps_taken(&input.history),
                    limit: evaluation::step_limit(ask.plan.as_ref()),
                };
                evaluation::answer_schema_for()
            }
        };
        if input.react.final_answer.is_some() {
            return Err((
                "react.final_answer_schema",
                "a plan or an evaluation is answered in its own form; leave final_answer_schema out"
                    .into(),
            ));
        }
        let schema = schema.map_err(|why| ("react", why))?;
        input.react.final_answer = Some(Arc::new(schema));
        input.react.require_action = false;
        input.react.answer_only = true;
        // Not a step of the loop: nothing it proposes is a call that could repeat one.
        input.react.loop_guard = None;
        input.iterations_left = 1;
        Ok(())
    }
}

/// The plan or the evaluation in the step's answer. A step whose model gave neither (it called
/// a tool though told not to) failed: its output is not what was asked for.
pub fn read(reading: Reading, output: &mut StepOutput) -> Result<(), StepError> {
    if reading == Reading::React || matches!(output.outcome, Outcome::DryRun(_)) {
        return Ok(());
    }
    let Some(answer) = output.answer_json.clone() else {
        let raw = match &output.outcome {
            Outcome::Answer { text, .. } => text.clone(),
            _ => String::new(),
        };
        let why = "the model did not give the plan or evaluation it was asked for".into();
        return Err(StepErrorKind::InvalidOutput {
            why,
            raw_output: raw,
        }
        .into());
    };
    output.forced_final = false;
    output.warnings.retain(|w| !w.contains("(forced_final)"));
    output.structured = Some(match reading {
        Reading::Plan => Structured::Plan(answer),
        Reading::Evaluation { steps, limit } => Structured::Evaluation(evaluation::ruled(
            answer,
            steps,
            limit,
            &mut output.warnings,
        )),
        Reading::React => return Ok(()),
    });
    Ok(())
}
