//! Reads the model's raw text into a thought plus either a tool call or a final answer, and says
//! what it assumed in `warnings`. Dialects: the service's own (`Thought:` / `Action:
//! tool(args)` / `Final Answer:`), LangChain's (`Action:` + `Action Input:`), JSON actions bare or
//! fenced, the ReAct paper's numbered steps with `Search[…]` / `Finish[…]`, and `Answer:`.
//! Wrappers are looked through: `<think>` tags, a code fence around everything, markdown bold
//! and headings, any letter case. Anything after an invented observation is discarded; output
//! with no structure at all becomes a direct response with a warning.

mod action;
mod action_input;
pub mod answer_call;
mod args;
mod blocks;
mod decision;
mod ending;
mod fence;
mod gemma;
mod harmony;
mod json;
#[cfg(test)]
mod linear;
pub mod live;
mod markup;
mod pythonic;
pub mod tags;
mod thought;
mod work;

use serde_json::{Map, Value};

pub use action_input::left_open;
pub use args::{parse_args, python_literal};
pub use decision::{Decision, Parsed};
pub use json::is_final_answer_name;
pub use tags::Tags;
pub use thought::thought_warnings;

use action::action;
use blocks::deciding_block;
use decision::MAX_CALLS;
use fence::unfence;
use tags::{section, Found, Tag};

/// `None` when the model wrote nothing usable at all.
pub fn parse(raw: &str, tags: &Tags) -> Option<Parsed> {
    // The passes over the whole text made a fixed number of times; the loops count their own.
    work::add(raw.len());
    if let Some(parsed) = harmony::parse(raw, tags, react) {
        return Some(parsed);
    }
    react(raw, tags)
}

/// The output read as ReAct text. Harmony's final channel is read with it too, and it never
/// looks for harmony itself: a final channel holding harmony again is not read twice.
fn react(raw: &str, tags: &Tags) -> Option<Parsed> {
    let mut warnings = Vec::new();
    let (think, text) = cleaned(raw, tags, &mut warnings);
    let (text, found) = before_observation(text, tags, &mut warnings);
    let decisive = decisive(text, &found);
    let read = decisions(
        text,
        &found,
        &decisive,
        think.as_deref(),
        tags,
        &mut warnings,
    );
    let closed_at_end = text
        .trim_end()
        .ends_with([')', ']', '}', '>', '"', '\'', '`']);
    let Some(Decisions {
        thought,
        mut calls,
        others,
        reaches_end,
    }) = read
    else {
        return fallback(text, &found, think, warnings);
    };
    if others > 0 {
        warnings.push(format!(
            "the output held {others} more action(s) or answer(s) after the one(s) used; they were left out"
        ));
    }
    let decision = answer_if_finish(calls.remove(0));
    let answer_left_out = matches!(decision, Decision::Action { .. })
        && decisive
            .iter()
            .any(|&i| found[i].tag == Tag::FinalAnswer && !section(text, &found, i).is_empty());
    Some(Parsed {
        thought: with_think(think, thought),
        decision,
        also: calls,
        warnings,
        structured: true,
        open_ended: reaches_end && !closed_at_end,
        answer_left_out,
        call_ids: Vec::new(),
    })
}

/// The `<think>` text, and the rest of the output without an invented turn, an end-of-turn
/// token or a fence around everything.
fn cleaned<'r>(raw: &'r str, tags: &Tags, warnings: &mut Vec<String>) -> (Option<String>, &'r str) {
    let cut = ending::cut_invented_turn(raw);
    let (think, whole) = split_think(cut, tags);
    let text = ending::strip(whole, &tags.observation);
    let text = ending::strip(unfence(text), &tags.observation);
    let stripped =
        text.trim_end().len() < whole.trim_end().len() && !whole.trim_end().ends_with("```");
    if stripped || !raw.trim_end().ends_with(cut.trim_end()) {
        warnings.push(format!(
            "the output ended with an end-of-turn token or the start of an '{}' tag the server left; it was dropped",
            tags.observation
        ));
    }
    (think, text)
}

/// The tags that decide the step: final answers, and actions that name a tool.
fn decisive(text: &str, found: &[Found]) -> Vec<usize> {
    let mut all = decisive_tags(text, found);
    // A heading (`## Final Answer`) with an action after it is a title the model quoted or
    // wrote on its way to the action, not its answer: only its tag with a colon is that.
    let heading = |i: usize| {
        let f = &found[i];
        f.tag == Tag::FinalAnswer && !text[f.line_start..f.text_start].contains([':', '：'])
    };
    let last_action = all
        .iter()
        .rev()
        .find(|&&i| found[i].tag == Tag::Action)
        .copied();
    all.retain(|&i| !(heading(i) && last_action.is_some_and(|a| a > i)));
    // A block quote's tags beside tags of the model's own (`> Action: …` quoted from the
    // user's message, then the model's answer) are a quotation, not a decision.
    let quoted = |&i: &usize| text[found[i].line_start..].trim_start().starts_with('>');
    if all.iter().any(quoted) && !all.iter().all(quoted) {
        return all.into_iter().filter(|i| !quoted(i)).collect();
    }
    all
}

/// Whether several list items each name an action (`- Action: a(…)`, `- Action: b(…)`):
/// options laid out, not calls made; which one is meant is for the model to say.
fn listed_options(text: &str, found: &[Found], decisive: &[usize]) -> bool {
    let listed = decisive
        .iter()
        .filter(|&&i| found[i].tag == Tag::Action && is_list_item(text, &found[i]));
    listed.count() > 1
}

