//! Tool names read from the free-text `available_tools_prompt_segment`, when a request names
//! its tools in prose instead of declaring them.

use std::cell::RefCell;
use std::sync::Arc;

use crate::runtime::memo::Memo;

/// Tool names in a free-text segment: every line that starts with a name and a colon or a dash
/// (`- read_file: …`, `code_search - …`), then every `name(`; each once, in that order.
pub fn names_in(segment: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for name in line_names(segment).chain(call_names(segment)) {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    names
}

/// [`names_in`], from this worker's memo when the segment was read lately.
pub(super) fn remembered_names_in(segment: &str) -> Arc<[String]> {
    thread_local! {
        static NAMES: RefCell<Memo<Arc<[String]>>> = const { RefCell::new(Memo::new()) };
    }
    crate::runtime::memo::remembered(&NAMES, &[segment], || names_in(segment).into())
}

/// The first of `names_in`, found without reading the rest of the segment.
pub fn first_name_in(segment: &str) -> Option<&str> {
    line_names(segment)
        .next()
        .or_else(|| call_names(segment).next())
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// Names that start a line and are followed by a colon or a dash.
fn line_names(segment: &str) -> impl Iterator<Item = &str> {
    segment.lines().filter_map(|line| {
        let rest = line
            .trim_start_matches(|c: char| c.is_whitespace() || matches!(c, '-' | '*' | '`' | '•'));
        let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.' || c == ')');
        let rest = rest.trim_start_matches([' ', '`']);
        let len = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
        let after = rest[len..].trim_start_matches('`');
        (len > 0
            && rest.as_bytes()[0].is_ascii_alphabetic()
            && (after.starts_with(':') || after.starts_with(" -") || after.starts_with(" —")))
        .then(|| &rest[..len])
    })
}

/// Names written just before an opening parenthesis.
fn call_names(segment: &str) -> impl Iterator<Item = &str> {
    segment.match_indices('(').filter_map(|(i, _)| {
        let before = &segment[..i];
        let start = before.rfind(|c: char| !is_name_char(c)).map_or(0, |j| {
            j + before[j..].chars().next().map_or(1, char::len_utf8)
        });
        let name = &before[start..];
        name.starts_with(|c: char| c.is_ascii_alphabetic())
            .then_some(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_from_a_free_text_segment() {
        let segment = "You have access to:\n- code_search(query) - search the code\n2. `read_file`: read a file\nrun_tests - runs the tests\nUse them well: e.g. call one per step.";
        assert_eq!(names_in(segment), ["read_file", "run_tests", "code_search"]);
        assert_eq!(first_name_in(segment), Some("read_file"));
    }

    proptest::proptest! {
        #[test]
        fn the_first_name_is_the_first_of_all_names(segment in "[a-c_:( \n-]{0,40}") {
            let all = names_in(&segment);
            proptest::prop_assert_eq!(first_name_in(&segment), all.first().map(String::as_str));
        }
    }
}
