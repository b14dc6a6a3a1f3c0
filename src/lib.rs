//! reactstep: a stateless HTTP service that performs one ReAct step per request.

pub mod api;
#[cfg(target_os = "linux")]
pub(crate) mod beneath;
pub mod config;
pub mod descriptors;
#[cfg(feature = "driver")]
pub mod driver;
pub mod json;
pub mod llm;
pub mod prices;
pub mod runtime;
pub mod scrub;
pub mod start_file;
pub mod startup;
pub mod step;
pub mod telemetry;
