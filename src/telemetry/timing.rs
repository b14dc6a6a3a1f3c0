//! The service's own phases of a step, timed for the client: the `Server-Timing` header (which
//! browsers' developer tools show) and `X-Reactstep-Overhead-Ms`, what the service added to the
//! model's time. A step's phases run on several tasks (the CPU pool, the HTTP worker), so each
//! adds its time to a shared record.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A phase of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Reading, decoding and checking the request.
    Decode,
    /// Fitting the prompt into the budget (again, when it is fitted again).
    Fit,
    /// Waiting on the model: every call, repair rounds and counts included.
    Upstream,
    /// Reading the model's output.
    Parse,
}

const PHASES: [(Phase, &str); 4] = [
    (Phase::Decode, "decode"),
    (Phase::Fit, "fit"),
    (Phase::Upstream, "upstream"),
    (Phase::Parse, "parse"),
];

/// The time each phase took so far, from when the request's handling began.
#[derive(Debug)]
pub struct PhaseTimes {
    started: Instant,
    nanos: [AtomicU64; 4],
    /// For a phase being timed now: when its timer began, in nanoseconds from `started`, plus
    /// one (0: none). A stream's headers leave while the model is still answering.
    running_since: [AtomicU64; 4],
}

impl Default for PhaseTimes {
    fn default() -> Self {
        Self::starting_at(Instant::now())
    }
}

impl PhaseTimes {
    pub fn starting_at(started: Instant) -> Self {
        Self {
            started,
            nanos: Default::default(),
            running_since: Default::default(),
        }
    }

    fn since_start(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.started).as_nanos()).unwrap_or(u64::MAX)
    }

    pub fn add(&self, phase: Phase, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.nanos[phase as usize].fetch_add(nanos, Ordering::Relaxed);
    }

    /// Times `phase` until the returned guard is dropped.
    pub fn timer(self: &Arc<Self>, phase: Phase) -> PhaseTimer {
        let started = Instant::now();
        let mark = self.since_start(started).saturating_add(1);
        self.running_since[phase as usize].store(mark, Ordering::Relaxed);
        PhaseTimer {
            times: self.clone(),
            phase,
            started,
            mark,
        }
    }

    /// A phase's milliseconds up to `now`, a timer still running included.
    fn ms(&self, phase: Phase, now: u64) -> f64 {
        let done = self.nanos[phase as usize].load(Ordering::Relaxed);
        let running = match self.running_since[phase as usize].load(Ordering::Relaxed) {
            0 => 0,
            mark => now.saturating_sub(mark - 1),
        };
        done.saturating_add(running) as f64 / 1e6
    }

    /// Each phase's milliseconds and the whole, as they stand now.
    pub fn summary(&self) -> Summary {
        let now = Instant::now();
        let at = self.since_start(now);
        let total_ms = at as f64 / 1e6;
        let upstream_ms = self.ms(Phase::Upstream, at);
        Summary {
            decode_ms: self.ms(Phase::Decode, at),
            fit_ms: self.ms(Phase::Fit, at),
            upstream_ms,
            parse_ms: self.ms(Phase::Parse, at),
            total_ms,
            overhead_ms: (total_ms - upstream_ms).max(0.0),
        }
    }
}

/// What a request's phases took, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Summary {
    pub decode_ms: f64,
    pub fit_ms: f64,
    pub upstream_ms: f64,
    pub parse_ms: f64,
    pub total_ms: f64,
    /// The whole less the model's time: what the service added.
    pub overhead_ms: f64,
}

impl Summary {
    /// The `Server-Timing` header's value: each phase as `name;dur=ms`, then `total`.
    pub fn header(&self) -> String {
        let durations = [self.decode_ms, self.fit_ms, self.upstream_ms, self.parse_ms];
        let mut out = String::with_capacity(112);
        for ((_, name), ms) in PHASES.iter().zip(durations) {
            out.push_str(name);
            out.push_str(";dur=");
            push_ms(&mut out, ms);
            out.push_str(", ");
        }
        out.push_str("total;dur=");
        push_ms(&mut out, self.total_ms);
        out
    }

