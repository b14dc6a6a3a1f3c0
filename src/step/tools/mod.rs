//! The tools a step may call: the catalog a request declares or names (checked against before an
//! action reaches the client) and the bounds a declared schema is held to before it is compiled.

mod catalog;
pub mod schema_limits;

pub use catalog::{compile, first_name_in, is_native_tool_name, type_name_of, Catalog, ToolSpec};
