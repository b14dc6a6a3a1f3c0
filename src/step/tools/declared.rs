//! A declared tool, and how the arguments a model wrote for it are read against its schema:
//! positional ones named, a whole input unwrapped, values written as text read as the types
//! declared, and arguments it does not declare refused.

use serde_json::{Map, Value};

use crate::llm::ToolSpec;

/// Keywords beside `properties` that can admit an argument `properties` does not list; with any
/// of them the validator alone decides.
const OPEN_KEYWORDS: [&str; 11] = [
    "patternProperties",
    "unevaluatedProperties",
    "allOf",
    "anyOf",
    "oneOf",
    "$ref",
    "$dynamicRef",
    "if",
    "dependentSchemas",
    "dependencies",
    "propertyNames",
];

pub(super) struct Declared {
    pub(super) spec: ToolSpec,
    pub(super) validator: jsonschema::Validator,
    /// Parameter names in the schema's order, for positional arguments.
    pub(super) order: Vec<String>,
}

impl std::fmt::Debug for Declared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Declared")
            .field("spec", &self.spec)
            .finish()
    }
}

/// Why an argument the schema does not declare is refused, if one is there. JSON Schema admits
/// undeclared properties by default, but a model that adds one (`other_param=2`, copied from an
/// example) did not mean the declared call, and the plugin would run it. So a schema that lists
/// `properties` admits others only when `additionalProperties` is `true` or a schema. An empty
/// `properties` says nothing (it is also what a tool declared without a schema gets).
pub(super) fn undeclared(name: &str, args: &Map<String, Value>, tool: &Declared) -> Option<String> {
    let schema = &tool.spec.parameters;
    let open = matches!(
        schema.get("additionalProperties"),
        Some(Value::Bool(true) | Value::Object(_))
    ) || OPEN_KEYWORDS.iter().any(|k| schema.get(*k).is_some());
    if tool.order.is_empty() || open {
        return None;
    }
    let extra: Vec<String> = args
        .keys()
        .filter(|k| !tool.order.contains(k))
        .map(|k| format!("'{k}'"))
        .collect();
    if extra.is_empty() {
        return None;
    }
    Some(format!(
        "'{name}' has no argument {}; its arguments are: {}",
        extra.join(", "),
        tool.order.join(", ")
    ))
}

/// A lone positional argument that is itself the text of the whole input as JSON or a Python
/// literal (`{"input": "{\"query\": \"x\"}"}`), when its keys are all declared and the tool
/// declares no `input` of its own.
pub(super) fn unwrap_whole_input(args: Map<String, Value>, tool: &Declared) -> Map<String, Value> {
    if args.len() != 1 {
        return args;
    }
    if tool.order.iter().any(|p| p == "input") {
        return unwrap_own_input(args, tool);
    }
    let declared_object = |value: Option<Value>| match value {
        Some(Value::Object(map))
            if !map.is_empty() && map.keys().all(|k| tool.order.contains(k)) =>
        {
            Some(map)
        }
        _ => None,
    };
    let inner = match args.get("input") {
        Some(Value::String(text)) => {
            declared_object(literal_of(text)).or_else(|| match keyword_args(text, &tool.order) {
                Some(Value::Object(map)) => Some(map),
                _ => None,
            })
        }
        // `read_file({"path": "a.ts"})`: the object passed as the one positional argument.
        Some(object @ Value::Object(_)) => declared_object(Some(object.clone())),
        _ => None,
    };
    inner.unwrap_or(args)
}

/// Whether a tool whose own parameter is `input` was given, as its input, text that starts
/// by naming it again (`input=2 * 21`, `input="x" and more`) and that could not be read as
/// that argument alone.
pub(super) fn own_input_named_again(args: &Map<String, Value>, tool: &Declared) -> bool {
    let Some(Value::String(text)) = args.get("input") else {
        return false;
    };
    args.len() == 1
        && tool.order.iter().any(|p| p == "input")
        && text
            .trim_start()
            .strip_prefix("input")
            .is_some_and(|rest| rest.trim_start().starts_with(['=', ':']))
}

/// Whether `text` holds `tool(`, the name standing as a word of its own.
pub(super) fn calls_inside(text: &str, tool: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    text.match_indices(tool).any(|(at, _)| {
        !word(text[..at].chars().next_back())
            && text[at + tool.len()..]
                .trim_start_matches(' ')
                .starts_with('(')
    })
}

