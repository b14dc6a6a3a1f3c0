//! A count of the bytes the parser looks at, kept only in tests: it lets them check that the
//! work grows linearly with the output without timing anything (see `linear.rs`). Every loop
//! that could pass over the same text more than once adds what it looks at.

#[cfg(test)]
pub use counted::{add, take};

#[cfg(not(test))]
#[inline(always)]
pub fn add(_bytes: usize) {}

#[cfg(test)]
mod counted {
    use std::cell::Cell;

    thread_local! {
        // Per thread, so tests running side by side do not add to each other's counts.
        static BYTES: Cell<usize> = const { Cell::new(0) };
    }

    pub fn add(bytes: usize) {
        BYTES.with(|b| b.set(b.get().saturating_add(bytes)));
    }

    /// The count since the last call, which starts a new one.
    pub fn take() -> usize {
        BYTES.with(|b| b.replace(0))
    }
}
