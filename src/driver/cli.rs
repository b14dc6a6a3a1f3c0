//! `reactstep run "<question>"`: a loop in the terminal. Without `--server` it starts the
//! service in-process on a loopback port and talks HTTP to it, as a plugin would.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use super::approval::{ApprovalPolicy, LineApprover};
use super::in_process::{budget, service_config, start_service};
use super::mcp::{start_servers, unset_variable, Endpoint, McpServer, ServerEnvironment};
use super::memory::{self, Conversation};
use super::service_reply::DEFAULT_STEP_CEILING;
use super::stderr_progress::StderrProgress;
use super::terminal::{printable, Terminal};
use super::{
    register_builtins, Driver, FallbackModel, LoopSettings, PriorConversation, RunReport,
    ToolRegistry, Workspace,
};
use crate::config::Config;
use crate::llm::Provider;
use crate::startup::Application;

/// `llm_config.tool_mode`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ToolMode {
    Text,
    Native,
    Auto,
}

impl ToolMode {
    fn name(self) -> &'static str {
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
fn fallback_model(text: &str) -> Result<(String, String), String> {
    match text.split_once(':') {
        Some((provider, model)) if !provider.trim().is_empty() && !model.trim().is_empty() => {
            Ok((provider.trim().to_string(), model.trim().to_string()))
        }
        _ => Err("a fallback is PROVIDER:MODEL, like anthropic:claude-sonnet-4-5".into()),
    }
}

/// The fallbacks, each with its key from `<PROVIDER>_API_KEY` (none needed offline).
fn fallbacks(args: &LoopArgs, var: impl Fn(&str) -> Option<String>) -> Vec<FallbackModel> {
    let offline = args.mock_responses.is_some();
    args.fallbacks
        .iter()
        .map(|(provider, model)| FallbackModel {
            provider: provider.clone(),
            model: model.clone(),
            key: (!offline)
                .then(|| var(&format!("{}_API_KEY", provider.to_ascii_uppercase())))
                .flatten(),
        })
        .collect()
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

/// Runs `reactstep run`; the process's exit code (0 when the loop succeeded).
pub async fn main(args: impl IntoIterator<Item = String>) -> i32 {
    let args = match RunArgs::try_parse_from(args) {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match run(args).await {
        Ok(code) => code,
        Err(why) => {
            eprintln!("reactstep run: {}", printable(&why));
            2
        }
    }
}

async fn run(args: RunArgs) -> Result<i32, String> {
    // The store is opened before anything starts: one that cannot be is said now, not after
    // the run it would lose.
    let conversation = match &args.session {
        Some(name) => Some(resume(&args, name).await?),
        None => None,
    };
    let prior = conversation.as_ref().map(Conversation::prior);
    let started = chrono::Utc::now().timestamp_millis();
    // Ctrl-C (and SIGTERM, SIGHUP, SIGQUIT) is caught from here on: during the servers' start
    // (a sign-in may wait on a person) it ends the command, the servers started so far killed
    // as they are dropped.
    let mut sigint = super::interrupts::Interrupts::catch()?;
    // The person at the terminal answers approvals and the servers' questions.
    let asks = args.approve != ApprovalPolicy::None || args.approve_plan;
    let tools = start_tools(&args, asks, &mut sigint).await?;
    let report = drive(
        &args,
        tools.registry,
        &tools.servers,
        tools.terminal,
        sigint,
        prior,
    )
    .await;
    for server in tools.servers {
        server.stop().await;
    }
    let report = report?;
    let saved = match &conversation {
        Some(conversation) => save(conversation, &args.question, started, &report).await,
        None => Ok(()),
    };
    let mut out = std::io::stdout();
    let written = match args.output {
        // The model's words on a terminal are shown, not obeyed (a file it read may have had it
        // write escapes); piped, the answer is data and goes as it is.
        Output::Simple if out.is_terminal() => {
            writeln!(out, "{}", super::terminal::printable(&report.answer))
        }
        Output::Simple => writeln!(out, "{}", report.answer),
        Output::Json => {
            let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
            match out.is_terminal() {
                true => writeln!(out, "{}", super::terminal::printable_json(&json)),
                false => writeln!(out, "{json}"),
            }
        }
    };
    written.map_err(|e| e.to_string())?;
    saved?;
    Ok(if report.success { 0 } else { 1 })
}

/// The session `name` in the store `--memory` names, with the secrets it must never hold: the
/// model's key, the MCP servers' tokens and header values, and the environment's keys.
async fn resume(args: &RunArgs, name: &str) -> Result<Conversation, String> {
    let store = memory::open(args.memory.as_deref()).await?;
    let endpoints = endpoints(args)?;
    let named = key(args)
        .into_iter()
        .chain(endpoints.iter().flat_map(Endpoint::secrets));
    Conversation::resume(store.into(), name, memory::redact::secrets(named)).await
}

/// Saves the run in its session; said on stderr.
async fn save(
    conversation: &Conversation,
    question: &str,
    started: i64,
    report: &RunReport,
) -> Result<(), String> {
    let store = conversation.store().describe();
    match conversation.save(question, started, report).await {
        Ok(run) => {
            eprintln!(
                "saved as run {} of the session {} in {}",
                run.id,
                printable(conversation.name()),
                printable(&store)
            );
            Ok(())
        }
        Err(why) => Err(format!("the run was not saved: {why}")),
    }
}

/// The tools a loop has: the built-in ones on the workspace and the MCP servers' (started),
/// and the terminal that answers the servers' questions (and approvals, when `approvals`).
pub struct Tools {
    pub registry: ToolRegistry,
    pub servers: Vec<McpServer>,
    pub terminal: Option<Arc<Terminal>>,
}

/// Builds the tools of `args`: the built-in ones on the workspace, and those of the MCP
/// servers, started within `--timeout`, given up on Ctrl-C.
pub async fn start_tools(
    args: &LoopArgs,
    approvals: bool,
    sigint: &mut super::interrupts::Interrupts,
) -> Result<Tools, String> {
    let root = match &args.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().map_err(|e| e.to_string())?,
    };
    let workspace =
        Workspace::new(&root).map_err(|e| format!("the workspace {}: {e}", root.display()))?;
    let mut registry = ToolRegistry::default();
    register_builtins(&mut registry, workspace);
    let patience = Duration::from_secs(args.mcp_timeout.max(1));
    let endpoints = endpoints(args)?;
    let asks = approvals || !endpoints.is_empty();
    let terminal = asks.then(|| Arc::new(Terminal::stdin()));
    // --timeout bounds the start too: a sign-in no one completes must not outlast it.
    let bound = async {
        match args.timeout {
            Some(secs) => tokio::time::sleep(Duration::from_secs(secs)).await,
            None => std::future::pending().await,
        }
    };
    let servers = tokio::select! {
        servers = start_servers(&endpoints, &mut registry, patience, terminal.clone()) => servers?,
        _ = sigint.recv() => return Err("interrupted while the MCP servers started".into()),
        () = bound => return Err("the MCP servers did not start within --timeout".into()),
    };
    Ok(Tools {
        registry,
        servers,
        terminal,
    })
}

/// The MCP servers named: `--mcp` command lines first, then `--mcp-url`s with the headers and
/// token every one of them is sent.
pub(crate) fn endpoints(args: &LoopArgs) -> Result<Vec<Endpoint>, String> {
    let lookup = |name: &str| std::env::var(name).ok();
    let token = match &args.mcp_token_env {
        Some(variable) => {
            Some(lookup(variable).ok_or_else(|| unset_variable("--mcp-token-env", variable))?)
        }
        None => None,
    };
    let mut headers = args.mcp_headers.clone();
    for named in &args.mcp_header_envs {
        headers.push(header_from_variable(named, lookup)?);
    }
    let env = ServerEnvironment::from_process(&args.mcp_env)?;
    let commands = args.mcp.iter().map(|line| {
        Ok(Endpoint::Command {
            line: line.clone(),
            env: env.clone(),
        })
    });
    let urls = args
        .mcp_urls
        .iter()
        .map(|url| Endpoint::url(url, &headers, token.clone()));
    commands.chain(urls).collect()
}

/// `--mcp-header-env "Name: VARIABLE"` as the header `Name: <what VARIABLE holds>`.
fn header_from_variable(
    named: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let flag = "--mcp-header-env";
    let (name, variable) = named
        .split_once(':')
        .ok_or_else(|| format!("an {flag} must be `Name: VARIABLE`; one has no colon"))?;
    let variable = variable.trim();
    let value = lookup(variable).ok_or_else(|| unset_variable(flag, variable))?;
    Ok(format!("{name}: {value}"))
}

/// The loop itself, once the tools are in place.
async fn drive(
    args: &RunArgs,
    registry: ToolRegistry,
    servers: &[McpServer],
    terminal: Option<Arc<Terminal>>,
    mut sigint: super::interrupts::Interrupts,
    prior: Option<PriorConversation>,
) -> Result<RunReport, String> {
    let mut driver = build_driver(args, registry, servers, prior.unwrap_or_default()).await?;
    let asked = args.approve != ApprovalPolicy::None || args.approve_plan;
    if let (true, Some(terminal)) = (asked, terminal) {
        driver = driver.with_approver(LineApprover::new(terminal));
    }
    let mut progress = StderrProgress::new(std::io::stderr().is_terminal());
    // Ctrl-C ends the loop cleanly: what it did so far is printed.
    let interrupted = async move {
        if sigint.recv().await.is_none() {
            std::future::pending::<()>().await;
        }
    };
    Ok(driver
        .run_until(&args.question, &mut progress, interrupted)
        .await)
}

/// The driver of `args` on these tools, talking to `--server` or to the service started here;
/// without an approver (calls the policy asks about are denied until one is given).
pub async fn build_driver(
    args: &LoopArgs,
    registry: ToolRegistry,
    servers: &[McpServer],
    prior: PriorConversation,
) -> Result<Driver, String> {
    let config = service_config(args);
    let (token_limit, reserved) = budget(args, &config).await?;
    // The in-process service answers within its own step timeout; another, within an hour.
    let own_ceiling = Duration::from_secs(config.step_timeout_secs + 30);
    let (server, max_body, ceiling) = match &args.server {
        Some(url) => (
            url.clone(),
            args.server_max_body_bytes,
            DEFAULT_STEP_CEILING,
        ),
        None => {
            let (url, max_body) = start_service(config)?;
            (url, max_body, own_ceiling)
        }
    };
    let mut settings = LoopSettings::new(&server, &args.model);
    settings.max_request_bytes = max_body;
    settings.provider = args.provider.clone();
    settings.token_limit = token_limit;
    settings.reserved_output_tokens = reserved;
    settings.temperature = args.temperature;
    settings.tool_mode = args.tool_mode.map(|mode| mode.name().to_string());
    settings.max_iterations = args.max_iterations;
    settings.timeout = args.timeout.map(Duration::from_secs);
    settings.tool_limits = args.tool_limits.iter().cloned().collect();
    settings.stream = true;
    settings.stream_idle = Duration::from_secs_f64(args.stream_idle_timeout);
    settings.step_ceiling = args.step_timeout.map_or(ceiling, Duration::from_secs);
    settings.mock_responses = match &args.mock_responses {
        Some(path) => Some(read_script(path)?),
        None => None,
    };
    if settings.mock_responses.is_none() {
        settings.key = key(args);
    }
    settings.fallbacks = fallbacks(args, |name| std::env::var(name).ok());
    settings.final_answer_schema = match &args.final_answer_schema {
        Some(path) => Some(read_schema(path)?),
        None => None,
    };
    settings.approval = args.approve;
    (settings.plan, settings.approve_plan) = (args.plan, args.approve_plan);
    settings.reflect = args.reflect;
    settings.prior = prior;
    let mut driver = Driver::new(settings, registry);
    for server in servers {
        driver = driver.with_source(server.source());
    }
    Ok(driver)
}

/// The final answer schema from its file.
fn read_schema(path: &PathBuf) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("the final answer schema {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| {
        format!(
            "the final answer schema {} is not JSON: {e}",
            path.display()
        )
    })
}

