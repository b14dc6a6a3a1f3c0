//! The HTTP layer: decode and validate requests into domain input, run the step, and map the
//! outcome (or the failure) to the one response shape the contract describes.

mod admission;
mod base_urls;
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
        .service(only(
            "POST",
            web::to(handlers::react_step),
            "/api/agent/react_step",
        ))
        .service(only(
            "POST",
            web::to(stream::react_step_stream),
            "/api/agent/react_step/stream",
        ))
        .service(only("POST", web::to(handlers::plan), "/api/agent/plan"))
        .service(only(
            "POST",
            web::to(stream::plan_stream),
            "/api/agent/plan/stream",
        ))
        .service(only(
            "POST",
            web::to(handlers::evaluate),
            "/api/agent/evaluate",
        ))
        .service(only(
            "POST",
            web::to(stream::evaluate_stream),
            "/api/agent/evaluate/stream",
        ));
}

pub fn default_service() -> actix_web::Route {
    web::to(handlers::not_found)
}