    /// `X-Reactstep-Overhead-Ms`'s value.
    pub fn overhead(&self) -> String {
        let mut out = String::with_capacity(16);
        push_ms(&mut out, self.overhead_ms);
        out
    }
}

/// Milliseconds with three decimals, written from whole microseconds: formatting an `f64` with
/// a precision took some 3,000 instructions a number under callgrind. The digits are written
/// without the formatting machinery too, which every response pays for (docs/benchmarks.md,
/// "What `Server-Timing` costs a step").
fn push_ms(out: &mut String, ms: f64) {
    let micros = (ms * 1000.0).round().max(0.0) as u64;
    out.push_str(itoa::Buffer::new().format(micros / 1000));
    let fraction = micros % 1000;
    out.push('.');
    for digit in [fraction / 100, fraction / 10 % 10, fraction % 10] {
        out.push(char::from(b'0' + digit as u8));
    }
}

/// Adds the time since it was made to its phase when dropped.
pub struct PhaseTimer {
    times: Arc<PhaseTimes>,
    phase: Phase,
    started: Instant,
    /// Its mark in `running_since`, taken back when it ends (unless a later timer's is there).
    mark: u64,
}

impl Drop for PhaseTimer {
    fn drop(&mut self) {
        self.times.add(self.phase, self.started.elapsed());
        let running = &self.times.running_since[self.phase as usize];
        let _ = running.compare_exchange(self.mark, 0, Ordering::Relaxed, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_add_up_and_the_header_names_each() {
        let times = Arc::new(PhaseTimes::starting_at(
            Instant::now() - Duration::from_millis(50),
        ));
        times.add(Phase::Upstream, Duration::from_millis(30));
        times.add(Phase::Upstream, Duration::from_millis(10));
        times.add(Phase::Fit, Duration::from_micros(1500));
        drop(times.timer(Phase::Parse));
        let summary = times.summary();
        assert!((summary.upstream_ms - 40.0).abs() < 1e-9);
        assert!((summary.fit_ms - 1.5).abs() < 1e-9);
        assert!(summary.total_ms >= 50.0);
        assert!((summary.overhead_ms - (summary.total_ms - 40.0)).abs() < 1e-9);
        let header = summary.header();
        assert!(
            header.starts_with("decode;dur=0.000, fit;dur=1.500, upstream;dur=40.000, parse;dur="),
            "{header}"
        );
        assert!(header.contains(", total;dur="), "{header}");
        // Three decimals, as a float formatted with that precision says them.
        for ms in [0.0, 0.0004, 0.0006, 1.5, 12.3456, 1234.5678] {
            let mut out = String::new();
            push_ms(&mut out, ms);
            assert_eq!(out, format!("{ms:.3}"), "{ms}");
        }
    }

    #[test]
    fn a_phase_still_timed_counts_up_to_now_and_once_ended_only_once() {
        let times = Arc::new(PhaseTimes::starting_at(
            Instant::now() - Duration::from_millis(50),
        ));
        times.add(Phase::Decode, Duration::from_millis(5));
        let waiting = times.timer(Phase::Upstream);
        std::thread::sleep(Duration::from_millis(20));
        let now = times.summary();
        // The model's wait so far is not the service's overhead.
        assert!(now.upstream_ms >= 20.0, "{now:?}");
        assert!(now.overhead_ms <= now.total_ms - 20.0, "{now:?}");
        drop(waiting);
        let after = times.summary();
        assert!(after.upstream_ms >= now.upstream_ms, "{after:?}");
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(times.summary().upstream_ms, after.upstream_ms);
    }

    proptest::proptest! {
        /// The digits written directly are the whole microseconds `format!` would write, from
        /// no time at all to days, text after text.
        #[test]
        fn milliseconds_are_written_as_the_formatter_writes_their_microseconds(
            all in proptest::collection::vec(0.0f64..1e8, 1..4),
        ) {
            let (mut out, mut expected) = (String::new(), String::new());
            for ms in all {
                push_ms(&mut out, ms);
                let micros = (ms * 1000.0).round() as u64;
                expected.push_str(&format!("{}.{:03}", micros / 1000, micros % 1000));
            }
            proptest::prop_assert_eq!(out, expected);
        }
    }
}
