//! The async shell around one owned partition: it drives a
//! [`PartitionEngine`](crate::queue::PartitionEngine) against a [`Store`].
//!
//! Three tasks per partition:
//! - the **writer** turns concurrent adds into one append per batch (group
//!   commit) and performs every conditional write of the partition, one at a
//!   time, so that appends and metadata writes never race each other;
//! - the **reader** refills the buffer when it runs low;
//! - the **keeper** persists ack levels and deletes acknowledged tasks.
//!
//! Invariant: the engine is only touched under its mutex, never across an
//! await; once a write comes back `Fenced` the partition hands out nothing more.

mod handle;
mod reader;
mod writer;

pub use handle::{Partition, PartitionError, PartitionState, ReadyHook, WriterConfig};
