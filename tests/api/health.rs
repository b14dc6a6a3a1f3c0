use crate::support::app::spawn_app;

#[tokio::test]
async fn healthz_answers_ok() {
    let app = spawn_app().await;
    let reply = app.send("GET", "/healthz", None).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body["status"], "ok");
}

#[tokio::test]
async fn the_served_spec_is_the_file_in_the_repository() {
    let app = spawn_app().await;
    let reply = app.send("GET", "/openapi.yaml", None).await;
    assert_eq!(reply.status, 200);
    let file =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml")).unwrap();
    assert_eq!(reply.text, file);
    assert!(reply.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/yaml"));
}

#[tokio::test]
async fn an_unknown_path_is_a_json_404() {
    let app = spawn_app().await;
    let reply = app.send("GET", "/api/agent/nothing", None).await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.body["error"]["type"], "not_found");
    assert_eq!(reply.body["status"], "error");
}

#[tokio::test]
async fn a_wrong_method_is_a_json_405() {
    let app = spawn_app().await;
    for (method, path, allowed) in [
        ("GET", "/api/agent/react_step", "POST"),
        ("TRACE", "/api/agent/react_step/stream", "POST"),
        ("POST", "/healthz", "GET"),
        ("DELETE", "/openapi.yaml", "GET"),
    ] {
        let reply = app.send(method, path, None).await;
        assert_eq!(reply.status, 405, "{method} {path}");
        assert_eq!(reply.body["error"]["type"], "method_not_allowed");
        assert_eq!(reply.headers["allow"], allowed, "{method} {path}");
    }
}
