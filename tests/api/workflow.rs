//! The original service's example workflow: query → action → observation → final answer.

use serde_json::json;

use crate::support::app::spawn_app_answering_in_turn;
use crate::support::requests::request;
use crate::support::upstream::{openai_reply, OPENAI_PATH};

#[tokio::test]
async fn the_seed_four_step_workflow_runs_end_to_end() {
    let app = spawn_app_answering_in_turn(
        OPENAI_PATH,
        vec![
            openai_reply("Thought: I need to search for authentication code.\nAction: code_search(query=\"authentication\")"),
            openai_reply("Thought: Based on the search results, I can explain the authentication.\nFinal Answer: Authentication is implemented using auth.js..."),
        ],
    )
    .await;

    // Step 1: the user's query. Step 2: the agent proposes an action.
    let first = app
        .post_react_step(&request("gpt-4", "How is authentication implemented?"))
        .await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.body["status"], "action_proposed");
    assert_eq!(
        first.body["action_details"]["tool_args"],
        json!({"query": "authentication"})
    );
    assert_eq!(first.body["iterations_remaining"], 2);

    // Step 3: the client runs the tool and sends the observation with the history it got back.
    let mut history = first.body["updated_conversation_history"]
        .as_array()
        .unwrap()
        .clone();
    history.push(json!({
        "role": "tool_observation",
        "content": "Found: auth.js with login() function, middleware/auth.js",
        "toolResult": {"success": true, "result": "Search results..."}
    }));
    let mut second_request = request("gpt-4", "");
    second_request["conversation_history"] = json!(history);
    second_request["max_iterations_left"] = first.body["iterations_remaining"].clone();
    let second = app.post_react_step(&second_request).await;

    // Step 4: the agent gives the final answer.
    assert_eq!(second.status, 200, "{}", second.text);
    assert_eq!(second.body["status"], "direct_response_provided");
    assert_eq!(
        second.body["thought"],
        "Based on the search results, I can explain the authentication."
    );
    assert_eq!(
        second.body["direct_response"],
        "Authentication is implemented using auth.js..."
    );
    assert_eq!(second.body["iterations_remaining"], 1);
    let updated = second.body["updated_conversation_history"]
        .as_array()
        .unwrap();
    assert_eq!(updated.len(), 4, "no user turn is added for an empty query");
    assert_eq!(&updated[..3], &history[..]);
    assert_eq!(updated[3]["role"], "assistant");

    // The second prompt replayed the first step faithfully.
    let bodies = app.upstream_bodies().await;
    let messages = bodies[1]["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(messages[1]["content"], "How is authentication implemented?");
    assert_eq!(
        messages[2]["content"],
        "Thought: I need to search for authentication code.\nAction: code_search(query=\"authentication\")"
    );
    assert_eq!(
        messages[3]["content"],
        "Observation: Found: auth.js with login() function, middleware/auth.js\nSearch results..."
    );
}
