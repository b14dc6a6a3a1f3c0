//! Tool schemas are untrusted input. Each attack that once aborted the process, grew it to
//! gigabytes or held a worker for seconds is sent here as one request to the real server: it
//! must be a 400 `invalid_request` naming the tool and the bound, and the server must go on
//! serving. Large realistic MCP schemas still pass.

use serde_json::{json, Map, Value};

use crate::support::app::{spawn_app, Reply, TestApp};
use crate::support::requests::request;
use crate::support::schema_bombs::{fan_out, ref_chain, ref_cycle};

/// A request with these tools whose `mock_response` calls `tool` with `args`.
fn calling(tools: Value, tool: &str, args: &str) -> Value {
    let mut body = request("gpt-4o", "go");
    body["available_tools_prompt_segment"] = Value::Null;
    body["tools"] = tools;
    body["mock_response"] = json!(format!("Thought: I call it.\nAction: {tool}({args})"));
    body
}

/// The documented 400: `invalid_request`, the field `tools[i].parameters`, and a message that
/// names the tool by index and name and names the bound. The server still answers after it.
async fn assert_refused(app: &TestApp, reply: &Reply, index: usize, name: &str, bound: &str) {
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "invalid_request");
    let at = format!("tools[{index}].parameters");
    let fields = reply.body["error"]["fields"].as_array().unwrap();
    let field = fields.iter().find(|f| f["field"] == at.as_str());
    let message = field
        .and_then(|f| f["message"].as_str())
        .unwrap_or_default();
    assert!(
        message.starts_with(&format!("tools[{index}] '{name}': ")),
        "{message}"
    );
    assert!(message.contains(bound), "{message}");
    assert!(
        message.len() < 400,
        "the message quotes no attacker text at length"
    );
    assert_eq!(app.send("GET", "/healthz", None).await.status, 200);
}

fn tool(name: &str, parameters: Value) -> Value {
    json!({"name": name, "description": "a tool", "parameters": parameters})
}

#[tokio::test]
async fn a_chain_of_500_refs_is_refused_not_a_stack_overflow() {
    let app = spawn_app().await;
    let body = calling(json!([tool("deep", ref_chain(500))]), "deep", "v=\"x\"");
    assert!(body["tools"].to_string().len() < 20_000);
    let reply = app.post_react_step(&body).await;
    assert_refused(&app, &reply, 0, "deep", "nests deeper than 32 levels").await;
}

#[tokio::test]
async fn ref_cycles_are_refused_before_any_argument_is_validated() {
    let app = spawn_app().await;
    // The 385-byte request's shape: a → b → a, and an action that calls the tool.
    let small = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"});
    let body = calling(json!([tool("loop", small)]), "loop", "v=1");
    let reply = app.post_react_step(&body).await;
    assert_refused(&app, &reply, 0, "loop", "makes a cycle").await;
    // A 100-node cycle passes the depth bound before it closes.
    let body = calling(json!([tool("loop", ref_cycle(100))]), "loop", "v=1");
    let reply = app.post_react_step(&body).await;
    assert_refused(&app, &reply, 0, "loop", "nests deeper than 32 levels").await;
}

#[tokio::test]
async fn an_any_of_fan_out_through_refs_is_refused() {
    let app = spawn_app().await;
    // 2^20 in under 1.7 KB, twenty levels deep.
    let deep = fan_out(2, 20);
    assert!(deep.to_string().len() < 1_700);
    let body = calling(json!([tool("fan", deep)]), "fan", "v=\"x\"");
    let reply = app.post_react_step(&body).await;
    assert_refused(&app, &reply, 0, "fan", "nests deeper than 32 levels").await;
    // 16^5 = 2^20 again, five levels deep: its expansion is what is bounded.
    let body = calling(json!([tool("fan", fan_out(16, 5))]), "fan", "v=\"x\"");
    let reply = app.post_react_step(&body).await;
    assert_refused(&app, &reply, 0, "fan", "follows more than 1000 $refs").await;
}

