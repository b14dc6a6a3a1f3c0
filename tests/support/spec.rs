//! Every response body checked against the schema `openapi.yaml` documents for its path, method
//! and status, so that the spec cannot drift from the code.

use std::sync::OnceLock;

use serde_json::Value;

fn spec() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(|| {
        let yaml =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml")).unwrap();
        serde_yaml::from_str(&yaml).expect("openapi.yaml is valid YAML")
    })
}

fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// Panics unless `body` matches the schema the spec gives for this path, method and status.
/// Paths the spec does not list answer with its documented error shape.
pub fn assert_conforms(method: &str, path: &str, status: u16, body: &Value) {
    let spec = spec();
    let method = method.to_ascii_lowercase();
    let pointer = match spec["paths"].get(path) {
        Some(item) if item.get(&method).is_some() => {
            let response = item[&method]["responses"]
                .get(status.to_string())
                .unwrap_or_else(|| {
                    panic!(
                        "{method} {path} answered {status}, which openapi.yaml does not document"
                    )
                });
            let base = match response.get("$ref").and_then(Value::as_str) {
                Some(r) => r.to_string(),
                None => format!("#/paths/{}/{method}/responses/{status}", escape(path)),
            };
            format!("{base}/content/application~1json/schema")
        }
        _ => "#/components/schemas/ErrorResponse".to_string(),
    };
    validate_at(&pointer, body, &format!("{method} {path} {status}"));
}

/// Validates the data of a streamed event against a schema of `components/schemas`.
pub fn assert_conforms_to_schema(name: &str, body: &Value) {
    validate_at(&format!("#/components/schemas/{name}"), body, name);
}

fn validate_at(pointer: &str, body: &Value, what: &str) {
    let spec = spec();
    let mut root = spec.clone();
    root["$ref"] = Value::String(pointer.to_string());
    let validator = jsonschema::draft202012::options()
        .build(&root)
        .unwrap_or_else(|e| panic!("schema {pointer} does not compile: {e}"));
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not conform to {pointer}:\n{}\nbody: {body:#}",
        errors.join("\n")
    );
}
