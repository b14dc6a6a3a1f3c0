//! A plan step (`POST /api/agent/plan`): the model is asked, on a step of its own, for an
//! `ExecutionPlan` of the task — its complexity, numbered steps each with the tool it uses, and
//! an estimate of the iterations — given as a final answer in JSON. The plan is read like any
//! structured answer (`answer_schema.rs`), then held to what a plan must be: its tools exist,
//! their arguments match their schemas, its numbering is dense and each dependency points to an
//! earlier step. A plan that is not is the model's to repair, in the same round an action gets.

use crate::llm::wire_names::WireNames;
use serde_json::{json, Map, Value};

use super::answer_schema::{whole_number, AnswerSchema, Meets};
use super::tools::Catalog;

/// The most steps a plan may hold: more is not a plan a loop follows.
pub const MAX_PLAN_STEPS: usize = 64;
/// The most JSON values a plan may hold, answered or sent back: a plan the service answers is
/// always one it takes back.
pub const MAX_PLAN_VALUES: usize = 10_000;
/// The most characters a plan may take as JSON, answered or sent back.
pub const MAX_PLAN_CHARS: usize = 1_000_000;

/// What a plan request asks beyond a step's fields: the plan to adjust and what it met.
#[derive(Debug, Clone, Default)]
pub struct PlanAsk {
    /// The plan made earlier (`previous_plan`), to adjust rather than begin again.
    pub previous: Option<Value>,
    /// What the loop observed last (`latest_observation`).
    pub latest_observation: Option<String>,
}

/// The JSON Schema of an `ExecutionPlan` as the model is asked for it. `depends_on` is taken as
/// a list, one number or null (models write all three) and answered as a list.
pub fn schema() -> Value {
    json!({
        "type": "object",
        "required": ["complexity", "steps", "estimated_iterations"],
        "properties": {
            "complexity": {"enum": ["simple", "medium", "complex"]},
            "steps": {
                "type": "array", "minItems": 1, "maxItems": MAX_PLAN_STEPS,
                "items": {
                    "type": "object",
                    "required": ["step_number", "description"],
                    "properties": {
                        "step_number": {"type": "integer", "minimum": 1},
                        "description": {"type": "string", "minLength": 1},
                        "tool_name": {"type": ["string", "null"]},
                        "parameters": {"type": ["object", "null"]},
                        "required": {"type": ["boolean", "null"]},
                        "depends_on": {"anyOf": [
                            {"type": "array", "items": {"type": "integer"}},
                            {"type": "integer"}, {"type": "null"}
                        ]}
                    }
                }
            },
            "estimated_iterations": {"type": "integer", "minimum": 1, "maximum": 1000}
        }
    })
}

/// The plan's schema, with the checks a plan must pass against the request's tools.
pub fn answer_schema_for(catalog: Catalog) -> Result<AnswerSchema, String> {
    let meets: Meets = Box::new(move |plan| checked(plan, &catalog));
    Ok(AnswerSchema::new(schema())?.meeting(meets))
}

/// The task as the plan step puts it to the model.
pub fn framed_query(task: &str, ask: &PlanAsk) -> String {
    let mut text = String::from(
        "Make a plan for the task below; do not carry it out and do not call a tool. Classify \
         its complexity (simple, medium or complex) and break it into numbered steps: for each, \
         what it does, the tool it uses (one of the available tools, or null for a step of \
         reasoning), that tool's parameters as far as they are known now, whether the step is \
         required, and the numbers of the earlier steps it depends on. Estimate the iterations \
         the work will take. Give the plan as your final answer.\n\n",
    );
    if let Some(previous) = &ask.previous {
        text.push_str(
            "This is an adjustment: the plan below was made earlier. Keep what still holds, \
             change or add the steps the latest observation calls for, and give the whole \
             adjusted plan.\n\nEarlier plan:\n",
        );
        text.push_str(&previous.to_string());
        text.push_str("\n\n");
    }
    if let Some(observation) = &ask.latest_observation {
        text.push_str("Latest observation:\n");
        text.push_str(observation);
        text.push_str("\n\n");
    }
    text.push_str("Task: ");
    text.push_str(task);
    text
}

