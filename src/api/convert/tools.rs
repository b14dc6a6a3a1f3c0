//! The ReAct settings (tags, thought rules, repairs) and the tools: the declared ones compiled
//! into a catalog, and what native tool calling asks of them.

use crate::api::request::{is_native_tool_name, ReactDto, ToolDto};
use crate::step::ToolMode;
use crate::step::{AnswerSchema, Catalog, ClearToolResults, ReactSettings, Tags, ToolSpec};

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
    settings
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
            (Some(schema), None) | (None, Some(schema)) => schema,
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

/// Native tool calling needs declared tools, each named as the providers accept.
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
}