/// Whether the tag opens a list item (`- Action: …`).
fn is_list_item(text: &str, found: &Found) -> bool {
    text[found.line_start..].trim_start().starts_with("- ")
}

fn decisive_tags(text: &str, found: &[Found]) -> Vec<usize> {
    found
        .iter()
        .enumerate()
        .filter(|(i, f)| match f.tag {
            Tag::FinalAnswer => true,
            // `Action: None` (LangChain's models saying they need no tool) decides nothing.
            Tag::Action => !is_no_action(section(text, found, *i)),
            _ => false,
        })
        .map(|(i, _)| i)
        .collect()
}

/// What the output decides, read from a block or the tags.
struct Decisions {
    thought: String,
    /// Never empty: the first is the decision.
    calls: Vec<Decision>,
    /// The decisive tags left out.
    others: usize,
    /// The decision runs to the end of the output.
    reaches_end: bool,
}

/// The step's decisions, from the block that decides it or else from the first decisive tag;
/// `None` when neither is there (the output is taken as a direct response).
fn decisions(
    text: &str,
    found: &[Found],
    decisive: &[usize],
    think: Option<&str>,
    tags: &Tags,
    warnings: &mut Vec<String>,
) -> Option<Decisions> {
    let limit = decisive
        .first()
        .map_or(text.len(), |&d| found[d].line_start);

    let block = deciding_block(text, limit, found);
    if let Some(block) = block {
        // A cut in a later call leaves the first one whole.
        let reaches_end = block.end >= text.trim_end().len() && block.calls.len() == 1;
        warnings.extend(
            block
                .read_as
                .map(|how| format!("the call was read from {how}")),
        );
        let thought = match block.thought {
            Some(t) => t,
            None => thought_before(text, found, block.start, think, tags, warnings),
        };
        return Some(Decisions {
            thought,
            calls: block.calls,
            others: decisive.len(),
            reaches_end,
        });
    }
    let d = first_meant(text, found, decisive, tags, warnings)?;
    let thought = thought_before(text, found, limit, think, tags, warnings);
    let reaches_end = found[d + 1..].iter().all(|f| f.tag == Tag::ActionInput);
    let (calls, others) = match found[d].tag {
        Tag::Action if listed_options(text, found, decisive) => {
            let why = format!(
                "the output lists several '{}:' items; write the one call to make now",
                tags.action
            );
            let raw_action_string = section(text, found, d).trim().to_string();
            let options = Decision::Unreadable {
                why,
                raw_action_string,
            };
            (vec![options], decisive.len() - 1)
        }
        Tag::Action => {
            let (calls, used) = actions(text, found, decisive, tags);
            (calls, decisive.len() - used)
        }
        _ => {
            let action_follows = decisive
                .iter()
                .any(|&i| i > d && found[i].tag == Tag::Action);
            let beside = decisive.iter().any(|&i| found[i].tag == Tag::Action);
            let decision = answer(section(text, found, d), tags, beside);
            if action_follows && matches!(decision, Decision::Answer(_)) {
                warnings.push(format!(
                    "the output went on after its '{}:' with an '{}:' the model invented; the answer was taken and the action left out",
                    tags.final_answer, tags.action
                ));
            }
            (vec![decision], decisive.len() - 1)
        }
    };
    Some(Decisions {
        thought,
        calls,
        others,
        reaches_end,
    })
}

/// The decisive tag the model meant: the first, unless the actions before a final answer hold
/// no call at all (`Action: 12 * 3 = 36`, `Action: Calculate the total`, a small model
/// narrating its arithmetic), when the answer decides.
fn first_meant(
    text: &str,
    found: &[Found],
    decisive: &[usize],
    tags: &Tags,
    warnings: &mut Vec<String>,
) -> Option<usize> {
    let &first = decisive.first()?;
    let answer = decisive
        .iter()
        .copied()
        .find(|&i| found[i].tag == Tag::FinalAnswer);
    let Some(answer) = answer.filter(|&a| a > first) else {
        return Some(first);
    };
    let narrated = decisive.iter().take_while(|&&i| i < answer).all(|&i| {
        found.get(i + 1).is_none_or(|f| f.tag != Tag::ActionInput)
            && is_prose(section(text, found, i))
    });
    if !narrated {
        return Some(first);
    }
    warnings.push(format!(
        "the '{}:' lines before the '{}:' held no tool call, only words or arithmetic; the answer was taken",
        tags.action, tags.final_answer
    ));
    Some(answer)
}

/// Whether an action's text is words or arithmetic rather than a call: no brackets, quotes or
/// braces anywhere, and more than one word on its line.
fn is_prose(action: &str) -> bool {
    let line = action.lines().next().unwrap_or_default().trim();
    // A first word in snake case names a tool (`run_command rm -rf build`), and a path or a
    // flag is a command's, not arithmetic's.
    let named = line
        .split_whitespace()
        .next()
        .is_some_and(|w| w.contains('_'));
    let command = line
        .split_whitespace()
        .any(|w| w.contains('/') && w.contains(|c: char| c.is_ascii_alphabetic()))
        || line.split_whitespace().any(|w| w.starts_with("--"))
        || line.split_whitespace().any(|w| {
            w.len() > 1
                && w.starts_with('-')
                && w[1..].starts_with(|c: char| c.is_ascii_alphabetic())
        });
    !action.contains(['(', '[', '{', '<', '"', '`'])
        && line.split_whitespace().count() > 2
        && !named
        && !command
}

fn is_no_action(action: &str) -> bool {
    let word = action
        .trim()
        .trim_matches(['`', '*', '"', '\'', '.'])
        .to_lowercase();
    ["none", "n/a", "null", "nothing"].contains(&word.as_str())
        || ["no action", "no tool", "none needed", "not needed"]
            .iter()
            .any(|w| word.starts_with(w))
}

