//! What a declared tool schema may cost, checked before it is compiled. Schemas come from the
//! request, so they are untrusted: the `jsonschema` crate compiles and validates them
//! recursively, inlines every `$ref` that is not a cycle (so a fan-out through refs is paid in
//! full), unrolls a cycle without end when an argument is validated, and builds a regex for
//! every `pattern`. The walk here is iterative (its own stack on the heap, whose size the
//! bounds cap), follows `$ref`s as the compiler does, and refuses a schema before any of that
//! cost is paid. Each refusal names the bound that was passed.

use std::rc::Rc;

use serde_json::{Map, Value};

/// Subschemas nested in one another, each `$ref` followed counting as one more level.
pub const MAX_DEPTH: usize = 32;
/// Levels of JSON nesting anywhere in a schema (the request body's own parser allows 128).
pub const MAX_JSON_DEPTH: usize = 128;
/// Compact JSON size of one schema.
pub const MAX_SCHEMA_BYTES: usize = 128 * 1024;
/// Subschemas of one schema once its `$ref`s are expanded, as the compiler expands them.
pub const MAX_SUBSCHEMAS: usize = 5_000;
/// `$ref`s one schema's expansion follows.
pub const MAX_REFS: usize = 1_000;
/// Branches of one `anyOf`, `oneOf` or `allOf`.
pub const MAX_BRANCHES: usize = 128;
/// `pattern`s and `patternProperties` keys of one schema (expanded): each is a compiled regex.
pub const MAX_PATTERNS: usize = 64;
/// Length of one pattern's source.
pub const MAX_PATTERN_BYTES: usize = 1_000;
/// Compact JSON size of all the request's schemas together.
pub const MAX_TOTAL_BYTES: usize = 1024 * 1024;
/// Expanded subschemas of all the request's schemas together.
pub const MAX_TOTAL_SUBSCHEMAS: usize = 20_000;
/// Patterns of all the request's schemas together: at most 32 MiB of compiled regexes.
pub const MAX_TOTAL_PATTERNS: usize = 256;
/// Size of one compiled regex (the `regex` crate's default is 10 MiB).
pub const REGEX_SIZE_LIMIT: usize = 128 * 1024;
/// Lazy-DFA cache of one regex; past it the engine stays linear, only slower.
pub const REGEX_DFA_SIZE_LIMIT: usize = 128 * 1024;

/// What one schema costs, in the figures the request-wide totals add up.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cost {
    pub bytes: usize,
    pub subschemas: usize,
    pub patterns: usize,
}

/// The running totals of one request's schemas.
#[derive(Debug, Default)]
pub struct Totals(Cost);

impl Totals {
    /// Checks one schema and adds its cost to the request's; the error says which bound.
    pub fn admit(&mut self, schema: &Value) -> Result<(), String> {
        let cost = check(schema)?;
        let sum = Cost {
            bytes: self.0.bytes + cost.bytes,
            subschemas: self.0.subschemas + cost.subschemas,
            patterns: self.0.patterns + cost.patterns,
        };
        let over = |what: &str, limit: usize| {
            format!("the request's tool schemas together have more than {limit} {what}")
        };
        if sum.bytes > MAX_TOTAL_BYTES {
            return Err(over("bytes of JSON", MAX_TOTAL_BYTES));
        }
        if sum.subschemas > MAX_TOTAL_SUBSCHEMAS {
            return Err(over("subschemas", MAX_TOTAL_SUBSCHEMAS));
        }
        if sum.patterns > MAX_TOTAL_PATTERNS {
            return Err(over("patterns", MAX_TOTAL_PATTERNS));
        }
        self.0 = sum;
        Ok(())
    }
}

/// The cost of one schema, or the first bound it passes.
pub fn check(schema: &Value) -> Result<Cost, String> {
    let bytes = json_size(schema)?;
    let mut walk = Walk::new(schema);
    walk.run()?;
    Ok(Cost {
        bytes,
        subschemas: walk.subschemas,
        patterns: walk.patterns,
    })
}

