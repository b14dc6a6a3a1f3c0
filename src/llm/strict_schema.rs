//! Whether a tool's parameters schema fits OpenAI's strict subset, where a tool may be sent
//! `strict: true` and its arguments are then constrained to the schema: every object lists all
//! its properties in `required` and has `additionalProperties: false`, and no keyword outside
//! the subset appears. A schema that does not fit is sent non-strict (the API would refuse it).

use serde_json::{Map, Value};

/// Keywords OpenAI's strict mode does not take.
const UNSUPPORTED: [&str; 17] = [
    "allOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "patternProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "contains",
    "uniqueItems",
    "prefixItems",
];

/// Why `schema` is outside OpenAI's strict subset, if it is. The schema was bounded when the
/// request was read (`step/tools/schema_limits.rs`); the walk keeps a stack of its own anyway.
pub fn openai_strict_misfit(schema: &Value) -> Option<String> {
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Some("its root is not `\"type\": \"object\"`".into());
    }
    let mut stack: Vec<(&Value, String)> = vec![(schema, "the root".into())];
    while let Some((node, at)) = stack.pop() {
        let Value::Object(map) = node else { continue };
        if let Some(keyword) = UNSUPPORTED.iter().find(|k| map.contains_key(**k)) {
            return Some(format!("{at} uses `{keyword}`"));
        }
        if let Some(why) = object_misfit(map) {
            return Some(format!("{at} {why}"));
        }
        push_subschemas(map, &at, &mut stack);
    }
    None
}

/// What an object schema lacks for strict mode.
fn object_misfit(map: &Map<String, Value>) -> Option<&'static str> {
    let is_object = match map.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(types)) => types.iter().any(|t| t == "object"),
        _ => map.contains_key("properties"),
    };
    if !is_object {
        return None;
    }
    if map.get("additionalProperties") != Some(&Value::Bool(false)) {
        return Some("lacks `\"additionalProperties\": false`");
    }
    let properties = map.get("properties").and_then(Value::as_object);
    let required = map.get("required").and_then(Value::as_array);
    let all_required = properties.is_none_or(|props| {
        props
            .keys()
            .all(|k| required.is_some_and(|r| r.iter().any(|n| n == k)))
    });
    (!all_required).then_some("does not list every property in `required`")
}

/// The schemas nested in `map`, with where they are.
fn push_subschemas<'a>(
    map: &'a Map<String, Value>,
    at: &str,
    stack: &mut Vec<(&'a Value, String)>,
) {
    for (name, schema) in map
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        stack.push((schema, format!("property `{name}`")));
    }
    for key in ["$defs", "definitions"] {
        for (name, schema) in map
            .get(key)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            stack.push((schema, format!("definition `{name}`")));
        }
    }
    if let Some(items) = map.get("items") {
        stack.push((items, format!("the items of {at}")));
    }
    for option in map
        .get("anyOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        stack.push((option, format!("an option of {at}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_closed_schema_with_every_property_required_fits() {
        let schema = json!({"type": "object", "additionalProperties": false,
            "required": ["path", "lines"],
            "properties": {"path": {"type": "string", "description": "a file"},
                "lines": {"type": ["array", "null"], "items": {"type": "object",
                    "additionalProperties": false, "required": ["n"], "properties": {"n": {"type": "integer"}}}}}});
        assert_eq!(openai_strict_misfit(&schema), None);
        assert_eq!(
            openai_strict_misfit(
                &json!({"type": "object", "properties": {}, "required": [], "additionalProperties": false})
            ),
            None
        );
    }

    #[test]
    fn each_misfit_is_found_and_said() {
        for (schema, why) in [
            (json!({"type": "string"}), "root"),
            (
                json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}),
                "additionalProperties",
            ),
            (
                json!({"type": "object", "additionalProperties": false, "properties": {"a": {"type": "string"}}}),
                "required",
            ),
            (
                json!({"type": "object", "additionalProperties": false, "required": ["a"],
                "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}}}),
                "property `a`",
            ),
            (
                json!({"type": "object", "additionalProperties": false, "required": ["a"],
                "properties": {"a": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}}),
                "oneOf",
            ),
            (
                json!({"type": "object", "additionalProperties": false, "required": ["a"],
                "properties": {"a": {"type": "array", "items": {"type": "object", "additionalProperties": true}}}}),
                "items",
            ),
            (
                json!({"type": "object", "additionalProperties": false, "required": [], "properties": {},
                "$defs": {"x": {"type": "object", "patternProperties": {}}}}),
                "patternProperties",
            ),
        ] {
            let said = openai_strict_misfit(&schema).unwrap_or_default();
            assert!(said.contains(why), "{schema}: {said}");
        }
    }
}
