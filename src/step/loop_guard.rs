//! The loop guard, from the conversation alone: the same call (tool and arguments, compared as
//! JSON values, key order aside) made again and again with the same result, or a short cycle
//! of calls (two or three steps) going round with the same results. At `warn_after` times the
//! step tells the model in the prompt's tail and reports it; at `stop_after` a proposed call
//! that would go on with it is refused (`loop_detected`). A final answer is never refused.
//!
//! One pass backwards over the history's last steps, stopping at the first that breaks every
//! pattern: a normal step looks at a few turns and allocates nothing.

use crate::llm::wire_names::WireNames;
use serde::Serialize;
use serde_json::{Map, Value};

use super::history::{Role, Turn};
use super::parse::Tags;

/// `react.loop_guard`: when the step warns, and when it stops the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopGuard {
    pub warn_after: u32,
    pub stop_after: u32,
}

impl Default for LoopGuard {
    fn default() -> Self {
        Self {
            warn_after: 3,
            stop_after: 5,
        }
    }
}

/// The longest cycle looked for, in steps.
const LONGEST_CYCLE: usize = 3;
/// How much of a call the prompt's notice quotes, in bytes.
const QUOTED_CALL_BYTES: usize = 240;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopKind {
    /// One step (its calls) made again and again.
    SameCall,
    /// Two or three different steps going round.
    Cycle,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopAction {
    /// The model was told in the prompt; what it proposed is returned.
    Warned,
    /// The proposed call would have gone on with it: refused (`loop_detected`).
    Stopped,
}

/// One call of the repetition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RepeatedCall {
    pub tool_name: String,
    pub tool_args: Map<String, Value>,
}

/// What the guard found: the response's `loop_guard`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoopReport {
    pub kind: LoopKind,
    /// The calls that repeat, in the order they were made: a step's calls (several when it
    /// made them in parallel), or each step of the cycle in turn.
    pub repeated: Vec<RepeatedCall>,
    /// How many steps the cycle has (1 for the same call).
    pub steps: u32,
    /// How many times in a row the history holds it (the complete rounds of a cycle); the
    /// call refused when stopped is not counted.
    pub times: u32,
    pub action: LoopAction,
}

/// A repetition at or past `warn_after`, and what the next step must not be.
#[derive(Debug, Clone)]
pub struct Finding {
    pub report: LoopReport,
    /// The calls (in `report.repeated`) a proposal must not repeat.
    next: std::ops::Range<usize>,
    stop_after: u32,
}

/// One step of the loop in the history: an assistant turn that called tools, and the
/// observations after it.
#[derive(Clone, Copy)]
struct Step<'h> {
    turn: &'h Turn,
    results: &'h [Turn],
}

impl Step<'_> {
    /// The same calls (names and arguments, in order) with the same results.
    fn same(&self, other: &Step<'_>) -> bool {
        same_calls(self.turn, other.turn)
            && self.results.len() == other.results.len()
            && self
                .results
                .iter()
                .zip(other.results)
                .all(|(a, b)| same_result(a, b))
    }
}

fn same_calls(a: &Turn, b: &Turn) -> bool {
    let (mut a, mut b) = (a.calls(), b.calls());
    loop {
        match (a.next(), b.next()) {
            (None, None) => return true,
            (Some(x), Some(y)) if x.name == y.name && same_map(&x.parameters, &y.parameters) => {}
            _ => return false,
        }
    }
}

fn same_result(a: &Turn, b: &Turn) -> bool {
    let (x, y) = (a.tool_result.as_ref(), b.tool_result.as_ref());
    a.content == b.content
        && a.failed() == b.failed()
        && match (x, y) {
            (Some(x), Some(y)) => same_value(&x.result, &y.result),
            (x, y) => x.is_none() && y.is_none(),
        }
}

fn same_map(a: &Map<String, Value>, b: &Map<String, Value>) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(k, v)| b.get(k).is_some_and(|w| same_value(v, w)))
}

