//! `reactstep run "<question>"`: a loop in the terminal. Without `--server` it starts the
//! service in-process on a loopback port and talks HTTP to it, as a plugin would.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

use super::approval::{ApprovalPolicy, LineApprover};
use super::args::{LoopArgs, Output, RunArgs};
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
