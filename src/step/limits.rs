//! The iteration limit: on the last step a proposed action becomes an answer that says the limit
//! was reached and summarises what the loop found, so the client always ends with something.

use super::history::{render_call, Role, Turn};

/// Observations are quoted in the summary only up to this many characters each.
const OBSERVATION_CHARS: usize = 300;

pub fn summary(history: &[Turn], last_thought: &str) -> String {
    let mut text = String::from(
        "I reached the limit of steps for this request before I could finish. Here is what I found so far.",
    );
    let mut steps = Vec::new();
    for (i, turn) in history.iter().enumerate() {
        let Some(call) = turn
            .tool_call
            .as_ref()
            .filter(|_| turn.role == Role::Assistant)
        else {
            continue;
        };
        let observed = history[i + 1..]
            .iter()
            .take_while(|t| t.role != Role::Assistant)
            .find(|t| t.role == Role::ToolObservation)
            .map(|t| shorten(t.content.trim()));
        let call = render_call(&call.name, &call.parameters);
        steps.push(match observed {
            Some(obs) => format!("- {call}: {obs}"),
            None => format!("- {call}: (no result was returned)"),
        });
    }
    if steps.is_empty() {
        text.push_str("\n\nNo tools were run.");
    } else {
        text.push_str("\n\nSteps taken:\n");
        text.push_str(&steps.join("\n"));
    }
    if !last_thought.trim().is_empty() {
        text.push_str("\n\nMy last thought was: ");
        text.push_str(last_thought.trim());
    }
    text
}

fn shorten(text: &str) -> String {
    match text.char_indices().nth(OBSERVATION_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::history::ToolCall;
    use serde_json::Map;

    #[test]
    fn the_summary_lists_each_tool_call_with_its_observation() {
        let ts = || "2024-01-01T00:00:00.000Z".to_string();
        let mut call = Turn::new(Role::Assistant, "search".into(), ts());
        call.tool_call = Some(ToolCall {
            id: None,
            name: "code_search".into(),
            parameters: Map::new(),
        });
        let history = vec![
            Turn::new(Role::User, "how?".into(), ts()),
            call,
            Turn::new(Role::ToolObservation, "Found: auth.js".into(), ts()),
        ];
        let text = summary(&history, "read auth.js next");
        assert!(text.contains("limit of steps"));
        assert!(text.contains("- code_search(): Found: auth.js"));
        assert!(text.ends_with("My last thought was: read auth.js next"));
    }
}
