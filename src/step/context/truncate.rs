//! Cutting an item that only partly fits: keep the head and the tail around a marker that says
//! how much was left out (or a window of lines around the cursor), on line boundaries, so that
//! what the model sees is real code, never half a character or half a line.

use super::tokens::TokenCounter;

/// Below this many tokens a cut item is not worth sending: it is dropped instead.
pub const MIN_USEFUL_TOKENS: u32 = 48;
/// Lines longer than this (minified code, prose paragraphs) are cut into pieces of about this
/// many bytes, at a space where there is one.
const MAX_LINE_BYTES: usize = 256;

/// The cut text and its exact token count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    pub text: String,
    pub tokens: u32,
    pub omitted_lines: usize,
}

/// Lines (with their newline), long lines split at character boundaries.
fn lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for line in text.split_inclusive('\n') {
        let mut rest = line;
        while rest.len() > MAX_LINE_BYTES {
            let mut cut = MAX_LINE_BYTES;
            while !rest.is_char_boundary(cut) {
                cut -= 1;
            }
            if let Some(space) = rest[..cut].rfind(' ').filter(|&s| s > 0) {
                cut = space + 1;
            }
            out.push(&rest[..cut]);
            rest = &rest[cut..];
        }
        out.push(rest);
    }
    out
}

/// Says what was left out. The size is given in bytes: tokenising text only to say how much of
/// it was dropped would cost more than the text that is kept.
fn marker(omitted_lines: usize, omitted_bytes: usize) -> String {
    format!(
        "\n[… {omitted_lines} lines ({omitted_bytes} bytes) left out here to fit the budget …]\n"
    )
}

/// Token costs of lines, computed only for the lines that are looked at.
struct Costs<'a, 'c> {
    counter: &'c TokenCounter,
    lines: &'a [&'a str],
    known: Vec<Option<u32>>,
}

impl Costs<'_, '_> {
    fn get(&mut self, i: usize) -> u32 {
        *self.known[i].get_or_insert_with(|| self.counter.count(self.lines[i]))
    }
}

/// What a cut is wrapped in before it is sent (a fenced block's heading and fences), so that the
/// count that decides the cut is the count of what is sent.
pub struct Frame<'f> {
    /// The frame's own tokens, held back from the room for lines.
    pub tokens: u32,
    pub wrap: &'f dyn Fn(&str) -> String,
}

/// Head and tail of `text` within `max_tokens` (as counted by `counter`), or `None` when not even
/// [`MIN_USEFUL_TOKENS`] of it would fit.
pub fn head_and_tail(counter: &TokenCounter, text: &str, max_tokens: u32) -> Option<Cut> {
    window(counter, text, None, max_tokens, None)
}

/// Lines around `center` (0-based) within `max_tokens`; without a center, head and tail. With a
/// frame, the cut is returned wrapped and `max_tokens` bounds the wrapped text.
pub fn window(
    counter: &TokenCounter,
    text: &str,
    center: Option<usize>,
    max_tokens: u32,
    frame: Option<Frame<'_>>,
) -> Option<Cut> {
    let frame_tokens = frame.as_ref().map_or(0, |f| f.tokens);
    if max_tokens.saturating_sub(frame_tokens) < MIN_USEFUL_TOKENS {
        return None;
    }
    let lines = lines(text);
    let mut costs = Costs {
        counter,
        lines: &lines,
        known: vec![None; lines.len()],
    };
    let mut reserve = frame_tokens + counter.count(&marker(lines.len(), text.len())) * 2 + 2;
    loop {
        let room = max_tokens.checked_sub(reserve)?;
        if room < MIN_USEFUL_TOKENS / 2 {
            return None;
        }
        let (start, end) = match center {
            Some(c) => around(&mut costs, c.min(lines.len().saturating_sub(1)), room),
            None => (0, 0),
        };
        let (head_end, tail_start) = match center {
            Some(_) => (start, end),
            None => ends(&mut costs, room),
        };
        let (cut, omitted_lines) = assemble(&lines, center.is_some(), head_end, tail_start);
        let sent = match &frame {
            Some(f) => (f.wrap)(&cut),
            None => cut,
        };
        let tokens = counter.count(&sent);
        if tokens <= max_tokens {
            return Some(Cut {
                text: sent,
                tokens,
                omitted_lines,
            });
        }
        // Joining changed the count at a seam: try again with more held back.
        reserve += tokens - max_tokens + 4;
    }
}

/// `[start, end)` of lines around `center` whose costs fit in `room`, growing both ways.
fn around(costs: &mut Costs<'_, '_>, center: usize, room: u32) -> (usize, usize) {
    let (mut start, mut end, mut used) = (center, center, 0u32);
    let n = costs.lines.len();
    loop {
        let mut grew = false;
        if end < n && used + costs.get(end) <= room {
            used += costs.get(end);
            end += 1;
            grew = true;
        }
        if start > 0 && used + costs.get(start - 1) <= room {
            start -= 1;
            used += costs.get(start);
            grew = true;
        }
        if !grew {
            return (start, end);
        }
    }
}

