use serde_json::{json, Value};

use crate::support::app::{
    report_item, spawn_app, spawn_app_answering, spawn_app_answering_in_turn,
};
use crate::support::requests::request;
use crate::support::upstream::{openai_reply, OPENAI_PATH};

#[tokio::test]
async fn inline_context_reaches_the_prompt_fenced_and_in_priority_order() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_reply("Thought: t\nFinal Answer: a"),
    )
    .await;
    let mut body = request("gpt-4o", "Explain login.");
    body["explicit_context_paths"] = json!(["src/auth.js", "src/missing.js"]);
    body["explicit_context"] =
        json!([{"path": "src/auth.js", "content": "export function login() {}"}]);
    body["pinned_item_ids_to_include"] = json!(["pin-1"]);
    body["pinned_items"] =
        json!([{"id": "pin-1", "content": "TODO: rate-limit login", "path": "NOTES.md"}]);
    body["implicit_context"] = json!({"last_focused_file_path": "src/Login.tsx", "last_focused_file_content": "<Login />"});
    body["vector_search_results_to_include"] = json!([
        {"path": "src/low.js", "content": "low()", "score": 0.1},
        {"path": "src/high.js", "content": "high()\nhigh2()", "score": 0.9, "start_line": 3, "end_line": 4}
    ]);

    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    let sent = app.upstream_bodies().await[0]["messages"].clone();
    let first = sent[0]["content"].as_str().unwrap().to_string();
    let last = sent.as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    // What persists across a loop's steps opens the prompt; what changes each step ends it.
    assert!(first.contains("TODO: rate-limit") && !first.contains("<Login />"));
    assert!(
        last.contains("<Login />") && last.ends_with("Explain login."),
        "{last}"
    );
    let system = format!("{first}{last}");
    let order: Vec<usize> = [
        "export function login",
        "TODO: rate-limit",
        "<Login />",
        "high()",
        "low()",
    ]
    .iter()
    .map(|needle| {
        system
            .find(needle)
            .unwrap_or_else(|| panic!("{needle} missing from the prompt"))
    })
    .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "priority order broken: {order:?}"
    );
    assert!(system.contains("### explicit context: src/auth.js\n```javascript\n"));
    assert!(system.contains("### search result: src/high.js, lines 3-4"));

    let items = reply.body["context_report"]["items"].as_array().unwrap();
    let missing = items.iter().find(|i| i["id"] == "src/missing.js").unwrap();
    assert_eq!(missing["fate"], "unresolved");
    assert_eq!(missing["tokens"], json!(null));
    assert!(reply.body["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains("could not be resolved")));
}

#[tokio::test]
async fn a_tight_budget_keeps_the_newest_turns_first_and_says_so() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_reply("Thought: t\nFinal Answer: a"),
    )
    .await;
    let long = "lorem ipsum dolor sit amet ".repeat(150);
    let mut body = request("gpt-4o", "Now what?");
    body["conversation_history"] = json!([
        {"role": "user", "content": format!("OLDEST {long}")},
        {"role": "assistant", "content": format!("MIDDLE {long}")},
        {"role": "user", "content": "NEWEST short turn"}
    ]);
    body["explicit_context"] = json!([{"path": "a.rs", "content": "fn keep_me() {}"}]);
    body["llm_config"]["tokenLimit"] = json!(1300);
    body["llm_config"]["reservedOutputTokens"] = json!(300);

    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    let report = &reply.body["context_report"];
    assert_eq!(report["budget"], 1000);
    assert!(report["used"].as_u64().unwrap() <= 1000);
    let fate = |id: &str| report_item(&reply.body, id)["fate"].clone();
    // History is served newest first and before context: the newest turns fit, the oldest and
    // then the explicit file do not.
    assert_eq!(fate("conversation_history[0]"), "dropped");
    assert_eq!(fate("conversation_history[1]"), "included");
    assert_eq!(fate("conversation_history[2]"), "included");
    assert_eq!(fate("a.rs"), "dropped");
    let sent = serde_json::to_string(&app.upstream_bodies().await[0]).unwrap();
    assert!(!sent.contains("OLDEST") && sent.contains("MIDDLE") && sent.contains("NEWEST"));
    assert!(sent.contains("[1 earlier turns omitted]"));
    assert!(reply.body["warnings"][0]
        .as_str()
        .unwrap()
        .contains("did not fit"));
    // The client's history is returned whole, whatever the prompt had to leave out.
    assert_eq!(
        reply.body["updated_conversation_history"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
}

#[tokio::test]
async fn a_prompt_whose_mandatory_part_cannot_fit_is_a_422_without_an_upstream_call() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", &"explain this ".repeat(400));
    body["llm_config"]["tokenLimit"] = json!(600);
    body["llm_config"]["reservedOutputTokens"] = json!(100);

    let reply = app.post_react_step(&body).await;

    assert_eq!(reply.status, 422);
    assert_eq!(reply.body["error"]["type"], "context_overflow");
    assert!(reply.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("500"));
    assert!(app.llm.received_requests().await.unwrap().is_empty());
}

