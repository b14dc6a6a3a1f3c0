//! The HTTP layer: decode and validate requests into domain input, run the step, and map the
//! outcome (or the failure) to the one response shape the contract describes.

mod admission;
mod base_urls;
mod bearer;
mod body;
mod client_address;
pub mod client_gone;
mod convert;
mod error;
mod fallback_report;
mod handlers;
pub mod headers;
mod held_body;
pub mod offline;
pub mod protocol;
mod rate_limit;
mod raw_keys;
mod request;
pub mod request_log;
mod response;
pub mod server_timing;
mod state;
mod step_slots;
mod stream;
mod tasks;
mod unknown_fields;

use actix_web::{guard, web};

pub use base_urls::{AllowedBaseUrls, Destinations};
pub use client_address::TrustedProxies;
pub use error::{ApiError, ErrorKind};
pub use handlers::OPENAPI_YAML;
pub use rate_limit::{RateLimits, SharedSettings};
pub use request::{tool_name_refusal, MAX_TOOLS, MAX_TOOL_DESCRIPTION_CHARS};
pub use state::AppState;
pub use step_slots::StepSlots;
pub use tasks::Endpoint;

pub fn routes(cfg: &mut web::ServiceConfig) {
    // Each endpoint takes one method; any other gets 405 with `Allow` naming it. actix-web's own
    // method guards (`web::get()`) would also record each method tried in the request's
    // extensions, an allocation every step would hold while it waits: a plain check instead.
    let only = |method: &'static str, handler: actix_web::Route, path: &str| {
        let guarded = handler.guard(guard::fn_guard(move |ctx| {
            ctx.head().method.as_str() == method
        }));
        web::resource(path).route(guarded).default_service(web::to(
            move |req: actix_web::HttpRequest, id: tracing_actix_web::RequestId| {
                handlers::method_not_allowed(req, id, method)
            },
        ))
    };
    cfg.service(only("GET", web::to(handlers::healthz), "/healthz"))
        .service(only("GET", web::to(handlers::readyz), "/readyz"))
        .service(only("GET", web::to(handlers::metrics), "/metrics"))
        .service(only("GET", web::to(handlers::openapi), "/openapi.yaml"))
        .service(only("GET", web::to(handlers::providers), "/api/providers"))
        .service(only("POST", task(Endpoint::Step), "/api/agent/react_step"))
        .service(only("POST", task(Endpoint::Plan), "/api/agent/plan"))
        .service(only(
            "POST",
            task(Endpoint::Evaluate),
            "/api/agent/evaluate",
        ))
        .service(only(
            "POST",
            streamed(Endpoint::Step),
            "/api/agent/react_step/stream",
        ))
        .service(only(
            "POST",
            streamed(Endpoint::Plan),
            "/api/agent/plan/stream",
        ))
        .service(only(
            "POST",
            streamed(Endpoint::Evaluate),
            "/api/agent/evaluate/stream",
        ));
}

/// The endpoint's task answered as JSON.
fn task(endpoint: Endpoint) -> actix_web::Route {
    web::to(move |req, payload, state, id| handlers::answer(req, payload, state, id, endpoint))
}

/// The endpoint's task answered as server-sent events.
fn streamed(endpoint: Endpoint) -> actix_web::Route {
    web::to(move |req, payload, state, id| stream::streamed(req, payload, state, id, endpoint))
}

pub fn default_service() -> actix_web::Route {
    web::to(handlers::not_found)
}
