//! The tools a step may call: declared with JSON Schema parameters (`tools`, or the MCP shape
//! with `inputSchema`), or only named in the free-text `available_tools_prompt_segment`. An
//! action is checked against them before it reaches the client: the tool exists, and its
//! arguments match the schema (positional arguments take the declared parameter order).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::declared::{
    calls_inside, own_input_named_again, positional_to_named, undeclared, unwrap_values,
    unwrap_whole_input, Declared,
};
use super::schema_limits;
use super::segment_names::remembered_names_in;

pub use crate::llm::ToolSpec;

/// Cheap to clone: a step with fallbacks keeps a copy of its input for the next model.
#[derive(Debug, Default, Clone)]
pub struct Catalog {
    declared: Arc<[Declared]>,
    /// Names read from the free-text segment, when no tools were declared; shared with the
    /// worker's memo, since a loop sends the same segment at every step.
    named: Arc<[String]>,
}

impl Catalog {
    /// The catalog of declared tools, or of the names in `segment` when none are declared.
    /// A schema over a cost bound (`schema_limits`) or that does not compile is an error with
    /// the tool's index, and a message naming the tool and the problem.
    pub fn new(specs: Vec<ToolSpec>, segment: &str) -> Result<Self, (usize, String)> {
        let mut declared = Vec::with_capacity(specs.len());
        let mut totals = schema_limits::Totals::default();
        for (i, spec) in specs.into_iter().enumerate() {
            let at = |why: String| (i, format!("tools[{i}] '{}': {why}", spec.name));
            if !spec.parameters.is_object() {
                return Err(at("the parameters schema must be a JSON object".into()));
            }
            totals.admit(&spec.parameters).map_err(at)?;
            let validator = compile(&spec.parameters).map_err(at)?;
            let order = spec
                .parameters
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default();
            declared.push(Declared {
                spec,
                validator,
                order,
            });
        }
        let named = if declared.is_empty() {
            remembered_names_in(segment)
        } else {
            Arc::from([])
        };
        Ok(Self {
            declared: declared.into(),
            named,
        })
    }

    /// Whether any tool is known by name (declared or read from the segment).
    pub fn knows_names(&self) -> bool {
        !self.declared.is_empty() || !self.named.is_empty()
    }

    pub fn has(&self, name: &str) -> bool {
        self.declared.iter().any(|d| d.spec.name == name) || self.named.iter().any(|n| n == name)
    }

