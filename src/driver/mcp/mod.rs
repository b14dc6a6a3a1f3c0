//! Tools from MCP servers: each `--mcp` command line is started over stdio and each `--mcp-url`
//! reached over streamable HTTP with the official SDK (`rmcp`), speaking the 2026-07-28 revision
//! (`server/discover`, no session) where the server does and 2025-11-25 (`initialize`) where it
//! does not. Its tools are listed into the registry, listed again once the list's cache hint
//! (`ttlMs`) has run out or the server says they changed, and calls are forwarded to it. A server
//! that cannot start, does not answer or dies is an error the caller or the model reads, never a
//! hang. A tool the service would refuse, or past its count of tools, is left out and said so
//! (`admission.rs`); a large result is read whole (up to [`MAX_MESSAGE_BYTES`]) and cut on its
//! way back to the service like any observation (`observation.rs`).

mod endpoint;
mod environment;
pub mod input;
mod listing;
mod oauth;
mod process;
mod server;
mod servers;
mod tool;

pub use endpoint::Endpoint;
pub use environment::{unset_variable, ServerEnvironment};
pub use server::{Listed, McpServer};
pub use servers::start_servers;
