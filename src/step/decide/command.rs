//! A query such as `/read_file src/auth.js` that names a declared tool: the call, proposed
//! without a model call.

use serde_json::{Map, Value};

use super::valid::{Call, Valid};
use crate::step::parse;
use crate::step::tools::Catalog;

/// A query such as `/read_file src/auth.js` or `/code_search query="login"` that names a known
/// tool: the action, without a model call. Any other `/…` is `None` and goes to the model.
pub fn command(query: &str, catalog: &Catalog) -> Option<Valid> {
    let rest = query.trim().strip_prefix('/')?;
    let name_len = rest
        .find(|c: char| c.is_whitespace() || c == '(')
        .unwrap_or(rest.len());
    let name = &rest[..name_len];
    if name.is_empty() || !catalog.has(name) {
        return None;
    }
    let input = rest[name_len..].trim();
    let args = if let Some(inner) = input.strip_prefix('(').and_then(|i| i.strip_suffix(')')) {
        parse::parse_args(inner).ok()?
    } else if looks_like_keywords(input) {
        parse::parse_args(input).ok()?
    } else {
        let mut args = Map::new();
        let value = input.trim_matches(|c| c == '"' || c == '\'');
        if !value.is_empty() {
            args.insert("input".into(), Value::String(value.to_string()));
        }
        args
    };
    let tool_args = catalog.check(name, args).ok()?;
    Some(Valid::Action {
        call: Call {
            tool_name: name.to_string(),
            tool_args,
            raw_action_string: query.trim().to_string(),
            tool_call_id: None,
        },
        parallel: Vec::new(),
    })
}

/// `key=value …` rather than free text.
fn looks_like_keywords(input: &str) -> bool {
    let key_len = input
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(input.len());
    key_len > 0 && input[key_len..].trim_start().starts_with('=')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::decide::tests::{action, catalog, strip_raw};
    use serde_json::json;

    #[test]
    fn commands_for_declared_tools_need_no_model() {
        let c = catalog();
        assert_eq!(
            strip_raw(command("/read_file src/auth.js", &c)),
            action("read_file", json!({"path": "src/auth.js"}))
        );
        assert_eq!(
            strip_raw(command("/code_search query=\"login\" limit=3", &c)),
            action("code_search", json!({"query": "login", "limit": 3}))
        );
        assert_eq!(
            strip_raw(command("/code_search(\"login form\")", &c)),
            action("code_search", json!({"query": "login form"}))
        );
    }

    #[test]
    fn other_slashes_go_to_the_model() {
        let c = catalog();
        assert_eq!(command("/help", &c), None);
        assert_eq!(
            command("/read_file", &c),
            None,
            "a required argument is missing"
        );
        assert_eq!(command("read_file a.rs", &c), None);
        assert_eq!(command("/ read_file", &c), None);
    }
}