#[tokio::test]
async fn thousands_of_patterns_are_refused_per_tool_and_per_request() {
    let app = spawn_app().await;
    let patterns = |n: usize| {
        let properties: Map<String, Value> = (0..n)
            .map(|i| {
                (
                    format!("p{i}"),
                    json!({"type": "string", "pattern": "^(a|b)*c$"}),
                )
            })
            .collect();
        json!({"type": "object", "properties": properties})
    };
    // 128 tools × 500 patterns, 4 MB: the first tool is over its own bound.
    let tools: Vec<Value> = (0..128)
        .map(|i| tool(&format!("t{i}"), patterns(500)))
        .collect();
    let body = calling(json!(tools), "t0", "p0=\"c\"");
    assert!(body.to_string().len() > 3_000_000);
    let reply = app.post_react_step(&body).await;
    assert_refused(&app, &reply, 0, "t0", "more than 64 patterns").await;
    // 128 tools × 60 patterns: each passes, the request as a whole does not.
    let tools: Vec<Value> = (0..128)
        .map(|i| tool(&format!("t{i}"), patterns(60)))
        .collect();
    let body = calling(json!(tools), "t0", "p0=\"c\"");
    let reply = app.post_react_step(&body).await;
    assert_refused(
        &app,
        &reply,
        4,
        "t4",
        "together have more than 256 patterns",
    )
    .await;
}

#[tokio::test]
async fn backtracking_patterns_are_refused_not_run() {
    let app = spawn_app().await;
    let long = "a".repeat(100_000);
    for (pattern, problem) in [
        ("(?=(a+)+b)", "uses look-around"),
        ("^(a*)\\1$", "uses a back-reference"),
    ] {
        let schema =
            json!({"type": "object", "properties": {"q": {"type": "string", "pattern": pattern}}});
        let body = calling(
            json!([tool("search", schema)]),
            "search",
            &format!("q=\"{long}\""),
        );
        let reply = app.post_react_step(&body).await;
        assert_refused(&app, &reply, 0, "search", problem).await;
    }
}

#[tokio::test]
async fn mcp_input_schemas_and_native_tools_get_the_same_check() {
    let app = spawn_app().await;
    let cycle = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"});
    let mcp = json!([
        {"name": "ok", "inputSchema": {"type": "object"}},
        {"name": "mcp_loop", "inputSchema": cycle},
    ]);
    let reply = app.post_react_step(&calling(mcp, "ok", "")).await;
    assert_refused(&app, &reply, 1, "mcp_loop", "makes a cycle").await;

    // In native mode the schema would go upstream: it is refused first, and nothing is sent.
    let mut body = request("gpt-4o", "go");
    body["available_tools_prompt_segment"] = Value::Null;
    body["llm_config"]["tool_mode"] = json!("native");
    body["tools"] = json!([tool(
        "remote",
        json!({"$ref": "https://example.com/schema.json"})
    )]);
    let reply = app.post_react_step(&body).await;
    assert_refused(
        &app,
        &reply,
        0,
        "remote",
        "does not point into the schema itself",
    )
    .await;
    assert!(app.upstream_bodies().await.is_empty());
}

