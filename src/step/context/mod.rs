//! What builds the prompt's context: the items the client sends and their report, the token
//! counts (with their cache and the margin for tokenizers that are not public), the fit into the
//! budget with truncation, the prompt's text, the summary of omitted turns, and the workspace
//! that items named without content are read from.

pub mod budget;
pub mod clearing;
mod encoder_tables;
mod items;
mod margin;
mod packed_table;
pub mod prompt;
pub(super) mod summary;
pub mod token_cache;
pub mod tokens;
pub(super) mod truncate;
pub mod workspace;

pub use items::{
    dedupe, path_key, same_path, ContextItem, ContextReport, ContextSource, Excluded, Fate,
    ReportItem,
};
pub use summary::{within_summary_bound, MAX_SUMMARY_CHARS};
