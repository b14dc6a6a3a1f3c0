//! Traces whose caller's `tracestate` held a key of the request's body. That is known only once
//! the body is read, after the request's span began carrying the state, so each span of such a
//! trace has its state cleared as it ends, before the batch exports it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use opentelemetry::trace::{SpanContext, TraceId, TraceState};
use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;

/// Traces remembered at most, the oldest forgotten first: their spans ended long before.
const MOST: usize = 4096;

/// Whether any trace was withheld: until then, ending a span takes no lock.
static ANY: AtomicBool = AtomicBool::new(false);
static TRACES: Mutex<VecDeque<TraceId>> = Mutex::new(VecDeque::new());

/// The spans of `trace` go without their `tracestate`.
pub fn withhold(trace: TraceId) {
    let mut traces = TRACES.lock().unwrap_or_else(PoisonError::into_inner);
    if traces.len() == MOST {
        traces.pop_front();
    }
    traces.push_back(trace);
    ANY.store(true, Ordering::Release);
}

fn withheld(trace: TraceId) -> bool {
    ANY.load(Ordering::Acquire)
        && (TRACES.lock().unwrap_or_else(PoisonError::into_inner)).contains(&trace)
}

/// The batch processor, each span handed to it without the state of a withheld trace.
#[derive(Debug)]
pub struct Withholding<P>(pub P);

impl<P: SpanProcessor> SpanProcessor for Withholding<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.0.on_start(span, cx);
    }

    fn on_end(&self, mut span: SpanData) {
        let context = &span.span_context;
        if *context.trace_state() != TraceState::NONE && withheld(context.trace_id()) {
            span.span_context = SpanContext::new(
                context.trace_id(),
                context.span_id(),
                context.trace_flags(),
                context.is_remote(),
                TraceState::NONE,
            );
        }
        self.0.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}
