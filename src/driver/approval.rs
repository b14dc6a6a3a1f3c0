//! Approval before a tool runs: which calls must be approved (`--approve all|writes|none`), and
//! who decides (the person at the terminal). Each decision is one of three: run the call as
//! proposed, deny it with a reason the model reads, or run it with arguments the person edited.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::registry::ToolMetadata;
use super::terminal::{printable, Conversation, Terminal};

/// Which calls are asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ApprovalPolicy {
    /// Every call.
    All,
    /// Calls of a tool that may change something: every tool not known to be read-only (the
    /// built-in tools are; an MCP tool is when its server says `readOnlyHint`).
    #[default]
    Writes,
    /// None: every call runs as proposed.
    None,
}

impl ApprovalPolicy {
    pub fn asks(self, tool: &ToolMetadata) -> bool {
        match self {
            Self::All => true,
            Self::Writes => !tool.read_only,
            Self::None => false,
        }
    }
}

/// A call waiting for a decision.
#[derive(Debug, Clone, Copy)]
pub struct ApprovalRequest<'a> {
    pub iteration: u32,
    pub tool: &'a str,
    pub args: &'a Value,
    pub metadata: &'a ToolMetadata,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Approve,
    /// Not run; the model reads the reason.
    Deny(String),
    /// Run with these arguments (an object) instead of the proposed ones.
    Edit(Value),
}

impl Decision {
    /// The word a report records.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Approve => "approved",
            Self::Deny(_) => "denied",
            Self::Edit(_) => "edited",
        }
    }
}

/// Whoever decides.
pub trait Approver: Send + Sync {
    fn decide<'a>(&'a self, request: ApprovalRequest<'a>) -> BoxFuture<'a, Decision>;

    /// Whether the loop runs this plan (`--approve-plan`); one who cannot ask does not.
    fn approve_plan<'a>(&'a self, _plan: &'a Value) -> BoxFuture<'a, bool> {
        Box::pin(async { false })
    }
}

/// The observation the model reads for a denied call.
pub fn denial(reason: &str) -> String {
    format!("The user denied this call: {reason}")
}

/// Said when a call must be approved and no one can answer.
pub const NO_ONE_TO_ASK: &str =
    "it needs approval and no one could approve it (run with --approve none to allow such calls)";

/// Tries a person gets to type valid JSON for an edit before the call is denied.
const EDIT_TRIES: usize = 3;

/// How deep edited arguments may nest. The run's report holds them a few levels deeper, and a
/// report past serde_json's 128 levels could not be read back from a session.
pub const MAX_EDIT_DEPTH: usize = 32;

/// What the model is told of arguments the user edited: short, so the tool's output is not cut
/// off behind them, and without `secrets` (a password typed for the tool is not the model's).
pub fn edit_note(args: &Value, secrets: &[String]) -> String {
    const MOST_SHOWN: usize = 1_000;
    let text = super::memory::redact::scrubbed_text(&args.to_string(), secrets);
    let shown = match text.char_indices().nth(MOST_SHOWN) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    };
    format!("(The user edited the arguments to {shown}.)")
}

/// Arguments typed or posted as an edit, when they are a JSON object nested at most
/// [`MAX_EDIT_DEPTH`] levels; otherwise why not.
pub fn edited_arguments(value: Value) -> Result<Value, String> {
    if !value.is_object() {
        return Err("the arguments must be a JSON object".into());
    }
    let mut stack = vec![(&value, 1)];
    while let Some((node, depth)) = stack.pop() {
        if depth > MAX_EDIT_DEPTH {
            return Err(format!(
                "the arguments nest deeper than {MAX_EDIT_DEPTH} levels"
            ));
        }
        match node {
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, depth + 1))),
            Value::Object(map) => stack.extend(map.values().map(|v| (v, depth + 1))),
            _ => {}
        }
    }
    Ok(value)
}

/// Asks on stderr and reads the answers, a line each, from the terminal (or a pipe). An input
/// that has ended can answer nothing: the call is denied, said so.
pub struct LineApprover {
    terminal: Arc<Terminal>,
}