    /// The declared tools, for the provider's own tool calling.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.declared.iter().map(|d| d.spec.clone()).collect()
    }

    pub fn declared_names(&self) -> impl Iterator<Item = &str> {
        self.declared.iter().map(|d| d.spec.name.as_str())
    }

    pub fn declared_specs(&self) -> impl Iterator<Item = &ToolSpec> {
        self.declared.iter().map(|d| &d.spec)
    }

    /// Whether the tools are declared and every one can go through a provider's tool calling:
    /// an ASCII name, and a schema of an object (`tool_mode: auto` stays with text otherwise;
    /// `native` refuses such tools before the step).
    pub fn callable_natively(&self) -> bool {
        let object =
            |spec: &ToolSpec| spec.parameters.get("type").and_then(Value::as_str) == Some("object");
        self.has_declared()
            && self
                .declared_specs()
                .all(|s| is_native_tool_name(&s.name) && object(s))
    }

    pub fn has_declared(&self) -> bool {
        !self.declared.is_empty()
    }

    /// The known tool `written` means, and what was assumed to find it: the name itself, else
    /// without a `functions.` namespace, else the one tool whose name differs only in case.
    /// An unknown name is not matched to a similar one: guessing runs the wrong tool.
    pub fn resolve(&self, written: &str) -> Option<(String, Option<String>)> {
        if self.has(written) {
            return Some((written.to_string(), None));
        }
        let bare = written.strip_prefix("functions.").unwrap_or(written);
        if self.has(bare) {
            return Some((bare.to_string(), None));
        }
        let mut same_case = self
            .names()
            .into_iter()
            .filter(|n| n.to_lowercase() == bare.to_lowercase());
        match (same_case.next(), same_case.next()) {
            (Some(name), None) => Some((
                name.to_string(),
                Some(format!(
                    "the model wrote the tool '{written}'; '{name}' was used"
                )),
            )),
            _ => None,
        }
    }

    pub fn names(&self) -> Vec<&str> {
        self.declared
            .iter()
            .map(|d| d.spec.name.as_str())
            .chain(self.named.iter().map(String::as_str))
            .collect()
    }

    /// What is wrong with the parameters a plan gives a call of `name`: those it names must be
    /// the tool's and of its types, but a required one may be missing, left to what an earlier
    /// step finds.
    pub fn planned_problems(&self, name: &str, parameters: &Map<String, Value>) -> Vec<String> {
        let Some(tool) = self.declared.iter().find(|d| d.spec.name == name) else {
            return Vec::new();
        };
        if let Some(why) = undeclared(name, parameters, tool) {
            return vec![why];
        }
        let instance = Value::Object(parameters.clone());
        let problems = tool.validator.iter_errors(&instance).filter(|e| {
            !matches!(
                e.kind,
                jsonschema::error::ValidationErrorKind::Required { .. }
            )
        });
        problems.take(3).map(|e| problem(&e)).collect()
    }

    /// The action's arguments, positional ones renamed to declared parameters, or why the action
    /// cannot be proposed. With no tool known by name, any action passes as written.
    pub fn check(
        &self,
        name: &str,
        args: Map<String, Value>,
    ) -> Result<Map<String, Value>, String> {
        if !self.knows_names() {
            return Ok(args);
        }
        if !self.has(name) {
            return Err(format!(
                "there is no tool named '{name}'; the tools are: {}",
                self.names().join(", ")
            ));
        }
        let Some(tool) = self.declared.iter().find(|d| d.spec.name == name) else {
            return Ok(args);
        };
        if let Some(other) = self.call_of_another(name, &args) {
            return Err(format!(
                "the input of '{name}' holds a call of '{other}'; call one tool, with its own arguments"
            ));
        }
        let args = unwrap_whole_input(args, tool);
        if own_input_named_again(&args, tool) {
            return Err(format!(
                "the input of '{name}' names its parameter again ('input=' inside the input); give the value alone"
            ));
        }
        let args = positional_to_named(args, &tool.order);
        let args = unwrap_values(args, tool);
        if let Some(why) = undeclared(name, &args, tool) {
            return Err(why);
        }
        let instance = Value::Object(args);
        let problems: Vec<String> = tool
            .validator
            .iter_errors(&instance)
            .take(3)
            .map(|e| problem(&e))
            .collect();
        if !problems.is_empty() {
            return Err(format!(
                "the arguments of '{name}' do not match its parameters: {}",
                problems.join("; ")
            ));
        }
        match instance {
            Value::Object(args) => Ok(args),
            _ => Err("the arguments are not an object".into()),
        }
    }

    /// The name of a known tool when the one input given to `name` is a call of another tool
    /// (`Action: read_file` then `Action Input: write_file(path="a", content="x")`), or a call
    /// with words after it (`read_file(path="a") and then list_dir`): which call the model
    /// meant is for it to say. Code that calls functions no tool is named after
    /// (`print(total)`) is an input like any other.
    fn call_of_another<'a>(&self, name: &str, args: &'a Map<String, Value>) -> Option<&'a str> {
        let (Some(Value::String(text)), 1) = (args.get("input"), args.len()) else {
            return None;
        };
        let text = text.trim();
        let open = text.find('(')?;
        let callee = text[..open].trim();
        let whole_args = || {
            text.ends_with(')')
                .then(|| crate::step::parse::parse_args(&text[open + 1..text.len() - 1]).ok())
                .flatten()
        };
        if self.has(callee) {
            return (callee != name || whole_args().is_none()).then_some(callee);
        }
        // `read_file_v2(path="a")`: a call of some other function, given the tool's own
        // argument names, is a call the model meant, not a value.
        let is_identifier = !callee.is_empty()
            && callee
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '.');
        if is_identifier
            && whole_args().is_some_and(|inner| {
                !inner.is_empty() && inner.keys().all(|k| self.declares(name, k))
            })
        {
            return Some(callee);
        }
        // `I will call read_file(path="a")`, `read(a); read_file(path="b")`: a known tool's
        // call inside words or beside another call.
        let names = self
            .declared
            .iter()
            .map(|d| d.spec.name.as_str())
            .chain(self.named.iter().map(String::as_str));
        names
            .filter(|n| !n.is_empty())
            .find(|n| calls_inside(text, n))
            .and_then(|n| text.find(n).map(|at| &text[at..at + n.len()]))
    }

    /// Whether the declared tool `tool` lists `argument` among its schema's properties.
    pub fn declares(&self, tool: &str, argument: &str) -> bool {
        self.declared
            .iter()
            .find(|d| d.spec.name == tool)
            .is_some_and(|d| d.order.iter().any(|p| p == argument))
    }

    /// Whether every argument (at least one) is the name of its declared parameter's type, as
    /// in `{"path": "string"}`: a signature the model copied from the tool list, not a call.
    pub fn values_are_type_names(&self, tool: &str, args: &Map<String, Value>) -> bool {
        let Some(tool) = self.declared.iter().find(|d| d.spec.name == tool) else {
            return false;
        };
        let properties = tool.spec.parameters.get("properties");
        !args.is_empty()
            && args.iter().all(|(key, value)| {
                let declared = properties
                    .and_then(|p| p.get(key))
                    .and_then(|p| p.get("type"))
                    .and_then(Value::as_str);
                match (declared, value.as_str()) {
                    (Some(ty), Some(v)) => type_name_of(v) == Some(ty),
                    _ => false,
                }
            })
    }

    /// The declared tools as the prompt lists them: a signature and the description, then the
    /// schema itself when it says more than names and simple types.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for tool in self.declared.iter() {
            let schema = &tool.spec.parameters;
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let properties = schema.get("properties").and_then(Value::as_object);
            let params: Vec<String> = properties
                .into_iter()
                .flatten()
                .map(|(name, p)| {
                    let ty = p.get("type").and_then(Value::as_str).unwrap_or("any");
                    let optional = if required.contains(&name.as_str()) {
                        ""
                    } else {
                        "?"
                    };
                    format!("{name}{optional}: {ty}")
                })
                .collect();
            out.push_str(&format!("- {}({})", tool.spec.name, params.join(", ")));
            let description = tool.spec.description.trim();
            if !description.is_empty() {
                out.push_str(" — ");
                out.push_str(&description.replace('\n', " "));
            }
            out.push('\n');
            let simple = properties.is_none_or(|p| {
                p.values().all(|v| {
                    v.as_object().is_some_and(|o| {
                        o.keys()
                            .all(|k| matches!(k.as_str(), "type" | "description"))
                            && !matches!(
                                o.get("type").and_then(Value::as_str),
                                Some("object" | "array")
                            )
                    })
                })
            });
            if !simple {
                out.push_str(&format!("  parameters (JSON Schema): {schema}\n"));
            }
        }
        out
    }
}