/// For a tool whose own parameter is named `input` (LangChain's single-input tools): that
/// input given again inside itself, as `{"input": {"input": "x"}}` (from `Search({"input":
/// "x"})`) or as the text `input="x"` (from `Search[input="x"]`), is the arguments, when every
/// name in it is declared and, in text, every value is quoted after its name. An `input` the
/// schema declares as an object keeps whatever object it is given.
fn unwrap_own_input(args: Map<String, Value>, tool: &Declared) -> Map<String, Value> {
    let declared_type = tool
        .spec
        .parameters
        .pointer("/properties/input/type")
        .and_then(Value::as_str);
    if declared_type != Some("string") {
        return args;
    }
    let all_declared =
        |map: &Map<String, Value>| !map.is_empty() && map.keys().all(|k| tool.order.contains(k));
    let inner = match args.get("input") {
        Some(Value::Object(map)) if all_declared(map) => Some(map.clone()),
        Some(Value::String(text)) => crate::step::parse::parse_args(text)
            .ok()
            .filter(|map| all_declared(map) && every_value_quoted(text, map)),
        _ => None,
    };
    inner.unwrap_or(args)
}

/// Whether each argument of `args`, read from `text`, is a string written quoted after its
/// name (`name="…"`, `name='…'`).
fn every_value_quoted(text: &str, args: &Map<String, Value>) -> bool {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    args.iter().all(|(k, v)| {
        v.is_string()
            && ["=\"", "='"]
                .iter()
                .any(|q| compact.contains(&format!("{k}{q}")))
    })
}

/// Text arguments whose parameter the schema declares of another type, read as that type when
/// they are its JSON or Python-literal text (`"5"` for an integer, `"{'a': 1}"` for an object):
/// markup such as Qwen3-Coder's writes every value as text. The other way, a bare integer or
/// boolean written for a parameter declared only `string` (`calculator(expression=3000)`, as a
/// real 0.5B model wrote) is its text.
pub(super) fn unwrap_values(mut args: Map<String, Value>, tool: &Declared) -> Map<String, Value> {
    let properties = tool.spec.parameters.get("properties");
    for (key, value) in args.iter_mut() {
        // `"type": "integer"` or `"type": ["integer", "null"]`.
        let declared: Vec<&str> = match properties.and_then(|p| p.get(key)?.get("type")) {
            Some(Value::String(ty)) => vec![ty.as_str()],
            Some(Value::Array(types)) => types.iter().filter_map(Value::as_str).collect(),
            _ => continue,
        };
        let Value::String(text) = &*value else {
            if declared == ["string"] {
                if let Some(text) = exact_text_of(value) {
                    *value = Value::String(text);
                }
            }
            continue;
        };
        if declared.contains(&"string") {
            continue;
        }
        if let Some(read) =
            literal_of(text.trim()).filter(|v| declared.iter().any(|ty| json_type_is(v, ty)))
        {
            *value = read;
        }
    }
    args
}

/// `path: a.py` or `command="ls", timeout=30`: the arguments written without the call around
/// them. Read so when the tool declares every name, or declares one and every text value is
/// quoted (then an undeclared one is the model's mistake, for the check to refuse); otherwise
/// the text is the input itself (`RUST_LOG=debug cargo run` is a command).
fn keyword_args(text: &str, declared: &[String]) -> Option<Value> {
    let args = crate::step::parse::parse_args(text).ok()?;
    let positional = |k: &String| k == "input" || k.starts_with("input_");
    if args.is_empty() || args.keys().any(positional) {
        return None;
    }
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let quoted = |k: &str, v: &Value| {
        !v.is_string()
            || ["=\"", "='", ":\"", ":'"]
                .iter()
                .any(|q| compact.contains(&format!("{k}{q}")))
    };
    let all_declared = args.keys().all(|k| declared.contains(k));
    let one_declared = args.keys().any(|k| declared.contains(k));
    (all_declared || one_declared && args.iter().all(|(k, v)| quoted(k, v)))
        .then_some(Value::Object(args))
}

/// The text a bare integer or boolean was written as. A fraction is left alone: `1e3` and
/// `1000.0` read as the same number, so its text is not known.
fn exact_text_of(value: &Value) -> Option<String> {
    match value {
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn literal_of(text: &str) -> Option<Value> {
    serde_json::from_str(text)
        .ok()
        .or_else(|| crate::step::parse::python_literal(text))
}

fn json_type_is(value: &Value, ty: &str) -> bool {
    match ty {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => false,
    }
}

/// `input`, `input_2`, … (the argument parser's names for positional arguments) become the
/// declared parameters in order, unless the tool itself declares a parameter of that name.
pub(super) fn positional_to_named(
    args: Map<String, Value>,
    order: &[String],
) -> Map<String, Value> {
    let positional = |key: &str| -> Option<usize> {
        if order.iter().any(|p| p == key) {
            return None;
        }
        match key {
            "input" => Some(0),
            _ => key
                .strip_prefix("input_")?
                .parse::<usize>()
                .ok()?
                .checked_sub(1),
        }
    };
    let mut out = Map::with_capacity(args.len());
    for (key, value) in args {
        let name = positional(&key)
            .and_then(|i| order.get(i))
            .filter(|p| !out.contains_key(*p))
            .cloned()
            .unwrap_or(key);
        out.insert(name, value);
    }
    out
}
