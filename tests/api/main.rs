//! Black-box tests: the real server on a loopback port, a mock LLM speaking each provider's
//! exact wire format, every response checked against openapi.yaml.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod anthropic;
mod bad_input;
mod cache_usage;
mod context;
mod corpus;
mod corpus_stream;
mod cost;
mod descriptors;
mod disconnect;
mod driver;
mod errors;
mod faults;
mod fidelity;
mod fidelity_usage;
mod health;
mod helpers;
mod hostile_schemas;
#[path = "../support/https_upstream.rs"]
mod https_upstream;
mod iterations;
mod key_secrecy;
mod key_vendors;
mod logging;
mod metrics;
mod mock_response;
mod native_history;
mod native_stream_loop;
mod native_tools;
mod ollama;
mod openai;
mod operator;
mod parallel_calls;
mod prompt_cache;
mod protocol;
mod providers;
mod proxies;
mod reasoning;
mod red_team_17;
mod red_team_providers;
mod redirects;
#[path = "../support/schema_bombs.rs"]
mod schema_bombs;
mod scrubbing;
mod shared_limits;
mod shutdown;
mod small_model_session;
mod start_files;
mod stream_upstream;
mod streaming;
#[cfg(target_os = "linux")]
#[path = "../support/swap.rs"]
mod swap;
mod tls;
mod tool_call_ids;
mod tools;
mod traces;
mod upstream;
mod workflow;
mod workspace;
