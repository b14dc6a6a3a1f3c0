//! A final answer a program can use (`react.final_answer_schema`): the prompt asks for a JSON
//! value that matches the client's schema, and the answer is read and checked like an action's
//! arguments, with the same repair round. In native mode the model may also give it by calling
//! a `final_answer` tool whose parameters are the schema.

use serde_json::{json, Map, Value};

use super::tools::{compile, schema_limits, ToolSpec};

/// The tool a native step offers for the final answer.
pub const FINAL_ANSWER_TOOL: &str = "final_answer";

/// What an answer must meet beyond its schema, and its tidied form: a plan's steps must point
/// at tools that exist (`plan.rs`). Its refusal goes to the model's repair round as the
/// schema's does.
pub type Meets = Box<dyn Fn(Value) -> Result<Value, String> + Send + Sync>;

/// The client's schema for the final answer, bounded and compiled once.
pub struct AnswerSchema {
    schema: Value,
    validator: jsonschema::Validator,
    meets: Option<Meets>,
}

impl std::fmt::Debug for AnswerSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnswerSchema")
            .field("schema", &self.schema)
            .finish()
    }
}

impl AnswerSchema {
    /// The schema, held to the bounds of a tool's (`schema_limits`), or why it cannot be one.
    pub fn new(schema: Value) -> Result<Self, String> {
        if !schema.is_object() && !schema.is_boolean() {
            return Err("must be a JSON Schema (an object)".into());
        }
        schema_limits::check(&schema)?;
        let validator = compile(&schema)?;
        Ok(Self {
            schema,
            validator,
            meets: None,
        })
    }

    /// The schema, with what an answer must meet beyond it.
    pub fn meeting(self, meets: Meets) -> Self {
        Self {
            meets: Some(meets),
            ..self
        }
    }

    /// The answer's JSON value, read from what the model wrote after the answer's tag (a fenced
    /// block is unwrapped; text that is no JSON counts as a string), or why it does not match.
    pub fn read(&self, text: &str) -> Result<Value, String> {
        let inner = unfenced(text.trim());
        let value =
            serde_json::from_str(inner).unwrap_or_else(|_| Value::String(text.trim().into()));
        self.check(value)
    }

    /// The answer given by calling the `final_answer` tool.
    pub fn read_call(&self, args: &Map<String, Value>) -> Result<Value, String> {
        let value = match self.wrapped() {
            true => args.get("answer").cloned().unwrap_or(Value::Null),
            false => Value::Object(args.clone()),
        };
        self.check(value)
    }

    fn check(&self, value: Value) -> Result<Value, String> {
        let problems: Vec<String> = self
            .validator
            .iter_errors(&value)
            .take(3)
            .map(|e| match e.instance_path.to_string() {
                at if at.is_empty() => shortened(e.to_string()),
                at => format!("{at}: {}", shortened(e.to_string())),
            })
            .collect();
        if !problems.is_empty() {
            return Err(format!(
                "the final answer does not match final_answer_schema: {}",
                problems.join("; ")
            ));
        }
        match &self.meets {
            Some(meets) => meets(value),
            None => Ok(value),
        }
    }

    /// What the system prompt adds: the answer's form, with the schema.
    pub fn prompt_section(&self, final_answer_tag: &str) -> String {
        format!(
            "## Final answer format\n\nThe final answer must be one JSON value that matches this JSON Schema, written after \"{final_answer_tag}:\" with nothing else:\n\n```json\n{}\n```\n\n",
            self.schema
        )
    }

    /// The `final_answer` tool of a native step: the schema as its parameters, or, for a schema
    /// of something other than an object, an object holding it as `answer`.
    pub fn tool(&self) -> ToolSpec {
        let parameters = match self.wrapped() {
            true => wrapped(&self.schema),
            false => self.schema.clone(),
        };
        ToolSpec {
            name: FINAL_ANSWER_TOOL.into(),
            description: "Give the final answer to the user, in the required form.".into(),
            parameters,
        }
    }

    /// Whether the answer goes to the tool wrapped as `answer` (its schema is not an object's).
    fn wrapped(&self) -> bool {
        self.schema.get("type").and_then(Value::as_str) != Some("object")
    }
}

