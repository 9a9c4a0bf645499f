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
//! 4. A task is handed out at most once while one engine owns the partition,
//!    and only once its lease record is durable; the ack level never passes a
//!    task whose lease is being written. Leases, delayed tasks, dead letters
//!    and dedup ids are records beside the backlog (`leases`, `delayed`,
//!    `dedup`), changed in the same conditional writes as the tasks.
//! 5. The tasks dispatched above `A` stay near `park_after`: a key held at
//!    its limits that holds `A` back is parked off the ack path (`parked`).
//! 6. In a queue with a `max_wait`, a task that has waited that long is
//!    moved to the front of its subqueue by one write that deletes its row
//!    and writes it again above `A` (`aged`): moved whole or not at all.

pub mod aged;
pub mod cancel;
mod config;
pub mod dead_letter_filter;
pub mod dedup;
pub mod delayed;
pub mod dispatch_tally;
mod ids;
pub mod key_rates;
pub mod leases;
pub mod lookup;
mod machine;
mod outcomes;
pub mod parked;
pub mod pauses;
mod plan;
pub mod policy;
mod report;
pub mod rows;
mod sizes;
mod subqueue;

pub use cancel::{Cancel, CancelRefused, MAX_CANCELLED, Purged};
pub use config::EngineConfig;
pub use dead_letter_filter::DeadLetterFilter;
pub use ids::{ID_BLOCK_SIZE, IdBlock};
pub use leases::LeaseError;
pub use machine::{MAX_MAINTENANCE_PER_WRITE, PartitionEngine};
pub use outcomes::{Added, Candidate, Finish, Finished, Next, Outcome};
pub use pauses::Pauses;
pub use plan::{AppendPlan, GcRequest, IdsExhausted, PlanInput, ReadRequest};
pub use policy::{DispatchOrder, TaskPolicy};
pub use report::{PartitionSnapshot, SubqueueSnapshot, TaskCounts};
pub use sizes::{bury_bytes, spec_bytes};
pub use subqueue::KeyBacklog;

#[cfg(test)]
mod age_boost_tests;
#[cfg(test)]
mod aged_tests;
#[cfg(test)]
mod budget_tests;
#[cfg(test)]
mod cancel_tests;
#[cfg(test)]
mod dead_letter_tests;
#[cfg(test)]
mod front_tests;
#[cfg(test)]
mod lead_tests;
#[cfg(test)]
mod lease_tests;
#[cfg(test)]
mod model_store;
#[cfg(test)]
mod park_tests;
#[cfg(test)]
mod purge_tests;
#[cfg(test)]
mod tests;
