//! What the service tells its operators: log lines, OpenTelemetry traces and Prometheus metrics.

pub mod logs;
pub mod metrics;
pub mod timing;
pub mod traces;