/// The compact JSON size (string escapes aside), walked without recursion; stops at the bound.
fn json_size(schema: &Value) -> Result<usize, String> {
    let mut bytes = 0;
    let mut stack = vec![(schema, 1)];
    while let Some((value, depth)) = stack.pop() {
        if depth > MAX_JSON_DEPTH {
            return Err(format!(
                "the parameters schema nests deeper than {MAX_JSON_DEPTH} JSON levels"
            ));
        }
        bytes += match value {
            Value::Null | Value::Bool(_) => 5,
            Value::Number(n) => n.to_string().len(),
            Value::String(s) => s.len() + 2,
            Value::Array(items) => {
                stack.extend(items.iter().map(|v| (v, depth + 1)));
                items.len() + 2
            }
            Value::Object(map) => {
                stack.extend(map.values().map(|v| (v, depth + 1)));
                map.keys().map(|k| k.len() + 4).sum::<usize>() + 2
            }
        };
        if bytes > MAX_SCHEMA_BYTES {
            return Err(format!(
                "the parameters schema is larger than {MAX_SCHEMA_BYTES} bytes of JSON"
            ));
        }
    }
    Ok(bytes)
}

/// The `$ref` targets followed to reach a subschema, innermost first: a target already on the
/// chain is a cycle. Its length is at most `MAX_DEPTH`, since each ref adds a level.
struct Link<'a> {
    target: &'a Value,
    up: Option<Rc<Link<'a>>>,
}

struct Frame<'a> {
    node: &'a Value,
    depth: usize,
    refs: Option<Rc<Link<'a>>>,
}

struct Walk<'a> {
    root: &'a Value,
    stack: Vec<Frame<'a>>,
    subschemas: usize,
    refs: usize,
    patterns: usize,
}

impl<'a> Walk<'a> {
    fn new(root: &'a Value) -> Self {
        Self {
            root,
            stack: Vec::new(),
            subschemas: 0,
            refs: 0,
            patterns: 0,
        }
    }

    fn run(&mut self) -> Result<(), String> {
        self.push(self.root, 0, None)?;
        while let Some(frame) = self.stack.pop() {
            self.visit(frame)?;
        }
        Ok(())
    }

