//! Whether a tool's parameters schema fits a provider's strict subset, where a tool may be sent
//! `strict: true` and its arguments are then constrained to the schema. OpenAI's: every object
//! lists all its properties in `required` and has `additionalProperties: false`, and no keyword
//! outside the subset appears. Anthropic's: every object has `additionalProperties: false`, and
//! neither those keywords nor numeric, length or count bounds appear. A schema that does not fit
//! is sent non-strict (the API would refuse the whole request).

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

/// Bounds Anthropic's strict mode does not take besides those ("numerical constraints", "string
/// constraints", array counts past `minItems` of 0 or 1).
const ANTHROPIC_UNSUPPORTED: [&str; 8] = [
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "maxItems",
];

/// Why `schema` is outside OpenAI's strict subset, if it is. The schema was bounded when the
/// request was read (`step/tools/schema_limits.rs`); the walk keeps a stack of its own anyway.
pub fn openai_strict_misfit(schema: &Value) -> Option<String> {
    misfit(schema, &OPENAI)
}

/// Why `schema` is outside Anthropic's strict subset, if it is.
pub fn anthropic_strict_misfit(schema: &Value) -> Option<String> {
    misfit(schema, &ANTHROPIC)
}

/// A provider's strict tool calling: whose subset it is, and why a schema is outside it.
pub struct Strictness {
    pub owner: &'static str,
    pub misfit: fn(&Value) -> Option<String>,
}

pub const OPENAI_STRICT: Strictness = Strictness {
    owner: "OpenAI",
    misfit: openai_strict_misfit,
};

pub const ANTHROPIC_STRICT: Strictness = Strictness {
    owner: "Anthropic",
    misfit: anthropic_strict_misfit,
};

/// What `strict_tools` comes to on a server (`name`): nothing where it has no strict tools
/// (the flag is turned off), and each tool whose schema is outside its subset sent non-strict.
pub fn warnings(
    request: &mut crate::llm::ChatRequest,
    strict: Option<&Strictness>,
    name: &str,
) -> Vec<String> {
    if !request.strict_tools || request.tools.is_empty() {
        return Vec::new();
    }
    let Some(strict) = strict else {
        request.strict_tools = false;
        return vec![format!(
            "strict_tools: {name} has no strict tool calling here; the tools were sent as declared"
        )];
    };
    request
        .tools
        .iter()
        .filter_map(|t| {
            let why = (strict.misfit)(&t.parameters)?;
            Some(format!(
                "strict_tools: tool {} was sent non-strict: its schema is outside {}'s strict subset ({why})",
                t.name, strict.owner
            ))
        })
        .collect()
}

/// How a provider's strict subset differs from the keywords both refuse.
struct Subset {
    /// Keywords it refuses besides [`UNSUPPORTED`].
    more: &'static [&'static str],
    /// Every property of an object must be in `required`.
    all_required: bool,
    /// `minItems` may be only 0 or 1.
    min_items_to_one: bool,
    /// Every schema states its `type` (or is `anyOf` or a `$ref`), and the enums hold at most
    /// [`MAX_ENUM_VALUES`] values in all.
    typed: bool,
}

/// The most enum values OpenAI's strict mode takes across a schema.
const MAX_ENUM_VALUES: usize = 1000;

const OPENAI: Subset = Subset {
    more: &[],
    all_required: true,
    min_items_to_one: false,
    typed: true,
};

const ANTHROPIC: Subset = Subset {
    more: &ANTHROPIC_UNSUPPORTED,
    all_required: false,
    min_items_to_one: true,
    typed: false,
};

/// Why `schema` is outside `subset`, if it is.
fn misfit(schema: &Value, subset: &Subset) -> Option<String> {
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Some("its root is not `\"type\": \"object\"`".into());
    }
    let mut stack: Vec<(&Value, String)> = vec![(schema, "the root".into())];
    let mut enum_values = 0;
    while let Some((node, at)) = stack.pop() {
        let Value::Object(map) = node else {
            // `true` or `false` in place of a schema.
            if subset.typed {
                return Some(format!("{at} is `{node}`, not a schema with a type"));
            }
            continue;
        };
        enum_values += map
            .get("enum")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        if subset.typed && enum_values > MAX_ENUM_VALUES {
            return Some(format!(
                "its enums hold more than {MAX_ENUM_VALUES} values in all"
            ));
        }
        let mut refused = UNSUPPORTED.iter().chain(subset.more);
        if let Some(keyword) = refused.find(|k| map.contains_key(**k)) {
            return Some(format!("{at} uses `{keyword}`"));
        }
        if subset.typed
            && !["type", "anyOf", "$ref"]
                .iter()
                .any(|k| map.contains_key(*k))
        {
            return Some(format!("{at} has no `type`"));
        }
        let min_items = map.get("minItems").and_then(Value::as_u64);
        if subset.min_items_to_one && min_items.is_some_and(|n| n > 1) {
            return Some(format!("{at} uses `minItems` past 1"));
        }
        if let Some(why) = object_misfit(map, subset.all_required) {
            return Some(format!("{at} {why}"));
        }
        push_subschemas(map, &at, &mut stack);
    }
    None
}

/// What an object schema lacks for strict mode.
fn object_misfit(map: &Map<String, Value>, all_required: bool) -> Option<&'static str> {
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
    if !all_required {
        return None;
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
        // Every subschema states its type: `{}`, `true`, a `const` or a description alone
        // ("schema must have a 'type' key"); and at most 1,000 enum values in all.
        let many: Vec<String> = (0..1001).map(|i| format!("v{i}")).collect();
        for (property, why) in [
            (json!({}), "no `type`"),
            (json!(true), "not a schema"),
            (json!({"const": "x"}), "no `type`"),
            (json!({"type": "string", "enum": many}), "enum"),
        ] {
            let schema = json!({"type": "object", "additionalProperties": false, "required": ["a"],
                "properties": {"a": property}});
            let said = openai_strict_misfit(&schema).unwrap_or_default();
            assert!(said.contains(why), "{schema}: {said}");
        }
    }

    #[test]
    fn anthropics_subset_takes_optional_properties_but_no_bounds() {
        let open = json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]});
        let said = anthropic_strict_misfit(&open).unwrap_or_default();
        assert!(said.contains("additionalProperties"), "{said}");
        let optional = json!({"type": "object", "additionalProperties": false,
            "properties": {"path": {"type": "string"}, "lines": {"type": "integer"}}, "required": ["path"]});
        assert_eq!(anthropic_strict_misfit(&optional), None);
        assert!(openai_strict_misfit(&optional).is_some());
        for (bound, why) in [
            (json!({"type": "integer", "minimum": 1}), "minimum"),
            (json!({"type": "string", "maxLength": 9}), "maxLength"),
            (json!({"type": "array", "minItems": 2}), "minItems"),
            (
                json!({"type": "object", "properties": {}}),
                "additionalProperties",
            ),
        ] {
            let schema = json!({"type": "object", "additionalProperties": false, "properties": {"a": bound}});
            let said = anthropic_strict_misfit(&schema).unwrap_or_default();
            assert!(said.contains(why), "{schema}: {said}");
        }
        let one = json!({"type": "object", "additionalProperties": false,
            "properties": {"a": {"type": "array", "minItems": 1}}});
        assert_eq!(anthropic_strict_misfit(&one), None);
    }
}
