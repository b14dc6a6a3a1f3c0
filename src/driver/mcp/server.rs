//! One MCP server: connecting in the revision it speaks, listing its tools (again once stale),
//! and stopping it.

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use reqwest::header::{HeaderName, HeaderValue};
use reqwest::Url;
use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::Value;

use super::endpoint::{redacted, Endpoint};
use super::environment::ServerEnvironment;
use super::input::Asker;
use super::listing;
use super::oauth;
use super::process::{self, Ended, ServerProcess};
use super::tool::{McpTool, Session};
use crate::driver::admission::{Admission, Refusal};
use crate::driver::memory::redact;
use crate::driver::registry::{ToolMetadata, ToolRegistry, ToolSource};
use crate::driver::terminal::Terminal;

/// The largest message read from a server: a result this large is delivered (and cut for the
/// service). The SDK drops a longer line unanswered, so its call ends at `--mcp-timeout`.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// How long a server is given to end by itself once its input is closed, before it is killed.
const GRACE: Duration = Duration::from_secs(1);

/// A connected MCP server: its name (as it gave it, or its program's or host's), the session,
/// and its process when it was started here.
pub struct McpServer {
    pub name: String,
    /// The revision spoken: `2026-07-28`, or `2025-11-25` for an older server.
    pub protocol: String,
    shared: Arc<Shared>,
    process: Option<ServerProcess>,
}

/// What the server's tools and its refreshes share.
struct Shared {
    name: String,
    /// The registry's group for this server's tools: its own, though two servers give one
    /// name (two `server-filesystem` roots), so that listing one again leaves the other's.
    category: String,
    session: Arc<Session>,
    patience: Duration,
    /// When the listed tools go stale, by the list's `ttlMs`; never without one.
    stale_at: Mutex<Option<Instant>>,
    /// What of the endpoint must never be printed nor sent on (its token, headers' values …).
    secrets: Arc<[String]>,
    /// For a server started here: whether, and how, it ended.
    ended: Option<Ended>,
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

/// The revisions asked for, newest first, and the one an older server is spoken to in.
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    }
}

impl McpServer {
    /// Connects to `endpoint`; `patience` bounds the start and every request after it. The
    /// server's questions to the user go to `terminal`, or are refused without one.
    pub async fn start(
        endpoint: &Endpoint,
        patience: Duration,
        terminal: Option<Arc<Terminal>>,
    ) -> Result<Self, String> {
        // What a server says or names is scrubbed of what it was given and of the secrets the
        // driver knows (its own environment's): a server may echo either.
        let secrets: Arc<[String]> = redact::secrets(endpoint.secrets()).into();
        let opened = session(endpoint, patience, terminal, &secrets).await;
        let (session, process) = opened.map_err(|e| redacted(&e, &secrets))?;
        let info = session.peer_info();
        let protocol = info
            .as_ref()
            .map(|info| info.protocol_version.to_string())
            .unwrap_or_default();
        let name = info
            .and_then(|info| info.server_info.as_ref().map(|s| s.name.clone()))
            .unwrap_or_else(|| endpoint.fallback_name());
        let name = identifier(&redacted(&name, &secrets));
        static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let shared = Shared {
            category: format!("mcp:{name}#{}", STARTED.fetch_add(1, Ordering::Relaxed)),
            name: name.clone(),
            session: Arc::new(session),
            patience,
            stale_at: Mutex::new(None),
            secrets,
            ended: process.as_ref().map(|p| p.ended.clone()),
        };
        Ok(Self {
            name,
            protocol,
            shared: Arc::new(shared),
            process,
        })
    }

    /// Lists the server's tools into `registry`, those `admission` admits.
    pub async fn register_tools(
        &self,
        registry: &mut ToolRegistry,
        admission: &mut Admission,
    ) -> Result<Listed, String> {
        self.shared.register_tools(registry, admission).await
    }

