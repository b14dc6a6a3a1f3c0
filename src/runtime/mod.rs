//! The process beneath the step: the fair CPU pool the heavy parts run on, the memory budget
//! bodies and replies are counted against, the memo of compiled schemas, and the allocator and
//! resident-memory care of a long-lived service.

pub mod cpu;
pub mod heap_trim;
pub(crate) mod memo;
pub mod memory_budget;
pub mod resident;
pub mod stopping;