/// The text up to an observation the model wrote itself (all after it is invented), and the
/// tags before it.
fn before_observation<'t>(
    text: &'t str,
    tags: &Tags,
    warnings: &mut Vec<String>,
) -> (&'t str, Vec<Found>) {
    let mut found = tags::find(text, tags);
    let Some(i) = found.iter().position(|f| f.tag == Tag::Observation) else {
        return (text, found);
    };
    let cut = found[i].line_start;
    found.truncate(i);
    if !text[cut..].trim().is_empty() {
        warnings.push(format!(
            "the model wrote an '{}:' itself; everything from it on was discarded",
            tags.observation
        ));
    }
    (&text[..cut], found)
}

/// The calls of the first `Action:` (a pythonic list after it is several), and of the
/// `Action:` tags right after it with no observation or answer between (several calls in one
/// turn); how many of the decisive tags they used. An action after an `Observation:` is the
/// model going on to imagine the tool's result: it is not proposed.
fn actions(text: &str, found: &[Found], decisive: &[usize], tags: &Tags) -> (Vec<Decision>, usize) {
    let mut calls = Vec::new();
    let mut previous = decisive[0];
    for (used, &d) in decisive.iter().enumerate() {
        let interrupted = found[previous..d]
            .iter()
            .any(|f| matches!(f.tag, Tag::Observation | Tag::FinalAnswer));
        // Each call may read to the end of the output: the bound keeps the work linear.
        if found[d].tag != Tag::Action || interrupted || calls.len() >= MAX_CALLS {
            return (calls, used);
        }
        let body = section(text, found, d);
        let read: Vec<Decision> = match pythonic::opens_a_list(body)
            .then(|| pythonic::find(body))
            .flatten()
        {
            Some(list) => list.calls,
            None => vec![action(text, found, d, tags)],
        };
        // A later action that cannot be read is no call: the ones before it stand.
        if used > 0
            && read
                .iter()
                .any(|c| matches!(c, Decision::Unreadable { .. }))
        {
            return (calls, used);
        }
        calls.extend(read);
        previous = d;
    }
    (calls, decisive.len())
}

/// A final answer, as the model meant it: a doubled tag (`Final Answer: **Final Answer:** …`)
/// and a boilerplate thought line at its start (`Final Answer: Thought: I now know the final
/// answer` then the answer) are not part of it. An answer that is an action or a thought alone
/// is no answer, nor is one beside an action (before or after it) that only announces a step or
/// says nothing: what the model meant is for it to say again.
fn answer(text: &str, tags: &Tags, beside_action: bool) -> Decision {
    let names = tags::TagNames::new(tags);
    let mut text = text;
    while let Some((Tag::FinalAnswer, offset)) = names.at(text) {
        text = text[offset..].trim_start();
    }
    let unreadable = |why: String| Decision::Unreadable {
        why,
        raw_action_string: text.to_string(),
    };
    // An answer the model went on from to invent an action is the answer, unless it only
    // announces that step ("I will read the file.") or says nothing.
    // An answer that ends in a colon introduces what follows it (`To read a file, write:`
    // then the call): the call is its example, or what the model meant; it must say which.
    let introduces = text.trim_end().ends_with(':');
    if beside_action && (text.trim().is_empty() || introduces || announces_a_step(text)) {
        return unreadable(format!(
            "the output holds a '{}:' and then an '{}:'; write one of them",
            tags.final_answer, tags.action
        ));
    }
    if markup::opener_at(text) == Some(0) {
        return unreadable(format!(
            "the '{}:' is a tool call; write it after '{}:'",
            tags.final_answer, tags.action
        ));
    }
    let rest = match names.at(text) {
        None => return Decision::Answer(without_invented_turn(text).to_string()),
        Some((Tag::Thought, _)) => text.split_once('\n').map_or("", |(_, rest)| rest.trim()),
        Some(_) => "",
    };
    if rest.is_empty() {
        return unreadable(format!(
            "the '{}:' holds ReAct tags of its own; write either an action or the answer",
            tags.final_answer
        ));
    }
    Decision::Answer(rest.to_string())
}

/// Whether an answer's first sentence announces a step instead of answering ("I will read the
/// file.", "Let me check the config first."): with an action after it, the action is what the
/// model meant, or the answer is; it must say which.
fn announces_a_step(answer: &str) -> bool {
    let first = answer
        .split(['.', '!', '?', '\n'])
        .next()
        .unwrap_or_default()
        .to_lowercase()
        .replace("let me know", "")
        .replace("i will not", "")
        .replace("i'll not", "");
    // At an answer's start "I should" announces a step too; before a block it is not counted.
    blocks::STEP
        .iter()
        .chain(&["i should"])
        .any(|w| first.contains(w))
}

/// An answer without the next turn the model went on to invent (LangChain's conversational
/// prompt names the user `Human:`): a line of its own that starts one ends the answer.
fn without_invented_turn(answer: &str) -> &str {
    let mut at = 0;
    for line in answer.split_inclusive('\n') {
        if at > 0 && ["Human:", "User:"].iter().any(|p| line.starts_with(p)) {
            return answer[..at].trim_end();
        }
        at += line.len();
    }
    answer
}

/// What an answer read by [`fallback`] is told with (not in native mode, where text without a
/// call is the provider's own way to answer).
pub fn unstructured_warning(tags: &Tags) -> String {
    format!(
        "the output had no '{}:' or '{}:'; it was taken as a direct response",
        tags.action, tags.final_answer
    )
}