/// Two JSON values the same as JSON means it: key order aside, and `1` the same number as
/// `1.0` (serde_json keeps them apart). Walked with a stack of its own.
fn same_value(a: &Value, b: &Value) -> bool {
    let mut stack = vec![(a, b)];
    while let Some(pair) = stack.pop() {
        match pair {
            (Value::Number(x), Value::Number(y)) => {
                let same = x == y || ((x.is_f64() || y.is_f64()) && x.as_f64() == y.as_f64());
                if !same {
                    return false;
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                stack.extend(x.iter().zip(y))
            }
            (Value::Object(x), Value::Object(y)) if x.len() == y.len() => {
                for (key, v) in x {
                    let Some(w) = y.get(key) else { return false };
                    stack.push((v, w));
                }
            }
            (x, y) if x == y => {}
            _ => return false,
        }
    }
    true
}

/// The loop's steps, newest first, back to the turn that ends the loop: the user's (unless it
/// only repeats the task, as some clients send it with every step) or a final answer.
fn steps_back(history: &[Turn]) -> impl Iterator<Item = Step<'_>> {
    let mut end = history.len();
    std::iter::from_fn(move || {
        while end > 0 && repeats_the_task(history, end - 1) {
            end -= 1;
        }
        let mut start = end;
        while start > 0 && history[start - 1].role == Role::ToolObservation {
            start -= 1;
        }
        let turn = history.get(start.checked_sub(1)?)?;
        if turn.role != Role::Assistant || turn.calls().next().is_none() {
            return None;
        }
        let step = Step {
            turn,
            results: &history[start..end],
        };
        end = start - 1;
        Some(step)
    })
}

/// Whether `history[at]` is a user turn that says what the user turn before it said.
fn repeats_the_task(history: &[Turn], at: usize) -> bool {
    let turn = &history[at];
    turn.role == Role::User
        && history[..at]
            .iter()
            .rev()
            .find(|t| t.role == Role::User)
            .is_some_and(|before| before.content.trim() == turn.content.trim())
}

impl LoopGuard {
    /// The repetition the history ends with, when it has reached `warn_after`. A query that
    /// says something new (not the task again) is the user stepping in: no loop.
    pub fn watch(&self, history: &[Turn], query: &str) -> Option<Finding> {
        let query = query.trim();
        if !query.is_empty()
            && history
                .iter()
                .rev()
                .find(|t| t.role == Role::User)
                .is_none_or(|t| t.content.trim() != query)
        {
            return None;
        }
        let (newest, matched) = runs(history);
        let seen = newest.iter().flatten().count();
        // The same call first; a cycle only when its steps are not all the same.
        (1..=seen).find_map(|len| {
            let cycle = &newest[..len];
            let degenerate = len > 1 && cycle[1..].iter().all(|s| same_step(*s, cycle[0]));
            let run = len + matched[len - 1];
            let times = u32::try_from(run / len).unwrap_or(u32::MAX);
            (!degenerate && times >= self.warn_after).then(|| finding(cycle, run, times, self))
        })
    }
}

fn same_step(a: Option<Step<'_>>, b: Option<Step<'_>>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a.same(&b))
}

