//! Plan and evaluate steps (issue 37): `POST /api/agent/plan` answers an `ExecutionPlan` held to
//! the request's tools, with one repair round; `POST /api/agent/evaluate` answers a
//! `QualityEvaluation` whose `needs_retry` the service decides. Both against the mock upstream,
//! streamed and not, each answer checked against openapi.yaml.

use serde_json::{json, Value};

use crate::support::app::{spawn_app, spawn_app_answering_in_turn, TestApp};
use crate::support::requests::request;
use crate::support::stream::post_stream_to;
use crate::support::upstream::{anthropic_tool_reply, openai_reply, ANTHROPIC_PATH, OPENAI_PATH};

const PLAN: &str = "/api/agent/plan";
const EVALUATE: &str = "/api/agent/evaluate";

fn tools() -> Value {
    json!([
        {"name": "read_file", "description": "Read a file.",
         "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                        "required": ["path"], "additionalProperties": false}},
        {"name": "run_tests", "description": "Run the tests.",
         "parameters": {"type": "object", "properties": {"filter": {"type": "string"}}}}
    ])
}

fn plan_request(model: &str) -> Value {
    let mut body = request(model, "Fix the failing login test");
    body.as_object_mut()
        .unwrap()
        .remove("available_tools_prompt_segment");
    body["tools"] = tools();
    body
}

fn plan_json(steps: Value) -> String {
    json!({"complexity": "medium", "steps": steps, "estimated_iterations": 3}).to_string()
}

fn good_plan() -> String {
    plan_json(json!([
        {"step_number": 1, "description": "Run the login test", "tool_name": "run_tests",
         "parameters": {"filter": "login"}, "required": true, "depends_on": null},
        {"step_number": 2, "description": "Read the test", "tool_name": "read_file",
         "parameters": {"path": "tests/login.rs"}, "depends_on": 1},
        {"step_number": 3, "description": "Explain the fix", "tool_name": null, "depends_on": [1, 2]}
    ]))
}

fn answering(plan: &str) -> Value {
    openai_reply(&format!("Thought: three steps.\nFinal Answer: {plan}"))
}

async fn post(app: &TestApp, path: &str, body: &Value) -> crate::support::app::Reply {
    app.send("POST", path, Some(body.to_string())).await
}

fn user_text(sent: &Value) -> String {
    sent["messages"].to_string()
}

#[tokio::test]
async fn a_plan_comes_back_checked_and_in_full_form() {
    let app = spawn_app_answering_in_turn(OPENAI_PATH, vec![answering(&good_plan())]).await;
    let reply = post(&app, PLAN, &plan_request("gpt-4o")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let plan = &reply.body["plan"];
    assert_eq!(plan["complexity"], "medium");
    assert_eq!(plan["steps"][1]["depends_on"], json!([1]));
    assert_eq!(plan["steps"][1]["required"], true);
    assert_eq!(plan["steps"][2]["tool_name"], Value::Null);
    assert_eq!(plan["estimated_iterations"], 3);
    // Told to plan, not to act, and not flagged as a forced guess.
    assert!(reply.body.get("forced_final").is_none(), "{}", reply.text);
    assert!(reply.body.get("evaluation").is_none());
    let sent = app.upstream_bodies().await;
    assert_eq!(sent.len(), 1);
    let prompt = user_text(&sent[0]);
    assert!(
        prompt.contains("Make a plan for the task below"),
        "{prompt}"
    );
    assert!(prompt.contains("Fix the failing login test"), "{prompt}");
    assert!(prompt.contains("estimated_iterations"), "{prompt}");
}

#[tokio::test]
async fn a_plan_naming_a_tool_that_does_not_exist_is_repaired_once() {
    let bad = plan_json(json!([
        {"step_number": 1, "description": "Delete it", "tool_name": "delete_repo"}
    ]));
    let app =
        spawn_app_answering_in_turn(OPENAI_PATH, vec![answering(&bad), answering(&good_plan())])
            .await;
    let reply = post(&app, PLAN, &plan_request("gpt-4o")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["plan"]["steps"].as_array().unwrap().len(), 3);
    let sent = app.upstream_bodies().await;
    assert_eq!(sent.len(), 2);
    let feedback = user_text(&sent[1]);
    assert!(
        feedback.contains("delete_repo") && feedback.contains("does not exist"),
        "{feedback}"
    );
}

#[tokio::test]
async fn a_plan_that_stays_wrong_is_a_502_saying_why() {
    let cases = [
        (
            plan_json(
                json!([{"step_number": 1, "description": "x", "tool_name": "read_file",
                              "parameters": {"path": 3}}]),
            ),
            "do not match the parameters of 'read_file'",
        ),
        (
            plan_json(json!([{"step_number": 1, "description": "x"},
                              {"step_number": 2, "description": "y", "depends_on": [3]}])),
            "only on an earlier step",
        ),
        (
            plan_json(json!([{"step_number": 1, "description": "x"},
                              {"step_number": 3, "description": "y"}])),
            "numbered 1, 2, 3",
        ),
        (
            json!({"complexity": "hard", "steps": [], "estimated_iterations": 0}).to_string(),
            "final_answer_schema",
        ),
    ];
    for (bad, said) in cases {
        let app =
            spawn_app_answering_in_turn(OPENAI_PATH, vec![answering(&bad), answering(&bad)]).await;
        let reply = post(&app, PLAN, &plan_request("gpt-4o")).await;
        assert_eq!(reply.status, 502, "{}", reply.text);
        assert_eq!(reply.body["error"]["type"], "invalid_model_output");
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(said), "{said}: {message}");
        assert!(reply.body.get("plan").is_none());
    }
}

#[tokio::test]
async fn a_model_that_acts_instead_of_planning_gives_no_plan() {
    let acting = openai_reply("Thought: let me look.\nAction: read_file(path=\"a.rs\")");
    let app = spawn_app_answering_in_turn(OPENAI_PATH, vec![acting.clone(), acting]).await;
    let reply = post(&app, PLAN, &plan_request("gpt-4o")).await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "invalid_model_output");
}