    /// Counted when pushed, so the stack never holds more than the bound allows.
    fn push(
        &mut self,
        node: &'a Value,
        depth: usize,
        refs: Option<Rc<Link<'a>>>,
    ) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!(
                "the parameters schema nests deeper than {MAX_DEPTH} levels (each $ref followed counts as one)"
            ));
        }
        self.subschemas += 1;
        if self.subschemas > MAX_SUBSCHEMAS {
            return Err(format!(
                "the parameters schema expands to more than {MAX_SUBSCHEMAS} subschemas (each $ref counted as often as it is reached)"
            ));
        }
        self.stack.push(Frame { node, depth, refs });
        Ok(())
    }

    fn visit(&mut self, frame: Frame<'a>) -> Result<(), String> {
        // Booleans are whole schemas; other non-objects the compiler itself refuses.
        let Value::Object(map) = frame.node else {
            return Ok(());
        };
        self.refuse_unsupported(map, frame.node)?;
        if let Some(reference) = map.get("$ref") {
            self.follow(reference, &frame)?;
        }
        for (keyword, value) in map {
            self.keyword(keyword, value, &frame)?;
        }
        Ok(())
    }

    /// Keywords that would let the compiler resolve a ref differently from this walk.
    fn refuse_unsupported(&self, map: &Map<String, Value>, node: &Value) -> Result<(), String> {
        for keyword in ["$dynamicRef", "$recursiveRef"] {
            if map.contains_key(keyword) {
                return Err(format!(
                    "the parameters schema uses {keyword}, which is not supported"
                ));
            }
        }
        // A nested `$id` (`id` before draft 6) starts a new base for the refs inside it.
        let nested_id = map.contains_key("$id") || map.get("id").is_some_and(Value::is_string);
        if nested_id && !std::ptr::eq(node, self.root) {
            return Err(
                "the parameters schema declares an $id below its root, which is not supported"
                    .into(),
            );
        }
        Ok(())
    }

    /// Only `#` and `#/json/pointer` into this schema: nothing is ever fetched.
    fn follow(&mut self, reference: &'a Value, from: &Frame<'a>) -> Result<(), String> {
        let Some(reference) = reference.as_str() else {
            return Err("the parameters schema has a $ref that is not a string".into());
        };
        self.refs += 1;
        if self.refs > MAX_REFS {
            return Err(format!(
                "the parameters schema follows more than {MAX_REFS} $refs"
            ));
        }
        let shown = shorten(reference);
        let target = resolve(self.root, reference).ok_or_else(|| {
            format!("$ref '{shown}' does not point into the schema itself (only '#/…' refs to its own parts are followed; nothing is fetched)")
        })?;
        let mut link = from.refs.as_deref();
        while let Some(l) = link {
            if std::ptr::eq(l.target, target) {
                return Err(format!(
                    "$ref '{shown}' makes a cycle; recursive schemas are not supported"
                ));
            }
            link = l.up.as_deref();
        }
        let refs = Some(Rc::new(Link {
            target,
            up: from.refs.clone(),
        }));
        self.push(target, from.depth + 1, refs)
    }

    /// Pushes the subschemas a keyword holds and checks the patterns it names.
    fn keyword(&mut self, keyword: &str, value: &'a Value, from: &Frame<'a>) -> Result<(), String> {
        let depth = from.depth + 1;
        match (keyword, value) {
            ("patternProperties", Value::Object(map)) => {
                for (pattern, schema) in map {
                    self.pattern(pattern)?;
                    self.push(schema, depth, from.refs.clone())?;
                }
            }
            (
                "properties" | "$defs" | "definitions" | "dependentSchemas" | "dependencies",
                Value::Object(map),
            ) => {
                // `dependencies` values may also be arrays of names, which hold no schema.
                for schema in map.values().filter(|v| !v.is_array()) {
                    self.push(schema, depth, from.refs.clone())?;
                }
            }
            ("allOf" | "anyOf" | "oneOf", Value::Array(items)) => {
                if items.len() > MAX_BRANCHES {
                    return Err(format!(
                        "an {keyword} of the parameters schema has more than {MAX_BRANCHES} branches"
                    ));
                }
                self.push_all(items, depth, from)?;
            }
            ("prefixItems" | "items", Value::Array(items)) => self.push_all(items, depth, from)?,
            (
                "items"
                | "additionalItems"
                | "additionalProperties"
                | "unevaluatedItems"
                | "unevaluatedProperties"
                | "propertyNames"
                | "contains"
                | "not"
                | "if"
                | "then"
                | "else"
                | "contentSchema",
                schema,
            ) => self.push(schema, depth, from.refs.clone())?,
            ("pattern", Value::String(pattern)) => self.pattern(pattern)?,
            _ => {}
        }
        Ok(())
    }

    fn push_all(
        &mut self,
        items: &'a [Value],
        depth: usize,
        from: &Frame<'a>,
    ) -> Result<(), String> {
        for schema in items {
            self.push(schema, depth, from.refs.clone())?;
        }
        Ok(())
    }

    fn pattern(&mut self, pattern: &str) -> Result<(), String> {
        self.patterns += 1;
        if self.patterns > MAX_PATTERNS {
            return Err(format!(
                "the parameters schema has more than {MAX_PATTERNS} patterns (each $ref counted as often as it is reached)"
            ));
        }
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(format!(
                "pattern '{}' is longer than {MAX_PATTERN_BYTES} bytes",
                shorten(pattern)
            ));
        }
        linear_time(pattern)
    }
}

/// Patterns run on the `regex` crate, which matches in linear time and so has no look-around
/// and no back-references: those are refused here with a message that says so. Any other
/// pattern the engine cannot compile is refused by the compiler.
fn linear_time(pattern: &str) -> Result<(), String> {
    use regex_syntax::ast::ErrorKind;
    let Err(error) = regex_syntax::ast::parse::Parser::new().parse(pattern) else {
        return Ok(());
    };
    let feature = match error.kind() {
        ErrorKind::UnsupportedLookAround => "look-around",
        ErrorKind::UnsupportedBackreference => "a back-reference",
        _ => return Ok(()),
    };
    Err(format!(
        "pattern '{}' uses {feature}, which the linear-time regex engine does not support",
        shorten(pattern)
    ))
}

/// `#` or `#/a/b` (percent-decoded, then `~1` and `~0` unescaped), against this schema only.
fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let fragment = reference.strip_prefix('#')?;
    let pointer = percent_decode(fragment)?;
    if pointer.is_empty() {
        return Some(root);
    }
    if !pointer.starts_with('/') {
        return None;
    }
    root.pointer(&pointer)
}

