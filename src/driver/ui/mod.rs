//! `reactstep ui`: the loop driver's local web page. The person types a task in a terminal-like
//! pane and watches the loop run: the thought as it forms, each step as a card, the plan and
//! its evaluation, each step's context budget, approvals asked on the page. The page, its
//! script and style are built into the binary, served on loopback, and work offline.

mod approver;
pub mod cli;
mod guard;
mod runner;
mod server;
mod watcher;

pub use cli::{main, UiArgs};
