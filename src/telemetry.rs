//! Tracing setup: JSON or pretty log lines, filtered by `RUST_LOG` (default `info`).
//! Secrets never reach a log line because the key type prints a mask (see `llm::ApiKey`).

use tracing_subscriber::{fmt, EnvFilter};

use crate::config::LogFormat;

/// Installs the global subscriber once; later calls (as in tests) are harmless no-ops.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _already_set = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Pretty => builder.pretty().try_init(),
    };
}
