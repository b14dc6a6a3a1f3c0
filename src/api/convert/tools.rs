//! The ReAct settings (tags, thought rules, repairs) and the tools: the declared ones compiled
//! into a catalog, and what native tool calling asks of them.

use crate::api::request::{ReactDto, ToolDto};
use crate::step::is_native_tool_name;
use serde_json::Value;

use crate::step::ToolMode;
use crate::step::{
    AnswerSchema, Catalog, ClearToolResults, LoopGuard, ReactSettings, Tags, ToolSpec,
};

/// Results shorter than this are not worth a placeholder (`react.clear_tool_results.min_tokens`).
const DEFAULT_CLEAR_MIN_TOKENS: u32 = 100;

/// The `react` object with its defaults; tags must differ from each other.
pub fn react_settings(
    dto: Option<ReactDto>,
    max_repair_attempts: Option<u32>,
    fail: &mut impl FnMut(&str, String),
) -> ReactSettings {
    let defaults = ReactSettings::default();
    let mut settings = ReactSettings {
        max_repair_attempts: max_repair_attempts.unwrap_or(defaults.max_repair_attempts),
        ..defaults
    };
    let Some(dto) = dto else {
        return settings;
    };
    let d = Tags::default();
    settings.tags = Tags {
        thought: dto.thought_tag.unwrap_or(d.thought),
        action: dto.action_tag.unwrap_or(d.action),
        observation: dto.observation_tag.unwrap_or(d.observation),
        final_answer: dto.final_answer_tag.unwrap_or(d.final_answer),
    };
    let t = &settings.tags;
    let names = [&t.thought, &t.action, &t.observation, &t.final_answer];
    let clash = names.iter().enumerate().any(|(i, a)| {
        names[..i].iter().any(|b| a.eq_ignore_ascii_case(b))
            || (i != 1 && a.eq_ignore_ascii_case(&format!("{} Input", t.action)))
    });
    if clash {
        fail(
            "react",
            "the four tags (and the action tag followed by ' Input') must differ from each other"
                .into(),
        );
    }
    settings.require_thought = dto.require_thought.unwrap_or(settings.require_thought);
    settings.min_thought_chars = dto.min_thought_chars.map_or(0, |n| n as usize);
    settings.require_action = dto.require_action.unwrap_or(false);
    settings.clear_tool_results = dto.clear_tool_results.map(|c| ClearToolResults {
        keep_last_steps: c.keep_last_steps as usize,
        min_tokens: c.min_tokens.unwrap_or(DEFAULT_CLEAR_MIN_TOKENS),
        server_side: c.server_side.unwrap_or(false),
    });
    if let Some(schema) = dto.final_answer_schema {
        match AnswerSchema::new(schema) {
            Ok(schema) => settings.final_answer = Some(std::sync::Arc::new(schema)),
            Err(why) => fail("react.final_answer_schema", why),
        }
    }
    settings.loop_guard = loop_guard(dto.loop_guard, fail);
    settings.answer_tool = dto.answer_tool;
    settings
}

/// The bounds of `react.loop_guard`'s thresholds.
const LOOP_GUARD_RANGE: std::ops::RangeInclusive<u64> = 2..=100;

