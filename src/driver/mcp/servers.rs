//! Starting the servers a run names, in order, and saying on stderr what each gave.

use std::sync::Arc;
use std::time::Duration;

use super::endpoint::Endpoint;
use super::server::{Listed, McpServer};
use crate::api::MAX_TOOLS;
use crate::driver::admission::Admission;
use crate::driver::registry::ToolRegistry;
use crate::driver::terminal::{printable, Terminal};

/// Starts every server and lists its tools into `registry`; on the first that fails,
/// those already started are stopped and the failure is the run's.
pub async fn start_servers(
    endpoints: &[Endpoint],
    registry: &mut ToolRegistry,
    patience: Duration,
    terminal: Option<Arc<Terminal>>,
) -> Result<Vec<McpServer>, String> {
    let mut servers = Vec::new();
    let mut admission = Admission::of(registry);
    for endpoint in endpoints {
        let started = match McpServer::start(endpoint, patience, terminal.clone()).await {
            Ok(server) => server
                .register_tools(registry, &mut admission)
                .await
                .map(|listed| (server, listed)),
            Err(why) => Err(why),
        };
        match started {
            Ok((server, listed)) => {
                let protocol = printable(&server.protocol);
                eprintln!(
                    "MCP server {} speaks MCP {protocol}",
                    printable(&server.name)
                );
                tell_listed(&server.name, &listed);
                servers.push(server);
            }
            Err(why) => {
                for server in servers {
                    server.stop().await;
                }
                return Err(why);
            }
        }
    }
    Ok(servers)
}

/// Says on stderr which of a server's tools the model may call, and which were left out and why.
fn tell_listed(server: &str, listed: &Listed) {
    // A server's names and the refusals that quote its schemas are its text, not ours.
    let server = printable(server);
    eprintln!(
        "MCP server {server}: {}",
        printable(&listed.names.join(", "))
    );
    for (name, why) in &listed.refused {
        let (name, why) = (printable(name), printable(why));
        eprintln!(
            "MCP server {server}: tool {name:?} left out, as the service would refuse it: {why}"
        );
    }
    if !listed.over_the_limit.is_empty() {
        eprintln!(
            "MCP server {server}: {} tools left out, past the service's limit of {MAX_TOOLS} tools in a request (built-in ones included): {}",
            listed.over_the_limit.len(),
            printable(&listed.over_the_limit.join(", "))
        );
    }
}
