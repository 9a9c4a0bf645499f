//! The storage contract: what a backend must do for Fairway to keep its
//! guarantees, apart from any backend. Backends live in submodules; every one
//! of them must pass the generic tests of [`conformance`].
//!
//! All operations address one partition (`PartitionId`). Levels order tasks
//! within one subqueue (a priority level of a partition).
//!
//! | operation | ordering and bounds | on error |
//! |---|---|---|
//! | [`Store::load_partition`] | - | retry |
//! | [`Store::take_ownership`] | compare-and-set of the range id: `expected` → `expected + 1` | `Fenced`: someone else owns it |
//! | [`Store::append`] | all tasks and the metadata, or nothing; conditional on the range id | see [`StoreError`] |
//! | [`Store::read`] | levels strictly above `after`, ascending, at most `limit` | retry |
//! | [`Store::delete_through`] | every task at or below the level, in one range delete; idempotent | retry later |
//! | [`Store::update_metadata`] | conditional on the range id | see [`StoreError`] |
//! | [`Store::create_queue`] | create-if-absent; the first creation's config wins | retry |
//! | [`Store::list_queues`] | every queue, in no particular order | retry |
//! | [`Store::heartbeat`] / [`Store::members`] / [`Store::leave`] | last write wins per node | retry |

pub mod cassandra;
pub mod codec;
pub mod conformance;
pub mod embedded;
mod error;

use async_trait::async_trait;

pub use error::{StoreError, StoreResult};

use crate::model::{FairLevel, PRIORITY_LEVELS, PartitionId, Priority, QueueName, StoredTask};

/// What a store keeps per subqueue besides its tasks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubqueueMeta {
    /// Everything at or below it was dispatched.
    pub ack_level: FairLevel,
    /// The highest level written (best effort).
    pub max_level: FairLevel,
    /// Written minus dispatched (approximate).
    pub approx_backlog: i64,
    /// The keys furthest ahead and their next passes, for the next owner.
    pub top_keys: Vec<(String, i64)>,
    /// Levels above the ack level already dispatched (tasks dispatched out
    /// of level order); the next owner does not hand them out again.
    pub dispatched_above_ack: Vec<FairLevel>,
}

/// The metadata row of a partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionMeta {
    /// The fencing token: every write is conditional on it.
    pub range_id: i64,
    /// The node that took it last (informational: the range id decides).
    pub owner: String,
    pub subqueues: [SubqueueMeta; PRIORITY_LEVELS],
}

/// Metadata written with an append must carry the range id it is written under.
pub(crate) fn check_metadata_range(range_id: i64, metadata: Option<&PartitionMeta>) -> StoreResult<()> {
    match metadata {
        Some(meta) if meta.range_id != range_id => {
            Err(StoreError::Invalid(format!("metadata of range {} written under range {range_id}", meta.range_id)))
        }
        _ => Ok(()),
    }
}

/// A queue's settings, fixed when it is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    pub partitions: u32,
}

/// A node of the cluster as the store records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The address other nodes and clients reach it at; also its identity.
    pub node: String,
    pub started_unix_ms: i64,
    pub heartbeat_unix_ms: i64,
}

#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// The partition's metadata as stored, `None` if it was never created.
    /// Not linearizable with concurrent writes: use it to learn the range id
    /// to pass to [`Store::take_ownership`].
    async fn load_partition(&self, partition: &PartitionId) -> StoreResult<Option<PartitionMeta>>;

    /// Takes (or renews) ownership: if the stored range id is `expected`
    /// (0: the partition does not exist yet, and is created), it becomes
    /// `expected + 1` and the stored metadata is returned with it. Every
    /// write of a previous owner fails from then on; every write that
    /// succeeded before is visible to the new owner's reads.
    ///
    /// Errors: `Fenced` if the range id is not `expected` (nothing changed);
    /// `Uncertain` if the outcome is unknown (load and try again).
    /// `owner` is recorded in the metadata, for operators.
    async fn take_ownership(&self, partition: &PartitionId, expected: i64, owner: &str) -> StoreResult<PartitionMeta>;

    /// Writes `tasks` (and `metadata`, if given) at once, if the range id is
    /// still `range_id`. Tasks' levels are unique; writing a level twice
    /// replaces the task.
    ///
    /// Errors: `Fenced` (nothing written, the caller lost the partition),
    /// `Unavailable` (nothing written, may retry), `Uncertain` (may have
    /// been written: re-read before trusting the buffer), `Invalid` (too
    /// large for the backend; nothing written).
    async fn append(
        &self,
        partition: &PartitionId,
        range_id: i64,
        tasks: &[StoredTask],
        metadata: Option<&PartitionMeta>,
    ) -> StoreResult<()>;

    /// Up to `limit` tasks of the subqueue with level strictly above `after`,
    /// in ascending level order. Fewer than `limit` means there were no more
    /// at the time of the read.
    async fn read(
        &self,
        partition: &PartitionId,
        priority: Priority,
        after: FairLevel,
        limit: usize,
    ) -> StoreResult<Vec<StoredTask>>;

    /// Deletes every task of the subqueue at or below `through`. Idempotent
    /// and unconditional: callers only delete at or below their ack level.
    async fn delete_through(&self, partition: &PartitionId, priority: Priority, through: FairLevel) -> StoreResult<()>;

    /// Writes the metadata if the range id is still `metadata.range_id`.
    /// Errors as for [`Store::append`].
    async fn update_metadata(&self, partition: &PartitionId, metadata: &PartitionMeta) -> StoreResult<()>;

    /// Creates the queue with `config` unless it exists; the queue's config
    /// as stored (the existing one, if it did).
    async fn create_queue(&self, queue: &QueueName, config: QueueConfig) -> StoreResult<QueueConfig>;

    /// Every queue and its config.
    async fn list_queues(&self) -> StoreResult<Vec<(QueueName, QueueConfig)>>;

    /// Records that `member` is alive (replaces its previous record).
    async fn heartbeat(&self, member: &Member) -> StoreResult<()>;

    /// Every node's last record, live or not.
    async fn members(&self) -> StoreResult<Vec<Member>>;

    /// Forgets a node (on graceful shutdown).
    async fn leave(&self, node: &str) -> StoreResult<()>;

    /// Whether several nodes can use this store at once (and so need
    /// membership and fencing), or only one process can open it.
    fn is_shared(&self) -> bool;

    /// Orderly close: flush and release what the backend holds.
    async fn close(&self) -> StoreResult<()> {
        Ok(())
    }
}