fn numbered(n: usize) -> String {
    (1..=n)
        .map(|i| format!("export const value{i} = compute({i});\n"))
        .collect()
}

#[tokio::test]
async fn dry_run_returns_the_exact_prompt_with_counts_and_calls_nothing() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "Explain login.");
    body["explicit_context"] =
        json!([{"path": "src/auth.js", "content": "export function login() {}"}]);
    body["conversation_history"] =
        json!([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]);
    body["dry_run"] = json!(true);

    let reply = app.post_react_step(&body).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "dry_run");
    assert_eq!(
        reply.body["iterations_remaining"], 3,
        "a dry run uses no iteration"
    );
    assert_eq!(
        reply.body["updated_conversation_history"],
        body["conversation_history"]
    );
    let prompt = &reply.body["prompt"];
    let messages = prompt["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert!(messages[0]["content"]
        .as_str()
        .unwrap()
        .contains("export function login() {}"));
    assert_eq!(messages[3]["content"], "Explain login.");
    // Message counts (with framing) plus the system prompt's framing and role (4, as OpenAI
    // counts a message besides its content) and the reply priming (3).
    let sum: u64 = messages
        .iter()
        .map(|m| m["tokens"].as_u64().unwrap())
        .sum::<u64>()
        + 4
        + 3;
    assert_eq!(prompt["tokens"].as_u64().unwrap(), sum);
    assert_eq!(prompt["tokens"], reply.body["context_report"]["used"]);
    assert!(app.llm.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_file_too_big_for_the_budget_is_cut_head_and_tail() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "What does this module export?");
    body["explicit_context"] = json!([{"path": "src/big.js", "content": numbered(3000)}]);
    body["llm_config"]["tokenLimit"] = json!(4000);
    body["llm_config"]["reservedOutputTokens"] = json!(500);
    body["dry_run"] = json!(true);

    let reply = app.post_react_step(&body).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    let item = report_item(&reply.body, "src/big.js");
    assert_eq!(item["fate"], "truncated");
    let system = reply.body["prompt"]["messages"][0]["content"]
        .as_str()
        .unwrap();
    assert!(system.contains("export const value1 = compute(1);\n"));
    assert!(system.contains("export const value3000 = compute(3000);\n"));
    assert!(system.contains("left out here to fit the budget"));
    assert!(reply.body["context_report"]["used"].as_u64().unwrap() <= 3500);
}