    /// What lists the server's tools again when they go stale, for the loop.
    pub fn source(&self) -> impl ToolSource + 'static {
        Refresher(self.shared.clone())
    }

    /// Ends the session: the server's input (or HTTP session) is closed, and a server started
    /// here is killed if it has not ended a moment later. Each wait is bounded.
    pub async fn stop(mut self) {
        if let Some(process) = &mut self.process {
            process.note_what_it_started();
        }
        let name = self.name;
        match Arc::try_unwrap(self.shared).map(|shared| Arc::try_unwrap(shared.session)) {
            Ok(Ok(mut session)) => match session.close_with_timeout(GRACE).await {
                Ok(Some(_)) => {}
                Ok(None) => tracing::debug!(server = %name, "the MCP session did not close"),
                Err(e) => tracing::debug!(server = %name, "the MCP session ended badly: {e}"),
            },
            // A tool still holds the session (its call was left behind): it is cancelled.
            Ok(Err(session)) => session.cancellation_token().cancel(),
            Err(shared) => shared.session.cancellation_token().cancel(),
        }
        // Dropped at the end: what it started goes with it.
        let Some(mut process) = self.process else {
            return;
        };
        if !process.ends_within(GRACE).await {
            process.kill();
            if !process.ends_within(GRACE).await {
                tracing::debug!(server = %name, "the MCP server did not end when killed");
            }
        }
    }
}

/// The session with the server at `endpoint`, and its process when it was started here.
async fn session(
    endpoint: &Endpoint,
    patience: Duration,
    terminal: Option<Arc<Terminal>>,
    secrets: &Arc<[String]>,
) -> Result<(Session, Option<ServerProcess>), String> {
    Ok(match endpoint {
        Endpoint::Command { line, env } => {
            let (transport, child) = spawn(line, env, endpoint.fallback_name(), secrets)?;
            let opened = Asker::new(terminal).serve_with_lifecycle(transport, lifecycle());
            (timed(endpoint, patience, opened).await?, Some(child))
        }
        Endpoint::Url {
            url,
            headers,
            token,
        } => {
            let http = Http {
                endpoint,
                url,
                headers,
                patience,
            };
            (http.connect(token.as_deref(), terminal).await?, None)
        }
    })
}

/// Starts `command_line` (split as a shell would, without running one) with `env` as its whole
/// environment, its output and input the session's transport.
fn spawn(
    command_line: &str,
    env: &ServerEnvironment,
    label: String,
    secrets: &Arc<[String]>,
) -> Result<
    (
        AsyncRwTransport<rmcp::RoleClient, tokio::process::ChildStdout, tokio::process::ChildStdin>,
        ServerProcess,
    ),
    String,
