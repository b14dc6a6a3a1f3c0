//! One budget for the bytes the service holds on behalf of others: request bodies as they
//! arrive and upstream replies as they are read. Each is bounded on its own (the body limit, the
//! reply cap), but not their sum: 64 clients each sending all but the last byte of an 8 MiB body
//! held 535 MiB, and eight 15.5 MiB replies took the process past its container's limit. Past
//! the budget new work is refused (503 `overloaded`, retry after a second) instead of taking
//! memory the process does not have. The budget never waits: a reservation that waited for
//! memory held by others that wait too would never end.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes of bodies and replies the process may hold at once.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: usize,
    held: AtomicUsize,
}

/// The budget is spent: the work asking for more should be refused, and retried later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted;

/// Bytes held against the budget, given back when dropped.
#[derive(Debug)]
pub struct Held {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl MemoryBudget {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            held: AtomicUsize::new(0),
        })
    }

    /// A budget that nothing exhausts (tools and tests that build parts of the service alone).
    pub fn unlimited() -> Arc<Self> {
        Self::new(usize::MAX)
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Holds `bytes`, or refuses if that would pass the limit.
    pub fn hold(self: &Arc<Self>, bytes: usize) -> Result<Held, Exhausted> {
        let mut held = Held {
            budget: Arc::clone(self),
            bytes: 0,
        };
        held.grow(bytes)?;
        Ok(held)
    }

    /// Holds `bytes` that are already in memory (an answer built): counted whatever the limit,
    /// so that new work is refused while they wait to be written.
    pub fn hold_anyway(self: &Arc<Self>, bytes: usize) -> Held {
        self.held.fetch_add(bytes, Ordering::AcqRel);
        Held {
            budget: Arc::clone(self),
            bytes,
        }
    }

    fn take(&self, bytes: usize) -> Result<(), Exhausted> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes).filter(|&after| after <= self.limit)
            })
            .map(drop)
            .map_err(|_| Exhausted)
    }
}

impl Held {
    /// Holds `more` bytes besides; on refusal what was held stays held.
    pub fn grow(&mut self, more: usize) -> Result<(), Exhausted> {
        self.budget.take(more)?;
        self.bytes += more;
        Ok(())
    }

    /// Holds at least `total` bytes in all.
    pub fn grow_to(&mut self, total: usize) -> Result<(), Exhausted> {
        self.grow(total.saturating_sub(self.bytes))
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// The budget when the operator sets none: a sixth of the memory its container may use (the
/// cgroup's `memory.max`). A byte held costs up to five more at the peak of a step (the decoded
/// text, the parsed answer, the response that carries it twice), so a sixth keeps the whole under
/// the limit. Outside a limited container, 256 MiB: thirty bodies of the largest size at once.
pub fn default_limit() -> usize {
    container_limit().map_or(DEFAULT_OUTSIDE_A_CONTAINER, |bytes| bytes / 6)
}

const DEFAULT_OUTSIDE_A_CONTAINER: usize = 256 * 1024 * 1024;

/// The container's limit: cgroup v2's `memory.max` ("max", none, reads as `None`), else cgroup
/// v1's `memory.limit_in_bytes` (which says "none" with a number near 2^63).
fn container_limit() -> Option<usize> {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.trim().parse::<usize>().ok())
    };
    read("/sys/fs/cgroup/memory.max").or_else(|| {
        read("/sys/fs/cgroup/memory/memory.limit_in_bytes").filter(|&bytes| bytes < 1 << 60)
    })
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_held_up_to_the_limit_and_given_back_when_dropped() {
        let budget = MemoryBudget::new(100);
        let mut a = budget.hold(60).unwrap();
        assert_eq!(budget.hold(41).map(|_| ()), Err(Exhausted));
        let b = budget.hold(40).unwrap();
        assert_eq!(budget.held(), 100);
        assert_eq!(a.grow(1), Err(Exhausted));
        assert_eq!(a.bytes(), 60, "a refused growth holds nothing more");
        drop(b);
        a.grow_to(90).unwrap();
        assert_eq!((a.bytes(), budget.held()), (90, 90));
        a.grow_to(10).unwrap();
        assert_eq!(a.bytes(), 90, "growing to less holds what was held");
        drop(a);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn racing_holders_never_pass_the_limit_together() {
        let budget = MemoryBudget::new(1000);
        let most = Arc::new(AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for _ in 0..8 {
                let (budget, most) = (Arc::clone(&budget), Arc::clone(&most));
                scope.spawn(move || {
                    for n in 0..10_000 {
                        if let Ok(held) = budget.hold(1 + n % 300) {
                            most.fetch_max(budget.held(), Ordering::Relaxed);
                            drop(held);
                        }
                    }
                });
            }
        });
        assert!(most.load(Ordering::Relaxed) <= 1000);
        assert_eq!(budget.held(), 0, "every byte was given back");
    }

    #[test]
    fn an_overflowing_request_is_refused_not_wrapped() {
        let budget = MemoryBudget::new(usize::MAX);
        let _a = budget.hold(usize::MAX - 1).unwrap();
        assert_eq!(budget.hold(2).map(|_| ()), Err(Exhausted));
    }

    #[test]
    fn the_default_is_a_sixth_of_the_containers_limit() {
        let expected = container_limit().map_or(DEFAULT_OUTSIDE_A_CONTAINER, |b| b / 6);
        assert_eq!(default_limit(), expected);
    }
}