#[tokio::test]
async fn the_focused_file_is_cut_around_the_cursor() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "What is on my cursor line?");
    body["implicit_context"] = json!({"last_focused_file_path": "src/app.ts", "last_focused_file_content": numbered(5000), "cursor_line": 2500});
    body["llm_config"]["tokenLimit"] = json!(3000);
    body["llm_config"]["reservedOutputTokens"] = json!(500);
    body["dry_run"] = json!(true);

    let reply = app.post_react_step(&body).await;

    assert_eq!(report_item(&reply.body, "src/app.ts")["fate"], "truncated");
    let messages = reply.body["prompt"]["messages"].as_array().unwrap();
    let system = messages.last().unwrap()["content"].as_str().unwrap();
    assert!(system.contains("export const value2500 = compute(2500);"));
    assert!(!system.contains("export const value1 = compute(1);"));
}

#[tokio::test]
async fn the_latest_observation_is_cut_to_max_observation_tokens() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "");
    body["conversation_history"] = json!([
        {"role": "user", "content": "list the values"},
        {"role": "assistant", "content": "I will read it.", "toolCall": {"name": "read_file", "parameters": {"path": "big.js"}}},
        {"role": "tool_observation", "content": numbered(2000)}
    ]);
    body["max_observation_tokens"] = json!(200);
    body["dry_run"] = json!(true);

    let reply = app.post_react_step(&body).await;

    assert_eq!(
        report_item(&reply.body, "conversation_history[2]")["fate"],
        "truncated"
    );
    let last = reply.body["prompt"]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        last["tokens"].as_u64().unwrap() <= 203,
        "{}",
        last["tokens"]
    );
    assert!(last["content"]
        .as_str()
        .unwrap()
        .starts_with("Observation: export const value1 "));
}

#[tokio::test]
async fn a_file_sent_twice_is_sent_once() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "q");
    body["explicit_context"] = json!([{"path": "src/auth.js", "content": "UNIQUE_MARKER_LINE\n"}]);
    body["vector_search_results_to_include"] = json!([
        {"path": "src/auth.js", "content": "UNIQUE_MARKER_LINE\n", "score": 0.9, "start_line": 1, "end_line": 1}
    ]);
    body["dry_run"] = json!(true);

    let reply = app.post_react_step(&body).await;

    let system = reply.body["prompt"]["messages"][0]["content"]
        .as_str()
        .unwrap();
    assert_eq!(system.matches("UNIQUE_MARKER_LINE").count(), 1);
    let items = reply.body["context_report"]["items"].as_array().unwrap();
    let hit = items
        .iter()
        .find(|i| i["source"] == "vector_search")
        .unwrap();
    assert_eq!(hit["fate"], "dropped");
    assert!(hit["reason"].as_str().unwrap().contains("duplicate"));
    // A duplicate is not an item the budget left out.
    let warnings = reply.body["warnings"].to_string();
    assert!(!warnings.contains("did not fit"), "{warnings}");
}