> {
    let words = shlex::split(command_line)
        .filter(|w| !w.is_empty())
        .ok_or_else(|| format!("the MCP command line `{command_line}` cannot be read"))?;
    let could_not_start =
        |e: &dyn std::fmt::Display| format!("the MCP server `{command_line}` could not start: {e}");
    process::keep_the_driver_from_servers();
    process::adopt_what_servers_leave();
    let mut command = tokio::process::Command::new(&words[0]);
    command
        .args(&words[1..])
        .env_clear()
        .envs(env.variables.iter().map(|(name, value)| (name, value)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    process::in_a_session_of_its_own(&mut command);
    // Killed when dropped, its group with it, so no path out of here (a timeout, a panic)
    // leaves it or what it started running.
    let (child, pipes) = ServerProcess::spawn(&mut command).map_err(|e| could_not_start(&e))?;
    let (Some(output), Some(input), Some(errors)) = pipes else {
        return Err(could_not_start(&"its input and output are not pipes"));
    };
    process::forward(errors, label, secrets.clone());
    let transport =
        AsyncRwTransport::new_client(output, input).with_max_line_length(MAX_MESSAGE_BYTES);
    Ok((transport, child))
}

/// A server reached over streamable HTTP.
struct Http<'a> {
    endpoint: &'a Endpoint,
    url: &'a Url,
    headers: &'a HashMap<HeaderName, HeaderValue>,
    patience: Duration,
}

impl Http<'_> {
    /// Whether a refusal is met by signing in: only where no credential of the user's (a
    /// token, an `Authorization` header) was what the server refused.
    fn signs_in(&self, token: Option<&str>) -> bool {
        token.is_none() && !self.headers.contains_key(&reqwest::header::AUTHORIZATION)
    }

    fn config(&self) -> StreamableHttpClientTransportConfig {
        StreamableHttpClientTransportConfig::with_uri(self.url.as_str())
            .custom_headers(self.headers.clone())
            .max_json_response_size(MAX_MESSAGE_BYTES)
            .max_sse_event_size(MAX_MESSAGE_BYTES)
    }

    /// The session, with `token` where one was given; a server that requires authorization
    /// when none was given is signed in to (OAuth), then connected to again.
    async fn connect(
        &self,
        token: Option<&str>,
        terminal: Option<Arc<Terminal>>,
    ) -> Result<Session, String> {
        // The SDK's HTTP client runs rustls on whichever provider is installed: ring, the one
        // the rest of the binary uses (an error means one is in place already).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut config = self.config();
        if let Some(token) = token {
            config = config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        let opened = Asker::new(terminal.clone()).serve_with_lifecycle(transport, lifecycle());
        let refused = match tokio::time::timeout(self.patience, opened).await {
            Ok(Ok(session)) => return Ok(session),
            Ok(Err(e)) if self.signs_in(token) && e.is_authorization_required() => e,
            Ok(Err(e)) => {
                return Err(format!(
                    "the MCP server {} could not start: {e}",
                    self.endpoint
                ))
            }
            Err(_) => return Err(no_session(self.endpoint, self.patience)),
        };
        let shown = self.endpoint.to_string();
        let challenge = refused.auth_challenge();
        let client = oauth::sign_in(self.url, &shown, challenge, oauth::SIGN_IN_PATIENCE).await?;
        let transport = StreamableHttpClientTransport::with_client(client, self.config());
        let opened = Asker::new(terminal).serve_with_lifecycle(transport, lifecycle());
        timed(self.endpoint, self.patience, opened).await
    }
}

fn no_session(endpoint: &Endpoint, patience: Duration) -> String {
    format!(
        "the MCP server {endpoint} did not open a session within {} s",
        patience.as_secs_f64()
    )
}

/// The session `opened` gives within `patience`, or why not.
async fn timed<E: std::fmt::Display>(
    endpoint: &Endpoint,
    patience: Duration,
    opened: impl std::future::Future<Output = Result<Session, E>>,
) -> Result<Session, String> {
    tokio::time::timeout(patience, opened)
        .await
        .map_err(|_| no_session(endpoint, patience))?
        .map_err(|e| format!("the MCP server {endpoint} could not start: {e}"))
}

impl Shared {
    async fn register_tools(
        &self,
        registry: &mut ToolRegistry,
        admission: &mut Admission,
    ) -> Result<Listed, String> {
        let listed = tokio::time::timeout(self.patience, listing::all_tools(&self.session))
            .await
            .map_err(|_| format!("the MCP server {} did not list its tools", self.name))?
            .map_err(|e| {
                let e = redacted(&e, &self.secrets);
                format!("the MCP server {} could not list its tools: {e}", self.name)
            })?;
        *self.stale_at.lock().unwrap_or_else(|e| e.into_inner()) = listed
            .ttl_ms
            .map(|ms| Instant::now() + Duration::from_millis(ms));
        let mut outcome = Listed::default();
        let wanted: Vec<&str> = listed.tools.iter().map(|t| t.name.as_ref()).collect();
        let names = names_for(registry, &self.name, &wanted);
        for (tool, name) in listed.tools.iter().zip(names) {
            // A definition goes to the service and the model: scrubbed as a result would be.
            let schema = Value::Object((*tool.input_schema).clone());
            let schema = redact::scrubbed(schema, &self.secrets);
            let description = tool.description.as_deref().unwrap_or_default();
            let description = redacted(description, &self.secrets);
            let description = match admission.admit(&name, &description, &schema) {
                Ok(description) => description,
                Err(Refusal::Full) => {
                    outcome.over_the_limit.push(name);
                    continue;
                }
                Err(Refusal::Refused(why)) => {
                    outcome.refused.push((name, why));
                    continue;
                }
            };
            let hints = tool.annotations.as_ref();
            let read_only = hints.and_then(|a| a.read_only_hint).unwrap_or(false);
            let metadata = ToolMetadata {
                description,
                category: self.category(),
                parameters: schema,
                examples: Vec::new(),
                read_only,
                // MCP's default: a tool that writes may destroy, unless it says it does not.
                destructive: !read_only && hints.and_then(|a| a.destructive_hint).unwrap_or(true),
            };
            let forwarded = McpTool {
                session: self.session.clone(),
                server: self.name.clone(),
                name: tool.name.to_string(),
                patience: self.patience,
                secrets: self.secrets.clone(),
                ended: self.ended.clone(),
            };
            registry.register(&name, forwarded, metadata);
            outcome.names.push(name);
        }
        Ok(outcome)
    }

    fn category(&self) -> String {
        self.category.clone()
    }

    /// The listed tools are past their `ttlMs`, or the server said they changed.
    fn stale(&self) -> bool {
        let changed = self.session.service().changed.swap(false, Ordering::SeqCst);
        let expired = self
            .stale_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|at| Instant::now() >= at);
        changed || expired
    }
}

