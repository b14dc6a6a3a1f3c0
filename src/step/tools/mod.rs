//! The tools a step may call: the catalog a request declares or names (checked against before an
//! action reaches the client) and the bounds a declared schema is held to before it is compiled.

mod catalog;
mod declared;
pub mod schema_limits;
mod segment_names;

pub use catalog::{compile, is_native_tool_name, type_name_of, Catalog, ToolSpec};
pub use segment_names::first_name_in;
