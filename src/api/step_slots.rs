//! Steps in flight, bounded: each holds descriptors the process has a limit on (see
//! `descriptors`), so a step over the bound is refused at once with 503 `at_capacity` rather
//! than left to fail at its upstream connection.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub struct StepSlots {
    limit: usize,
    taken: AtomicUsize,
}

/// A step's place among those in flight, given back when dropped.
pub struct Slot(Arc<StepSlots>);

impl StepSlots {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            taken: AtomicUsize::new(0),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A place, unless all are taken.
    pub fn take(self: &Arc<Self>) -> Option<Slot> {
        let taken = self.taken.fetch_add(1, Ordering::AcqRel);
        if taken >= self.limit {
            self.taken.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Slot(self.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.taken.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_given_back_and_never_more_than_the_limit_taken() {
        let slots = StepSlots::new(2);
        let first = slots.take();
        let second = slots.take();
        assert!(first.is_some() && second.is_some());
        assert!(slots.take().is_none());
        drop(first);
        let third = slots.take();
        assert!(third.is_some());
        assert!(slots.take().is_none());
    }

    #[test]
    fn racing_threads_never_hold_more_than_the_limit() {
        let slots = StepSlots::new(8);
        let most = std::sync::Arc::new(AtomicUsize::new(0));
        let held = std::sync::Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..16)
            .map(|_| {
                let (slots, most, held) = (slots.clone(), most.clone(), held.clone());
                std::thread::spawn(move || {
                    for _ in 0..2_000 {
                        if let Some(slot) = slots.take() {
                            let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            held.fetch_sub(1, Ordering::SeqCst);
                            drop(slot);
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            assert!(thread.join().is_ok());
        }
        assert!(most.load(Ordering::SeqCst) <= 8);
        assert_eq!(slots.taken.load(Ordering::SeqCst), 0);
    }
}