/// `schema` as the `answer` of an object. Its definitions move to the object's root, and its
/// local references are rewritten to where they now point (`#/$defs/…` still names them there;
/// any other `#…` is now under `#/properties/answer`): left as they were, they pointed at nothing
/// in the tool's parameters, which a provider refuses. Its `$id` and `$schema` move to the root
/// too: a subschema with an `$id` is a document of its own, against which every reference in
/// it would resolve.
fn wrapped(schema: &Value) -> Value {
    let mut answer = schema.clone();
    let mut parameters = Map::new();
    if let Value::Object(fields) = &mut answer {
        for key in ["$schema", "$id", "$defs", "definitions"] {
            if let Some(definitions) = fields.remove(key) {
                parameters.insert(key.into(), definitions);
            }
        }
    }
    parameters.insert("type".into(), json!("object"));
    parameters.insert("properties".into(), json!({ "answer": answer }));
    parameters.insert("required".into(), json!(["answer"]));
    parameters.insert("additionalProperties".into(), json!(false));
    let mut parameters = Value::Object(parameters);
    moved_refs(&mut parameters);
    parameters
}

/// Rewrites every local `$ref` of `schema` but those into the definitions, which stay at the
/// root. Values that are data, not schemas (`const`, `enum`, `default`, `examples`), are left,
/// but only where those are keywords: in `properties` and the like they are names.
fn moved_refs(schema: &mut Value) {
    // Each value with whether its keys are names (of properties, definitions) not keywords.
    let mut stack = vec![(schema, false)];
    while let Some((value, names)) = stack.pop() {
        match value {
            Value::Object(fields) => {
                for (key, child) in fields.iter_mut() {
                    match (key.as_str(), child) {
                        (_, child) if names => stack.push((child, false)),
                        ("$ref", Value::String(reference)) => {
                            if let Some(moved) = moved(reference) {
                                *reference = moved;
                            }
                        }
                        ("const" | "enum" | "default" | "examples", _) => {}
                        (
                            "properties" | "patternProperties" | "$defs" | "definitions"
                            | "dependentSchemas",
                            child,
                        ) => stack.push((child, true)),
                        (_, child) => stack.push((child, false)),
                    }
                }
            }
            Value::Array(items) => stack.extend(items.iter_mut().map(|item| (item, false))),
            _ => {}
        }
    }
}

/// Where a local reference into the wrapped schema points now, when it moved: not when it
/// points into the definitions (written `$defs`, `%24defs` or `definitions`), which moved to
/// the root themselves.
fn moved(reference: &str) -> Option<String> {
    let pointer = reference.strip_prefix('#')?;
    let first = pointer
        .strip_prefix('/')
        .map(|p| p.split('/').next().unwrap_or(""));
    let defined = matches!(first, Some("$defs" | "%24defs" | "definitions"));
    (!defined).then(|| format!("#/properties/answer{pointer}"))
}

/// A problem as told to the model and the client: the schema's message quotes the value it
/// refused, which may be megabytes.
fn shortened(problem: String) -> String {
    const MOST: usize = 300;
    match problem.char_indices().nth(MOST) {
        Some((at, _)) => format!("{} …", &problem[..at]),
        None => problem,
    }
}

/// A non-negative whole number as JSON Schema's `integer` takes it: `9`, and also `9.0` or
/// `9e0`, which models write and the schema lets through.
pub fn whole_number(value: &Value) -> Option<u64> {
    if let Some(n) = value.as_u64() {
        return Some(n);
    }
    let f = value.as_f64()?;
    // Up to 2^53 a float is exact; past it no count here means anything.
    (f.fract() == 0.0 && (0.0..=9_007_199_254_740_992.0).contains(&f)).then_some(f as u64)
}