impl LineApprover {
    pub fn new(terminal: Arc<Terminal>) -> Self {
        Self { terminal }
    }

    async fn ask(&self, request: ApprovalRequest<'_>) -> Decision {
        let mut input = self.terminal.conversation().await;
        eprintln!("{}", printable(&question(request)));
        loop {
            eprint!("Approve? [a]pprove, [d]eny, [e]dit the arguments: ");
            let Some(answer) = input.line().await else {
                return Decision::Deny(NO_ONE_TO_ASK.into());
            };
            match answer.trim().to_lowercase().as_str() {
                "a" | "approve" | "y" | "yes" => return Decision::Approve,
                "d" | "deny" | "n" | "no" => return deny(&mut input).await,
                "e" | "edit" => return edit(&mut input, request.args).await,
                _ => eprintln!("Answer a, d or e."),
            }
        }
    }
}

impl Approver for LineApprover {
    fn decide<'a>(&'a self, request: ApprovalRequest<'a>) -> BoxFuture<'a, Decision> {
        Box::pin(self.ask(request))
    }

    fn approve_plan<'a>(&'a self, plan: &'a Value) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let mut input = self.terminal.conversation().await;
            let steps = plan["steps"].as_array().map_or(0, Vec::len);
            loop {
                eprint!("Run this plan of {steps} steps (shown above)? [y]es, [n]o: ");
                let Some(answer) = input.line().await else {
                    return false;
                };
                match answer.trim().to_lowercase().as_str() {
                    "y" | "yes" | "a" | "approve" => return true,
                    "n" | "no" | "d" | "deny" => return false,
                    _ => eprintln!("Answer y or n."),
                }
            }
        })
    }
}

/// What the person is shown: the tool, what it says of itself, and the arguments.
fn question(request: ApprovalRequest<'_>) -> String {
    let warning = if request.metadata.destructive {
        " (it may delete or overwrite)"
    } else {
        ""
    };
    let args = serde_json::to_string_pretty(request.args).unwrap_or_default();
    format!(
        "[{}] the model wants to run {}{warning}:\n{args}",
        request.iteration, request.tool
    )
}

async fn deny(input: &mut Conversation<'_>) -> Decision {
    eprint!("The reason the model will read: ");
    let reason = input.line().await.unwrap_or_default();
    let reason = reason.trim();
    Decision::Deny(if reason.is_empty() {
        "no reason was given".into()
    } else {
        reason.to_string()
    })
}

