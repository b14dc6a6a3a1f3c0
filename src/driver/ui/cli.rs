//! `reactstep ui`: builds the tools and the driver as `reactstep run` does (the same flags),
//! then serves the page and prints the one line a person or a test reads its address from:
//! `reactstep ui: http://127.0.0.1:PORT/?token=TOKEN`.

use std::io::Write;
use std::net::IpAddr;
use std::sync::Arc;

use actix_web::{web, HttpServer};
use clap::Parser;
use serde_json::{json, Value};

use super::approver::{Approvals, PageApprover};
use super::runner::{self, Memory, Runs};
use super::server::{app, Page};
use crate::driver::approval::ApprovalPolicy;
use crate::driver::args::LoopArgs;
use crate::driver::cli::{build_driver, endpoints, key, key_variable, start_tools};
use crate::driver::in_process::local_provider;
use crate::driver::mcp::Endpoint;
use crate::driver::memory;
use crate::driver::terminal::printable;
use crate::driver::PriorConversation;

/// Serve a local web page that runs the loop: type a task, watch it work.
#[derive(Debug, Parser)]
#[command(name = "reactstep ui")]
pub struct UiArgs {
    /// The address the page is served on. Loopback by default: the page runs tools on your
    /// files, and only this machine should reach it.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// The port (0: any free one; the address is printed).
    #[arg(long, default_value_t = 8765)]
    pub port: u16,
    /// Where the runs are saved, in the session the page names: a SQLite file (default:
    /// reactstep/memory.sqlite3 under the user's data directory) or a postgres:// URL.
    #[arg(long)]
    pub memory: Option<String>,
    #[command(flatten)]
    pub loop_args: LoopArgs,
}

/// Runs `reactstep ui` until Ctrl-C; the process's exit code.
pub async fn main(args: impl IntoIterator<Item = String>) -> i32 {
    let args = match UiArgs::try_parse_from(args) {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match serve(args).await {
        Ok(()) => 0,
        Err(why) => {
            eprintln!("reactstep ui: {}", printable(&why));
            2
        }
    }
}

async fn serve(args: UiArgs) -> Result<(), String> {
    let mut sigint = crate::driver::interrupts::Interrupts::catch()?;
    // The store is opened before anything starts: one that cannot be is said now.
    let memory = memory(&args).await?;
    // Approvals are asked on the page; the terminal answers only the MCP servers' questions.
    let tools = start_tools(&args.loop_args, false, &mut sigint).await?;
    let served = serve_with(&args, tools.registry, &tools.servers, memory).await;
    for server in tools.servers {
        server.stop().await;
    }
    served
}

/// The store `--memory` names, with the secrets it must never hold.
async fn memory(args: &UiArgs) -> Result<Memory, String> {
    let store = memory::open(args.memory.as_deref()).await?;
    let endpoints = endpoints(&args.loop_args)?;
    let named = key(&args.loop_args)
        .into_iter()
        .chain(endpoints.iter().flat_map(Endpoint::secrets));
    Ok(Memory {
        store: store.into(),
        secrets: memory::redact::secrets(named),
    })
}

async fn serve_with(
    args: &UiArgs,
    registry: crate::driver::ToolRegistry,
    servers: &[crate::driver::mcp::McpServer],
    memory: Memory,
) -> Result<(), String> {
    let loop_args = &args.loop_args;
    let approvals = Arc::new(Approvals::default());
    let driver = build_driver(loop_args, registry, servers, PriorConversation::default())
        .await?
        .with_approver(PageApprover(approvals.clone()));
    let (runs, queue) = Runs::new();
    let missing = missing_key(loop_args);
    let key_hint = missing.as_ref().map(|variable| {
        format!(
            "The model's key is missing: {variable} is not set. Set it (or name another variable with --key-env) and start reactstep ui again, or run offline with --mock-responses."
        )
    });
    actix_web::rt::spawn(runner::serve(
        driver,
        runs.clone(),
        approvals.clone(),
        queue,
        key_hint,
        Memory {
            store: memory.store.clone(),
            secrets: memory.secrets,
        },
    ));
    let token = super::guard::new_token()?;
    let page = web::Data::new(Page {
        runs,
        approvals,
        info: info(loop_args, missing),
        bound: args.bind,
        store: memory.store,
        token: token.clone(),
    });
    let server = HttpServer::new(move || app(page.clone()))
        .workers(1)
        .shutdown_timeout(1)
        .bind((args.bind, args.port))
        .map_err(|e| {
            format!(
                "the page cannot be served on {}:{}: {e}",
                args.bind, args.port
            )
        })?;
    let address = server
        .addrs()
        .first()
        .copied()
        .ok_or("the page's server listens nowhere")?;
    let mut out = std::io::stdout();
    writeln!(out, "reactstep ui: http://{address}/?token={token}")
        .and_then(|()| out.flush())
        .map_err(|e| e.to_string())?;
    server.run().await.map_err(|e| e.to_string())
}

/// The variable that should hold the model's key, when the runs need one and it is not set.
fn missing_key(args: &LoopArgs) -> Option<String> {
    let needs_key = args.mock_responses.is_none() && local_provider(args).is_none();
    (needs_key && key(args).is_none()).then(|| key_variable(args))
}

/// What the page shows of how it runs.
fn info(args: &LoopArgs, missing_key: Option<String>) -> Value {
    let workspace = match &args.workspace {
        Some(dir) => dir.display().to_string(),
        None => std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default(),
    };
    let approve = match args.approve {
        ApprovalPolicy::All => "all",
        ApprovalPolicy::Writes => "writes",
        ApprovalPolicy::None => "none",
    };
    json!({
        "model": args.model,
        "provider": args.provider,
        "workspace": workspace,
        "offline": args.mock_responses.is_some(),
        "missing_key": missing_key,
        "approve": approve,
        "plan": args.plan || args.approve_plan,
        "approve_plan": args.approve_plan,
        "reflect": args.reflect,
        "server": args.server.as_deref().unwrap_or("in-process"),
        "version": env!("CARGO_PKG_VERSION"),
    })
}
