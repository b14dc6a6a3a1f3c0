//! Traces over OTLP, when `REACTSTEP_OTLP_ENDPOINT` is set: each request's span, with a span per
//! phase under it (decode, context fit, each upstream attempt, parse: each made where its phase
//! runs, the upstream attempt's in `llm/transport.rs`), exported in batches over OTLP/HTTP with
//! protobuf. An incoming W3C `traceparent` is continued, its `tracestate` cut to
//! what the specification allows (see `propagated`). The export queue holds at most 2,048 spans
//! (the SDK's default, `OTEL_BSP_MAX_QUEUE_SIZE`); past it new spans are dropped, not queued.
//!
//! Off, it costs nothing: no exporter, thread or layer exists, and the phase spans are not made
//! (each place asks [`on`], one atomic load). On, they are at `trace` level under their own
//! target, so the log filter leaves them out of the log.
//!
//! Only names and figures go into a span, never a prompt, an output, a file, a header or a key:
//! the exporter sees the phase spans and the request's (whose fields are scrubbed for the log
//! line already), and never an event, since a log line may quote an upstream's message.

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::resource::{
    EnvResourceDetector, ResourceDetector, TelemetryResourceDetector,
};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::filter::{filter_fn, FilterExt as _, Targets};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

mod bounded_client;
mod propagated;
mod standard_variables;
mod withheld;

/// The target of the phase spans: only traces ask for it.
pub const TARGET: &str = "reactstep::trace";

/// Where the request's span is made (see `api::request_log`).
const REQUEST_TARGET: &str = "reactstep::api::request_log";

static ON: AtomicBool = AtomicBool::new(false);

/// Whether traces are being exported.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// A phase's span (made by `make`) while traces are exported, else none: even a disabled span
/// macro calls into `tracing` (for its `log` bridge), and a phase span is for traces alone.
pub fn phase(make: impl FnOnce() -> tracing::Span) -> tracing::Span {
    if on() {
        make()
    } else {
        tracing::Span::none()
    }
}

/// The tracer provider, whose batch processor exports on a thread of its own.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// The exporter to `endpoint` (the collector's OTLP/HTTP base URL; `/v1/traces` is added
    /// unless it is there), the standard `OTEL_*` variables read for the rest, and the tracer.
    pub fn start(endpoint: &str) -> Result<(Self, SdkTracer), String> {
        let url = traces_url(endpoint)?;
        standard_variables::check()?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(bounded_client::BoundedClient::new()?)
            .with_endpoint(url.clone())
            .build()
            .map_err(|e| format!("REACTSTEP_OTLP_ENDPOINT {url}: {e}"))?;
        let provider = SdkTracerProvider::builder()
            .with_resource(resource(std::env::var("OTEL_SERVICE_NAME").ok()))
            .with_span_processor(withheld::Withholding(
                opentelemetry_sdk::trace::BatchSpanProcessor::builder(exporter).build(),
            ))
            .build();
        let tracer = provider.tracer("reactstep");
        Ok((Self { provider }, tracer))
    }

    /// Marks traces as exported, once the layer is installed.
    pub fn switch_on(&self) {
        ON.store(true, Ordering::Relaxed);
    }

    /// Sends what the batch still holds and stops the exporter: the last requests' traces are
    /// not lost when the service stops.
    pub fn shutdown(self) {
        ON.store(false, Ordering::Relaxed);
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "traces could not all be sent at shutdown");
        }
    }
}

/// The full URL traces are posted to. A URL with credentials or a query is refused: the
/// exporter sends neither as a credential, and its errors quote the URL in the log; headers
/// (`OTEL_EXPORTER_OTLP_HEADERS`) are the place for a collector's key.
fn traces_url(endpoint: &str) -> Result<String, String> {
    let trimmed = endpoint.trim().trim_end_matches('/');
    // Not quoted: it may hold a password.
    let parsed = reqwest::Url::parse(trimmed)
        .map_err(|e| format!("REACTSTEP_OTLP_ENDPOINT is not a URL: {e}"))?;
    if !parsed.username().is_empty() || parsed.password().is_some() || parsed.query().is_some() {
        return Err("REACTSTEP_OTLP_ENDPOINT holds credentials or a query, which are not sent as credentials and would be logged: give the collector's key in OTEL_EXPORTER_OTLP_HEADERS".into());
    }
    if !matches!(parsed.scheme(), "http" | "https") {
        // Not quoted either: `user:password@host` without a scheme reads as a scheme `user`.
        return Err("REACTSTEP_OTLP_ENDPOINT is not an http or https URL".into());
    }
    if trimmed.ends_with("/v1/traces") {
        Ok(trimmed.to_string())
    } else {
        Ok(format!("{trimmed}/v1/traces"))
    }
}