/// The seed's fallback: no action and no final answer, so the text is the answer.
fn fallback(
    text: &str,
    found: &[Found],
    think: Option<String>,
    warnings: Vec<String>,
) -> Option<Parsed> {
    let tagged = found
        .iter()
        .position(|f| f.tag == Tag::Thought)
        .map(|i| section(text, found, i).to_string())
        .unwrap_or_default();
    let thought = match found.is_empty() {
        true => think.clone().unwrap_or_default(),
        false => with_think(think.clone(), tagged.clone()),
    };
    // A thought alone is its own answer, the thinking with it: the step sees it is no answer
    // (`reply::shortfall`) and asks again.
    let answer = match (found.is_empty(), tagged.is_empty()) {
        (true, _) => text.trim().to_string(),
        (false, false) => thought.clone(),
        (false, true) => String::new(),
    };
    let answer = if answer.is_empty() {
        think.unwrap_or_default()
    } else {
        answer
    };
    if answer.is_empty() {
        return None;
    }
    Some(Parsed {
        thought,
        decision: Decision::Answer(answer),
        also: Vec::new(),
        warnings,
        structured: false,
        open_ended: true,
        answer_left_out: false,
        call_ids: Vec::new(),
    })
}

/// The thought that precedes the decision at `limit`: the thought tag's text, else the untagged
/// text before the decision, else the `<think>` text.
fn thought_before(
    text: &str,
    found: &[Found],
    limit: usize,
    think: Option<&str>,
    tags: &Tags,
    warnings: &mut Vec<String>,
) -> String {
    if let Some(i) = found
        .iter()
        .position(|f| f.tag == Tag::Thought && f.line_start < limit)
    {
        let end = found
            .get(i + 1)
            .map_or(limit, |next| next.line_start.min(limit));
        return text[found[i].text_start..end].trim().to_string();
    }
    let before = text[..limit].trim();
    if !before.is_empty() {
        warnings.push(format!(
            "no '{}:' tag: the text before the action was taken as the thought",
            tags.thought
        ));
        return before.to_string();
    }
    think.unwrap_or_default().to_string()
}

/// The thought with the `<think>` text before it: a reasoning model's thinking is its thought,
/// and it streams as such before any `Thought:` it writes after.
fn with_think(think: Option<String>, thought: String) -> String {
    match think.filter(|t| !t.is_empty() && *t != thought) {
        Some(think) if thought.is_empty() => think,
        Some(think) => format!("{think}\n\n{thought}"),
        None => thought,
    }
}

/// Each decision as (tool, arguments), for the readers' tests; any other decision fails them.
#[cfg(test)]
fn as_calls(decisions: Vec<Decision>) -> Vec<(String, Value)> {
    decisions
        .into_iter()
        .map(|c| match c {
            Decision::Action {
                tool_name,
                tool_args,
                ..
            } => (tool_name, Value::Object(tool_args)),
            other => panic!("{other:?}"),
        })
        .collect()
}

/// `final_answer(...)`, `finish(...)` and the paper's `Finish[...]` end the task.
fn answer_if_finish(decision: Decision) -> Decision {
    match decision {
        Decision::Action {
            tool_name,
            tool_args,
            ..
        } if is_final_answer_name(&tool_name) => Decision::Answer(answer_text(tool_args)),
        other => other,
    }
}

fn answer_text(mut args: Map<String, Value>) -> String {
    for key in [
        "answer",
        "final_answer",
        "input",
        "text",
        "response",
        "output",
        "result",
    ] {
        if let Some(value) = args.remove(key) {
            return json::as_text(&value);
        }
    }
    match args.len() {
        0 => String::new(),
        1 => args.values().next().map(json::as_text).unwrap_or_default(),
        _ => Value::Object(args).to_string(),
    }
}

/// Separates `<think>…</think>` (or `<thinking>`) from the rest. Some local models omit the
/// opening tag, so a lone closing tag ends the thinking too. Blocks one after another (an empty
/// one, as Qwen3 writes with its thinking off, then more) are all thinking.
fn split_think<'r>(raw: &'r str, tags: &Tags) -> (Option<String>, &'r str) {
    let (mut think, mut rest) = one_think(raw, tags);
    while let Some(before) = think.as_mut() {
        let next = rest.trim_start();
        if !THINK_OPENS.iter().any(|open| next.starts_with(open)) {
            break;
        }
        let (more, after) = one_think(next, tags);
        if let Some(more) = more.filter(|m| !m.is_empty()) {
            if !before.is_empty() {
                before.push_str("\n\n");
            }
            before.push_str(&more);
        }
        rest = after;
    }
    (think, rest)
}

const THINK_OPENS: [&str; 2] = ["<think>", "<thinking>"];

/// The first think block of `raw` and what follows it.
fn one_think<'r>(raw: &'r str, tags: &Tags) -> (Option<String>, &'r str) {
    for (open, close) in [("<think>", "</think>"), ("<thinking>", "</thinking>")] {
        let Some(end) = raw.find(close) else {
            // Stopped inside its thinking (a stop sequence it wrote there): all of it is
            // thought, unless it drafted its step there: that is read as written, what came
            // before it the thinking.
            let Some(inner) = raw.trim_start().strip_prefix(open) else {
                continue;
            };
            return match step_at(inner, tags) {
                Some(at) => (Some(inner[..at].trim().to_string()), &inner[at..]),
                None => (Some(inner.trim().to_string()), ""),
            };
        };
        let inner = &raw[..end];
        // Thinking comes first: a closing tag after the step began is text (an answer that
        // explains the tag, an argument that searches for it).
        let opens = inner.trim_start().starts_with(open);
        if !opens && step_at(inner, tags).is_some() {
            continue;
        }
        let inner = inner.find(open).map_or(inner, |s| &inner[s + open.len()..]);
        return (Some(inner.trim().to_string()), &raw[end + close.len()..]);
    }
    (None, raw)
}

