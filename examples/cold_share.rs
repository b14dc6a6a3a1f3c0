//! How much of each step of a loop is cold: text the token cache has not seen, which a step
//! must tokenize, against text it answers from the cache. A loop is run through the service in
//! this process (HTTP on loopback, as `reactstep run` drives it), over this repository's own
//! files with the built-in tools, the model's turns scripted (`mock_response`), twice: the first
//! loop in a fresh process, then a second on another question over the same files.
//!
//!   cargo run --release --example cold_share
//!
//! Before each step and after the last, the cache's looked-up bytes are read; the difference is
//! that step's. Texts under the cache's 256 bytes are counted word by word and not in either
//! figure. The table is printed in markdown.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;

use reactstep::config::Config;
use reactstep::driver::{
    register_builtins, Driver, LoopSettings, ToolRegistry, Watcher, Workspace,
};
use reactstep::startup::Application;
use reactstep::step::context::token_cache;

/// The cache's (answered, counted afresh) bytes before each step, and after the last.
#[derive(Default)]
struct Snapshots(Vec<(u64, u64)>);

impl Snapshots {
    fn take(&mut self) {
        let cache = token_cache::global().expect("the token cache is on by default");
        self.0.push(cache.looked_up_bytes());
    }
}

impl Watcher for Snapshots {
    fn waiting(&mut self, _iteration: u32) {
        self.take();
    }
}

/// A model that reads its way through the driver's code, then answers.
fn script(first: &str) -> Vec<String> {
    let calls = [
        format!("list_directory(path=\"{first}\")"),
        "read_file(path=\"src/driver/run.rs\")".to_string(),
        "grep_search(pattern=\"fn act\", path=\"src/driver\")".to_string(),
        "read_file(path=\"src/driver/execution.rs\")".to_string(),
        "read_file(path=\"src/driver/registry.rs\")".to_string(),
        "grep_search(pattern=\"ToolOutcome::Failed\", path=\"src/driver\")".to_string(),
        "read_file(path=\"src/driver/observation.rs\")".to_string(),
        "read_file(path=\"src/driver/approval.rs\")".to_string(),
        "read_file(path=\"src/driver/terminal.rs\")".to_string(),
    ];
    let mut steps: Vec<String> = calls
        .iter()
        .enumerate()
        .map(|(n, call)| {
            format!("Thought: step {n}: I need to see more of the driver.\nAction: {call}")
        })
        .collect();
    steps.push(
        "Thought: I have read enough.\nFinal Answer: the loop runs each call through the executor."
            .into(),
    );
    steps
}

async fn run_loop(server: &str, question: &str, first: &str) -> Vec<(u64, u64)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut registry = ToolRegistry::default();
    register_builtins(&mut registry, Workspace::new(root).unwrap());
    let mut settings = LoopSettings::new(server, "gpt-4o");
    settings.mock_responses = Some(script(first));
    settings.max_iterations = 12;
    settings.token_limit = 128_000;
    let mut snapshots = Snapshots::default();
    let report = Driver::new(settings, registry)
        .run(question, &mut snapshots)
        .await;
    assert_eq!(report.iterations, 10, "{}", report.answer);
    snapshots.take();
    snapshots
        .0
        .windows(2)
        .map(|w| (w[1].0 - w[0].0, w[1].1 - w[0].1))
        .collect()
}

fn table(name: &str, steps: &[(u64, u64)]) {
    println!("\n{name}\n");
    println!("| step | looked up (KB) | counted afresh (KB) | cold share |");
    println!("|---|---|---|---|");
    for (n, (hit, miss)) in steps.iter().enumerate() {
        let all = hit + miss;
        let share = if all == 0 {
            0.0
        } else {
            100.0 * *miss as f64 / all as f64
        };
        println!(
            "| {} | {:.1} | {:.1} | {share:.1} % |",
            n + 1,
            all as f64 / 1000.0,
            *miss as f64 / 1000.0
        );
    }
}

#[actix_web::main]
async fn main() {
    let mut config = Config::defaults();
    config.bind = ([127, 0, 0, 1], 0).into();
    config.workers = 1;
    let app = Application::build(&config).unwrap();
    let server = format!("http://127.0.0.1:{}", app.port());
    actix_web::rt::spawn(app.run_until_stopped());
    let first = run_loop(
        &server,
        "How does the driver run a tool call?",
        "src/driver",
    )
    .await;
    table("First loop of the process", &first);
    let second = run_loop(&server, "Where are a tool's failures recorded?", "src").await;
    table("A second loop over the same files", &second);
}