/// The scripted outputs: the file split at lines holding only `---`.
fn read_script(path: &PathBuf) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("the mock responses {}: {e}", path.display()))?;
    let mut steps = vec![String::new()];
    for line in text.lines() {
        if line.trim() == "---" {
            steps.push(String::new());
        } else if let Some(step) = steps.last_mut() {
            step.push_str(line);
            step.push('\n');
        }
    }
    let steps: Vec<String> = steps
        .into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if steps.is_empty() {
        return Err(format!("{} holds no model output", path.display()));
    }
    Ok(steps)
}

/// The model's key, from `--key-env` or the variable its provider's models read.
pub(crate) fn key(args: &LoopArgs) -> Option<String> {
    std::env::var(key_variable(args)).ok()
}

/// The variable holding the model's key: `--key-env`, else OPENAI_API_KEY, or
/// ANTHROPIC_API_KEY for Claude models.
pub(crate) fn key_variable(args: &LoopArgs) -> String {
    args.key_env.clone().unwrap_or_else(|| {
        let claude =
            args.model.starts_with("claude") || args.provider.as_deref() == Some("anthropic");
        if claude {
            "ANTHROPIC_API_KEY"
        } else {
            "OPENAI_API_KEY"
        }
        .to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(extra: &[&str]) -> Result<RunArgs, clap::Error> {
        let mut args = vec!["reactstep run", "q"];
        args.extend_from_slice(extra);
        RunArgs::try_parse_from(args)
    }

    #[test]
    fn each_fallback_is_provider_colon_model_with_its_providers_own_key() {
        let Ok(args) = parsed(&[
            "--fallback",
            "anthropic:claude-sonnet-4-5",
            "--fallback",
            "ollama:qwen2.5-coder:7b",
        ]) else {
            panic!("the fallbacks parse")
        };
        let env = |name: &str| (name == "ANTHROPIC_API_KEY").then(|| "sk-ant-x".to_string());
        assert_eq!(
            fallbacks(&args, env),
            [
                FallbackModel {
                    provider: "anthropic".into(),
                    model: "claude-sonnet-4-5".into(),
                    key: Some("sk-ant-x".into()),
                },
                FallbackModel {
                    provider: "ollama".into(),
                    model: "qwen2.5-coder:7b".into(),
                    key: None,
                },
            ]
        );
    }

    #[test]
    fn a_fallback_without_its_provider_or_model_is_refused() {
        for bad in ["claude-sonnet-4-5", ":claude", "anthropic:"] {
            assert!(parsed(&["--fallback", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_offline_run_sends_no_fallback_keys() {
        let Ok(args) = parsed(&["--fallback", "anthropic:c", "--mock-responses", "s.txt"]) else {
            panic!("the arguments parse")
        };
        let env = |_: &str| Some("sk-ant-x".to_string());
        assert_eq!(fallbacks(&args, env)[0].key, None);
    }
}