/// The plan in its full form (every field of each step present, `depends_on` a list), or what
/// is wrong with it.
fn checked(plan: Value, catalog: &Catalog) -> Result<Value, String> {
    let Value::Object(mut plan) = plan else {
        return Err("the plan must be a JSON object".into());
    };
    let steps = match plan.remove("steps") {
        Some(Value::Array(steps)) => steps,
        _ => return Err("the plan must have a list of steps".into()),
    };
    let mut tidy = Vec::with_capacity(steps.len());
    for (i, step) in steps.into_iter().enumerate() {
        tidy.push(checked_step(i + 1, step, catalog)?);
    }
    let complexity = plan.remove("complexity").unwrap_or(Value::Null);
    if complexity == "complex" && tidy.len() < 2 {
        return Err("a complex task's plan has at least two steps".into());
    }
    let estimate = plan.remove("estimated_iterations").unwrap_or(Value::Null);
    let plan = json!({
        "complexity": complexity,
        "steps": tidy,
        "estimated_iterations": whole_number(&estimate).map_or(Value::Null, Value::from),
    });
    let mut values = 0;
    super::history::walk_json(std::iter::once(&plan), |_| {
        values += 1;
        values <= MAX_PLAN_VALUES
    });
    if values > MAX_PLAN_VALUES || plan.to_string().chars().count() > MAX_PLAN_CHARS {
        return Err(format!(
            "the plan holds more than {MAX_PLAN_VALUES} JSON values or {MAX_PLAN_CHARS} characters: give each step's parameters in brief"
        ));
    }
    Ok(plan)
}

/// Step `number` of the plan, checked and in full form.
fn checked_step(number: usize, step: Value, catalog: &Catalog) -> Result<Value, String> {
    let Value::Object(mut step) = step else {
        return Err(format!("step {number} must be a JSON object"));
    };
    if step.get("step_number").and_then(whole_number) != Some(number as u64) {
        return Err(format!(
            "the steps must be numbered 1, 2, 3 … in order: the step at position {number} is numbered {}",
            step.get("step_number").unwrap_or(&Value::Null)
        ));
    }
    let depends_on = dependencies(number, step.remove("depends_on"))?;
    let parameters = match step.remove("parameters") {
        Some(Value::Object(p)) => p,
        _ => Map::new(),
    };
    if let Some(why) = super::history::too_deep(&parameters) {
        return Err(format!("step {number}: {why}"));
    }
    let tool = match step.remove("tool_name") {
        Some(Value::String(name)) if !name.trim().is_empty() => {
            Value::String(tool_of(number, &name, &parameters, catalog)?)
        }
        _ if !parameters.is_empty() => {
            return Err(format!(
                "step {number} has parameters but no tool_name: name the tool they are for, or leave them out"
            ))
        }
        _ => Value::Null,
    };
    Ok(json!({
        "step_number": number,
        "description": step.remove("description").unwrap_or(Value::Null),
        "tool_name": tool,
        "parameters": parameters,
        "required": step.remove("required").and_then(|r| r.as_bool()).unwrap_or(true),
        "depends_on": depends_on,
    }))
}

/// `depends_on` as a list of earlier steps' numbers.
fn dependencies(number: usize, given: Option<Value>) -> Result<Vec<u64>, String> {
    let numbers: Vec<Value> = match given {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list,
        Some(one) => vec![one],
    };
    let mut list = Vec::with_capacity(numbers.len());
    for n in numbers {
        match whole_number(&n) {
            Some(earlier) if earlier >= 1 && (earlier as usize) < number => {
                if !list.contains(&earlier) {
                    list.push(earlier);
                }
            }
            _ => {
                return Err(format!(
                "step {number} depends on {n}: a step can depend only on an earlier step (1 to {})",
                number - 1
            ))
            }
        }
    }
    Ok(list)
}

