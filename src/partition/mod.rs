//! The async shell around one owned partition: it drives a
//! [`PartitionEngine`](crate::core::engine::PartitionEngine) against a [`Store`](crate::store::Store).
//!
//! Three tasks per partition:
//! - the **writer** turns concurrent adds, completions, failures and the
//!   leases of dispatched tasks into one conditional write per batch (group
//!   commit), one at a time, so that no two writes of a partition race;
//! - the **reader** refills the buffer when it runs low;
//! - the **keeper** persists ack levels, deletes acknowledged tasks, and wakes
//!   the writer when leases expire or delayed tasks become ready.
//!
//! Invariants: the engine is only touched under its mutex, never across an
//! await; a task reaches a worker only after its lease record is durable;
//! once a write comes back `Fenced` the partition hands out nothing more.

mod config;
mod error;
mod handle;
mod keeper;
mod reader;
mod shared;
mod writer;

pub use config::WriterConfig;
pub use error::{FinishError, PartitionError};
pub use handle::{Partition, PartitionSetup};
pub use shared::{Delivery, PartitionState, ReadyHook, Redriven};