async fn edit(input: &mut Conversation<'_>, proposed: &Value) -> Decision {
    eprintln!(
        "The arguments as one line of JSON (an object); proposed: {}",
        printable(&proposed.to_string())
    );
    for _ in 0..EDIT_TRIES {
        eprint!("Arguments: ");
        let Some(line) = input.line().await else {
            return Decision::Deny(NO_ONE_TO_ASK.into());
        };
        match serde_json::from_str::<Value>(&line).map(edited_arguments) {
            Ok(Ok(args)) => return Decision::Edit(args),
            Ok(Err(why)) => eprintln!("Not taken: {why}."),
            Err(e) => eprintln!("That is not JSON: {e}"),
        }
    }
    Decision::Deny(format!(
        "the user's edit of the arguments was not a JSON object after {EDIT_TRIES} tries"
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn metadata(read_only: bool) -> ToolMetadata {
        ToolMetadata {
            read_only,
            destructive: !read_only,
            parameters: json!({"type": "object"}),
            ..ToolMetadata::default()
        }
    }

    #[test]
    fn an_edit_is_an_object_nested_within_the_bound() {
        assert!(edited_arguments(json!({"path": "a"})).is_ok());
        for refused in [json!([1]), json!("a"), json!(null), json!(3)] {
            let why = edited_arguments(refused).err().unwrap_or_default();
            assert!(why.contains("a JSON object"), "{why}");
        }
        let nested =
            |levels: usize| (1..levels).fold(json!({"x": 1}), |inner, _| json!({ "k": inner }));
        assert!(edited_arguments(nested(MAX_EDIT_DEPTH - 1)).is_ok());
        let why = edited_arguments(nested(MAX_EDIT_DEPTH + 1))
            .err()
            .unwrap_or_default();
        assert!(why.contains("deeper than 32"), "{why}");
        let arrays = (0..MAX_EDIT_DEPTH).fold(json!(1), |inner, _| json!([inner]));
        let in_an_array = json!({ "a": arrays });
        assert!(edited_arguments(in_an_array).is_err());
    }

    #[test]
    fn the_model_reads_an_edit_short_and_without_the_known_secrets() {
        let secret = "hunter2hunter2xyz".to_string();
        let args = json!({"path": "f.txt", "auth": secret, "content": "z".repeat(70_000)});
        let note = edit_note(&args, std::slice::from_ref(&secret));
        assert!(!note.contains(&secret), "{note}");
        assert!(
            note.contains("[REDACTED]") && note.contains("\"path\":\"f.txt\""),
            "{note}"
        );
        assert!(
            note.chars().count() < 1_100,
            "{} characters",
            note.chars().count()
        );
        assert!(note.ends_with("….)"), "{note}");
        let short = edit_note(&json!({"path": "b"}), &[]);
        assert_eq!(short, r#"(The user edited the arguments to {"path":"b"}.)"#);
    }

    async fn decided(typed: &str) -> Decision {
        let terminal = Terminal::reading(std::io::Cursor::new(typed.to_string()));
        let approver = LineApprover::new(Arc::new(terminal));
        let meta = metadata(false);
        let args = json!({"path": "a.txt"});
        let request = ApprovalRequest {
            iteration: 1,
            tool: "write_file",
            args: &args,
            metadata: &meta,
        };
        approver.decide(request).await
    }

    #[test]
    fn writes_asks_about_tools_not_known_to_be_read_only() {
        let (reads, writes) = (metadata(true), metadata(false));
        assert!(!ApprovalPolicy::Writes.asks(&reads));
        assert!(ApprovalPolicy::Writes.asks(&writes));
        assert!(ApprovalPolicy::All.asks(&reads));
        assert!(!ApprovalPolicy::None.asks(&writes));
    }

    #[tokio::test]
    async fn each_answer_is_its_decision() {
        assert_eq!(decided("a\n").await, Decision::Approve);
        assert_eq!(decided(" YES \n").await, Decision::Approve);
        assert_eq!(
            decided("d\nnot that file\n").await,
            Decision::Deny("not that file".into())
        );
        assert_eq!(
            decided("d\n\n").await,
            Decision::Deny("no reason was given".into())
        );
        assert_eq!(
            decided("e\n{\"path\": \"b.txt\"}\n").await,
            Decision::Edit(json!({"path": "b.txt"}))
        );
    }

    #[tokio::test]
    async fn nonsense_is_asked_again_and_an_ended_input_denies() {
        assert_eq!(decided("maybe\n?\na\n").await, Decision::Approve);
        assert_eq!(decided("").await, Decision::Deny(NO_ONE_TO_ASK.into()));
        assert_eq!(decided("e\n").await, Decision::Deny(NO_ONE_TO_ASK.into()));
        assert_eq!(
            decided("what\n").await,
            Decision::Deny(NO_ONE_TO_ASK.into())
        );
    }

    #[tokio::test]
    async fn an_edit_that_is_not_an_object_is_asked_again_then_denied() {
        assert_eq!(
            decided("e\n[1]\nnot json\n{\"path\": \"c\"}\n").await,
            Decision::Edit(json!({"path": "c"}))
        );
        let Decision::Deny(why) = decided("e\n[1]\n\"s\"\nnull\n{\"late\": 1}\n").await else {
            panic!("three bad edits deny the call");
        };
        assert!(why.contains("not a JSON object"), "{why}");
    }
}