fn old_names(registry: &ToolRegistry, category: &str) -> Vec<String> {
    registry
        .list(Some(category))
        .into_iter()
        .map(String::from)
        .collect()
}

/// Lists a server's tools again, in place of its old ones, when they have gone stale.
struct Refresher(Arc<Shared>);

impl ToolSource for Refresher {
    fn refresh<'a>(&'a self, registry: &'a mut ToolRegistry) -> BoxFuture<'a, Option<String>> {
        Box::pin(async move {
            let shared = &self.0;
            if !shared.stale() {
                return None;
            }
            let mut before: Vec<String> = old_names(registry, &shared.category());
            // The other tools stay as they were; this server's are listed afresh after them.
            let old = registry.take_category(&shared.category());
            let mut admission = Admission::of(registry);
            match shared.register_tools(registry, &mut admission).await {
                Ok(listed) => {
                    let mut now = listed.names.clone();
                    before.sort();
                    now.sort();
                    // Said only when the list changed: a short ttlMs lists it before every step.
                    (before != now).then(|| {
                        format!(
                            "MCP server {}: tools listed again ({} before, {} now): {}",
                            shared.name,
                            before.len(),
                            now.len(),
                            listed.names.join(", ")
                        )
                    })
                }
                Err(why) => {
                    // The old list stays: a server that cannot list now may still answer calls.
                    registry.absorb(old);
                    Some(format!("{why}; its earlier list of tools is kept"))
                }
            }
        })
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

/// The names a server's tools are registered by, in its order: each keeps its own name where
/// that is free, and one whose name is taken (a built-in's, say) gets the server's name in front
/// (`server_tool`, then `server2_tool` …), never a name another of the server's tools has.
fn names_for(registry: &ToolRegistry, server: &str, tools: &[&str]) -> Vec<String> {
    let mut taken: HashSet<String> = registry.list(None).into_iter().map(String::from).collect();
    let mut own: Vec<Option<String>> = tools
        .iter()
        .map(|tool| taken.insert(tool.to_string()).then(|| tool.to_string()))
        .collect();
    for (name, tool) in own.iter_mut().zip(tools) {
        if name.is_none() {
            let mut candidate = format!("{server}_{tool}");
            let mut n = 2;
            while taken.contains(&candidate) {
                candidate = format!("{server}{n}_{tool}");
                n += 1;
            }
            taken.insert(candidate.clone());
            *name = Some(candidate);
        }
    }
    own.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map};

    use super::*;
    use crate::driver::registry::ToolOutcome;

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
        assert_eq!(
            names_for(&registry, "fs", &["write", "read_file"]),
            ["write", "fs_read_file"]
        );
        // The server's own `fs_read_file` keeps its name; the clashing one goes past it, and a
        // name the server lists twice is told apart.
        assert_eq!(
            names_for(&registry, "fs", &["read_file", "fs_read_file", "x", "x"]),
            ["fs2_read_file", "fs_read_file", "x", "fs_x"]
        );
        registry.register("fs_read_file", tool, meta);
        assert_eq!(
            names_for(&registry, "fs", &["read_file"]),
            ["fs2_read_file"]
        );
        assert_eq!(
            identifier("secure-filesystem-server"),
            "secure_filesystem_server"
        );
        assert_eq!(identifier("@@"), "mcp");
    }
}