/// Search hits as clients send them, at their most awkward: each line is sent once, under a
/// heading that names the lines the text holds.
#[tokio::test]
async fn search_hits_send_each_line_once_under_a_heading_that_names_what_they_hold() {
    let app = spawn_app().await;
    let lines = |path: &str, from: u32, to: u32| -> String {
        (from..=to).map(|n| format!("{path}:L{n}_\n")).collect()
    };
    let hit = |path: &str, score: f64, (from, to): (u32, u32), range: Value| {
        let mut hit = json!({"path": path, "content": lines(path, from, to), "score": score});
        hit.as_object_mut()
            .unwrap()
            .extend(range.as_object().unwrap().clone());
        hit
    };
    let mut body = request("gpt-4o", "q");
    body["vector_search_results_to_include"] = json!([
        // a.rs: two hits, and a lower-scored one bridging them.
        hit("a.rs", 0.9, (1, 5), json!({"start_line": 1, "end_line": 5})),
        hit(
            "a.rs",
            0.8,
            (10, 14),
            json!({"start_line": 10, "end_line": 14})
        ),
        hit(
            "a.rs",
            0.1,
            (4, 11),
            json!({"start_line": 4, "end_line": 11})
        ),
        // b.rs: a hit whose text is shorter than its range, then one past the text's end.
        hit(
            "b.rs",
            0.9,
            (1, 3),
            json!({"start_line": 1, "end_line": 10})
        ),
        hit("b.rs", 0.8, (6, 8), json!({"start_line": 6, "end_line": 8})),
        // c.rs: a hit with only a start is not the whole file.
        hit("c.rs", 0.9, (50, 52), json!({"start_line": 50})),
        hit(
            "c.rs",
            0.8,
            (80, 81),
            json!({"start_line": 80, "end_line": 81})
        ),
        // d.rs: a ranged hit, then a lower-scored one of the whole file.
        hit("d.rs", 0.9, (7, 8), json!({"start_line": 7, "end_line": 8})),
        json!({"path": "d.rs", "content": "WHOLE_D\n", "score": 0.2})
    ]);
    body["dry_run"] = json!(true);

    let reply = app.post_react_step(&body).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    let prompt = reply.body["prompt"]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string()
        + reply.body["prompt"]["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()["content"]
            .as_str()
            .unwrap();
    let sent = [
        ("a.rs", 1..=14),
        ("b.rs", 1..=3),
        ("b.rs", 6..=8),
        ("c.rs", 50..=52),
        ("c.rs", 80..=81),
    ];
    for (path, range) in sent {
        for n in range {
            let line = format!("{path}:L{n}_");
            assert_eq!(prompt.matches(&line).count(), 1, "{line} in {prompt}");
        }
    }
    assert!(!prompt.contains("b.rs:L4_") && !prompt.contains("d.rs:L7_"));
    for heading in [
        "### search result: a.rs, lines 1-14\n",
        "### search result: b.rs, lines 1-3\n",
        "### search result: b.rs, lines 6-8\n",
        "### search result: c.rs, lines 50-52\n",
        "### search result: c.rs, lines 80-81\n",
        "### search result: d.rs\n```rust\nWHOLE_D\n",
    ] {
        assert!(prompt.contains(heading), "{heading} in {prompt}");
    }
    let items = reply.body["context_report"]["items"].as_array().unwrap();
    let dropped = items.iter().filter(|i| i["fate"] == "dropped").count();
    assert_eq!(
        dropped, 3,
        "the bridge, a.rs's second hit, d.rs's ranged hit: {items:?}"
    );
}

/// An empty hit holds no line: it joins no others and claims no line in a heading (it bridged
/// lines 4 and 6 under "lines 4-6", line 6 shown as line 5). A hit whose lines, counted from its
/// start, run past the last line number is refused (its heading claimed fewer lines than it showed).
#[tokio::test]
async fn an_empty_hit_holds_no_line_and_one_past_the_last_line_number_is_refused() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "q");
    body["vector_search_results_to_include"] = json!([
        {"path": "a.py", "content": "four\n", "score": 0.9, "start_line": 4},
        {"path": "a.py", "content": "", "score": 0.8, "start_line": 5},
        {"path": "a.py", "content": "six\n", "score": 0.7, "start_line": 6},
        {"content": "", "score": 0.1},
        {"path": "b.py", "content": "ten\n\n\n", "score": 0.05, "start_line": 10}
    ]);
    body["dry_run"] = json!(true);

    let reply = app.post_react_step(&body).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    let prompt = reply.body["prompt"]["messages"].to_string();
    assert!(
        prompt.contains("a.py, lines 4-4") && prompt.contains("a.py, lines 6-6"),
        "{prompt}"
    );
    assert!(!prompt.contains("lines 4-6") && !prompt.contains("lines 5-5"));
    // Blank lines at a block's end are not shown, nor claimed.
    assert!(prompt.contains("b.py, lines 10-10"), "{prompt}");
    let items = reply.body["context_report"]["items"].as_array().unwrap();
    let empty: Vec<&Value> = items
        .iter()
        .filter(|i| i["reason"].as_str().is_some_and(|r| r.contains("empty")))
        .map(|i| &i["id"])
        .collect();
    assert_eq!(
        empty,
        [&json!("a.py"), &json!("search result 4")],
        "{items:?}"
    );

    body["vector_search_results_to_include"] =
        json!([{"path": "a.py", "content": "a\nb\nc\n", "start_line": 4_294_967_294u32}]);
    let refused = app.post_react_step(&body).await;
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert!(
        refused.text.contains("run past line 4294967295"),
        "{}",
        refused.text
    );
    // Counted back from end_line, five lines would begin before line 1.
    body["vector_search_results_to_include"] =
        json!([{"path": "a.py", "content": "A\nB\nC\nD\nE", "end_line": 2}]);
    let refused = app.post_react_step(&body).await;
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert!(
        refused.text.contains("end_line leaves room"),
        "{}",
        refused.text
    );
}