/// As the compiler decodes (the `percent-encoding` crate): `%` and two hex digits is a byte;
/// any other `%` stays as it is.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let digits = bytes.get(i + 1..i + 3).and_then(|h| {
            let hex = std::str::from_utf8(h).ok()?;
            let valid = h.iter().all(u8::is_ascii_hexdigit);
            valid.then(|| u8::from_str_radix(hex, 16).ok())?
        });
        match (bytes[i], digits) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// A ref or pattern as quoted in a message: an attacker's may be 100 KB long.
fn shorten(text: &str) -> String {
    const SHOWN: usize = 60;
    match text.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use super::*;
    use serde_json::json;

    /// The refusal, which must name `bound`.
    fn refused(schema: &Value, bound: &str) {
        refused_by(schema, &[bound]);
    }

    /// The refusal, which must name one of `bounds` (whichever the walk reaches first).
    fn refused_by(schema: &Value, bounds: &[&str]) {
        match check(schema) {
            Err(why) => assert!(bounds.iter().any(|b| why.contains(b)), "{why}"),
            Ok(cost) => panic!("passed ({cost:?}); expected a refusal naming {bounds:?}"),
        }
    }

    /// `{"$defs": {"a0": {"$ref": "#/$defs/a1"}, …, "aN": {"type": "string"}}, "$ref": "#/$defs/a0"}`
    fn ref_chain(n: usize) -> Value {
        let mut defs = Map::new();
        for i in 0..n {
            defs.insert(
                format!("a{i}"),
                json!({"$ref": format!("#/$defs/a{}", i + 1)}),
            );
        }
        defs.insert(format!("a{n}"), json!({"type": "string"}));
        json!({"$defs": defs, "$ref": "#/$defs/a0"})
    }

    /// Each level an `anyOf` of `width` refs to the next: width^levels expanded, a few KB written.
    fn fan_out(width: usize, levels: usize) -> Value {
        let mut defs = Map::new();
        for i in 0..levels {
            let next = json!({"$ref": format!("#/$defs/l{}", i + 1)});
            defs.insert(format!("l{i}"), json!({"anyOf": vec![next; width]}));
        }
        defs.insert(format!("l{levels}"), json!({"type": "string"}));
        json!({"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/l0"}}})
    }

    /// `{"properties": {"a": {"properties": {"a": …}}}}`, built without recursion.
    fn nested(levels: usize) -> Value {
        // Not `json!`, which would serialize the inner value again, recursively.
        let mut value = json!({"type": "string"});
        for _ in 0..levels {
            let mut properties = Map::new();
            properties.insert("a".into(), value);
            let mut object = Map::new();
            object.insert("type".into(), json!("object"));
            object.insert("properties".into(), Value::Object(properties));
            value = Value::Object(object);
        }
        value
    }

    /// Drops a deep value without the recursion of `Value`'s own drop.
    fn dismantle(value: Value) {
        let mut stack = vec![value];
        while let Some(mut v) = stack.pop() {
            match &mut v {
                Value::Object(map) => stack.extend(std::mem::take(map).into_iter().map(|(_, v)| v)),
                Value::Array(items) => stack.append(items),
                _ => {}
            }
        }
    }

    /// Runs `f` on a thread with a 256 KiB stack: a walk that recursed would overflow it.
    fn on_small_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn_scoped(s, f)
                .unwrap()
                .join()
                .unwrap()
        })
    }

    /// A GitHub-style MCP tool: nested objects, enums, arrays, `$defs` shared by refs, formats.
    pub(crate) fn github_like() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "user": {"type": "object", "properties": {
                    "login": {"type": "string", "pattern": "^[A-Za-z0-9-]{1,39}$"},
                    "id": {"type": "integer", "minimum": 1},
                    "site_admin": {"type": "boolean"}}, "required": ["login"]},
                "label": {"type": "object", "properties": {
                    "name": {"type": "string", "maxLength": 50},
                    "color": {"type": "string", "pattern": "^[0-9a-fA-F]{6}$"}}},
                "state": {"type": "string", "enum": ["open", "closed", "all"]}
            },
            "properties": {
                "owner": {"type": "string", "description": "Repository owner"},
                "repo": {"type": "string"},
                "title": {"type": "string", "minLength": 1},
                "body": {"type": ["string", "null"]},
                "state": {"$ref": "#/$defs/state"},
                "assignees": {"type": "array", "items": {"$ref": "#/$defs/user"}, "maxItems": 10},
                "labels": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/label"}]}},
                "milestone": {"oneOf": [{"type": "integer"}, {"type": "null"}]},
                "since": {"type": "string", "format": "date-time"},
                "sort": {"type": "string", "enum": ["created", "updated", "comments"], "default": "created"},
                "page": {"type": "integer", "minimum": 1, "default": 1},
                "reviewers": {"type": "object", "additionalProperties": false, "properties": {
                    "users": {"type": "array", "items": {"$ref": "#/$defs/user"}},
                    "teams": {"type": "array", "items": {"type": "string"}}}}
            },
            "required": ["owner", "repo", "title"],
            "additionalProperties": false
        })
    }

    #[test]
    fn a_realistic_schema_passes_and_is_counted() {
        let cost = check(&github_like()).unwrap();
        // `user` is reached twice by ref and once in `$defs`: each reach is compiled, so counted.
        assert_eq!((cost.subschemas, cost.patterns), (45, 5), "{cost:?}");
        let filesystem = json!({"type": "object", "properties": {
            "edits": {"type": "array", "items": {"type": "object", "properties": {
                "oldText": {"type": "string"}, "newText": {"type": "string"}},
                "required": ["oldText", "newText"], "additionalProperties": false}},
            "path": {"type": "string"}, "dryRun": {"type": "boolean", "default": false}},
            "required": ["path", "edits"], "definitions": {"unused": {"not": {}}}});
        assert!(check(&filesystem).is_ok());
    }

    #[test]
    fn each_size_bound_is_named() {
        refused(&nested(MAX_DEPTH + 1), "deeper than 32 levels");
        assert!(check(&nested(MAX_DEPTH)).is_ok());
        refused(
            &json!({"description": "x".repeat(MAX_SCHEMA_BYTES)}),
            "larger than 131072 bytes",
        );
        let many: Map<String, Value> = (0..MAX_SUBSCHEMAS)
            .map(|i| (format!("p{i}"), json!(true)))
            .collect();
        refused(&json!({"properties": many}), "more than 5000 subschemas");
        let refs: Map<String, Value> = (0..=MAX_REFS)
            .map(|i| (format!("p{i}"), json!({"$ref": "#/$defs/s"})))
            .collect();
        refused(
            &json!({"$defs": {"s": {"type": "string"}}, "properties": refs}),
            "more than 1000 $refs",
        );
        refused(
            &json!({"anyOf": vec![json!({"type": "string"}); MAX_BRANCHES + 1]}),
            "anyOf of the parameters schema has more than 128 branches",
        );
    }

    #[test]
    fn a_fan_out_through_refs_is_bounded_by_its_expansion() {
        // 16^5 = 2^20 expanded subschemas from a schema under 1 KB.
        let shallow = fan_out(16, 5);
        assert!(shallow.to_string().len() < 2_000);
        // Each branch is a ref, so the ref count passes its bound first.
        refused_by(
            &shallow,
            &["more than 1000 $refs", "more than 5000 subschemas"],
        );
        // 2^20 again, twenty levels deep: the depth bound comes first.
        refused(&fan_out(2, 20), "deeper than 32 levels");
        assert!(check(&fan_out(4, 3)).is_ok());
    }

    #[test]
    fn cycles_are_refused_direct_indirect_and_through_properties() {
        refused(
            &json!({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}),
            "makes a cycle",
        );
        refused(
            &json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                    "properties": {"x": {"$ref": "#/$defs/a"}}}),
            "makes a cycle",
        );
        refused(
            &json!({"definitions": {"node": {"type": "object", "properties": {
                "children": {"type": "array", "items": {"$ref": "#/definitions/node"}}}}},
                "$ref": "#/definitions/node"}),
            "makes a cycle",
        );
        refused(
            &json!({"type": "object", "properties": {"self": {"$ref": "#"}}}),
            "makes a cycle",
        );
        // A 100-node cycle, entered from a property: longer than the depth bound, which it
        // passes before it closes.
        let mut defs = Map::new();
        for i in 0..100 {
            defs.insert(
                format!("n{i}"),
                json!({"$ref": format!("#/$defs/n{}", (i + 1) % 100)}),
            );
        }
        refused(
            &json!({"$defs": defs, "properties": {"x": {"$ref": "#/$defs/n0"}}}),
            "deeper than 32 levels",
        );
    }

    #[test]
    fn refs_resolve_only_inside_the_schema() {
        for reference in [
            "https://example.com/schema.json",
            "other.json#/$defs/a",
            "file:///etc/passwd",
            "#anchor",
            "#/$defs/missing",
        ] {
            refused(
                &json!({"$defs": {"a": {}}, "$ref": reference}),
                "does not point into the schema itself",
            );
        }
        refused(&json!({"$ref": 7}), "not a string");
        let escaped = json!({"$defs": {"a/b": {"type": "string"}, "c d": {"type": "string"}},
            "properties": {"x": {"$ref": "#/$defs/a~1b"}, "y": {"$ref": "#/$defs/c%20d"},
                           "z": {"$ref": "#/properties/x"}}});
        assert!(check(&escaped).is_ok());
    }

    #[test]
    fn keywords_that_move_the_base_of_a_ref_are_refused() {
        refused(
            &json!({"$dynamicAnchor": "m", "properties": {"x": {"$dynamicRef": "#m"}}}),
            "$dynamicRef",
        );
        refused(
            &json!({"properties": {"x": {"$recursiveRef": "#"}}}),
            "$recursiveRef",
        );
        refused(
            &json!({"properties": {"x": {"$id": "https://evil.example/x", "$ref": "#/a"}}}),
            "$id below its root",
        );
        assert!(check(&json!({"$id": "https://example.com/tool", "type": "object"})).is_ok());
        // A property *named* `$id` or `$ref` is a name, not a keyword.
        let names = json!({"properties": {"$id": {"type": "string"}, "$ref": {"type": "string"}}});
        assert!(check(&names).is_ok());
    }

    #[test]
    fn patterns_are_counted_bounded_and_linear() {
        assert!(check(&json!({"pattern": "^[a-z][a-z0-9_]*(\\.[a-z]+)?$"})).is_ok());
        refused(&json!({"pattern": "(?=(a+)+b)"}), "uses look-around");
        refused(&json!({"pattern": "(a)\\1"}), "uses a back-reference");
        refused(
            &json!({"patternProperties": {"^(?!x)": {}}}),
            "uses look-around",
        );
        refused(
            &json!({"pattern": "a".repeat(MAX_PATTERN_BYTES + 1)}),
            "longer than 1000 bytes",
        );
        let many: Map<String, Value> = (0..=MAX_PATTERNS)
            .map(|i| (format!("p{i}"), json!({"type": "string", "pattern": "^x$"})))
            .collect();
        refused(&json!({"properties": many}), "more than 64 patterns");
    }

    #[test]
    fn request_totals_bound_many_tools_that_each_pass() {
        let tool: Map<String, Value> = (0..60)
            .map(|i| (format!("p{i}"), json!({"type": "string", "pattern": "^x$"})))
            .collect();
        let tool = json!({"properties": tool});
        let mut totals = Totals::default();
        let admitted = (0..128).take_while(|_| totals.admit(&tool).is_ok()).count();
        assert_eq!(admitted, MAX_TOTAL_PATTERNS / 60);
        let why = totals.admit(&tool).unwrap_err();
        assert!(
            why.contains("together have more than 256 patterns"),
            "{why}"
        );
    }

    #[test]
    fn deep_schemas_are_refused_on_a_small_stack() {
        let chain = ref_chain(500);
        assert!(chain.to_string().len() < 20_000);
        let why = on_small_stack(|| check(&chain)).unwrap_err();
        assert!(why.contains("deeper than 32 levels"), "{why}");

        let deep = nested(10_000);
        let why = on_small_stack(|| check(&deep)).unwrap_err();
        assert!(why.contains("deeper than 128 JSON levels"), "{why}");
        dismantle(deep);

        let mut data = json!(1);
        for _ in 0..10_000 {
            data = Value::Array(vec![data]);
        }
        let mut schema = json!({"type": "array"});
        schema["default"] = data;
        let why = on_small_stack(|| check(&schema)).unwrap_err();
        assert!(why.contains("JSON levels"), "{why}");
        dismantle(schema);
    }
}
