//! Tools from MCP servers: each `--mcp` command line is started over stdio with the official SDK
//! (`rmcp`), its tools are listed into the registry, and calls are forwarded to it. A server that
//! cannot start, does not answer or dies is an error the caller or the model reads, never a hang.
//! A tool the service would refuse, or past its count of tools, is left out at start and said
//! so (`admission.rs`); a large result is read whole (up to [`MAX_MESSAGE_BYTES`]) and cut on
//! its way back to the service like any observation (`observation.rs`).

use std::process::Stdio;
use std::time::Duration;

use futures_util::future::BoxFuture;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Map, Value};

use super::admission::{Admission, Refusal};
use super::registry::{Tool, ToolMetadata, ToolOutcome, ToolRegistry};

/// The largest message read from a server: a result this large is delivered (and cut for the
/// service). The SDK drops a longer line unanswered, so its call ends at `--mcp-timeout`.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// How long a server is given to end by itself once its input is closed, before it is killed.
const GRACE: Duration = Duration::from_secs(1);

/// A started MCP server: its name (as it gave it, or its program's), the running session and
/// its process.
pub struct McpServer {
    pub name: String,
    session: RunningService<RoleClient, ()>,
    child: tokio::process::Child,
}

/// What listing a server's tools came to: the names registered, and those left out.
#[derive(Debug, Default)]
pub struct Listed {
    pub names: Vec<String>,
    /// Tools the service would refuse, each with the reason.
    pub refused: Vec<(String, String)>,
    /// Tools past the service's count of tools in a request.
    pub over_the_limit: Vec<String>,
}

impl McpServer {
    /// Starts `command_line` (split as a shell would, without running one) and opens the MCP
    /// session; `patience` bounds the start and every request after it.
    pub async fn start(command_line: &str, patience: Duration) -> Result<Self, String> {
        let words = shlex::split(command_line)
            .filter(|w| !w.is_empty())
            .ok_or_else(|| format!("the MCP command line `{command_line}` cannot be read"))?;
        let could_not_start = |e: &dyn std::fmt::Display| {
            format!("the MCP server `{command_line}` could not start: {e}")
        };
        // Killed when dropped, so no path out of here (a timeout, a panic) leaves it running.
        let mut child = tokio::process::Command::new(&words[0])
            .args(&words[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| could_not_start(&e))?;
        let (Some(output), Some(input)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(could_not_start(&"its input and output are not pipes"));
        };
        let transport =
            AsyncRwTransport::new_client(output, input).with_max_line_length(MAX_MESSAGE_BYTES);
        let session = tokio::time::timeout(patience, ().serve(transport))
            .await
            .map_err(|_| {
                format!(
                    "the MCP server `{command_line}` did not open a session within {} s",
                    patience.as_secs_f64()
                )
            })?
            .map_err(|e| could_not_start(&e))?;
        let name = session
            .peer_info()
            .and_then(|info| info.server_info.as_ref().map(|s| s.name.clone()))
            .unwrap_or_else(|| words[0].clone());
        Ok(Self {
            name: identifier(&name),
            session,
            child,
        })
    }

    /// Lists the server's tools into `registry`, those `admission` admits. A name already taken
    /// gets the server's name in front (`filesystem_read_file`); the names, in the server's order.
    pub async fn register_tools(
        &self,
        registry: &mut ToolRegistry,
        admission: &mut Admission,
        patience: Duration,
    ) -> Result<Listed, String> {
        let tools = tokio::time::timeout(patience, self.session.list_all_tools())
            .await
            .map_err(|_| format!("the MCP server {} did not list its tools", self.name))?
            .map_err(|e| format!("the MCP server {} could not list its tools: {e}", self.name))?;
        let mut listed = Listed::default();
        for tool in tools {
            let name = free_name(registry, &self.name, &tool.name);
            let schema = Value::Object((*tool.input_schema).clone());
            let description = tool.description.as_deref().unwrap_or_default();
            let description = match admission.admit(&name, description, &schema) {
                Ok(description) => description,
                Err(Refusal::Full) => {
                    listed.over_the_limit.push(name);
                    continue;
                }
                Err(Refusal::Refused(why)) => {
                    listed.refused.push((name, why));
                    continue;
                }
            };
            let hints = tool.annotations.as_ref();
            let read_only = hints.and_then(|a| a.read_only_hint).unwrap_or(false);
            let metadata = ToolMetadata {
                description,
                category: format!("mcp:{}", self.name),
                parameters: schema,
                examples: Vec::new(),
                read_only,
                // MCP's default: a tool that writes may destroy, unless it says it does not.
                destructive: !read_only && hints.and_then(|a| a.destructive_hint).unwrap_or(true),
            };
            let forwarded = McpTool {
                peer: self.session.peer().clone(),
                server: self.name.clone(),
                name: tool.name.to_string(),
                patience,
            };
            registry.register(&name, forwarded, metadata);
            listed.names.push(name);
        }
        Ok(listed)
    }

    /// Ends the session: the server's input is closed, and the server is killed if it has not
    /// ended a moment later. Each wait is bounded, whatever the server is doing.
    pub async fn stop(mut self) {
        match self.session.close_with_timeout(GRACE).await {
            Ok(Some(_)) => {}
            Ok(None) => tracing::debug!(server = %self.name, "the MCP session did not close"),
            Err(e) => tracing::debug!(server = %self.name, "the MCP session ended badly: {e}"),
        }
        // Closing the session dropped the server's input; the session itself goes now, so
        // the input is closed even where the close timed out.
        drop(self.session);
        if tokio::time::timeout(GRACE, self.child.wait())
            .await
            .is_err()
        {
            if let Err(e) = self.child.kill().await {
                tracing::debug!(server = %self.name, "the MCP server could not be killed: {e}");
            }
        }
    }
}

/// A name a model can call: the server's, with anything else than letters, digits and `_`
/// turned into `_`.
fn identifier(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let cleaned = cleaned.trim_matches('_');
    if cleaned.is_empty() {
        "mcp".into()
    } else {
        cleaned.to_string()
    }
}

/// `tool`, or `server_tool` when that is taken, or `server2_tool` and so on.
fn free_name(registry: &ToolRegistry, server: &str, tool: &str) -> String {
    if !registry.has(tool) {
        return tool.to_string();
    }
    let mut candidate = format!("{server}_{tool}");
    let mut n = 2;
    while registry.has(&candidate) {
        candidate = format!("{server}{n}_{tool}");
        n += 1;
    }
    candidate
}

/// A tool that lives in an MCP server.
struct McpTool {
    peer: Peer<RoleClient>,
    server: String,
    /// The tool's name in its server, which may differ from the registry's.
    name: String,
    patience: Duration,
}

impl Tool for McpTool {
    fn call<'a>(&'a self, args: &'a Map<String, Value>) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let request =
                CallToolRequestParams::new(self.name.clone()).with_arguments(args.clone());
            match tokio::time::timeout(self.patience, self.peer.call_tool(request)).await {
                Ok(Ok(result)) => observation(result),
                Ok(Err(e)) => ToolOutcome::Failed(format!(
                    "the MCP server {} failed to run {}: {e}",
                    self.server, self.name
                )),
                Err(_) => ToolOutcome::Failed(format!(
                    "the MCP server {} did not answer {} within {} s (timed out)",
                    self.server,
                    self.name,
                    self.patience.as_secs_f64()
                )),
            }
        })
    }
}