#[tokio::test]
async fn a_tool_called_instead_of_a_plan_gets_the_repair_round() {
    let acting = openai_reply("Thought: let me look.\nAction: read_file(path=\"a.rs\")");
    let app = spawn_app_answering_in_turn(OPENAI_PATH, vec![acting, answering(&good_plan())]).await;
    let reply = post(&app, PLAN, &plan_request("gpt-4o")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["plan"]["steps"].as_array().unwrap().len(), 3);
    let feedback = user_text(&app.upstream_bodies().await[1]);
    assert!(feedback.contains("this step calls no tool"), "{feedback}");
    // In native mode too: a real tool called beside the answer's tool.
    let call = anthropic_tool_reply("Thought: look.", "read_file", json!({"path": "a.rs"}));
    let plan: Value = serde_json::from_str(&good_plan()).unwrap();
    let answer = anthropic_tool_reply("Thought: planned.", "final_answer", plan);
    let app = spawn_app_answering_in_turn(ANTHROPIC_PATH, vec![call, answer]).await;
    let mut body = plan_request("claude-sonnet-4-5");
    body["llm_config"]["tool_mode"] = json!("native");
    let reply = post(&app, PLAN, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

#[tokio::test]
async fn numbers_written_as_whole_decimals_are_answered_as_integers() {
    let plan = json!({"complexity": "simple", "estimated_iterations": 2.0,
        "steps": [{"step_number": 1.0, "description": "x"}]});
    let app = spawn_app_answering_in_turn(OPENAI_PATH, vec![answering(&plan.to_string())]).await;
    let reply = post(&app, PLAN, &plan_request("gpt-4o")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(
        reply.body["plan"]["estimated_iterations"].is_u64(),
        "{}",
        reply.text
    );
    assert!(reply.body["plan"]["steps"][0]["step_number"].is_u64());
    let said = json!({"completeness_score": 9.0, "quality_score": 8, "needs_retry": true});
    let (body, _) = evaluate_request(9, true);
    let app = spawn_app_answering_in_turn(OPENAI_PATH, vec![evaluated(&said)]).await;
    let reply = post(&app, EVALUATE, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["evaluation"]["needs_retry"], false);
    assert!(reply.body["evaluation"]["completeness_score"].is_u64());
}

#[tokio::test]
async fn an_adjustment_sends_the_earlier_plan_and_the_observation() {
    let app = spawn_app_answering_in_turn(OPENAI_PATH, vec![answering(&good_plan())]).await;
    let mut body = plan_request("gpt-4o");
    body["previous_plan"] = json!({"complexity": "simple", "estimated_iterations": 1,
        "steps": [{"step_number": 1, "description": "Read the unique marker-7781", "tool_name": "read_file"}]});
    body["latest_observation"] = json!("error: tests/login.rs not found (marker-5512)");
    let reply = post(&app, PLAN, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    // The endpoint's own fields are not flagged as unknown.
    let warnings = reply.body["warnings"].to_string();
    assert!(!warnings.contains("previous_plan"), "{warnings}");
    let prompt = user_text(&app.upstream_bodies().await[0]);
    assert!(
        prompt.contains("marker-7781") && prompt.contains("marker-5512"),
        "{prompt}"
    );
    assert!(prompt.contains("This is an adjustment"), "{prompt}");
}

#[tokio::test]
async fn the_plan_endpoints_fields_are_unknown_to_the_step_endpoint() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "Where is login handled?");
    body["mock_response"] = json!("Thought: known.\nFinal Answer: in auth.js");
    body["previous_plan"] = json!({});
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.body["warnings"].to_string().contains("previous_plan"));
}

#[tokio::test]
async fn bad_plan_and_evaluate_fields_are_400s_naming_them() {
    let app = spawn_app().await;
    let mut body = plan_request("gpt-4o");
    body["previous_plan"] = json!("step 1: read");
    let reply = post(&app, PLAN, &body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(reply.body["error"]["fields"][0]["field"], "previous_plan");

    let mut body = plan_request("gpt-4o");
    body["react"] = json!({"final_answer_schema": {"type": "object"}});
    let reply = post(&app, PLAN, &body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(
        reply.body["error"]["fields"][0]["field"],
        "react.final_answer_schema"
    );

    let body = request("gpt-4o", "Fix it");
    let reply = post(&app, EVALUATE, &body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(
        reply.body["error"]["fields"][0]["field"],
        "candidate_answer"
    );

    let mut body = request("gpt-4o", "Fix it");
    body["candidate_answer"] = json!("   ");
    let reply = post(&app, EVALUATE, &body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(
        reply.body["error"]["fields"][0]["field"],
        "candidate_answer"
    );

    let mut body = request("gpt-4o", "Fix it");
    body["candidate_answer"] = json!(42);
    let reply = post(&app, EVALUATE, &body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "invalid_request");
}

#[tokio::test]
async fn a_streamed_plan_ends_with_the_plan() {
    let app = spawn_app().await;
    let output = format!("Thought: three steps.\nFinal Answer: {}", good_plan());
    let sse = crate::support::stream_upstream::openai_stream(&[output.as_str()], "stop");
    wiremock::Mock::given(wiremock::matchers::path(OPENAI_PATH))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream"))
        .mount(&app.llm)
        .await;
    let streamed = post_stream_to(&app, "/api/agent/plan/stream", &plan_request("gpt-4o")).await;
    assert!(streamed.joined("thought").contains("three steps"));
    let (name, event) = streamed.terminal();
    assert_eq!(name, "step", "{event}");
    assert_eq!(event["plan"]["steps"][0]["tool_name"], "run_tests");
    crate::support::spec::assert_conforms_to_schema("PlanSuccess", event);
}

#[tokio::test]
async fn in_native_mode_the_plan_comes_through_the_final_answer_tool() {
    let plan: Value = serde_json::from_str(&good_plan()).unwrap();
    let call = anthropic_tool_reply("Thought: planned.", "final_answer", plan);
    let app = spawn_app_answering_in_turn(ANTHROPIC_PATH, vec![call]).await;
    let mut body = plan_request("claude-sonnet-4-5");
    body["llm_config"]["tool_mode"] = json!("native");
    let reply = post(&app, PLAN, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.body["plan"]["steps"][0]["parameters"]["filter"],
        "login"
    );
}

#[tokio::test]
async fn a_native_plan_may_name_a_renamed_tool_as_the_model_saw_it() {
    // `tests.run` goes to the model as `tests_run`: a plan naming that was refused as naming
    // no tool, and the repair told the model a name it was never shown.
    let mut plan: Value = serde_json::from_str(&good_plan()).unwrap();
    plan["steps"][0]["tool_name"] = json!("tests_run");
    let call = anthropic_tool_reply("Thought: planned.", "final_answer", plan);
    let app = spawn_app_answering_in_turn(ANTHROPIC_PATH, vec![call]).await;
    let mut body = plan_request("claude-sonnet-4-5");
    body["tools"][1]["name"] = json!("tests.run");
    body["llm_config"]["tool_mode"] = json!("native");
    let reply = post(&app, PLAN, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["plan"]["steps"][0]["tool_name"], "tests.run");
}

#[tokio::test]
async fn a_plan_offline_with_mock_response_and_a_dry_run() {
    let app = spawn_app().await;
    let mut body = plan_request("gpt-4o");
    body["mock_response"] = json!(format!("Thought: ok.\nFinal Answer: {}", good_plan()));
    let reply = post(&app, PLAN, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["plan"]["complexity"], "medium");
    let mut body = plan_request("gpt-4o");
    body["dry_run"] = json!(true);
    let reply = post(&app, PLAN, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "dry_run");
    assert!(reply.body["prompt"].to_string().contains("Make a plan"));
}

fn evaluate_request(completeness: i64, retry: bool) -> (Value, Value) {
    let mut body = request("gpt-4o", "Fix the failing login test");
    body["candidate_answer"] =
        json!("The test fails because the fixture is missing (marker-3319).");
    let said = json!({"completeness_score": completeness, "quality_score": 6,
        "missing_info": ["the fix itself"], "suggestions": ["show the diff"], "needs_retry": retry});
    (body, said)
}

fn evaluated(said: &Value) -> Value {
    openai_reply(&format!("Thought: judged.\nFinal Answer: {said}"))
}

#[tokio::test]
async fn an_evaluation_comes_back_with_the_rules_applied() {
    // The model says no retry at completeness 5: the service says retry, and why.
    let (body, said) = evaluate_request(5, false);
    let app = spawn_app_answering_in_turn(OPENAI_PATH, vec![evaluated(&said)]).await;
    let reply = post(&app, EVALUATE, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let evaluation = &reply.body["evaluation"];
    assert_eq!(evaluation["completeness_score"], 5);
    assert_eq!(evaluation["needs_retry"], true);
    assert_eq!(evaluation["missing_info"], json!(["the fix itself"]));
    assert_eq!(reply.body["direct_response_json"]["needs_retry"], false);
    assert!(reply.body["warnings"]
        .to_string()
        .contains("needs_retry is true"));
    let prompt = user_text(&app.upstream_bodies().await[0]);
    assert!(prompt.contains("marker-3319") && prompt.contains("Candidate answer"));

    // At 9 a retry the model asks for is refused.
    let (body, said) = evaluate_request(9, true);
    let app = spawn_app_answering_in_turn(OPENAI_PATH, vec![evaluated(&said)]).await;
    let reply = post(&app, EVALUATE, &body).await;
    assert_eq!(reply.body["evaluation"]["needs_retry"], false);
}

#[tokio::test]
async fn scores_outside_zero_to_ten_are_refused_after_the_repair_round() {
    let (body, said) = evaluate_request(11, false);
    let app =
        spawn_app_answering_in_turn(OPENAI_PATH, vec![evaluated(&said), evaluated(&said)]).await;
    let reply = post(&app, EVALUATE, &body).await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "invalid_model_output");
    assert!(reply.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("completeness_score"));
    // Repaired: the second answer is in range.
    let (_, fixed) = evaluate_request(8, false);
    let app =
        spawn_app_answering_in_turn(OPENAI_PATH, vec![evaluated(&said), evaluated(&fixed)]).await;
    let reply = post(&app, EVALUATE, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["evaluation"]["completeness_score"], 8);
}

#[tokio::test]
async fn a_loop_past_its_plans_estimate_is_not_sent_round_again() {
    let (mut body, said) = evaluate_request(3, true);
    body["plan"] = json!({"complexity": "simple", "estimated_iterations": 1, "steps": []});
    let turn = |i: usize| {
        vec![
            json!({"role": "assistant", "content": format!("step {i}"),
                   "toolCall": {"name": "read_file", "parameters": {"path": "a"}, "id": format!("c{i}")}}),
            json!({"role": "tool_observation", "content": "ok", "tool_call_id": format!("c{i}")}),
        ]
    };
    // Three steps taken: at the limit (1 + 2), a retry stands.
    let history: Vec<Value> = std::iter::once(json!({"role": "user", "content": "Fix it"}))
        .chain((0..3).flat_map(turn))
        .collect();
    body["conversation_history"] = json!(history);
    let app = spawn_app_answering_in_turn(OPENAI_PATH, vec![evaluated(&said)]).await;
    let reply = post(&app, EVALUATE, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["evaluation"]["needs_retry"], true);
    // Four: past it, no retry, and the warning says why.
    let history: Vec<Value> = std::iter::once(json!({"role": "user", "content": "Fix it"}))
        .chain((0..4).flat_map(turn))
        .collect();
    body["conversation_history"] = json!(history);
    let app = spawn_app_answering_in_turn(OPENAI_PATH, vec![evaluated(&said)]).await;
    let reply = post(&app, EVALUATE, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["evaluation"]["needs_retry"], false);
    assert!(reply.body["warnings"].to_string().contains("4 steps"));
}

#[tokio::test]
async fn a_streamed_evaluation_ends_with_the_evaluation() {
    let app = spawn_app().await;
    let (body, said) = evaluate_request(9, false);
    let output = format!("Thought: good.\nFinal Answer: {said}");
    let sse = crate::support::stream_upstream::openai_stream(&[output.as_str()], "stop");
    wiremock::Mock::given(wiremock::matchers::path(OPENAI_PATH))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream"))
        .mount(&app.llm)
        .await;
    let streamed = post_stream_to(&app, "/api/agent/evaluate/stream", &body).await;
    let (name, event) = streamed.terminal();
    assert_eq!(name, "step", "{event}");
    assert_eq!(event["evaluation"]["quality_score"], 6);
    crate::support::spec::assert_conforms_to_schema("EvaluateSuccess", event);
}