/// How many lines of head and from which line the tail, sharing `room` two to one.
fn ends(costs: &mut Costs<'_, '_>, room: u32) -> (usize, usize) {
    let n = costs.lines.len();
    let (mut head, mut used) = (0, 0u32);
    while head < n && used + costs.get(head) <= room * 2 / 3 {
        used += costs.get(head);
        head += 1;
    }
    let mut tail = n;
    while tail > head && used + costs.get(tail - 1) <= room {
        tail -= 1;
        used += costs.get(tail);
    }
    (head, tail)
}

/// For a window, `a..b` are the kept lines; for head and tail, `..a` and `b..`.
fn assemble(lines: &[&str], is_window: bool, a: usize, b: usize) -> (String, usize) {
    let mut text = String::new();
    let tokens = |r: std::ops::Range<usize>| lines[r].iter().map(|l| l.len()).sum::<usize>();
    if is_window {
        if a > 0 {
            text.push_str(marker(a, tokens(0..a)).trim_start());
        }
        lines[a..b].iter().for_each(|l| text.push_str(l));
        if b < lines.len() {
            text.push_str(&marker(lines.len() - b, tokens(b..lines.len())));
        }
        return (text, a + lines.len() - b);
    }
    lines[..a].iter().for_each(|l| text.push_str(l));
    if b > a {
        text.push_str(&marker(b - a, tokens(a..b)));
    }
    lines[b..].iter().for_each(|l| text.push_str(l));
    (text, b - a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Provider;

    fn counter() -> TokenCounter {
        TokenCounter::for_model(Provider::OPENAI, "gpt-4o")
    }

    fn numbered(n: usize) -> String {
        (1..=n)
            .map(|i| format!("let line_{i} = compute({i});\n"))
            .collect()
    }

    #[test]
    fn head_and_tail_keep_both_ends_with_a_marker_between() {
        let text = numbered(400);
        let cut = head_and_tail(&counter(), &text, 300).unwrap_or_else(|| panic!("fits"));
        assert!(cut.tokens <= 300);
        assert!(cut.text.starts_with("let line_1 = compute(1);\n"));
        assert!(cut.text.ends_with("let line_400 = compute(400);\n"));
        assert!(cut.text.contains("bytes) left out"), "{}", cut.text);
        assert!(cut.omitted_lines > 300);
        assert_eq!(cut.tokens, counter().count(&cut.text));
    }

    #[test]
    fn every_kept_line_is_whole() {
        let text = numbered(200);
        let cut = head_and_tail(&counter(), &text, 120).unwrap_or_else(|| panic!("fits"));
        for line in cut
            .text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('['))
        {
            assert!(
                text.contains(&format!("{line}\n")),
                "{line:?} is not a whole line"
            );
        }
    }

    #[test]
    fn a_window_centres_on_the_cursor() {
        let text = numbered(1000);
        let cut = window(&counter(), &text, Some(499), 200, None).unwrap_or_else(|| panic!("fits"));
        assert!(cut.text.contains("let line_500 = compute(500);"));
        assert!(!cut.text.contains("let line_1 = "));
        assert!(cut.text.starts_with("[… "));
        assert!(cut.tokens <= 200);
    }

    #[test]
    fn multi_byte_text_and_huge_lines_are_cut_on_character_boundaries() {
        let text = format!("{}\n{}", "é😀".repeat(5000), numbered(50));
        let cut = head_and_tail(&counter(), &text, 400).unwrap_or_else(|| panic!("fits"));
        assert!(cut.tokens <= 400);
        assert!(cut.text.ends_with("compute(50);\n"));
    }

    #[test]
    fn too_small_a_budget_gives_nothing() {
        assert!(head_and_tail(&counter(), &numbered(100), MIN_USEFUL_TOKENS - 1).is_none());
    }

    #[test]
    fn a_framed_cut_is_counted_with_its_frame() {
        let text = numbered(400);
        let wrap = |cut: &str| format!("### File: a.rs\n```rust\n{cut}```\n\n");
        let frame = Frame {
            tokens: counter().count(&wrap("")),
            wrap: &wrap,
        };
        let cut = window(&counter(), &text, Some(200), 150, Some(frame))
            .unwrap_or_else(|| panic!("fits"));
        assert!(cut.text.starts_with("### File: a.rs\n```rust\n[… "));
        assert!(cut.text.ends_with("```\n\n"));
        assert!(cut.tokens <= 150);
        assert_eq!(cut.tokens, counter().count(&cut.text));
    }
}
