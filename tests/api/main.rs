//! Black-box tests: the real server on a loopback port, a mock LLM speaking each provider's
//! exact wire format, every response checked against openapi.yaml.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The harness the test binaries share; this binary lives in a folder of its own, so it names
// the file by path.
#[path = "../support/mod.rs"]
mod support;

mod anthropic;
mod bad_input;
mod base_url_allow_list;
mod bedrock;
mod billed_usage;
mod cache_markers;
mod cache_usage;
mod clearing;
mod context;
mod copied_examples;
mod corpus;
mod corpus_stream;
mod cost;
mod descriptors;
mod disconnect;
mod driver;
mod errors;
mod fallbacks;
mod faults;
mod final_answer_schema;
mod gemini_signatures;
mod health;
mod hostile_counts;
mod hostile_schemas;
mod hostile_streams;
mod huge_reasoning;
mod iterations;
mod key_secrecy;
mod key_vendors;
mod last_step;
mod logging;
mod loop_guard;
mod metrics;
mod mock_response;
mod model_inference;
mod model_switch;
mod native_history;
mod native_stream_loop;
mod native_text_calls;
mod native_tools;
mod ollama;
mod one_turn;
mod openai;
mod operator;
mod parallel_calls;
mod prompt_cache;
mod protocol;
mod provider_settings;
mod providers;
mod proxies;
mod reasoning;
mod redirects;
mod responses;
mod scrubbing;
mod server_timing;
mod session_privacy;
mod shared_limits;
mod shutdown;
mod small_model_session;
mod start_files;
mod streaming;
mod thinking_streams;
mod tls;
mod tool_call_ids;
mod tools;
mod traces;
mod window_refit;
mod workflow;
mod workspace;