/// `react.loop_guard`: off with `false`, the defaults with `true` or nothing, or the thresholds
/// given (the one left out follows the other: `warn_after` at most 3, `stop_after` at least 5).
fn loop_guard(value: Option<Value>, fail: &mut impl FnMut(&str, String)) -> Option<LoopGuard> {
    let defaults = LoopGuard::default();
    let object = match value {
        None | Some(Value::Null | Value::Bool(true)) => return Some(defaults),
        Some(Value::Bool(false)) => return None,
        Some(Value::Object(object)) => object,
        Some(_) => {
            fail(
                "react.loop_guard",
                "must be false, true or an object with warn_after and stop_after".into(),
            );
            return None;
        }
    };
    let mut bad = false;
    let mut threshold = |key: &str| -> Option<u32> {
        let value = object.get(key).filter(|v| !v.is_null())?;
        let n = value.as_u64().filter(|n| LOOP_GUARD_RANGE.contains(n));
        if n.is_none() {
            fail(
                &format!("react.loop_guard.{key}"),
                format!(
                    "must be an integer from {} to {}",
                    LOOP_GUARD_RANGE.start(),
                    LOOP_GUARD_RANGE.end()
                ),
            );
            bad = true;
        }
        n.and_then(|n| u32::try_from(n).ok())
    };
    let (warn, stop) = (threshold("warn_after"), threshold("stop_after"));
    // The unknown name is the client's text, and not repeated.
    if object
        .keys()
        .any(|key| key != "warn_after" && key != "stop_after")
    {
        fail(
            "react.loop_guard",
            "takes only warn_after and stop_after; another field was given".into(),
        );
        bad = true;
    }
    let warn_after = warn.unwrap_or_else(|| defaults.warn_after.min(stop.unwrap_or(u32::MAX)));
    let stop_after = stop.unwrap_or_else(|| defaults.stop_after.max(warn_after));
    if warn_after > stop_after {
        fail(
            "react.loop_guard.stop_after",
            format!("must be at least warn_after ({warn_after})"),
        );
        bad = true;
    }
    (!bad).then_some(LoopGuard {
        warn_after,
        stop_after,
    })
}

/// The declared tools (each schema compiled once), or the names in the free-text segment.
pub fn catalog(tools: Vec<ToolDto>, segment: &str, fail: &mut impl FnMut(&str, String)) -> Catalog {
    let mut specs = Vec::with_capacity(tools.len());
    let mut bad = false;
    for (i, tool) in tools.into_iter().enumerate() {
        if specs.iter().any(|s: &ToolSpec| s.name == tool.name) {
            fail(&format!("tools[{i}].name"), "is declared twice".into());
            bad = true;
        }
        let parameters = match (tool.parameters, tool.input_schema) {
            (Some(_), Some(_)) => {
                fail(
                    &format!("tools[{i}]"),
                    "give parameters or inputSchema, not both".into(),
                );
                bad = true;
                continue;
            }
            (Some(schema), None) | (None, Some(schema)) => of_an_object(schema),
            (None, None) => serde_json::json!({"type": "object", "properties": {}}),
        };
        specs.push(ToolSpec {
            name: tool.name,
            description: tool.description.unwrap_or_default(),
            parameters,
        });
    }
    if bad {
        return Catalog::default();
    }
    match Catalog::new(specs, segment) {
        Ok(catalog) => catalog,
        Err((i, why)) => {
            fail(&format!("tools[{i}].parameters"), why);
            Catalog::default()
        }
    }
}

/// A schema that says nothing of its type but describes an object (`{}`, properties alone) with
/// `"type": "object"` said, as every provider's tool calling wants it said.
fn of_an_object(mut schema: serde_json::Value) -> serde_json::Value {
    if let Some(fields) = schema.as_object_mut() {
        let silent = ![
            "type", "anyOf", "oneOf", "allOf", "$ref", "enum", "const", "not",
        ]
        .iter()
        .any(|k| fields.contains_key(*k));
        if silent {
            fields.insert("type".into(), "object".into());
        }
    }
    schema
}

/// Native tool calling needs declared tools, each named as the providers accept, each taking
/// an object (a call's arguments are one).
pub fn tool_mode(mode: Option<ToolMode>, tools: &Catalog, fail: &mut impl FnMut(&str, String)) {
    if mode != Some(ToolMode::Native) {
        return;
    }
    if !tools.has_declared() {
        fail(
            "llm_config.tool_mode",
            "native tool calling needs the tools declared in `tools`".into(),
        );
    }
    if let Some(i) = tools
        .declared_names()
        .position(|name| !is_native_tool_name(name))
    {
        fail(
            &format!("tools[{i}].name"),
            "native tool calling accepts only ASCII letters, digits, '_', '-' and '.' in a tool name; use tool_mode text".into(),
        );
    }
    if let Some(i) = tools
        .declared_specs()
        .position(|t| t.parameters.get("type").and_then(|t| t.as_str()) != Some("object"))
    {
        fail(
            &format!("tools[{i}].parameters"),
            "native tool calling takes a schema whose root is `\"type\": \"object\"` (a call's arguments are an object); use tool_mode text".into(),
        );
    }
}