/// Two explicit files, and two pinned items, of one path or id: the first of each is sent, and the
/// second is reported dropped as a duplicate (it was neither sent nor reported).
#[tokio::test]
async fn an_item_sent_twice_under_one_id_is_reported_as_a_duplicate() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "q");
    body["explicit_context"] = json!([
        {"path": "src/auth.rs", "content": "FIRST_VERSION\n"},
        {"path": "src/auth.rs", "content": "SECOND_VERSION\n"}
    ]);
    body["pinned_items"] = json!([
        {"id": "note", "content": "FIRST NOTE"},
        {"id": "note", "content": "SECOND NOTE"}
    ]);
    body["pinned_item_ids_to_include"] = json!(["note"]);
    body["dry_run"] = json!(true);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let prompt = reply.body["prompt"].to_string();
    assert!(
        prompt.contains("FIRST_VERSION") && prompt.contains("FIRST NOTE"),
        "{prompt}"
    );
    assert!(!prompt.contains("SECOND_VERSION") && !prompt.contains("SECOND NOTE"));
    let items = reply.body["context_report"]["items"].as_array().unwrap();
    for (source, id) in [("explicit", "src/auth.rs"), ("pinned", "note")] {
        let fates: Vec<&Value> = items
            .iter()
            .filter(|i| i["source"] == source && i["id"] == id)
            .map(|i| &i["fate"])
            .collect();
        assert_eq!(fates, [&json!("included"), &json!("dropped")], "{items:?}");
    }
    let warnings = reply.body["warnings"].to_string();
    assert!(!warnings.contains("did not fit"), "{warnings}");
}

#[tokio::test]
async fn context_priority_and_tokenizer_are_honoured() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "q");
    let long = "lorem ipsum dolor sit amet ".repeat(150);
    body["conversation_history"] =
        json!([{"role": "user", "content": long}, {"role": "assistant", "content": "ok"}]);
    body["vector_search_results_to_include"] =
        json!([{"path": "hit.js", "content": numbered(40), "score": 0.5}]);
    body["context_priority"] = json!(["vector_search"]);
    body["llm_config"]["tokenLimit"] = json!(1400);
    body["llm_config"]["reservedOutputTokens"] = json!(300);
    body["llm_config"]["tokenizer"] = json!("cl100k_base");
    body["dry_run"] = json!(true);

    let reply = app.post_react_step(&body).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["context_report"]["tokenizer"], "cl100k_base");
    assert_eq!(report_item(&reply.body, "hit.js")["fate"], "included");
    assert_eq!(
        report_item(&reply.body, "conversation_history[0]")["fate"],
        "dropped"
    );
    assert_eq!(
        report_item(&reply.body, "conversation_history[1]")["fate"],
        "included"
    );
}