/// A schema's refusal as the model and the client read it: where in the value, then why.
fn problem(error: &jsonschema::ValidationError) -> String {
    match error.instance_path.to_string() {
        at if at.is_empty() => error.to_string(),
        at => format!("{at}: {error}"),
    }
}

/// Names every provider's native tool calling accepts, renamed on the wire where need be: ASCII
/// letters, digits, `_`, `-`, `.`.
pub fn is_native_tool_name(name: &str) -> bool {
    name.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Compiles a schema that passed the cost check. Patterns run on the linear-time `regex`
/// engine, never a backtracking one, within a size limit. `format` stays an annotation
/// whatever `$schema` says (drafts 4–7 would check it), so no format checker runs on the
/// model's arguments. A remote `$ref` is refused by the cost check already; the retriever
/// refuses too, so nothing is ever fetched whatever the crate's features.
/// A schema compiled as the service compiles every client schema: bounded regexes, no formats
/// checked, nothing fetched.
pub fn compile(schema: &Value) -> Result<jsonschema::Validator, String> {
    let patterns = jsonschema::PatternOptions::regex()
        .size_limit(schema_limits::REGEX_SIZE_LIMIT)
        .dfa_size_limit(schema_limits::REGEX_DFA_SIZE_LIMIT);
    jsonschema::options()
        .with_pattern_options(patterns)
        .should_validate_formats(false)
        .with_retriever(NoFetch)
        .build(schema)
        .map_err(|e| format!("the parameters schema is not valid: {e}"))
}

/// The retriever of a service that never fetches a schema.
struct NoFetch;

impl jsonschema::Retrieve for NoFetch {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!("'{uri}' is not fetched: a tool schema must be self-contained").into())
    }
}

