//! Every response says what the service's own phases took (`Server-Timing`, the W3C header that
//! browsers' developer tools show) and what it added to the model's time
//! (`X-Reactstep-Overhead-Ms`). A step's phases are timed as it runs (`telemetry::timing`); a
//! stream's headers leave before its step has run, so its terminal event says it again, whole.

use std::sync::Arc;
use std::time::Instant;

use actix_web::dev::ServiceResponse;
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::HttpMessage;

use crate::telemetry::timing::{PhaseTimes, Summary};

const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");
const OVERHEAD: HeaderName = HeaderName::from_static("x-reactstep-overhead-ms");

/// The timings of the request's step (timed from when its handling began), or of the request
/// alone since `started`.
pub fn summary_of(request: &actix_web::HttpRequest, started: Instant) -> Summary {
    let times = request.extensions().get::<Arc<PhaseTimes>>().cloned();
    match times {
        Some(times) => times.summary(),
        None => PhaseTimes::starting_at(started).summary(),
    }
}

/// Adds the two headers to a response.
pub fn tell<B>(response: &mut ServiceResponse<B>, started: Instant) {
    let summary = summary_of(response.request(), started);
    let headers = response.headers_mut();
    // From the `String` itself: `from_str` would copy each value into an allocation of its own.
    if let Ok(value) = HeaderValue::try_from(summary.header()) {
        headers.insert(SERVER_TIMING, value);
    }
    if let Ok(value) = HeaderValue::try_from(summary.overhead()) {
        headers.insert(OVERHEAD, value);
    }
}
