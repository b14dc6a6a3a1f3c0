//! A loop's progress on stderr as `reactstep run` prints it: each step's thought (as it
//! streams), action, approval and observation, the plan and the evaluations, in colour on a
//! terminal.

use serde_json::Value;

use super::approval::Decision;
use super::terminal::printable;
use super::Watcher;

/// Progress on stderr, as it happens.
pub struct StderrProgress {
    colour: bool,
    /// The step's thought was printed as it streamed.
    streamed: bool,
}

impl StderrProgress {
    /// Coloured when `colour` (stderr is a terminal).
    pub fn new(colour: bool) -> Self {
        Self {
            colour,
            streamed: false,
        }
    }

    fn line(&mut self, label: &str, colour: &str, text: &str) {
        // A thought streamed without its step's whole thought (an empty one) leaves its line
        // open: what comes next starts its own.
        self.end_streamed_line();
        let (on, off) = if self.colour {
            (colour, "\x1b[0m")
        } else {
            ("", "")
        };
        eprintln!("{on}{label}{off} {}", shown(text));
    }

    /// Ends the line a streamed thought was printed on, when one was, so that what comes next
    /// starts a line of its own.
    fn end_streamed_line(&mut self) {
        if std::mem::take(&mut self.streamed) {
            eprintln!();
        }
    }
}

/// A step that ends the loop with an error (or Ctrl-C) mid-thought: what is printed after the
/// loop starts its own line.
impl Drop for StderrProgress {
    fn drop(&mut self) {
        self.end_streamed_line();
    }
}

/// `text` made printable, each line after the first indented: a model's thought, a tool's name
/// or a service's reason cannot print a line that passes for one of the loop's own
/// (`[1] approval: … approved`).
fn shown(text: &str) -> String {
    printable(text).replace('\n', "\n    ")
}

/// Characters of an observation's first line shown.
const OBSERVATION_SHOWN: usize = 160;
/// A warning of the service's is read whole: its longest (the loop guard's) is about 200 bytes.
const WARNING_SHOWN: usize = 400;
/// Characters of a call's arguments shown: they may be a whole file.
const ARGUMENTS_SHOWN: usize = 500;

/// The first `shown` characters of `text`'s first line, and how much more there is.
fn shortened(text: &str, shown: usize) -> String {
    let first = text.lines().next().unwrap_or_default();
    let cut: String = first.chars().take(shown).collect();
    if cut.len() < text.trim_end().len() {
        format!("{cut} … ({} bytes)", text.len())
    } else {
        cut
    }
}

impl Watcher for StderrProgress {
    fn waiting(&mut self, iteration: u32) {
        self.end_streamed_line();
        if self.colour {
            self.line(
                &format!("[{iteration}]"),
                "\x1b[2m",
                "waiting for the model …",
            );
        }
    }

    fn thought_piece(&mut self, iteration: u32, piece: &str) {
        if !self.streamed {
            let (on, off) = if self.colour {
                ("\x1b[36m", "\x1b[0m")
            } else {
                ("", "")
            };
            eprint!("{on}[{iteration}] thought:{off} ");
            self.streamed = true;
        }
        eprint!("{}", shown(piece));
    }

    fn thought(&mut self, iteration: u32, thought: &str) {
        if self.streamed {
            self.end_streamed_line();
            return;
        }
        self.line(&format!("[{iteration}] thought:"), "\x1b[36m", thought);
    }

    fn repairing(&mut self, iteration: u32, reason: &str) {
        self.end_streamed_line();
        let said = format!(
            "{}; the model is asked again",
            shortened(reason, OBSERVATION_SHOWN)
        );
        self.line(&format!("[{iteration}] repair:"), "\x1b[35m", &said);
    }

    fn warning(&mut self, iteration: u32, text: &str) {
        self.end_streamed_line();
        let said = shortened(text, WARNING_SHOWN);
        self.line(&format!("[{iteration}] warning:"), "\x1b[33m", &said);
    }

    fn retrying(&mut self, iteration: u32, why: &str, wait: std::time::Duration) {
        self.end_streamed_line();
        let said = format!(
            "{}; the step is sent again in {:.1} s",
            shortened(why, OBSERVATION_SHOWN),
            wait.as_secs_f64()
        );
        self.line(&format!("[{iteration}] retry:"), "\x1b[35m", &said);
    }

    fn plan(&mut self, plan: &Value) {
        self.line("[plan]", "\x1b[35m", &super::reflection::checklist(plan));
    }

    fn evaluation(&mut self, evaluation: &Value, _answer: &str) {
        let incomplete = evaluation["completeness_score"]
            .as_u64()
            .is_some_and(|c| c < 7);
        let verdict = match (evaluation["needs_retry"] == true, incomplete) {
            (true, _) => "another try",
            (false, true) => "accepted as it is: the plan's steps are spent",
            (false, false) => "accepted",
        };
        let scores = format!(
            "completeness {}/10, quality {}/10: {verdict}",
            evaluation["completeness_score"], evaluation["quality_score"]
        );
        self.line("evaluation:", "\x1b[35m", &scores);
    }

    fn action(&mut self, iteration: u32, tool: &str, args: &Value) {
        // Compact JSON is one line: its start is shown, and its size.
        let args = shortened(&args.to_string(), ARGUMENTS_SHOWN);
        self.line(
            &format!("[{iteration}] action:"),
            "\x1b[33m",
            &format!("{tool} {args}"),
        );
    }

    fn tools_changed(&mut self, note: &str) {
        self.end_streamed_line();
        eprintln!("{}", shown(note));
    }

    fn approval(&mut self, iteration: u32, tool: &str, decision: &Decision) {
        let said = match decision {
            Decision::Approve => format!("{tool} approved"),
            Decision::Deny(reason) => format!("{tool} denied: {reason}"),
            Decision::Edit(args) => format!("{tool} approved with the arguments {args}"),
        };
        self.line(&format!("[{iteration}] approval:"), "\x1b[35m", &said);
    }

    fn observation(&mut self, iteration: u32, text: &str) {
        self.line(
            &format!("[{iteration}] observation:"),
            "\x1b[32m",
            &shortened(text, OBSERVATION_SHOWN),
        );
    }
}