/// The body of a fenced block (```json … ```), or the text as it is.
fn unfenced(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let body = rest.split_once('\n').map_or("", |(_, b)| b);
    body.trim_end().strip_suffix("```").unwrap_or(body).trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> AnswerSchema {
        AnswerSchema::new(json!({"type": "object", "required": ["file", "line"],
            "properties": {"file": {"type": "string"}, "line": {"type": "integer", "minimum": 1}}}))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_answer_is_read_bare_or_fenced_and_checked() {
        let s = schema();
        let want = json!({"file": "a.rs", "line": 3});
        assert_eq!(
            s.read(r#"{"file": "a.rs", "line": 3}"#).ok(),
            Some(want.clone())
        );
        assert_eq!(
            s.read("```json\n{\"file\": \"a.rs\", \"line\": 3}\n```")
                .ok(),
            Some(want)
        );
        let why = s
            .read(r#"{"file": "a.rs", "line": 0}"#)
            .err()
            .unwrap_or_default();
        assert!(
            why.contains("/line") && why.contains("final_answer_schema"),
            "{why}"
        );
        assert!(s.read("It is in a.rs on line 3.").is_err());
    }

    #[test]
    fn a_schema_of_a_string_takes_plain_text_and_goes_to_the_tool_wrapped() {
        let s = AnswerSchema::new(json!({"type": "string", "maxLength": 10}))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.read("short").ok(), Some(json!("short")));
        assert!(s.read("far too long for it").is_err());
        let tool = s.tool();
        assert_eq!(tool.parameters["required"], json!(["answer"]));
        let mut args = Map::new();
        args.insert("answer".into(), json!("ok"));
        assert_eq!(s.read_call(&args).ok(), Some(json!("ok")));
        assert_eq!(
            schema().tool().parameters["required"],
            json!(["file", "line"])
        );
    }

    /// A wrapped schema's references still point into the tool's parameters: to its definitions,
    /// moved to the root, and to its own parts, now under `answer`. The parameters compile as a
    /// tool's schema (a dangling reference is refused there) and read what the schema reads.
    #[test]
    fn a_wrapped_schemas_references_point_where_they_did() {
        let schemas = [
            json!({"type": "array", "items": {"$ref": "#/$defs/hit"},
                   "$defs": {"hit": {"type": "object", "properties": {"file": {"type": "string"}},
                                     "required": ["file"]}}}),
            json!({"$ref": "#/definitions/a",
                   "definitions": {"a": {"type": "array", "items": {"$ref": "#/definitions/b"}},
                                   "b": {"type": "string"}}}),
            json!({"type": "array", "items": {"type": "integer"},
                   "contains": {"$ref": "#/items"}, "const": [{"$ref": "#/data"}]}),
        ];
        for schema in schemas {
            let s = AnswerSchema::new(schema.clone()).unwrap_or_else(|e| panic!("{e}"));
            let parameters = s.tool().parameters;
            let compiled = compile(&parameters);
            assert!(compiled.is_ok(), "{parameters}: {:?}", compiled.err());
            let text = parameters.to_string();
            assert!(!text.contains(r##""$ref":"#/items""##), "{text}");
        }
        let s = AnswerSchema::new(json!({"type": "array", "items": {"$ref": "#/$defs/n"},
            "$defs": {"n": {"type": "integer"}}}))
        .unwrap_or_else(|e| panic!("{e}"));
        let parameters = s.tool().parameters;
        assert_eq!(parameters["$defs"]["n"], json!({"type": "integer"}));
        let validator = compile(&parameters).unwrap_or_else(|e| panic!("{e}"));
        assert!(validator.is_valid(&json!({"answer": [1, 2]})));
        assert!(!validator.is_valid(&json!({"answer": ["x"]})));
        // Data is not rewritten.
        let s = AnswerSchema::new(json!({"type": "string", "enum": ["#/x"], "const": "#/x"}))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.tool().parameters["properties"]["answer"]["const"], "#/x");
        // A property named as a data keyword is a schema all the same; a pointer written
        // percent-encoded still names the definitions.
        let named = json!({"type": "array", "items": {"type": "object", "properties": {
                "const": {"$ref": "#/$defs/c"}, "enum": {"$ref": "#/%24defs/c"},
                "first": {"$ref": "#/prefixItems/0"}}},
            "prefixItems": [{"type": "object"}],
            "$defs": {"c": {"type": "string"}}});
        let s = AnswerSchema::new(named).unwrap_or_else(|e| panic!("{e}"));
        let parameters = s.tool().parameters;
        let properties = &parameters["properties"]["answer"]["items"]["properties"];
        assert_eq!(properties["const"]["$ref"], "#/$defs/c");
        assert_eq!(properties["enum"]["$ref"], "#/%24defs/c");
        assert_eq!(
            properties["first"]["$ref"],
            "#/properties/answer/prefixItems/0"
        );
        assert!(compile(&parameters).is_ok(), "{parameters}");
    }

    #[test]
    fn a_wrapped_schemas_id_and_dialect_go_to_the_root_with_its_definitions() {
        // Left on `answer`, the `$id` made it a document of its own, without the definitions.
        let s = AnswerSchema::new(
            json!({"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://example.com/hits", "type": "array", "items": {"$ref": "#/$defs/n"},
            "$defs": {"n": {"type": "integer"}}}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let parameters = s.tool().parameters;
        let validator = compile(&parameters).unwrap_or_else(|e| panic!("{parameters}: {e}"));
        assert!(validator.is_valid(&json!({"answer": [1, 2]})));
        assert!(!validator.is_valid(&json!({"answer": ["x"]})));
        assert_eq!(parameters["$id"], "https://example.com/hits");
        assert!(parameters["properties"]["answer"].get("$schema").is_none());
    }

    #[test]
    fn a_hostile_schema_is_refused_as_a_tools_would_be() {
        assert!(AnswerSchema::new(json!("string")).is_err());
        assert!(AnswerSchema::new(json!({"$ref": "https://example.com/s.json"})).is_err());
        let mut deep = json!({"type": "string"});
        for _ in 0..200 {
            deep = json!({"type": "array", "items": deep});
        }
        assert!(AnswerSchema::new(deep).is_err());
    }
}
