//! The harness every test binary shares (`mod support;`; the `api` binary names this file by
//! path). One definition of each helper:
//!
//! - `app`: the real server in the test's process, its mock LLM, and requests to it;
//! - `requests`: the request bodies the tests send, and the key they carry;
//! - `spec`: every reply checked against `openapi.yaml`;
//! - `stream`: a streamed step read as a client reads it;
//! - `upstream`: replies in each provider's exact wire format, and mocks that serve them;
//! - `gemini_upstream`: Gemini 3 as strict about thought signatures as Google is;
//! - `prefix`: how much of each prompt of a loop is the previous one's, for the cache;
//! - `provider_rules`: what the providers' real APIs refuse, for mocks that refuse it too;
//! - `responses_upstream`: a model behind OpenAI's Responses API that checks what a stateless
//!   caller must send back;
//! - `stream_upstream`: an upstream that streams exactly as a test scripts it;
//! - `binary`: the real `reactstep` binary as a child process;
//! - `corpus`: the model-output corpus and how one case runs through the server;
//! - `fake_service`: a `reactstep` service faked over a raw socket, for the driver's tests;
//! - `postgres`: a real PostgreSQL server from the system's packages, a database per test;
//! - `https_upstream`, `schema_bombs`, `swap`, `system_packages`, `venv`, `workspace`: what a
//!   few tests need (an HTTPS upstream, hostile tool schemas, an atomic name exchange, programs
//!   from the system's packages, Python packages from PyPI, a workspace for `reactstep run`).

// Each test binary compiles all of the harness but uses only part of it.
#![allow(dead_code)]

pub mod app;
pub mod binary;
pub mod corpus;
pub mod fake_service;
pub mod gemini_upstream;
pub mod https_upstream;
pub mod postgres;
pub mod prefix;
pub mod provider_rules;
pub mod requests;
pub mod responses_upstream;
pub mod schema_bombs;
pub mod spec;
pub mod stream;
pub mod stream_upstream;
#[cfg(target_os = "linux")]
pub mod swap;
pub mod system_packages;
pub mod upstream;
pub mod venv;
pub mod workspace;