/// The JSON Schema type a type name written in a signature stands for: JSON Schema's own names
/// and Python's, in any case (`string`, `str`, `Integer`, `list`, …).
pub fn type_name_of(word: &str) -> Option<&'static str> {
    Some(match word.to_ascii_lowercase().as_str() {
        "string" | "str" => "string",
        "integer" | "int" => "integer",
        "number" | "float" => "number",
        "boolean" | "bool" => "boolean",
        "object" | "dict" => "object",
        "array" | "list" => "array",
        "null" | "none" => "null",
        "any" => "any",
        _ => return None,
    })
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use super::*;
    use serde_json::json;

    fn catalog() -> Catalog {
        let spec = |name: &str, parameters: Value| ToolSpec {
            name: name.into(),
            description: format!("the {name} tool"),
            parameters,
        };
        Catalog::new(
            vec![
                spec(
                    "read_file",
                    json!({"type": "object", "properties": {"path": {"type": "string"}, "start_line": {"type": "integer"}}, "required": ["path"]}),
                ),
                spec(
                    "code_search",
                    json!({"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}}, "required": ["query"]}),
                ),
            ],
            "",
        )
        .unwrap_or_else(|e| panic!("{e:?}"))
    }

    fn args(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn a_written_name_resolves_to_a_declared_tool_never_to_a_similar_one() {
        let c = catalog();
        assert_eq!(c.resolve("read_file"), Some(("read_file".into(), None)));
        assert_eq!(
            c.resolve("functions.read_file"),
            Some(("read_file".into(), None))
        );
        let (name, warning) = c.resolve("Read_File").unwrap();
        assert_eq!(name, "read_file");
        assert!(warning.unwrap().contains("'Read_File'"));
        for unknown in ["read_files", "readfile", "read", "functions.grep", ""] {
            assert_eq!(c.resolve(unknown), None, "{unknown}");
        }
    }

    #[test]
    fn a_bare_integer_or_boolean_for_a_text_parameter_is_its_text_and_nothing_else_is() {
        let c = catalog();
        for (written, read) in [
            (json!(3000), "3000"),
            (json!(-7), "-7"),
            (json!(true), "true"),
        ] {
            let checked = c.check("code_search", args(json!({"query": written})));
            assert_eq!(checked.unwrap(), args(json!({"query": read})));
        }
        // A fraction's text is not known (1e3 and 1000.0 read the same): refused as before.
        assert!(c.check("code_search", args(json!({"query": 1.5}))).is_err());
        // Objects, arrays and null are no text; an integer parameter keeps its number.
        for kept in [json!({"a": 1}), json!([1]), Value::Null] {
            assert!(c
                .check("code_search", args(json!({"query": kept})))
                .is_err());
        }
        let checked = c.check("code_search", args(json!({"query": "x", "limit": 3})));
        assert_eq!(checked.unwrap(), args(json!({"query": "x", "limit": 3})));
        // A parameter of several types is not guessed at.
        let loose = Catalog::new(
            vec![ToolSpec {
                name: "find".into(),
                description: "find".into(),
                parameters: json!({"type": "object", "properties": {"q": {"type": ["string", "null"]}}}),
            }],
            "",
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(loose.check("find", args(json!({"q": 5}))).is_err());
    }

    #[test]
    fn text_values_are_read_as_their_declared_types_and_whole_inputs_unwrapped() {
        let c = catalog();
        let checked = c.check("code_search", args(json!({"query": "x", "limit": "5"})));
        assert_eq!(checked.unwrap(), args(json!({"query": "x", "limit": 5})));
        // A string parameter keeps text that looks like a number.
        let checked = c.check("code_search", args(json!({"query": "5"})));
        assert_eq!(checked.unwrap(), args(json!({"query": "5"})));
        let checked = c.check("code_search", args(json!({"input": "{\"query\": \"x\"}"})));
        assert_eq!(checked.unwrap(), args(json!({"query": "x"})));
        let checked = c.check(
            "code_search",
            args(json!({"input": "{'query': 'x', 'limit': 2}"})),
        );
        assert_eq!(checked.unwrap(), args(json!({"query": "x", "limit": 2})));
        let checked = c.check("code_search", args(json!({"input": "query: x y"})));
        assert_eq!(checked.unwrap(), args(json!({"query": "x y"})));
        let checked = c.check(
            "code_search",
            args(json!({"input": "RUST_LOG=debug cargo run"})),
        );
        assert_eq!(
            checked.unwrap(),
            args(json!({"query": "RUST_LOG=debug cargo run"}))
        );
        let refused = c.check(
            "code_search",
            args(json!({"input": "query=\"x\", timeout=30"})),
        );
        assert!(refused.unwrap_err().contains("timeout"));
        let checked = c.check("code_search", args(json!({"input": {"query": "x"}})));
        assert_eq!(checked.unwrap(), args(json!({"query": "x"})));
        // Keys the tool does not declare: not its input, so the text stays the first argument.
        let checked = c.check("code_search", args(json!({"input": "{\"q\": \"x\"}"})));
        assert_eq!(checked.unwrap(), args(json!({"query": "{\"q\": \"x\"}"})));
        // Text that is not of the declared type stays text, and fails the schema.
        assert!(c
            .check("code_search", args(json!({"query": "x", "limit": "five"})))
            .is_err());
    }

    #[test]
    fn a_valid_action_passes_with_positional_arguments_named() {
        let checked = catalog().check("read_file", args(json!({"input": "a.rs", "input_2": 3})));
        assert_eq!(
            checked.map(Value::Object),
            Ok(json!({"path": "a.rs", "start_line": 3}))
        );
    }

    #[test]
    fn unknown_tools_missing_and_mistyped_arguments_are_refused() {
        let c = catalog();
        let unknown = c.check("delete_everything", Map::new()).unwrap_err();
        assert!(
            unknown.contains("no tool named 'delete_everything'")
                && unknown.contains("read_file, code_search"),
            "{unknown}"
        );
        let missing = c.check("read_file", Map::new()).unwrap_err();
        assert!(
            missing.contains("\"path\" is a required property"),
            "{missing}"
        );
        let mistyped = c
            .check("code_search", args(json!({"query": "x", "limit": "ten"})))
            .unwrap_err();
        assert!(mistyped.contains("/limit"), "{mistyped}");
    }

    #[test]
    fn a_schema_that_does_not_compile_names_its_tool() {
        let bad = ToolSpec {
            name: "x".into(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {"a": {"type": 12}}}),
        };
        assert_eq!(Catalog::new(vec![bad], "").map(|_| ()).unwrap_err().0, 0);
    }

    fn one_tool(name: &str, parameters: Value) -> Result<Catalog, (usize, String)> {
        let spec = ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters,
        };
        Catalog::new(vec![catalog().specs().remove(0), spec], "")
    }

    #[test]
    fn a_schema_over_a_bound_is_refused_naming_tool_and_bound() {
        let cycle = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"});
        let (i, why) = one_tool("search", cycle).unwrap_err();
        assert_eq!(i, 1);
        assert!(
            why.starts_with("tools[1] 'search': $ref '#/$defs/"),
            "{why}"
        );
        assert!(why.contains("makes a cycle"), "{why}");
    }

    #[test]
    fn patterns_run_on_the_linear_time_engine() {
        let schema = json!({"type": "object", "properties": {"q": {"type": "string", "pattern": "^\\d{3}-\\w+$"}}});
        let c = one_tool("lookup", schema).unwrap();
        assert!(c.check("lookup", args(json!({"q": "123-abc"}))).is_ok());
        assert!(c.check("lookup", args(json!({"q": "12-abc"}))).is_err());
        let lookaround = json!({"type": "object", "properties": {"q": {"pattern": "(?=(a+)+b)"}}});
        let (_, why) = one_tool("lookup", lookaround).unwrap_err();
        assert!(
            why.contains("'lookup'") && why.contains("look-around"),
            "{why}"
        );
        // Over the engine's size limit (`.` is any Unicode scalar): refused, never run.
        let huge = json!({"type": "object", "properties": {"q": {"pattern": "^.{1,1000}$"}}});
        let (_, why) = one_tool("lookup", huge).unwrap_err();
        assert!(
            why.contains("is not valid") && why.contains("regex"),
            "{why}"
        );
    }

    #[test]
    fn formats_are_annotations_and_nothing_is_fetched() {
        let draft7 = json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
            "properties": {"when": {"type": "string", "format": "date-time"}}});
        let c = one_tool("schedule", draft7).unwrap();
        assert!(c
            .check("schedule", args(json!({"when": "not a date"})))
            .is_ok());
        let remote_meta = json!({"$schema": "http://127.0.0.1:9/meta", "type": "object"});
        let (_, why) = one_tool("schedule", remote_meta).unwrap_err();
        assert!(why.contains("'schedule'"), "{why}");
    }

    #[test]
    fn a_chain_of_500_refs_is_refused_on_a_small_stack() {
        let mut defs = Map::new();
        for i in 0..500 {
            defs.insert(
                format!("a{i}"),
                json!({"$ref": format!("#/$defs/a{}", i + 1)}),
            );
        }
        defs.insert("a500".into(), json!({"type": "string"}));
        let chain = json!({"$defs": defs, "$ref": "#/$defs/a0"});
        let result = std::thread::scope(|s| {
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                // Only the cost check may run here: compiling even a small schema takes more
                // stack than this in a debug build.
                .spawn_scoped(s, || {
                    let spec = ToolSpec {
                        name: "deep".into(),
                        description: String::new(),
                        parameters: chain,
                    };
                    Catalog::new(vec![spec], "").map(|_| ())
                })
                .unwrap()
                .join()
                .unwrap()
        });
        let (_, why) = result.unwrap_err();
        assert!(
            why.contains("'deep'") && why.contains("deeper than 32 levels"),
            "{why}"
        );
    }

    #[test]
    fn a_catalog_of_a_segment_knows_the_names_it_holds() {
        let segment = "You have access to:\n- code_search(query) - search the code\n2. `read_file`: read a file";
        let c = Catalog::new(Vec::new(), segment).unwrap_or_else(|e| panic!("{e:?}"));
        assert!(c.check("read_file", Map::new()).is_ok());
        assert!(c.check("rm_rf", Map::new()).is_err());
    }

    #[test]
    fn without_known_names_any_action_passes() {
        let c = Catalog::new(Vec::new(), "Tools are described elsewhere.")
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(c.check("anything", Map::new()).is_ok());
    }

    #[test]
    fn the_prompt_lists_signatures_and_complex_schemas() {
        let text = catalog().render();
        assert!(
            text.contains("- read_file(path: string, start_line?: integer) — the read_file tool\n"),
            "{text}"
        );
        assert!(text.contains("parameters (JSON Schema): {"), "{text}");
    }

    #[test]
    fn an_undeclared_argument_is_refused_naming_it_and_the_declared_ones() {
        let why = catalog()
            .check("code_search", args(json!({"query": "x", "other_param": 2})))
            .unwrap_err();
        assert_eq!(
            why,
            "'code_search' has no argument 'other_param'; its arguments are: query, limit"
        );
        // A positional argument past the declared ones is undeclared too.
        let why = catalog()
            .check(
                "code_search",
                args(json!({"input": "x", "input_2": 3, "input_3": 4})),
            )
            .unwrap_err();
        assert!(why.contains("no argument 'input_3'"), "{why}");
    }

    #[test]
    fn positional_and_truly_declared_arguments_still_pass() {
        let c = catalog();
        let checked = c.check("code_search", args(json!({"input": "x", "input_2": 3})));
        assert_eq!(
            checked.map(Value::Object),
            Ok(json!({"query": "x", "limit": 3}))
        );
        let own = json!({"type": "object", "properties": {"other_param": {"type": "integer"}, "input": {"type": "string"}}});
        let c = one_tool("tool_name", own).unwrap();
        assert!(c
            .check("tool_name", args(json!({"other_param": 2, "input": "a"})))
            .is_ok());
    }

    #[test]
    fn a_schema_that_admits_extras_keeps_admitting_them() {
        for extras in [json!(true), json!({"type": "integer"})] {
            let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}, "additionalProperties": extras});
            let c = one_tool("lookup", schema).unwrap();
            assert!(c.check("lookup", args(json!({"q": "a", "n": 2}))).is_ok());
        }
        let patterned =
            json!({"type": "object", "properties": {"q": {}}, "patternProperties": {"^x_": {}}});
        let c = one_tool("lookup", patterned).unwrap();
        assert!(c.check("lookup", args(json!({"q": "a", "x_1": 2}))).is_ok());
        let closed = json!({"type": "object", "properties": {"q": {}}, "additionalProperties": {"type": "integer"}});
        let c = one_tool("lookup", closed).unwrap();
        assert!(c
            .check("lookup", args(json!({"q": "a", "n": "two"})))
            .is_err());
        // A tool declared without parameters (an empty `properties`) takes what it is given.
        let c = one_tool("ping", json!({"type": "object", "properties": {}})).unwrap();
        assert!(c.check("ping", args(json!({"host": "a"}))).is_ok());
    }

    #[test]
    fn values_that_are_their_parameters_type_names_are_a_signature() {
        let c = catalog();
        assert!(c.values_are_type_names("read_file", &args(json!({"path": "string"}))));
        assert!(c.values_are_type_names(
            "read_file",
            &args(json!({"path": "str", "start_line": "Integer"}))
        ));
        // One real value among them, a type name of another type, or no schema type: a call.
        assert!(!c.values_are_type_names(
            "read_file",
            &args(json!({"path": "string", "start_line": 3}))
        ));
        assert!(!c.values_are_type_names("read_file", &args(json!({"path": "integer"}))));
        assert!(!c.values_are_type_names("read_file", &Map::new()));
        let untyped =
            json!({"type": "object", "properties": {"kind": {"enum": ["string", "number"]}}});
        let c = one_tool("convert", untyped).unwrap();
        assert!(!c.values_are_type_names("convert", &args(json!({"kind": "string"}))));
    }

    #[test]
    fn an_input_that_calls_another_tool_or_nests_its_own_input_is_read_carefully() {
        let c = catalog();
        let why = c
            .check(
                "read_file",
                args(json!({"input": "code_search(query=\"x\")"})),
            )
            .unwrap_err();
        assert!(why.contains("holds a call of 'code_search'"), "{why}");
        let why = c
            .check(
                "read_file",
                args(json!({"input": "read_file(path=\"a\") and more"})),
            )
            .unwrap_err();
        assert!(why.contains("holds a call of 'read_file'"), "{why}");
        // A function no tool is named after is text like any other.
        let checked = c.check("read_file", args(json!({"input": "print(1)"})));
        assert_eq!(checked.unwrap(), args(json!({"path": "print(1)"})));

        let own = json!({"type": "object", "properties": {"input": {"type": "string"}}});
        let lc = one_tool("Search", own).unwrap();
        for nested in [
            json!({"input": {"input": "x"}}),
            json!({"input": "input=\"x\""}),
        ] {
            let checked = lc.check("Search", args(nested.clone()));
            assert_eq!(checked.unwrap(), args(json!({"input": "x"})), "{nested}");
        }
        // Unquoted, the text is the input as written.
        let checked = lc.check("Search", args(json!({"input": "x = 2"})));
        assert_eq!(checked.unwrap(), args(json!({"input": "x = 2"})));
    }
}
