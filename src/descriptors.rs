//! File descriptors: what the service needs, checked at start. A step in flight holds up to
//! three (its client's connection, the duplicate of it watched for the client leaving, and its
//! upstream connection over HTTP/1), and an idle or refused client's connection one. Past the
//! process's limit an upstream connection cannot be opened (the step's 502) and a client's
//! cannot be accepted (every request, `/healthz` too, left waiting). So the soft limit is raised
//! to the hard one, and the steps and connections taken at once are bounded to fit in it: a
//! step over the bound gets 503 `at_capacity`, a connection over it waits to be accepted.

/// Descriptors one step in flight may hold.
pub const PER_STEP: u64 = 3;
/// Held whatever the load, besides each worker's: the listener, the log, Redis's and the trace
/// exporter's connections, a file being read (an idle process with one worker holds 18).
const FIXED: u64 = 48;
/// Each worker's poller and wakers (16 workers hold 60 more than one).
const PER_WORKER: u64 = 4;
/// Idle connections each upstream pool keeps to a provider's host.
const IDLE_PER_POOL: u64 = 64;

/// Descriptors held whatever the load, with `workers` and `pools` upstream pools.
pub fn held(workers: usize, pools: u16) -> u64 {
    FIXED + PER_WORKER * workers as u64 + IDLE_PER_POOL * u64::from(pools)
}

/// What the limit allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The soft limit on open descriptors, once raised.
    pub limit: u64,
    /// Steps in flight at once.
    pub steps: usize,
    /// Client connections open at once.
    pub connections: usize,
}

impl Budget {
    /// What fits in `limit` beside the descriptors `held` whatever the load, with at most
    /// `wanted` steps (0: as many as fit). Each step counts its three descriptors plus one more
    /// client connection (waiting, refused or idle), so that as many connections as steps are
    /// left for those.
    pub fn within(limit: u64, held: u64, wanted: usize) -> Self {
        let free = limit.saturating_sub(held);
        let fit = usize::try_from(free / (PER_STEP + 1))
            .unwrap_or(usize::MAX)
            .max(1);
        let steps = match wanted {
            0 => fit,
            wanted => wanted.min(fit),
        };
        // A step's connection is one of the connections; its two others come off the rest.
        let connections = usize::try_from(free.saturating_sub(2 * steps as u64))
            .unwrap_or(usize::MAX)
            .max(1);
        Self {
            limit,
            steps,
            connections,
        }
    }
}

/// Raises the soft limit on open descriptors to the hard one where it is lower; the soft
/// limit then in force, and the hard one. `None` where it cannot be read.
#[cfg(target_os = "linux")]
pub fn raise_limit() -> Option<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit for the call to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: a valid rlimit, read above; a refusal leaves the limit as it was.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = limit.rlim_max;
        }
    }
    Some((limit.rlim_cur, limit.rlim_max))
}

#[cfg(not(target_os = "linux"))]
pub fn raise_limit() -> Option<(u64, u64)> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every descriptor the budget lets be taken, at once.
    fn at_most_taken(budget: Budget, held: u64) -> u64 {
        held + budget.connections as u64 + 2 * budget.steps as u64
    }

    #[test]
    fn a_full_load_fits_in_the_limit() {
        for limit in [300, 1024, 3000, 65_536, 1 << 20] {
            let helds = [held(1, 1), held(16, 4), held(512, 64)];
            for held in helds.into_iter().filter(|h| h + 2 * (PER_STEP + 1) < limit) {
                let budget = Budget::within(limit, held, 0);
                assert!(at_most_taken(budget, held) <= limit, "{budget:?}");
                assert!(budget.connections >= 2 * budget.steps, "{budget:?}");
            }
        }
        // 2 workers, 4 pools: 312 held.
        let budget = Budget::within(3000, held(2, 4), 0);
        assert_eq!((budget.steps, budget.connections), (672, 1344));
    }

    #[test]
    fn the_operators_figure_is_kept_below_what_fits_and_capped_above() {
        assert_eq!(Budget::within(3000, 300, 100).steps, 100);
        assert_eq!(Budget::within(3000, 300, 100).connections, 2700 - 200);
        assert_eq!(Budget::within(3000, 300, 5000).steps, 675);
    }

    #[test]
    fn a_limit_below_the_fixed_need_still_admits_one_step() {
        let budget = Budget::within(10, held(1, 4), 0);
        assert_eq!((budget.steps, budget.connections), (1, 1));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_soft_limit_ends_at_the_hard_one() {
        let (soft, hard) = raise_limit().unwrap_or_default();
        assert!(
            soft > 0 && (soft == hard || hard == libc::RLIM_INFINITY),
            "{soft} {hard}"
        );
    }
}
