//! The reference client: drives a whole ReAct loop through the service over HTTP, running the
//! tools itself (`reactstep run`, or [`Driver`] from code). It shows plugin authors how the
//! service is meant to be driven.

pub mod admission;
pub mod approval;
pub mod args;
mod arithmetic;
pub mod builtin;
mod calls;
pub mod cli;
pub mod execution;
mod in_process;
pub mod interrupts;
pub mod mcp;
pub mod memory;
pub mod observation;
pub mod prior;
pub mod reflection;
pub mod registry;
pub mod report;
pub mod run;
mod service_reply;
mod stderr_progress;
mod step_retry;
pub mod terminal;
pub mod ui;
pub mod watcher;
pub mod window;
pub mod workspace;

pub use approval::{ApprovalPolicy, ApprovalRequest, Approver, Decision, LineApprover};
pub use builtin::{register_builtins, Workspace};
pub use execution::RetryPolicy;
pub use prior::PriorConversation;
pub use registry::{Tool, ToolMetadata, ToolOutcome, ToolRegistry};
pub use report::{RunReport, StepRecord, Termination};
pub use run::{Driver, FallbackModel, LoopSettings};
pub use watcher::{Quiet, Watcher};