/// Where in `text` a step the model wrote begins: its first tag's line, or call markup.
fn step_at(text: &str, tags: &Tags) -> Option<usize> {
    let tag = tags::find(text, tags).first().map(|f| f.line_start);
    let markup = markup::opener_at(text);
    tag.into_iter().chain(markup).min()
}

/// Whether `text` holds a tag or call markup: a step the model wrote.
fn drafts_a_step(text: &str, tags: &Tags) -> bool {
    step_at(text, tags).is_some()
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use super::*;

    use serde_json::json;

    fn parsed(raw: &str) -> Parsed {
        parse(raw, &Tags::default()).unwrap_or_else(|| panic!("no parse for {raw:?}"))
    }

    fn action_of(p: &Parsed) -> (&str, Value, &str) {
        match &p.decision {
            Decision::Action {
                tool_name,
                tool_args,
                raw_action_string,
            } => (
                tool_name,
                Value::Object(tool_args.clone()),
                raw_action_string,
            ),
            other => panic!("expected an action, got {other:?}"),
        }
    }

    fn answer_of(p: &Parsed) -> &str {
        match &p.decision {
            Decision::Answer(text) => text,
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    // The service's own dialect.

    #[test]
    fn the_seed_format_gives_thought_and_action() {
        let p = parsed("Thought: I need to search for authentication code.\nAction: code_search(query=\"authentication login\")");
        assert_eq!(p.thought, "I need to search for authentication code.");
        let (name, args, raw) = action_of(&p);
        assert_eq!(
            (name, args),
            ("code_search", json!({"query": "authentication login"}))
        );
        assert_eq!(raw, "Action: code_search(query=\"authentication login\")");
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    }

    #[test]
    fn a_final_answer_is_a_direct_response() {
        let p = parsed("Thought: I know it now.\nFinal Answer: Use auth.js.\nIt has login().");
        assert_eq!(p.thought, "I know it now.");
        assert_eq!(answer_of(&p), "Use auth.js.\nIt has login().");
    }

    #[test]
    fn bold_tags_in_any_case_and_multi_line_calls_are_read() {
        let p = parsed("**thought:** write it\n**ACTION:** write_file(path=\"a.py\", content=\"\"\"x = 1\ny = 2\n\"\"\")\n");
        assert_eq!(p.thought, "write it");
        let (_, args, raw) = action_of(&p);
        assert_eq!(args, json!({"path": "a.py", "content": "x = 1\ny = 2\n"}));
        assert!(raw.starts_with("**ACTION:** write_file(") && raw.ends_with("\"\"\")"));
    }

    #[test]
    fn a_call_in_inline_code_or_a_fence_is_read() {
        let p = parsed("Thought: look\nAction: `read_file(path=\"a.rs\")`");
        assert_eq!(action_of(&p).1, json!({"path": "a.rs"}));
        assert_eq!(action_of(&p).2, "Action: `read_file(path=\"a.rs\")");
        let p = parsed("Thought: look\nAction:\n```python\nread_file(path=\"a.rs\")\n```");
        assert_eq!(action_of(&p).1, json!({"path": "a.rs"}));
    }

    #[test]
    fn a_tag_inside_a_string_argument_does_not_end_the_call() {
        let p = parsed("Thought: note it\nAction: write_file(path=\"n.md\", content=\"\"\"\nThought: keep\nFinal Answer: no\n\"\"\")");
        let (_, args, _) = action_of(&p);
        assert_eq!(args["content"], "\nThought: keep\nFinal Answer: no\n");
    }

    // LangChain.

    #[test]
    fn langchain_action_input_as_json_or_plain_text() {
        let p = parsed("Thought: I should search the code base.\nAction: code_search\nAction Input: {\"query\": \"session timeout\", \"limit\": 5}");
        let (name, args, raw) = action_of(&p);
        assert_eq!(
            (name, args),
            (
                "code_search",
                json!({"query": "session timeout", "limit": 5})
            )
        );
        assert!(
            raw.starts_with("Action: code_search\nAction Input: {"),
            "{raw}"
        );
        let p = parsed("Thought: read it\nAction: read_file\nAction Input: src/app.py\n");
        assert_eq!(action_of(&p).1, json!({"input": "src/app.py"}));
        let p = parsed("Thought: read it\nAction: read_file\nAction Input: \"src/app.py\"");
        assert_eq!(action_of(&p).1, json!({"input": "src/app.py"}));
    }

    // JSON actions.

    #[test]
    fn a_fenced_json_action_after_a_thought() {
        let p = parsed("Thought: The config loader is the place to look.\n```json\n{\n  \"action\": \"read_file\",\n  \"action_input\": {\"path\": \"src/config.ts\"}\n}\n```");
        assert_eq!(p.thought, "The config loader is the place to look.");
        assert_eq!(action_of(&p).1, json!({"path": "src/config.ts"}));
    }

    #[test]
    fn the_seed_json_form_with_its_own_thought() {
        let p = parsed("{\"thought\": \"Search for the login handler first.\", \"tool_name\": \"code_search\", \"parameters\": {\"query\": \"login handler\"}}");
        assert_eq!(p.thought, "Search for the login handler first.");
        assert_eq!(action_of(&p).0, "code_search");
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    }

    #[test]
    fn a_json_final_answer() {
        let p = parsed("```json\n{\"action\": \"Final Answer\", \"action_input\": \"The timeout is set in settings.py.\"}\n```");
        assert_eq!(answer_of(&p), "The timeout is set in settings.py.");
    }

    #[test]
    fn json_after_the_action_tag() {
        let p = parsed(
            "Thought: t\nAction: {\"tool_name\": \"read_file\", \"parameters\": {\"path\": \"x\"}}",
        );
        assert_eq!(action_of(&p).1, json!({"path": "x"}));
    }

    // The ReAct paper.

    #[test]
    fn numbered_paper_steps_with_bracket_actions() {
        let p = parsed("Thought 3: Apple Remote was designed for Front Row, so I should search Front Row next.\nAction 3: Search[Front Row (software)]\nObservation 3: Front Row is a discontinued media center...");
        assert!(p.thought.starts_with("Apple Remote was designed"));
        let (name, args, raw) = action_of(&p);
        assert_eq!(
            (name, args),
            ("Search", json!({"input": "Front Row (software)"}))
        );
        assert_eq!(raw, "Action 3: Search[Front Row (software)]");
    }

    #[test]
    fn finish_is_the_final_answer() {
        let p = parsed("Thought 4: So the answer is keyboard function keys.\nAction 4: Finish[keyboard function keys]");
        assert_eq!(answer_of(&p), "keyboard function keys");
        let p = parsed("Thought: done\nAction: final_answer(answer=\"It's in auth.js\")");
        assert_eq!(answer_of(&p), "It's in auth.js");
        let p = parsed("Thought: done\nAction: finish(\"ok\")");
        assert_eq!(answer_of(&p), "ok");
    }

    #[test]
    fn an_apostrophe_inside_brackets_is_text() {
        let p = parsed("Thought 1: search\nAction 1: Lookup[Apple's remote]");
        assert_eq!(action_of(&p).1, json!({"input": "Apple's remote"}));
    }

    #[test]
    fn answer_is_a_final_answer_tag() {
        let p = parsed("Thought: easy\nAnswer: 42");
        assert_eq!(answer_of(&p), "42");
    }

    // Wrappers and noise.

    #[test]
    fn think_tags_become_the_thought_when_none_is_written() {
        let p = parsed("<think>The user wants the file.</think>\nAction: read_file(path=\"a.rs\")");
        assert_eq!(p.thought, "The user wants the file.");
        assert_eq!(action_of(&p).1, json!({"path": "a.rs"}));
        let p = parsed("<thinking>\nCheck the tests.\n</thinking>\n\nAction: run_tests()");
        assert_eq!(p.thought, "Check the tests.");
    }

    #[test]
    fn an_unclosed_think_block_is_thought_or_the_step_drafted_in_it() {
        // Stopped inside its thinking: a thought alone, for a repair round.
        let p = parsed("<think>\nOkay, I should search the code and then read the");
        assert_eq!(
            p.thought,
            "Okay, I should search the code and then read the"
        );
        assert!(!p.structured);
        // A step drafted there before the stop: read, without the tag in the thought.
        let p = parsed("<think>\nI should read it.\nAction: read_file(path=\"a.rs\")");
        assert_eq!(p.thought, "I should read it.");
        assert_eq!(action_of(&p).1, json!({"path": "a.rs"}));
    }

    /// An empty block (Qwen3 with its thinking off) and then a block of thinking: both are
    /// thinking, a call the model drafted and dropped there too. The second block was read as
    /// the output: its drafted call proposed, the answer after it lost.
    #[test]
    fn think_blocks_one_after_another_are_all_thinking() {
        let p = parsed("<think>\n\n</think>\n\n<think>\nAction: code_search(query=\"login\")\nno, I already know.\n</think>\nThought: I know it.\nFinal Answer: In auth.py.");
        assert_eq!(p.decision, Decision::Answer("In auth.py.".into()));
        assert_eq!(
            p.thought,
            "Action: code_search(query=\"login\")\nno, I already know.\n\nI know it."
        );
        let p = parsed("<think>a</think>\n<thinking>b</thinking>\nThought: k\nAction: x()");
        assert_eq!(p.thought, "a\n\nb\n\nk");
        // What an unclosed block holds before the step drafted in it is its thinking.
        let p = parsed("<think>\nI could write:\nThought: search\nAction: x()");
        assert_eq!(p.thought, "I could write:\n\nsearch");
    }

    /// Thinking, then a thought and nothing after it: a thought alone (the step asks again), as
    /// without the thinking. It was the answer: the thought's words without the thinking.
    #[test]
    fn thinking_and_a_thought_alone_are_a_thought_alone() {
        for raw in [
            "<think>The user asks where login is.</think>\n\nThought: I should search the code.",
            "The user asks where login is.\n</think>\n\nThought: I should search the code.",
        ] {
            let p = parsed(raw);
            assert!(!p.structured, "{raw}");
            assert_eq!(p.decision, Decision::Answer(p.thought.clone()), "{raw}");
        }
    }

    #[test]
    fn a_lone_closing_think_tag_ends_the_thinking() {
        let p = parsed("Okay, the user wants the router.\n</think>\n\nThought: Open the router.\nAction: read_file(path=\"router.go\")");
        assert_eq!(
            p.thought,
            "Okay, the user wants the router.\n\nOpen the router."
        );
    }

    #[test]
    fn a_fence_around_the_whole_output_is_looked_through() {
        let p = parsed("```\nThought: look\nAction: read_file(path=\"a.rs\")\n```");
        assert_eq!(action_of(&p).1, json!({"path": "a.rs"}));
    }

    #[test]
    fn chatter_before_and_after_is_ignored() {
        let p = parsed("Sure! Here is my next step.\n\nThought: Read the handler.\nAction: read_file(path=\"h.js\")\n\nLet me know if you need anything else!");
        assert_eq!(p.thought, "Read the handler.");
        assert_eq!(action_of(&p).1, json!({"path": "h.js"}));
    }

    #[test]
    fn markdown_headings_as_tags() {
        let p = parsed("### Thought\nnot a tag line\n## Thought: real\n## Final Answer: yes");
        assert_eq!(p.thought, "real");
        assert_eq!(answer_of(&p), "yes");
    }

    #[test]
    fn an_invented_observation_and_all_after_it_is_discarded() {
        let p = parsed("Thought: search\nAction: code_search(query=\"x\")\nObservation: found it\nThought: done\nFinal Answer: 42");
        assert_eq!(action_of(&p).0, "code_search");
        assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    }

    #[test]
    fn the_first_of_action_and_answer_wins_with_a_warning() {
        let p = parsed("Thought: t\nFinal Answer: done\nFinal Answer: again");
        assert_eq!(answer_of(&p), "done");
        assert_eq!(p.warnings.len(), 1);
        // An answer and then an action: which one the model meant is for it to say.
        let p =
            parsed("Thought: t\nFinal Answer: I will search.\nAction: code_search(query=\"x\")");
        assert!(
            matches!(p.decision, Decision::Unreadable { .. }),
            "{:?}",
            p.decision
        );
        let p = parsed("Thought: t\nAction: code_search(query=\"x\")\nFinal Answer: done");
        assert_eq!(action_of(&p).0, "code_search");
        assert!(p.warnings[0].contains("were left out"), "{:?}", p.warnings);
    }

    #[test]
    fn an_answer_the_model_went_on_from_is_the_answer_unless_it_announces_a_step() {
        let p = parsed("Thought: t\nFinal Answer: It is 30 s.\nAction: read_file(path=\"a\")");
        assert_eq!(answer_of(&p), "It is 30 s.");
        assert!(
            p.warnings.iter().any(|w| w.contains("the action left out")),
            "{:?}",
            p.warnings
        );
        for announced in ["Let me read it.", "I'll check a first.", ""] {
            let p = parsed(&format!(
                "Thought: t\nFinal Answer: {announced}\nAction: read_file(path=\"a\")"
            ));
            assert!(
                matches!(p.decision, Decision::Unreadable { .. }),
                "{announced:?}: {:?}",
                p.decision
            );
        }
        // Actions that hold no call (arithmetic, words) leave the answer after them to decide.
        let p = parsed("Thought: t\nAction: 12 * 3 = 36\nFinal Answer: 36");
        assert_eq!(answer_of(&p), "36");
        let p = parsed("Thought: t\nAction: multiply(a=12, b=3)\nFinal Answer: 36");
        assert_eq!(action_of(&p).0, "multiply");
    }

    #[test]
    fn list_item_labels_are_tags_outside_an_answer_only() {
        let p = parsed("- Thought: t\n- Action: read_file\n- Action Input: a.py");
        assert_eq!(action_of(&p).1, json!({"input": "a.py"}));
        let p = parsed("Thought: t\nFinal Answer: Steps:\n- Action: build\n- Action: push");
        assert_eq!(answer_of(&p), "Steps:\n- Action: build\n- Action: push");
    }

    #[test]
    fn a_json_call_after_one_stray_character_is_read() {
        for lead in ["`", ".", "\""] {
            let p = parsed(&format!(
                "{lead}{{\"name\": \"read_file\", \"arguments\": {{\"path\": \"a\"}}}}{lead}"
            ));
            assert_eq!(action_of(&p).1, json!({"path": "a"}), "{lead}");
        }
    }

    #[test]
    fn a_forgotten_thought_tag_uses_the_text_before_the_action() {
        let p = parsed("I should look at the file.\nAction: read_file(path=\"a.rs\")");
        assert_eq!(p.thought, "I should look at the file.");
        assert_eq!(p.warnings.len(), 1);
    }

    #[test]
    fn untagged_output_falls_back_to_a_direct_response_marked_unstructured() {
        let p = parsed("Authentication lives in auth.js.");
        assert_eq!(answer_of(&p), "Authentication lives in auth.js.");
        // The step warns of it where a format was asked for (`reply::read`), not in native mode.
        assert!(p.warnings.is_empty());
        assert!(!p.structured);
    }

    #[test]
    fn unreadable_actions_say_why() {
        for (raw, why) in [
            ("Thought: t\nAction: code_search(query=\"x\"", "not closed"),
            ("Thought: t\nAction: (query=\"x\")", "no tool name"),
            ("Thought: t\nAction: Search[never closed", "not closed"),
            ("Thought: t\nAction: {\"tool\": ", "not closed"),
        ] {
            match parsed(raw).decision {
                Decision::Unreadable { why: got, .. } => assert!(got.contains(why), "{raw}: {got}"),
                other => panic!("{raw}: {other:?}"),
            }
        }
    }

    #[test]
    fn client_tags_are_the_ones_read() {
        let tags = Tags {
            thought: "Reasoning".into(),
            action: "Tool".into(),
            observation: "Result".into(),
            final_answer: "Reply".into(),
        };
        let p = parse(
            "Reasoning: look\nTool: read_file(path=\"a\")\nResult: x",
            &tags,
        )
        .unwrap();
        assert_eq!(p.thought, "look");
        assert_eq!(action_of(&p).0, "read_file");
        let p = parse("Reasoning: done\nReply: yes", &tags).unwrap();
        assert_eq!(answer_of(&p), "yes");
    }

    // Issue 14, families 1–3 and item 11.

    #[test]
    fn the_start_of_an_observation_tag_left_at_the_end_is_dropped() {
        for tail in [
            "\nObs",
            "\nObserv",
            "\nobservation",
            "\nOBSERVATION",
            "\n**Observation",
        ] {
            let p = parsed(&format!(
                "Thought: t\nAction: read_file\nAction Input: src/app.py{tail}"
            ));
            assert_eq!(action_of(&p).1, json!({"input": "src/app.py"}), "{tail:?}");
            let p = parsed(&format!(
                "Thought: t\nFinal Answer: It is in auth.js.{tail}"
            ));
            assert_eq!(answer_of(&p), "It is in auth.js.", "{tail:?}");
        }
        let p = parsed("Thought: t\nAction: f(x=1)\nObservation\nmade up\nFinal Answer: no");
        assert_eq!(action_of(&p).1, json!({"x": 1}));
    }

    #[test]
    fn stray_end_tokens_never_reach_an_answer_or_argument() {
        for token in ["<|im_end|>", "<|eot_id|>", "</s>", "<|end|>"] {
            let p = parsed(&format!("Thought: t\nFinal Answer: Done.{token}"));
            assert_eq!(answer_of(&p), "Done.", "{token}");
            assert!(
                p.warnings.iter().any(|w| w.contains("end-of-turn")),
                "{:?}",
                p.warnings
            );
            let p = parsed(&format!(
                "Thought: t\nAction: read_file\nAction Input: a.py\n{token}"
            ));
            assert_eq!(action_of(&p).1, json!({"input": "a.py"}), "{token}");
        }
    }

    #[test]
    fn markup_after_a_thought_is_the_action_and_not_part_of_the_thought() {
        let p = parsed("Thought: I need the file.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.py\"}}\n</tool_call><|im_end|>");
        assert_eq!(p.thought, "I need the file.");
        assert_eq!(action_of(&p).1, json!({"path": "a.py"}));
        assert!(
            p.warnings
                .iter()
                .any(|w| w.contains("'<tool_call>' tool-call markup")),
            "{:?}",
            p.warnings
        );
        let p = parsed("<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.py\"}}\n</tool_call>");
        assert_eq!(p.thought, "");
        let p = parsed("Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.ls:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>");
        assert_eq!(p.thought, "Let me check.");
        assert_eq!(action_of(&p).0, "ls");
    }

    #[test]
    fn every_call_of_a_list_is_kept_in_order() {
        let p = parsed("Thought: both\n[read_file(path='a'), read_file(path='b')]");
        assert_eq!(action_of(&p).1, json!({"path": "a"}));
        assert_eq!(p.also.len(), 1);
        assert_eq!(
            action_of(&Parsed {
                decision: p.also[0].clone(),
                ..p.clone()
            })
            .1,
            json!({"path": "b"})
        );
        // Several calls are no fault of the output: the step proposes them all.
        assert!(
            !p.warnings.iter().any(|w| w.contains("tool calls")),
            "{:?}",
            p.warnings
        );
    }

    #[test]
    fn harmony_messages_are_read() {
        let p = parsed("<|channel|>analysis<|message|>Look first.<|end|><|start|>assistant<|channel|>commentary to=functions.read_file <|constrain|>json<|message|>{\"path\":\"a\"}<|call|>");
        assert_eq!(p.thought, "Look first.");
        assert_eq!(action_of(&p).1, json!({"path": "a"}));
    }

    #[test]
    fn an_answer_that_opens_with_a_tag_is_no_answer() {
        let p = parsed("Final Answer: Thought: I should read it.\n\nAction: read_file(path=\"a\")");
        assert!(
            matches!(p.decision, Decision::Unreadable { .. }),
            "{:?}",
            p.decision
        );
        let p = parsed("Thought: t\nFinal Answer: Action items are listed in TODO.md.");
        assert_eq!(answer_of(&p), "Action items are listed in TODO.md.");
        let p = parsed("Thought: t\nFinal Answer: **Final Answer:** 30 s.");
        assert_eq!(answer_of(&p), "30 s.");
        let p =
            parsed("Thought: t\nFinal Answer: Thought: I now know the final answer\nIt is 30 s.");
        assert_eq!(answer_of(&p), "It is 30 s.");
    }

    #[test]
    fn empty_output_is_none() {
        assert!(parse("  \n ", &Tags::default()).is_none());
        assert!(parse("<think></think>", &Tags::default()).is_none());
    }

    #[test]
    fn actions_after_their_tags_are_several_calls_until_an_imagined_result() {
        let p = parsed("Thought: both\nAction: [a(x=1), b(y=2)]");
        assert_eq!(action_of(&p).0, "a");
        assert_eq!(p.also.len(), 1);
        let p = parsed("Thought: both\nAction: a(x=1)\nAction: b(y=2)");
        assert_eq!(p.also.len(), 1);
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        // What follows an imagined observation is the model playing the tool: not a call.
        let p = parsed("Thought: t\nAction: a(x=1)\nObservation: 3\nAction: b(y=2)");
        assert_eq!(action_of(&p).0, "a");
        assert!(p.also.is_empty());
        assert!(
            p.warnings
                .iter()
                .any(|w| w.contains("'Observation:' itself")),
            "{:?}",
            p.warnings
        );
        // An unreadable second action leaves the first standing alone.
        let p = parsed("Thought: t\nAction: a(x=1)\nAction: b(y=");
        assert_eq!(action_of(&p).0, "a");
        assert!(p.also.is_empty());
    }
}
