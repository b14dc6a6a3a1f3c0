//! A code fence that wraps a whole output or input.

/// The inside of a code fence that wraps the whole output.
pub fn unfence(text: &str) -> &str {
    let t = text.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return text;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return text;
    };
    // Two fenced blocks with prose between them are not one fence around everything.
    if body.contains("\n```") {
        return text;
    }
    match body.find('\n') {
        // Gemma's ```tool_code fence is its call, read as markup.
        Some(nl) if body[..nl].trim() == "tool_code" => text,
        Some(nl) => &body[nl + 1..],
        None => text,
    }
}