/// MCP-style tool schemas of the size and shape real servers publish.
fn realistic_tools() -> Value {
    json!([
        {"name": "create_pull_request", "description": "Open a pull request.", "inputSchema": {
            "type": "object",
            "$defs": {
                "user": {"type": "object", "properties": {
                    "login": {"type": "string", "pattern": "^[A-Za-z0-9-]{1,39}$"},
                    "id": {"type": "integer", "minimum": 1}}, "required": ["login"]},
                "label": {"type": "object", "properties": {
                    "name": {"type": "string", "maxLength": 50},
                    "color": {"type": "string", "pattern": "^[0-9a-fA-F]{6}$"}}}
            },
            "properties": {
                "owner": {"type": "string", "description": "Repository owner"},
                "repo": {"type": "string", "description": "Repository name"},
                "title": {"type": "string", "minLength": 1},
                "body": {"type": ["string", "null"]},
                "head": {"type": "string"}, "base": {"type": "string"},
                "draft": {"type": "boolean", "default": false},
                "state": {"type": "string", "enum": ["open", "closed"]},
                "reviewers": {"type": "array", "items": {"$ref": "#/$defs/user"}, "maxItems": 15},
                "assignees": {"type": "array", "items": {"$ref": "#/$defs/user"}},
                "labels": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/label"}]}},
                "milestone": {"oneOf": [{"type": "integer"}, {"type": "null"}]},
                "created_after": {"type": "string", "format": "date-time"}
            },
            "required": ["owner", "repo", "title", "head", "base"],
            "additionalProperties": false}},
        {"name": "edit_file", "description": "Edit a file by replacing text.", "inputSchema": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "edits": {"type": "array", "items": {"type": "object", "properties": {
                    "oldText": {"type": "string"}, "newText": {"type": "string"}},
                    "required": ["oldText", "newText"], "additionalProperties": false}},
                "dryRun": {"type": "boolean", "default": false}},
            "required": ["path", "edits"], "additionalProperties": false,
            "$schema": "http://json-schema.org/draft-07/schema#"}},
        {"name": "search_issues", "description": "Search issues (pydantic-generated).", "parameters": {
            "type": "object", "title": "SearchIssuesArgs",
            "definitions": {
                "Sort": {"title": "Sort", "enum": ["created", "updated", "comments"], "type": "string"},
                "Range": {"title": "Range", "type": "object", "properties": {
                    "from": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
                    "to": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]}}},
                "Filter": {"title": "Filter", "type": "object", "properties": {
                    "labels": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                    "author": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null},
                    "created": {"$ref": "#/definitions/Range"},
                    "updated": {"$ref": "#/definitions/Range"}},
                    "propertyNames": {"pattern": "^[a-z_]+$"}}
            },
            "properties": {
                "q": {"type": "string", "minLength": 1, "maxLength": 256},
                "sort": {"$ref": "#/definitions/Sort"},
                "order": {"type": "string", "enum": ["asc", "desc"], "default": "desc"},
                "filter": {"$ref": "#/definitions/Filter"},
                "per_page": {"type": "integer", "minimum": 1, "maximum": 100},
                "page": {"type": "integer", "minimum": 1}},
            "required": ["q"]}}
    ])
}

#[tokio::test]
async fn large_realistic_mcp_schemas_still_pass() {
    let app = spawn_app().await;
    let args = r#"{"q": "is:open", "sort": "updated", "filter": {"labels": ["bug"], "created": {"from": "2024-01-01", "to": null}}}"#;
    let mut body = calling(realistic_tools(), "search_issues", "");
    body["mock_response"] = json!(format!(
        "Thought: Search first.\nAction: search_issues\nAction Input: {args}"
    ));
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["action_details"]["tool_name"], "search_issues");
    assert_eq!(
        reply.body["action_details"]["tool_args"]["filter"]["labels"],
        json!(["bug"])
    );

    // Thirty copies of them (90 tools) in one request stay within the request-wide totals.
    let tools: Vec<Value> = (0..30)
        .flat_map(|i| {
            realistic_tools()
                .as_array()
                .into_iter()
                .flatten()
                .map(move |t| {
                    let mut t = t.clone();
                    t["name"] = json!(format!("{}_{i}", t["name"].as_str().unwrap_or("t")));
                    t
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let mut body = calling(
        json!(tools),
        "edit_file_0",
        r#"path="a.rs", edits=[{"oldText": "a", "newText": "b"}]"#,
    );
    body["llm_config"]["tokenLimit"] = json!(128_000);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "action_proposed");
}
