//! The partition engine: a pure state machine that decides which task a
//! partition dispatches next, which levels new tasks get, what to read, what to
//! persist and what to delete. It does no I/O and takes time as an argument;
//! `crate::partition` drives it against a store.
//!
//! Levels of one subqueue (a priority level of a partition):
//!
//! ```text
//!   dispatched            buffered in memory          only in the store
//! ──────────────────A─────────────────────────R──────────────────────M────▶ level
//! ```
//!
//! Invariants, per subqueue:
//! 1. Every task at or below the ack level `A` has been dispatched; nothing is
//!    ever written at or below `A` (the writer pins `A` while it assigns and
//!    writes a batch, and new passes are at least `A.pass`).
//! 2. Every stored task in `(A, R]` that has not been dispatched is in the
//!    buffer, ready. The buffer holds at most `buffer_tasks` ready tasks.
//! 3. When `at_end` is set, the store holds no task above `R` other than those
//!    of appends still in flight, which are merged when they succeed.
//! 4. A task is handed out at most once while one engine owns the partition.

mod engine;
mod ids;
mod subqueue;

pub use engine::{
    AppendPlan, Candidate, EngineConfig, GcRequest, IdsExhausted, PartitionEngine, PartitionSnapshot, ReadRequest,
    SubqueueSnapshot,
};
pub use ids::{ID_BLOCK_SIZE, IdBlock};
pub use subqueue::KeyBacklog;

#[cfg(test)]
mod tests;