/// The newest steps (up to three, newest first), and for each cycle length how many older
/// steps go on with it (each the same as the step that length after it).
fn runs(history: &[Turn]) -> ([Option<Step<'_>>; LONGEST_CYCLE], [usize; LONGEST_CYCLE]) {
    let mut newest = [None; LONGEST_CYCLE];
    let mut matched = [0usize; LONGEST_CYCLE];
    let mut going = [true; LONGEST_CYCLE];
    // The steps just after this one, nearest first.
    let mut after: [Option<Step<'_>>; LONGEST_CYCLE] = [None; LONGEST_CYCLE];
    for (count, step) in steps_back(history).enumerate() {
        if let Some(slot) = newest.get_mut(count) {
            *slot = Some(step);
        }
        for len in 1..=LONGEST_CYCLE {
            let Some(later) = after[len - 1].filter(|_| going[len - 1]) else {
                continue;
            };
            if step.same(&later) {
                matched[len - 1] += 1;
            } else {
                going[len - 1] = false;
            }
        }
        after.rotate_right(1);
        after[0] = Some(step);
        if count + 1 >= LONGEST_CYCLE && going.iter().all(|g| !g) {
            break;
        }
    }
    (newest, matched)
}

/// The finding for a cycle of `cycle.len()` steps (newest first) that the last `run` steps go
/// round, `times` rounds.
fn finding(cycle: &[Option<Step<'_>>], run: usize, times: u32, guard: &LoopGuard) -> Finding {
    let len = cycle.len();
    // In the order made: the run's oldest step is `run - 1` steps back, and so is the same as
    // the newest step `(run - 1) % len` back; the next step would be the same as the step
    // `run % len` into the cycle.
    let mut repeated = Vec::new();
    let mut next = 0..0;
    for k in 0..len {
        let Some(step) = cycle[(run - 1 - k) % len] else {
            continue;
        };
        let calls = step.turn.calls().map(|c| RepeatedCall {
            tool_name: c.name.clone(),
            tool_args: c.parameters.clone(),
        });
        let from = repeated.len();
        repeated.extend(calls);
        if k == run % len {
            next = from..repeated.len();
        }
    }
    Finding {
        report: LoopReport {
            kind: if len == 1 {
                LoopKind::SameCall
            } else {
                LoopKind::Cycle
            },
            repeated,
            steps: len as u32,
            times,
            action: LoopAction::Warned,
        },
        next,
        stop_after: guard.stop_after,
    }
}

impl Finding {
    /// The report of a stopped loop, when the proposed calls go on with it at `stop_after`.
    pub fn stops<'c>(
        &self,
        mut proposed: impl Iterator<Item = (&'c str, &'c Map<String, Value>)>,
    ) -> Option<LoopReport> {
        if self.report.times < self.stop_after {
            return None;
        }
        let mut expected = self.report.repeated[self.next.clone()].iter();
        let same = loop {
            match (proposed.next(), expected.next()) {
                (None, None) => break true,
                (Some((name, args)), Some(e))
                    if name == e.tool_name && same_map(args, &e.tool_args) => {}
                _ => break false,
            }
        };
        same.then(|| LoopReport {
            action: LoopAction::Stopped,
            ..self.report.clone()
        })
    }

    /// What the prompt's tail tells the model, naming the tools as it sees them (`renamed`).
    pub fn notice(&self, tags: &Tags, renamed: &WireNames) -> String {
        let r = &self.report;
        let calls = quoted(&r.repeated, renamed);
        let what = match r.kind {
            LoopKind::SameCall => format!(
                "you have made the same call {} times in a row ({calls}) and got the same result each time",
                r.times
            ),
            LoopKind::Cycle => format!(
                "you have gone round the same {} calls {} times in a row ({calls}) and got the same results each time",
                r.steps, r.times
            ),
        };
        format!(
            "Loop warning: {what}. Doing it again will not tell you anything new. Change course: \
call a different tool or use different arguments, or give the {}.",
            tags.final_answer
        )
    }

    /// The response's warning.
    pub fn warning(&self) -> String {
        let r = &self.report;
        let names = names(&r.repeated);
        match r.kind {
            LoopKind::SameCall => format!(
                "loop guard: the model called {names} with the same arguments {} times in a row, with the same result each time; the prompt asked it to change course (see loop_guard)",
                r.times
            ),
            LoopKind::Cycle => format!(
                "loop guard: the model went round a cycle of {} steps ({names}) {} times, with the same results each time; the prompt asked it to change course (see loop_guard)",
                r.steps, r.times
            ),
        }
    }
}

/// The error message of a stopped loop.
pub fn stopped_message(report: &LoopReport) -> String {
    let names = names(&report.repeated);
    match report.kind {
        LoopKind::SameCall => format!(
            "the model proposed {names} with the same arguments again, after {} times in a row with the same result (react.loop_guard.stop_after); the loop is stopped",
            report.times
        ),
        LoopKind::Cycle => format!(
            "the model went on with a cycle of {} steps ({names}) it had gone round {} times with the same results (react.loop_guard.stop_after); the loop is stopped",
            report.steps, report.times
        ),
    }
}

/// The tools' names, in order, joined.
fn names(calls: &[RepeatedCall]) -> String {
    let names: Vec<&str> = calls.iter().map(|c| c.tool_name.as_str()).collect();
    names.join(", ")
}

/// The calls as the prompt writes them (`name({"arg": …})`), each cut to
/// [`QUOTED_CALL_BYTES`]: a call's arguments may be megabytes, and are not written whole.
fn quoted(calls: &[RepeatedCall], renamed: &WireNames) -> String {
    let mut out = String::new();
    for (i, call) in calls.iter().enumerate() {
        if i > 0 {
            out.push_str(", then ");
        }
        let mut one = Bounded(Vec::with_capacity(QUOTED_CALL_BYTES));
        let whole = (|| {
            std::io::Write::write_all(&mut one, renamed.seen(&call.tool_name).as_bytes())?;
            std::io::Write::write_all(&mut one, b"(")?;
            serde_json::to_writer(&mut one, &call.tool_args)?;
            std::io::Write::write_all(&mut one, b")")
        })()
        .is_ok();
        // Cut at a byte count, the last character may be split: it is left out.
        let text = match std::str::from_utf8(&one.0) {
            Ok(text) => text,
            Err(e) => std::str::from_utf8(&one.0[..e.valid_up_to()]).unwrap_or_default(),
        };
        out.push_str(text);
        if !whole {
            out.push('…');
        }
    }
    out
}

/// A writer that takes [`QUOTED_CALL_BYTES`] and then refuses more.
struct Bounded(Vec<u8>);

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = QUOTED_CALL_BYTES - self.0.len();
        if room == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let n = buf.len().min(room);
        self.0.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use super::*;
    use serde_json::json;

    fn turn(value: Value) -> Turn {
        serde_json::from_value(value).unwrap()
    }

    /// A call and its result, as two turns.
    fn step(name: &str, args: Value, result: &str) -> [Turn; 2] {
        [
            turn(json!({"role": "assistant", "content": "t",
                "toolCall": {"id": "c", "name": name, "parameters": args}})),
            turn(json!({"role": "tool_observation", "content": result, "tool_call_id": "c"})),
        ]
    }

    fn history(steps: &[[Turn; 2]]) -> Vec<Turn> {
        let mut turns = vec![turn(json!({"role": "user", "content": "find it"}))];
        turns.extend(steps.iter().flatten().cloned());
        turns
    }

    fn read(path: &str) -> [Turn; 2] {
        step("read_file", json!({"path": path}), "fn main() {}")
    }

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    const GUARD: LoopGuard = LoopGuard {
        warn_after: 3,
        stop_after: 5,
    };

    #[test]
    fn the_same_call_with_the_same_result_three_times_is_warned_of() {
        let h = history(&[read("b.rs"), read("a.rs"), read("a.rs")]);
        assert!(GUARD.watch(&h, "").is_none(), "twice is not a loop yet");
        let h = history(&[read("a.rs"), read("a.rs"), read("a.rs")]);
        let found = GUARD.watch(&h, "").unwrap();
        assert_eq!(found.report.kind, LoopKind::SameCall);
        assert_eq!(found.report.times, 3);
        assert_eq!(found.report.steps, 1);
        assert_eq!(found.report.action, LoopAction::Warned);
        assert_eq!(
            found.report.repeated,
            vec![RepeatedCall {
                tool_name: "read_file".into(),
                tool_args: args(json!({"path": "a.rs"}))
            }]
        );
        let notice = found.notice(&Tags::default(), &WireNames::default());
        assert!(
            notice.contains(r#"read_file({"path":"a.rs"})"#) && notice.contains("3 times"),
            "{notice}"
        );
        assert!(notice.ends_with("give the Final Answer."), "{notice}");
        // Three times is not yet five: the same call again is proposed.
        let same = args(json!({"path": "a.rs"}));
        assert!(found.stops([("read_file", &same)].into_iter()).is_none());
    }

    #[test]
    fn different_results_are_progress_not_a_loop() {
        let h = history(&[
            step("run_tests", json!({}), "3 failed"),
            step("run_tests", json!({}), "2 failed"),
            step("run_tests", json!({}), "1 failed"),
        ]);
        assert!(GUARD.watch(&h, "").is_none());
        let mut failed = read("a.rs");
        failed[1].is_error = Some(true);
        let h = history(&[read("a.rs"), failed, read("a.rs")]);
        assert!(GUARD.watch(&h, "").is_none(), "a failure is another result");
    }

    /// JSON has one number 1, however written: `1` and `1.0` are the same argument, in the
    /// history and in the call proposed; `1` and `1.5` are not, nor `"1"` and `1`.
    #[test]
    fn a_number_is_the_same_however_written() {
        let h = history(&[
            step("grep", json!({"n": 1}), "none"),
            step("grep", json!({"n": 1.0}), "none"),
            step("grep", json!({"n": 1, "deep": [2.0]}), "none"),
        ]);
        assert!(GUARD.watch(&h, "").is_none(), "a key more is another call");
        let h = history(&[
            step("grep", json!({"n": 1}), "none"),
            step("grep", json!({"n": 1.0}), "none"),
            step("grep", json!({"n": 1}), "none"),
        ]);
        assert_eq!(GUARD.watch(&h, "").unwrap().report.times, 3);
        let h = history(&[
            step("grep", json!({"n": 1}), "none"),
            step("grep", json!({"n": 1.5}), "none"),
            step("grep", json!({"n": "1"}), "none"),
        ]);
        assert!(GUARD.watch(&h, "").is_none());
        let five: Vec<[Turn; 2]> = (0..5)
            .map(|_| step("grep", json!({"n": 1}), "none"))
            .collect();
        let found = GUARD.watch(&history(&five), "").unwrap();
        let proposed = json!({"n": 1.0});
        let args = proposed.as_object().unwrap();
        assert!(found.stops([("grep", args)].into_iter()).is_some());
        let other = json!({"n": 2.0});
        assert!(found
            .stops([("grep", other.as_object().unwrap())].into_iter())
            .is_none());
    }

    #[test]
    fn arguments_in_another_key_order_are_the_same_call() {
        let h = history(&[
            step("grep", json!({"pattern": "x", "path": "src"}), "none"),
            step("grep", json!({"path": "src", "pattern": "x"}), "none"),
            step("grep", json!({"pattern": "x", "path": "src"}), "none"),
        ]);
        assert_eq!(GUARD.watch(&h, "").unwrap().report.times, 3);
        let h = history(&[
            step(
                "grep",
                json!({"pattern": "x", "opts": {"a": 1, "b": [1, 2]}}),
                "none",
            ),
            step(
                "grep",
                json!({"opts": {"b": [1, 2], "a": 1}, "pattern": "x"}),
                "none",
            ),
            step(
                "grep",
                json!({"pattern": "x", "opts": {"a": 1, "b": [2, 1]}}),
                "none",
            ),
        ]);
        assert!(
            GUARD.watch(&h, "").is_none(),
            "an array's order is part of its value"
        );
    }

    #[test]
    fn five_times_stops_the_same_call_and_nothing_else() {
        let h = history(&[read("a.rs"), read("a.rs"), read("a.rs"), read("a.rs")]);
        let same = args(json!({"path": "a.rs"}));
        let found = GUARD.watch(&h, "").unwrap();
        assert!(
            found.stops([("read_file", &same)].into_iter()).is_none(),
            "the fifth is still proposed"
        );
        let h = history(&[
            read("a.rs"),
            read("a.rs"),
            read("a.rs"),
            read("a.rs"),
            read("a.rs"),
        ]);
        let found = GUARD.watch(&h, "").unwrap();
        assert_eq!(found.report.times, 5);
        let stopped = found.stops([("read_file", &same)].into_iter()).unwrap();
        assert_eq!(stopped.action, LoopAction::Stopped);
        assert_eq!(stopped.times, 5);
        let other = args(json!({"path": "b.rs"}));
        assert!(found.stops([("read_file", &other)].into_iter()).is_none());
        assert!(found.stops([("grep", &same)].into_iter()).is_none());
        assert!(
            found
                .stops([("read_file", &same), ("read_file", &other)].into_iter())
                .is_none(),
            "more calls than the loop's is another step"
        );
        assert!(stopped_message(&stopped).contains("read_file"));
    }

    #[test]
    fn a_cycle_of_two_and_of_three() {
        let (a, b, c) = (read("a.rs"), read("b.rs"), read("c.rs"));
        let two = |n: usize| {
            let mut steps = Vec::new();
            for i in 0..n {
                steps.push(if i % 2 == 0 { a.clone() } else { b.clone() });
            }
            history(&steps)
        };
        assert!(GUARD.watch(&two(5), "").is_none(), "two rounds and a half");
        let found = GUARD.watch(&two(6), "").unwrap();
        assert_eq!(found.report.kind, LoopKind::Cycle);
        assert_eq!((found.report.steps, found.report.times), (2, 3));
        let paths: Vec<&Value> = found
            .report
            .repeated
            .iter()
            .map(|c| &c.tool_args["path"])
            .collect();
        assert_eq!(paths, [&json!("a.rs"), &json!("b.rs")], "in the order made");
        // Round five done, then each step of the cycle would go on with it.
        let a_args = args(json!({"path": "a.rs"}));
        let b_args = args(json!({"path": "b.rs"}));
        let found = GUARD.watch(&two(10), "").unwrap();
        assert_eq!(found.report.times, 5);
        assert!(found.stops([("read_file", &a_args)].into_iter()).is_some());
        assert!(found.stops([("read_file", &b_args)].into_iter()).is_none());
        let found = GUARD.watch(&two(11), "").unwrap();
        assert!(found.stops([("read_file", &b_args)].into_iter()).is_some());
        assert!(found.stops([("read_file", &a_args)].into_iter()).is_none());

        let three = history(&[
            a.clone(),
            b.clone(),
            c.clone(),
            a.clone(),
            b.clone(),
            c.clone(),
            a.clone(),
            b.clone(),
            c.clone(),
        ]);
        let found = GUARD.watch(&three, "").unwrap();
        assert_eq!(
            (found.report.kind, found.report.steps),
            (LoopKind::Cycle, 3)
        );
        assert_eq!(found.report.times, 3);
        let notice = found.notice(&Tags::default(), &WireNames::default());
        assert!(notice.contains("a.rs\"}), then read_file"), "{notice}");
    }

    #[test]
    fn a_new_user_turn_or_query_ends_the_loop_but_the_task_repeated_does_not() {
        let mut h = history(&[read("a.rs"), read("a.rs")]);
        h.push(turn(json!({"role": "user", "content": "try once more"})));
        h.extend(read("a.rs"));
        assert!(GUARD.watch(&h, "").is_none());
        let mut h = history(&[read("a.rs"), read("a.rs")]);
        h.push(turn(json!({"role": "user", "content": "find it"})));
        h.extend(read("a.rs"));
        assert_eq!(GUARD.watch(&h, "").unwrap().report.times, 3);
        assert!(GUARD.watch(&h, "find it").is_some(), "the task again");
        assert!(GUARD.watch(&h, "look elsewhere").is_none());
        let mut h = history(&[read("a.rs"), read("a.rs")]);
        h.push(turn(
            json!({"role": "assistant", "content": "done", "thought": "t"}),
        ));
        h.extend(read("a.rs"));
        assert!(GUARD.watch(&h, "").is_none(), "a final answer ends a loop");
    }

    #[test]
    fn parallel_calls_repeat_as_one_step() {
        let both = [
            turn(
                json!({"role": "assistant", "content": "t", "toolCall": {"name": "read_file", "parameters": {"path": "a"}},
                "toolCalls": [{"name": "read_file", "parameters": {"path": "a"}}, {"name": "read_file", "parameters": {"path": "b"}}]}),
            ),
            turn(json!({"role": "tool_observation", "content": "A"})),
        ];
        let mut h = history(&[both.clone(), both.clone(), both.clone()]);
        h.push(turn(json!({"role": "tool_observation", "content": "B"})));
        assert!(GUARD.watch(&h, "").is_none(), "its last result differs");
        let mut with_b = both.to_vec();
        with_b.push(turn(json!({"role": "tool_observation", "content": "B"})));
        let h: Vec<Turn> = std::iter::repeat_n(with_b, 5).flatten().collect();
        let found = GUARD.watch(&h, "").unwrap();
        assert_eq!(found.report.repeated.len(), 2);
        let (a, b) = (args(json!({"path": "a"})), args(json!({"path": "b"})));
        assert!(found
            .stops([("read_file", &a), ("read_file", &b)].into_iter())
            .is_some());
        assert!(found.stops([("read_file", &a)].into_iter()).is_none());
    }

    #[test]
    fn a_huge_call_is_quoted_short() {
        let big = "x".repeat(1 << 20);
        let h = history(&[
            step("write_file", json!({"content": big}), "ok"),
            step("write_file", json!({"content": big}), "ok"),
            step("write_file", json!({"content": big}), "ok"),
        ]);
        let found = GUARD.watch(&h, "").unwrap();
        let notice = found.notice(&Tags::default(), &WireNames::default());
        assert!(notice.len() < 1_000, "{}", notice.len());
        assert!(notice.contains("write_file({\"content\":\"xxx"), "{notice}");
        // A character split by the cut is left out, not broken.
        let wide = "é".repeat(1_000);
        let calls = [RepeatedCall {
            tool_name: "w".into(),
            tool_args: args(json!({ "s": wide })),
        }];
        let quoted = quoted(&calls, &WireNames::default());
        assert!(
            quoted.ends_with("éé…") || quoted.ends_with("é…"),
            "{quoted}"
        );
    }

    #[test]
    fn ten_thousand_turns_are_read_once() {
        // All the same: the whole history is one run.
        let h: Vec<Turn> = std::iter::repeat_n(read("a.rs"), 5_000).flatten().collect();
        let found = GUARD.watch(&h, "").unwrap();
        assert_eq!(found.report.times, 5_000);
        // All different: only the last few are looked at.
        let h: Vec<Turn> = (0..5_000).flat_map(|i| read(&format!("{i}.rs"))).collect();
        assert!(GUARD.watch(&h, "").is_none());
        // Ten thousand repeats of the task, each its own user turn.
        let h: Vec<Turn> = (0..10_000)
            .map(|_| turn(json!({"role": "user", "content": "find it"})))
            .collect();
        assert!(GUARD.watch(&h, "find it").is_none());
    }
}