/// The tool step `number` names, as the catalog knows it, with its parameters checked.
fn tool_of(
    number: usize,
    written: &str,
    parameters: &Map<String, Value>,
    catalog: &Catalog,
) -> Result<String, String> {
    if !catalog.knows_names() {
        return Err(format!(
            "step {number} names the tool '{written}', but no tools are available: use null"
        ));
    }
    // Through native tool calling the model was shown a renamed tool by its wire name, made
    // unique beside the service's own answer tool, which a plan is given through.
    let resolved = catalog.resolve(written).or_else(|| {
        let service = std::iter::once(super::answer_schema::FINAL_ANSWER_TOOL);
        let names: Vec<&str> = catalog.declared_names().chain(service).collect();
        let renamed = WireNames::of(names.iter().copied());
        renamed
            .given(written)
            .and_then(|given| catalog.resolve(given))
    });
    let Some((name, _)) = resolved else {
        return Err(format!(
            "step {number} names the tool '{written}', which does not exist; the tools are: {}",
            catalog.names().join(", ")
        ));
    };
    let problems = catalog.planned_problems(&name, parameters);
    if !problems.is_empty() {
        return Err(format!(
            "the parameters of step {number} do not match the parameters of '{name}': {}",
            problems.join("; ")
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::ToolSpec;

    fn catalog() -> Catalog {
        let read = ToolSpec {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "required": ["path"],
                "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}}}),
        };
        Catalog::new(vec![read], "").unwrap_or_else(|e| panic!("{e:?}"))
    }

    fn plan(steps: Value) -> Value {
        json!({"complexity": "medium", "steps": steps, "estimated_iterations": 3})
    }

    #[test]
    fn a_plan_is_answered_in_full_form_with_depends_on_a_list() {
        let given = plan(json!([
            {"step_number": 1, "description": "read", "tool_name": "read_file",
             "parameters": {"path": "a.rs"}},
            {"step_number": 2, "description": "think", "depends_on": 1},
        ]));
        let tidy = checked(given, &catalog()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tidy["steps"][0]["depends_on"], json!([]));
        assert_eq!(tidy["steps"][0]["required"], json!(true));
        assert_eq!(tidy["steps"][1]["depends_on"], json!([1]));
        assert_eq!(tidy["steps"][1]["tool_name"], Value::Null);
        assert_eq!(tidy["steps"][1]["parameters"], json!({}));
    }

    /// A client tool `final.answer` goes on the wire beside the service's `final_answer` under
    /// a name of its own: a plan naming it so names the client's tool.
    #[test]
    fn a_plan_may_name_a_tool_by_the_name_the_wire_gave_it() {
        let tool = ToolSpec {
            name: "final.answer".into(),
            description: "Answer".into(),
            parameters: json!({"type": "object"}),
        };
        let catalog = Catalog::new(vec![tool], "").unwrap_or_else(|e| panic!("{e:?}"));
        let sent = WireNames::of(["final.answer", "final_answer"].into_iter());
        let wire = sent.seen("final.answer");
        assert_ne!(wire, "final_answer");
        let given = plan(json!([{"step_number": 1, "description": "answer", "tool_name": wire}]));
        let tidy = checked(given, &catalog).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tidy["steps"][0]["tool_name"], "final.answer");
    }

    #[test]
    fn what_a_plan_must_meet_is_told_to_the_model() {
        let cases = [
            (
                json!([{"step_number": 1, "description": "x", "tool_name": "delete_all"}]),
                "does not exist",
            ),
            (
                json!([{"step_number": 2, "description": "x"}]),
                "numbered 1, 2, 3",
            ),
            (
                json!([{"step_number": 1, "description": "x"},
                       {"step_number": 2, "description": "y", "depends_on": [2]}]),
                "only on an earlier step",
            ),
            (
                json!([{"step_number": 1, "description": "x", "depends_on": [0]}]),
                "only on an earlier step",
            ),
            (
                json!([{"step_number": 1, "description": "x", "tool_name": "read_file",
                        "parameters": {"path": 7}}]),
                "do not match the parameters of 'read_file'",
            ),
            (
                json!([{"step_number": 1, "description": "x", "tool_name": "read_file",
                        "parameters": {"mode": "r"}}]),
                "do not match",
            ),
            (
                json!([{"step_number": 1, "description": "x", "parameters": {"path": "a"}}]),
                "no tool_name",
            ),
        ];
        for (steps, said) in cases {
            let why = checked(plan(steps.clone()), &catalog())
                .err()
                .unwrap_or_else(|| panic!("{steps} passed"));
            assert!(why.contains(said), "{steps}: {why}");
        }
        let complex = json!({"complexity": "complex", "estimated_iterations": 2,
            "steps": [{"step_number": 1, "description": "x"}]});
        assert!(checked(complex, &catalog()).is_err());
        let none = Catalog::default();
        let named = plan(json!([{"step_number": 1, "description": "x", "tool_name": "read_file"}]));
        assert!(checked(named, &none).is_err());
    }

    #[test]
    fn numbers_written_as_whole_decimals_are_integers_in_the_plan() {
        let given = json!({"complexity": "medium", "estimated_iterations": 3.0, "steps": [
            {"step_number": 1.0, "description": "x", "required": null},
            {"step_number": 2, "description": "y", "depends_on": [1.0]}]});
        let tidy = checked(given, &catalog()).unwrap_or_else(|e| panic!("{e}"));
        assert!(tidy["estimated_iterations"].is_u64());
        assert_eq!(tidy["steps"][1]["depends_on"], json!([1]));
        assert_eq!(tidy["steps"][0]["required"], true);
    }

    #[test]
    fn a_plan_too_large_to_send_back_is_refused() {
        let big: Vec<Value> = (0..MAX_PLAN_VALUES).map(|i| json!(i)).collect();
        let tools = vec![ToolSpec {
            name: "sum".into(),
            description: "Sum".into(),
            parameters: json!({"type": "object", "properties": {"xs": {"type": "array"}}}),
        }];
        let catalog = Catalog::new(tools, "").unwrap_or_else(|e| panic!("{e:?}"));
        let given = plan(
            json!([{"step_number": 1, "description": "x", "tool_name": "sum",
            "parameters": {"xs": big}}]),
        );
        let why = checked(given, &catalog).err().unwrap_or_default();
        assert!(why.contains("more than"), "{why}");
    }

    #[test]
    fn a_parameter_left_to_an_earlier_step_is_not_a_missing_one() {
        let given = plan(json!([
            {"step_number": 1, "description": "find", "tool_name": null},
            {"step_number": 2, "description": "read it", "tool_name": "READ_FILE",
             "parameters": {}, "depends_on": [1]},
        ]));
        let tidy = checked(given, &catalog()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tidy["steps"][1]["tool_name"], "read_file");
    }

    #[test]
    fn the_schema_refuses_what_no_repair_of_the_checks_would_catch() {
        let schema = answer_schema_for(catalog()).unwrap_or_else(|e| panic!("{e}"));
        let bad = [
            json!({"complexity": "huge", "estimated_iterations": 1,
                   "steps": [{"step_number": 1, "description": "x"}]}),
            json!({"complexity": "simple", "estimated_iterations": 0,
                   "steps": [{"step_number": 1, "description": "x"}]}),
            json!({"complexity": "simple", "estimated_iterations": 1, "steps": []}),
        ];
        for plan in bad {
            assert!(schema.read(&plan.to_string()).is_err(), "{plan}");
        }
    }

    #[test]
    fn an_adjustment_carries_the_earlier_plan_and_the_observation() {
        let ask = PlanAsk {
            previous: Some(json!({"complexity": "simple"})),
            latest_observation: Some("the file is empty".into()),
        };
        let text = framed_query("fix the bug", &ask);
        assert!(text.contains("{\"complexity\":\"simple\"}"));
        assert!(text.contains("the file is empty"));
        assert!(text.ends_with("Task: fix the bug"));
    }
}
