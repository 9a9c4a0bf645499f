//! The async shell around one owned partition: it drives a
//! [`PartitionEngine`](crate::core::engine::PartitionEngine) against a [`Store`](crate::store::Store).
//!
//! Three tasks per partition, and a fourth after a forced failover:
//! - the **writer** turns concurrent adds, completions, failures and the
//!   leases of dispatched tasks into one conditional write per batch (group
//!   commit), one at a time, so that no two writes of a partition race; it
//!   makes every write of the partition's task rows and metadata;
//! - the **reader** refills the buffer when it runs low (reads only);
//! - the **keeper** deletes acknowledged tasks (rows the engine no longer
//!   needs), asks the writer to persist ack levels, and wakes it when
//!   leases expire or delayed tasks become ready;
//! - the **drain** ([`Partition::start_drain`], only when the queue's config
//!   names a previous generation) adds again the tasks of the previous
//!   generation's partition of its index, through the writer; it writes
//!   its own marks (section `Drained`, conditional on the range id) and
//!   deletes them once done, and it is the one writer of the previous
//!   partition: it fences it (`take_ownership`) and closes it (metadata).
//!
//! Outside these tasks, a partition's rows are read only through
//! [`StoredPartition`] (metadata, dead letters), and written only to free
//! a partition this node does not run ([`StoredPartition::release`]) or to
//! hand over or abandon a previous generation ([`hand_over_previous`],
//! [`abandon_previous`]); each of these writes is fenced by a range id.
//!
//! Invariants: the engine is only touched under its mutex, never across an
//! await; a task reaches a worker only after its lease record is durable;
//! once a write comes back `Fenced` the partition hands out nothing more.

mod config;
mod drain;
mod error;
mod handle;
mod keeper;
mod lookup;
mod previous_generation;
mod reader;
mod shared;
mod stored;
mod writer;

/// What the store keeps of a partition, as those above the partition name it.
pub use crate::store::{PartitionMeta, RecordTask};
pub use config::WriterConfig;
pub use error::{CancelError, FinishError, PartitionError};
pub use handle::{Partition, PartitionSetup};
pub use lookup::{Lookup, LookupBounds};
pub use previous_generation::{abandon_previous, hand_over_previous};
pub use shared::{Delivery, PartitionState, ReadyHook, Redriven};
pub use stored::{DeadLetter, StoredPartition};
