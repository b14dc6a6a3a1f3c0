//! Tool names as native tool calling takes them everywhere. A tool may be named with `.` (an
//! MCP server's `notion.search`), and a history may hold calls of tools named otherwise still,
//! but OpenAI's and Anthropic's tool calling take only ASCII letters, digits, `_` and `-`, at
//! most 64 of them, and refuse a request with any other name. Such a name goes on the wire rewritten (`notion_search`, made
//! unique among the step's tools), and the model's calls of it come back under the name the
//! client gave. A step whose names all fit is sent as it came.

use std::collections::HashSet;

use super::{ChatRequest, NativeCall};

/// The longest name every provider's native tool calling takes.
const MAX_WIRE_CHARS: usize = 64;

/// The request's tools whose names are rewritten on the wire: `(given, wire)`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WireNames {
    renamed: Vec<(String, String)>,
}

impl WireNames {
    /// The rewriting the request's tool `names` (the client's and the service's own, such as
    /// `final_answer`) need: none when every name fits.
    pub fn of<'a>(names: impl Iterator<Item = &'a str> + Clone) -> Self {
        if names.clone().all(fits) {
            return Self::default();
        }
        let mut taken: HashSet<String> = names
            .clone()
            .filter(|n| fits(n))
            .map(String::from)
            .collect();
        let renamed = names
            .filter(|n| !fits(n))
            .map(|name| {
                let wire = unique(&sanitized(name), &mut taken);
                (name.to_string(), wire)
            })
            .collect();
        Self { renamed }
    }

    /// Renames the request's tools, and the calls of them in its history; a history call of a
    /// tool the step does not send, whose name the providers refuse, is rewritten too.
    pub fn apply(&self, request: &mut ChatRequest) {
        for tool in &mut request.tools {
            if let Some(wire) = self.wire(&tool.name) {
                tool.name = wire.to_string();
            }
        }
        for call in request.messages.iter_mut().flat_map(|m| m.calls.iter_mut()) {
            match self.wire(&call.name) {
                Some(wire) => call.name = wire.to_string(),
                None if !fits(&call.name) => call.name = sanitized(&call.name),
                None => {}
            }
        }
    }

    /// The `(given, wire)` pairs, as the request keeps them for [`Self::restore`].
    pub fn into_pairs(self) -> Vec<(String, String)> {
        self.renamed
    }

    /// Gives the model's calls back the names the client gave their tools, `renamed` being
    /// the request's `(given, wire)` pairs.
    pub fn restore(renamed: &[(String, String)], calls: &mut [NativeCall]) {
        for call in calls {
            if let Some((given, _)) = renamed.iter().find(|(_, wire)| *wire == call.name) {
                call.name = given.clone();
            }
        }
    }

    /// The name the model sees the tool `given` by.
    pub fn seen<'a>(&'a self, given: &'a str) -> &'a str {
        self.wire(given).unwrap_or(given)
    }

    /// The name the client gave the tool the model knows as `wire`, where it was renamed.
    pub fn given(&self, wire: &str) -> Option<&str> {
        let pair = self.renamed.iter().find(|(_, name)| name == wire);
        pair.map(|(given, _)| given.as_str())
    }

    fn wire(&self, given: &str) -> Option<&str> {
        let pair = self.renamed.iter().find(|(name, _)| name == given);
        pair.map(|(_, wire)| wire.as_str())
    }
}

fn fits(name: &str) -> bool {
    (1..=MAX_WIRE_CHARS).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

/// `name` with every other character as `_`, cut to [`MAX_WIRE_CHARS`].
fn sanitized(name: &str) -> String {
    let mut wire: String = name
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() || c == '-' {
            true => c,
            false => '_',
        })
        .take(MAX_WIRE_CHARS)
        .collect();
    if wire.is_empty() {
        wire.push('_');
    }
    wire
}

/// `wire`, or with a number after it, that no other tool of the step is named.
fn unique(wire: &str, taken: &mut HashSet<String>) -> String {
    let mut candidate = wire.to_string();
    let mut n = 2;
    while taken.contains(&candidate) {
        let suffix = format!("_{n}");
        let keep = wire.len().min(MAX_WIRE_CHARS - suffix.len());
        candidate = format!("{}{suffix}", &wire[..keep]);
        n += 1;
    }
    taken.insert(candidate.clone());
    candidate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_fit_are_left_and_others_rewritten_apart_from_every_other() {
        assert_eq!(
            WireNames::of(["read_file", "grep-2"].into_iter()),
            WireNames::default()
        );
        let long = "x".repeat(100);
        let names = [
            "notion.search",
            "notion_search",
            "notion-search",
            long.as_str(),
            "a.b.c",
        ];
        let wire = WireNames::of(names.into_iter());
        let renamed: Vec<&str> = wire.renamed.iter().map(|(_, w)| w.as_str()).collect();
        assert_eq!(renamed[0], "notion_search_2");
        assert_eq!(renamed[1], "x".repeat(64));
        assert_eq!(renamed[2], "a_b_c");
        assert!(renamed.iter().all(|w| fits(w)));
        // Many names that rewrite alike stay apart, within the bound.
        let many: Vec<String> = (0..200)
            .map(|i| format!("{}.{i}", "y".repeat(70)))
            .collect();
        let wire = WireNames::of(many.iter().map(String::as_str));
        let unique: HashSet<&str> = wire.renamed.iter().map(|(_, w)| w.as_str()).collect();
        assert_eq!(unique.len(), 200);
        assert!(unique.iter().all(|w| fits(w)));
    }

    #[test]
    fn calls_come_back_under_the_given_name() {
        let wire = WireNames::of(["fs.read", "ls"].into_iter());
        let mut calls = vec![
            NativeCall::new(None, "fs_read".into(), "{}"),
            NativeCall::new(None, "ls".into(), "{}"),
            NativeCall::new(None, "other".into(), "{}"),
        ];
        WireNames::restore(&wire.into_pairs(), &mut calls);
        let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["fs.read", "ls", "other"]);
    }
}
