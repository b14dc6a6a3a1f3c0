//! Checks on the thought before an action: present (`react.require_thought`), long enough
//! (`react.min_thought_chars`), and not degenerate ("I will use the tool").

/// Warnings about the thought of an action; none when it is a real thought.
pub fn thought_warnings(
    thought: &str,
    tool_name: &str,
    require: bool,
    min_chars: usize,
) -> Vec<String> {
    let mut warnings = Vec::new();
    let thought = thought.trim();
    if thought.is_empty() {
        if require {
            warnings.push("the model gave no thought before its action".to_string());
        }
        return warnings;
    }
    let chars = thought.chars().count();
    if chars < min_chars {
        warnings.push(format!(
            "the thought is {chars} characters long, under react.min_thought_chars ({min_chars})"
        ));
    }
    if is_degenerate(thought, tool_name) {
        warnings.push(format!(
            "the thought only says that a tool will be used ({thought:?}); it gives no reason"
        ));
    }
    warnings
}

/// A thought that only announces the call: a few words about using a tool, and nothing else.
fn is_degenerate(thought: &str, tool_name: &str) -> bool {
    let lower = thought.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    const VERBS: [&str; 8] = [
        "use", "using", "call", "calling", "run", "running", "invoke", "execute",
    ];
    const FILLER: [&str; 16] = [
        "i", "will", "should", "need", "to", "now", "let", "me", "the", "a", "this", "that",
        "tool", "function", "action", "it",
    ];
    let tool = tool_name.to_lowercase();
    words.len() <= 8
        && words.iter().any(|w| VERBS.contains(w))
        && words
            .iter()
            .all(|w| VERBS.contains(w) || FILLER.contains(w) || *w == tool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcing_a_call_is_degenerate() {
        for t in [
            "I will use the tool.",
            "Let me call read_file",
            "I need to use this tool now",
            "Using the tool",
        ] {
            assert!(is_degenerate(t, "read_file"), "{t}");
        }
    }

    #[test]
    fn a_reason_is_not_degenerate() {
        for t in [
            "I will use the tool to read the login handler, since the bug is in it.",
            "The error mentions auth.js, so read it",
            "Search for the definition",
        ] {
            assert!(!is_degenerate(t, "read_file"), "{t}");
        }
    }

    #[test]
    fn missing_and_short_thoughts_are_reported_as_configured() {
        assert_eq!(thought_warnings("", "x", true, 0).len(), 1);
        assert!(thought_warnings("", "x", false, 0).is_empty());
        assert_eq!(thought_warnings("short", "x", true, 20).len(), 1);
        assert!(thought_warnings("the file holds the handler we need", "x", true, 20).is_empty());
    }
}