/// What the model reads of a result: its text blocks, a line for each other block, or the
/// structured result when there is no content; `isError` makes it a failure.
fn observation(result: CallToolResult) -> ToolOutcome {
    let mut parts: Vec<String> = result.content.iter().map(described).collect();
    if parts.is_empty() {
        if let Some(structured) = &result.structured_content {
            parts.push(structured.to_string());
        }
    }
    let text = parts.join("\n");
    if result.is_error == Some(true) {
        ToolOutcome::Failed(if text.is_empty() {
            "the tool failed and said nothing more".into()
        } else {
            text
        })
    } else {
        ToolOutcome::Done(text)
    }
}

fn described(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => format!("[an image, {}]", image.mime_type),
        ContentBlock::Audio(audio) => format!("[audio, {}]", audio.mime_type),
        ContentBlock::Resource(resource) => match serde_json::to_value(&resource.resource) {
            Ok(value) => value["text"]
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| format!("[a resource: {}]", value["uri"])),
            Err(_) => "[a resource]".into(),
        },
        ContentBlock::ResourceLink(link) => format!("[a resource at {}]", link.uri),
        _ => "[content of a kind this client does not read]".into(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_taken_name_gets_the_servers_name_in_front() {
        let mut registry = ToolRegistry::default();
        let meta = ToolMetadata {
            description: String::new(),
            category: String::new(),
            parameters: json!({"type": "object"}),
            examples: Vec::new(),
            read_only: true,
            destructive: false,
        };
        let tool = |_: &Map<String, Value>| ToolOutcome::Done(String::new());
        registry.register("read_file", tool, meta.clone());
        assert_eq!(free_name(&registry, "fs", "write"), "write");
        assert_eq!(free_name(&registry, "fs", "read_file"), "fs_read_file");
        registry.register("fs_read_file", tool, meta);
        assert_eq!(free_name(&registry, "fs", "read_file"), "fs2_read_file");
        assert_eq!(
            identifier("secure-filesystem-server"),
            "secure_filesystem_server"
        );
        assert_eq!(identifier("@@"), "mcp");
    }

    #[test]
    fn a_result_is_its_text_and_is_error_makes_it_a_failure() {
        let result: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "a"}, {"type": "image", "data": "AA==", "mimeType": "image/png"}],
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            observation(result),
            ToolOutcome::Done("a\n[an image, image/png]".into())
        );
        let failed: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "Access denied"}], "isError": true,
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            observation(failed),
            ToolOutcome::Failed("Access denied".into())
        );
        let structured: CallToolResult =
            serde_json::from_value(json!({"content": [], "structuredContent": {"n": 1}}))
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            observation(structured),
            ToolOutcome::Done(r#"{"n":1}"#.into())
        );
    }
}
