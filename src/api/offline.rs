//! The request path without HTTP around it, for the fuzz target that drives all of it: a body
//! decoded, validated and converted into a step's input as the handlers do, and a step's
//! output rendered as the response body. Nothing here reaches a network or the disk.

use std::sync::{Arc, OnceLock};

use super::convert::{self, Conversion};
use super::request::ReactStepRequest;
use super::response::ReactStepResponse;
use super::tasks::Endpoint;
use crate::config::{Config, Settings};
use crate::step::timestamp_now;
use crate::step::{StepInput, StepOutput};

/// The step's input from a request body, or why the service would answer 400.
pub fn step_input(body: &[u8]) -> Result<Box<StepInput>, String> {
    input_for(Endpoint::Step, body)
}

/// The input a body sent to `endpoint` becomes (a plan's or an evaluation's step), or why the
/// service would answer 400.
pub fn input_for(endpoint: Endpoint, body: &[u8]) -> Result<Box<StepInput>, String> {
    let (request, unknown): (ReactStepRequest, _) =
        super::body::decode_knowing(body, endpoint.own_fields()).map_err(|(message, _)| message)?;
    let task = endpoint.task(body).map_err(|(message, _)| message)?;
    let how = Conversion {
        settings: defaults(),
        destinations: Arc::default(),
        session_id: request
            .session_id
            .clone()
            .unwrap_or_else(|| "offline".into()),
        received_at: timestamp_now(),
        unknown,
    };
    let mut input = convert::step_input(request, how)
        .map(Box::new)
        .map_err(|fields| convert::invalid_fields(&fields))?;
    task.shape(&mut input)
        .map_err(|(field, why)| format!("{field}: {why}"))?;
    Ok(input)
}

/// The settings of a service started with no flags and no environment (no workspace, mock
/// responses allowed), made once; no base URL is allowed and none required.
fn defaults() -> Arc<Settings> {
    static DEFAULTS: OnceLock<Arc<Settings>> = OnceLock::new();
    DEFAULTS
        .get_or_init(|| Arc::new(Settings::new(&Config::defaults(), None)))
        .clone()
}

/// The body of the 200 response for a step's output.
pub fn response_body(output: StepOutput) -> Result<String, serde_json::Error> {
    serde_json::to_string(&ReactStepResponse::success(output, "offline".into(), None))
}