/// `service.name` is `reactstep` unless `OTEL_SERVICE_NAME` (or `service.name` in
/// `OTEL_RESOURCE_ATTRIBUTES`) says otherwise; the SDK's own attributes come along.
fn resource(service_name: Option<String>) -> Resource {
    let detectors: [Box<dyn ResourceDetector>; 2] = [
        Box::new(TelemetryResourceDetector),
        Box::new(EnvResourceDetector::new()),
    ];
    let builder = Resource::builder_empty()
        .with_service_name("reactstep")
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .with_detectors(&detectors);
    match service_name.filter(|name| !name.trim().is_empty()) {
        Some(name) => builder.with_service_name(name),
        None => builder,
    }
    .build()
}

/// The layer that turns the request's span and the phase spans into OpenTelemetry spans. Events
/// and every other span stay out: a filtered span's children attach to its nearest exported
/// ancestor.
pub fn layer<S>(tracer: SdkTracer) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let exported = Targets::new()
        .with_target(TARGET, tracing::Level::TRACE)
        .with_target(REQUEST_TARGET, tracing::Level::INFO)
        .and(filter_fn(|meta| meta.is_span()));
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(exported)
}

/// Continues the client's trace: the request's span gets the incoming `traceparent` (and
/// `tracestate`, bounded as [`propagated`] says, without the entries that hold a `secret`) as
/// its parent; returns the `tracestate` its spans carry. Only while traces are on.
pub fn continue_trace(
    span: &tracing::Span,
    headers: &actix_web::http::header::HeaderMap,
    secret: impl Fn(&str) -> bool,
) -> Option<String> {
    if !on() {
        return None;
    }
    let values = |name| headers.get_all(name).filter_map(|v| v.to_str().ok());
    let traceparent = propagated::traceparent(values("traceparent"))?;
    let carried = Carried {
        traceparent,
        tracestate: propagated::tracestate(values("tracestate"), secret),
    };
    let parent = TraceContextPropagator::new().extract(&carried);
    // Fails only for a span no layer exports, which then has no trace to continue.
    let _ = span.set_parent(parent);
    carried.tracestate
}

/// The request's `tracestate` held a key of its body (known once the body is read): its trace's
/// spans go without it. Only while traces are on.
pub fn withhold_tracestate() {
    if !on() {
        return;
    }
    let context = tracing::Span::current().context();
    withheld::withhold(
        opentelemetry::trace::TraceContextExt::span(&context)
            .span_context()
            .trace_id(),
    );
}

/// The two headers the propagator reads, as bounded.
struct Carried<'a> {
    traceparent: &'a str,
    tracestate: Option<String>,
}

impl Extractor for Carried<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => Some(self.traceparent),
            "tracestate" => self.tracestate.as_deref(),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_added_to_a_base_url_once() {
        let url = |e: &str| traces_url(e).ok();
        assert_eq!(
            url("http://127.0.0.1:4318").as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        assert_eq!(
            url("https://otel.example/collector/").as_deref(),
            Some("https://otel.example/collector/v1/traces")
        );
        assert_eq!(
            url("http://c:4318/v1/traces").as_deref(),
            Some("http://c:4318/v1/traces")
        );
        assert_eq!(url("c:4318"), None);
        let refused = traces_url("otel:S3cretPw@collector:4318")
            .err()
            .unwrap_or_default();
        assert!(refused.contains("not an http or https URL") && !refused.contains("S3cret"));
        assert_eq!(url("grpc://c:4317"), None);
    }

    /// Credentials in the URL are neither sent as credentials nor kept out of the exporter's
    /// error lines: refused, and not quoted in the refusal.
    #[test]
    fn an_endpoint_with_credentials_or_a_query_is_refused_unquoted() {
        for endpoint in [
            "http://user:s3cret-pass@collector:4318",
            "http://s3cret-user@collector:4318",
            "https://collector/?api_key=s3cret-key",
        ] {
            let refused = traces_url(endpoint).err().unwrap_or_default();
            assert!(refused.contains("OTEL_EXPORTER_OTLP_HEADERS"), "{refused}");
            assert!(!refused.contains("s3cret"), "{refused}");
        }
    }

    #[test]
    fn the_service_is_named_reactstep_unless_the_operator_names_it() {
        let name = |r: Resource| {
            r.get(&opentelemetry::Key::new("service.name"))
                .map(|v| v.to_string())
        };
        if std::env::var_os("OTEL_RESOURCE_ATTRIBUTES").is_none() {
            assert_eq!(name(resource(None)).as_deref(), Some("reactstep"));
            assert_eq!(
                name(resource(Some(" ".into()))).as_deref(),
                Some("reactstep")
            );
        }
        assert_eq!(
            name(resource(Some("ide-gateway".into()))).as_deref(),
            Some("ide-gateway")
        );
    }
}