/// A step with `history_strategy: summarize` whose two oldest turns do not fit its window.
fn summarizing_request() -> Value {
    let long = "lorem ipsum dolor sit amet ".repeat(150);
    let mut body = request("gpt-4o", "And the middleware?");
    body["conversation_history"] = json!([
        {"role": "user", "content": format!("OLDEST {long}")},
        {"role": "assistant", "content": format!("MIDDLE {long}")},
        {"role": "user", "content": "NEWEST"}
    ]);
    body["history_strategy"] = json!("summarize");
    body["llm_config"]["tokenLimit"] = json!(1200);
    body["llm_config"]["reservedOutputTokens"] = json!(300);
    body
}

#[tokio::test]
async fn a_summary_the_model_writes_too_long_or_empty_is_returned_as_one_the_service_takes_back() {
    let too_long = "word ".repeat(25_000);
    let app = spawn_app_answering_in_turn(
        OPENAI_PATH,
        vec![
            openai_reply(&too_long),
            openai_reply("Thought: t\nFinal Answer: first"),
            openai_reply("Thought: t\nFinal Answer: second"),
            openai_reply("   "),
            openai_reply("Thought: t\nFinal Answer: third"),
            openai_reply("Thought: t\nFinal Answer: fourth"),
        ],
    )
    .await;
    let mut body = summarizing_request();

    let first = app.post_react_step(&body).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let summary = first.body["conversation_summary"].clone();
    let chars = summary["text"].as_str().unwrap().chars().count();
    assert_eq!(chars, 100_000, "cut to what a request may send back");
    body["conversation_summary"] = summary;
    let second = app.post_react_step(&body).await;
    assert_eq!(
        second.status, 200,
        "sent back, it is taken: {}",
        second.text
    );
    assert_eq!(second.body["direct_response"], "second");

    // A model that writes no summary: the marker stands in, and it too is taken back.
    body["conversation_summary"] = Value::Null;
    let third = app.post_react_step(&body).await;
    assert_eq!(third.status, 200, "{}", third.text);
    let summary = third.body["conversation_summary"].clone();
    assert_eq!(summary["text"], "[2 earlier turns omitted]");
    body["conversation_summary"] = summary;
    let fourth = app.post_react_step(&body).await;
    assert_eq!(fourth.status, 200, "{}", fourth.text);
    assert_eq!(fourth.body["direct_response"], "fourth");
}

#[tokio::test]
async fn summarize_makes_one_summary_call_and_the_client_summary_is_reused() {
    let app = spawn_app_answering_in_turn(
        OPENAI_PATH,
        vec![
            openai_reply("The user wants auth explained; code_search found login() in auth.js."),
            openai_reply("Thought: t\nFinal Answer: first"),
            openai_reply("Thought: t\nFinal Answer: second"),
        ],
    )
    .await;
    let mut body = summarizing_request();

    let first = app.post_react_step(&body).await;

    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.body["direct_response"], "first");
    let summary = first.body["conversation_summary"].clone();
    assert_eq!(summary["turns"], 2);
    assert!(summary["text"]
        .as_str()
        .unwrap()
        .contains("login() in auth.js"));
    assert_eq!(
        first.body["usage"]["prompt_tokens"], 824,
        "both calls' usage is reported"
    );
    let bodies = app.upstream_bodies().await;
    assert_eq!(bodies.len(), 2);
    assert!(bodies[0]["messages"][1]["content"]
        .as_str()
        .unwrap()
        .contains("OLDEST"));
    let step_system = bodies[1]["messages"][0]["content"].as_str().unwrap();
    assert!(step_system.contains("## Earlier conversation\n\nThe user wants auth explained"));
    assert!(!serde_json::to_string(&bodies[1])
        .unwrap()
        .contains("OLDEST"));

    body["conversation_summary"] = summary;
    let second = app.post_react_step(&body).await;
    assert_eq!(second.body["direct_response"], "second");
    assert_eq!(
        app.upstream_bodies().await.len(),
        3,
        "the client's summary covered the omitted turns"
    );
}
