//! The flags of `reactstep run` (and, through [`LoopArgs`], of `reactstep ui`), each checked
//! as it is read.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

use super::approval::ApprovalPolicy;

/// `llm_config.tool_mode`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ToolMode {
    Text,
    Native,
    Auto,
}

impl ToolMode {
    pub fn name(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Native => "native",
            Self::Auto => "auto",
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Output {
    /// The answer alone.
    Simple,
    /// The whole run as JSON.
    Json,
}

/// Drive a whole ReAct loop from the terminal.
#[derive(Debug, Parser)]
#[command(name = "reactstep run")]
pub struct RunArgs {
    /// The question or task.
    pub question: String,
    #[arg(long, value_enum, default_value_t = Output::Simple)]
    pub output: Output,
    /// Continue the session NAME: its earlier questions and answers (and its summary) are sent
    /// before the question, and this run is saved in it when it ends, however it ends.
    /// Checked once parsed (`Conversation::resume`), not by the parser, whose refusal would
    /// print the name as typed: a key or a terminal escape in it included.
    #[arg(long)]
    pub session: Option<String>,
    /// Where sessions are kept: a SQLite file (default: reactstep/memory.sqlite3 under the
    /// user's data directory) or a postgres:// URL.
    #[arg(long, requires = "session")]
    pub memory: Option<String>,
    #[command(flatten)]
    pub loop_args: LoopArgs,
}

/// The flags `run` shares with `reactstep ui`: the model, the tools, the service.
impl std::ops::Deref for RunArgs {
    type Target = LoopArgs;
    fn deref(&self) -> &LoopArgs {
        &self.loop_args
    }
}

/// How a loop is driven: its model, its tools and the service it talks to (`run` and `ui`).
#[derive(Debug, clap::Args)]
pub struct LoopArgs {
    /// The folder the file tools may read (default: the current folder).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    #[arg(long, default_value = "gpt-4o")]
    pub model: String,
    #[arg(long)]
    pub provider: Option<String>,
    /// A running service to use instead of one started in-process.
    #[arg(long)]
    pub server: Option<String>,
    #[arg(long, default_value_t = 10)]
    pub max_iterations: u32,
    /// The sampling temperature (the model's own default when absent).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// How the model calls a tool: `text` (ReAct lines), `native` (the provider's tool
    /// calling) or `auto` (the service's default: native for hosted models, text for local ones).
    #[arg(long, value_enum)]
    pub tool_mode: Option<ToolMode>,
    /// The model's context window in tokens (default: what a local model server says it serves,
    /// else 128,000).
    #[arg(long)]
    pub token_limit: Option<u32>,
    /// Tokens kept for each answer (default: 4,000, or a quarter of a smaller window).
    #[arg(long)]
    pub reserved_output_tokens: Option<u32>,
    /// Seconds one call of the model may take, in the service started in-process (default: 60,
    /// or 300 for a local model server, whose model may run on a CPU).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub llm_timeout: Option<u64>,
    /// Seconds the whole loop may take.
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Seconds the service may take to answer one step (a plan, an evaluation), however alive
    /// its stream is kept (default: the in-process service's step timeout and 30 s more; with
    /// --server, 3,630: a reactstep service's step timeout is at most an hour).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub step_timeout: Option<u64>,
    /// Seconds a step's stream may go without a whole event or heartbeat (the service sends one
    /// every 15 s while the model is quiet) before the step fails.
    #[arg(long, default_value_t = 60.0, value_parser = positive_seconds)]
    pub stream_idle_timeout: f64,
    /// The variable holding the model's key (default: OPENAI_API_KEY, or ANTHROPIC_API_KEY for
    /// Claude models).
    #[arg(long)]
    pub key_env: Option<String>,
    /// A model the service falls back to inside a step when the one before fails in a way
    /// another model can fix (repeatable, in order), as PROVIDER:MODEL, e.g.
    /// "anthropic:claude-sonnet-4-5"; its key is read from <PROVIDER>_API_KEY
    /// (ANTHROPIC_API_KEY, GEMINI_API_KEY …).
    #[arg(long = "fallback", value_parser = fallback_model)]
    pub fallbacks: Vec<(String, String)>,
    /// A JSON file holding a JSON Schema the final answer must match: the report's
    /// `answer_json` holds it parsed.
    #[arg(long)]
    pub final_answer_schema: Option<PathBuf>,
    /// One model output per step, separated by lines holding only `---`: the loop runs offline.
    #[arg(long)]
    pub mock_responses: Option<PathBuf>,
    /// At most N calls of a tool in the loop (repeatable), as NAME=N.
    #[arg(long = "tool-limit", value_parser = tool_limit)]
    pub tool_limits: Vec<(String, u32)>,
    /// An MCP server to start over stdio, whose tools the model may call (repeatable), e.g.
    /// "npx -y @modelcontextprotocol/server-filesystem .".
    #[arg(long = "mcp")]
    pub mcp: Vec<String>,
    /// A variable every --mcp server starts with (repeatable): NAME, taken from this
    /// environment, or NAME=value. Besides these a server has only PATH, HOME, USER, LOGNAME,
    /// SHELL, TERM, the locale and TMPDIR: never the model's key.
    #[arg(long = "mcp-env")]
    pub mcp_env: Vec<String>,
    /// An MCP server to reach over streamable HTTP (repeatable), e.g. "https://host/mcp".
    #[arg(long = "mcp-url")]
    pub mcp_urls: Vec<String>,
    /// A header sent to every --mcp-url server (repeatable), as "Name: value". Every local
    /// user sees a command line: give a secret with --mcp-header-env.
    #[arg(long = "mcp-header")]
    pub mcp_headers: Vec<String>,
    /// A header sent to every --mcp-url server with the value a variable holds (repeatable), as
    /// "Name: VARIABLE", e.g. "X-Api-Key: SEARCH_API_KEY"; the value is never printed.
    #[arg(long = "mcp-header-env")]
    pub mcp_header_envs: Vec<String>,
    /// The variable holding a bearer token sent to every --mcp-url server (never printed).
    #[arg(long)]
    pub mcp_token_env: Option<String>,
    /// Which tool calls wait for your approval on the terminal: `writes` (those of a tool not
    /// known to be read-only), `all` or `none`. A call no one can answer (the input has ended)
    /// is denied, and the model reads why.
    #[arg(long, value_enum, default_value_t = ApprovalPolicy::Writes)]
    pub approve: ApprovalPolicy,
    /// Ask the service for a plan first (POST /api/agent/plan): shown, sent with each step,
    /// adjusted after a failed call; the JSON report carries it.
    #[arg(long)]
    pub plan: bool,
    /// As --plan, and the plan runs only once you approve it on the terminal.
    #[arg(long)]
    pub approve_plan: bool,
    /// Evaluate each final answer (POST /api/agent/evaluate) before accepting it: one that
    /// needs another try goes back into the loop with what it is missing, until the answer is
    /// complete or the loop passes its plan's estimate by 2 steps.
    #[arg(long)]
    pub reflect: bool,
    /// Seconds an MCP server may take to start, to list its tools, or to answer one call.
    #[arg(long, default_value_t = 30)]
    pub mcp_timeout: u64,
    /// The body limit of the service named by --server (its REACTSTEP_MAX_BODY_BYTES), when
    /// it is not the default: older observations are cut to keep each step under it.
    #[arg(long, default_value_t = super::run::DEFAULT_MAX_REQUEST_BYTES, value_parser = body_limit)]
    pub server_max_body_bytes: usize,
}

/// `PROVIDER:MODEL`, split at the first `:` (a model name may hold more, as Ollama's tags do).
pub(super) fn fallback_model(text: &str) -> Result<(String, String), String> {
    match text.split_once(':') {
        Some((provider, model)) if !provider.trim().is_empty() && !model.trim().is_empty() => {
            Ok((provider.trim().to_string(), model.trim().to_string()))
        }
        _ => Err("a fallback is PROVIDER:MODEL, like anthropic:claude-sonnet-4-5".into()),
    }
}

fn tool_limit(text: &str) -> Result<(String, u32), String> {
    let (name, n) = text
        .split_once('=')
        .ok_or("a tool limit is NAME=N, like read_file=5")?;
    let n = n
        .trim()
        .parse()
        .map_err(|_| format!("{n} is not a number of calls"))?;
    Ok((name.trim().to_string(), n))
}

/// A body limit from 64 KiB (a step with its tools needs that much) to 1 GiB (past it, the
/// answer's bound, four times this, would bound nothing).
fn body_limit(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(bytes) if (64 << 10..=1 << 30).contains(&bytes) => Ok(bytes),
        _ => Err(format!(
            "{text} is not a number of bytes from 65536 to 1073741824"
        )),
    }
}

/// A number of seconds from a thousandth to a day: past a day is no bound worth the name, and
/// a `Duration` cannot hold every float.
fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(secs) if (0.001..=86_400.0).contains(&secs) => Ok(secs),
        _ => Err(format!(
            "{text} is not a number of seconds from 0.001 to 86400"
        )),
    }
}
