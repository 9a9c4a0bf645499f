//! The storage contract: what a backend must do for Fairway to keep its
//! guarantees, apart from any backend. Backends live in submodules; every one
//! of them must pass the generic tests of `conformance` (behind the feature of that name).
//!
//! All operations address one partition (`PartitionId`). Levels order tasks
//! within one subqueue (a priority level of a partition).
//!
//! | operation | ordering and bounds | on error |
//! |---|---|---|
//! | [`PartitionStore::load_partition`] | - | retry |
//! | [`PartitionStore::take_ownership`] | compare-and-set of the range id: `expected` → `expected + 1` | `Fenced`: someone else owns it |
//! | [`PartitionStore::write`] | all tasks, record puts and deletes and the metadata, or nothing; conditional on the range id | see [`StoreError`] |
//! | [`PartitionStore::append`] | [`PartitionStore::write`] of tasks (and metadata) alone | see [`StoreError`] |
//! | [`PartitionStore::read`] | levels strictly above `after`, ascending, at most `limit` | retry |
//! | [`PartitionStore::read_row`] | one task row or record, linearizable with the conditional writes before it | retry |
//! | [`PartitionStore::read_records`] | keys of one section in `(after, through]` ([`RecordRange`]), ascending, at most `limit`; crosses only the rows (and tombstones) of that range | retry |
//! | [`PartitionStore::read_buckets`] | the records of each bucket given (keys `(bucket, _)` of one section), ascending, at most `per_bucket` of each, at most [`MAX_BUCKETS_PER_READ`] buckets; crosses only those buckets' rows | retry |
//! | [`PartitionStore::delete_records_through`] | every record of a section with a key at or below, in one range delete; idempotent | retry later |
//! | [`PartitionStore::delete_through`] | every task at or below the level, in one range delete; idempotent | retry later |
//! | [`PartitionStore::update_metadata`] | conditional on the range id | see [`StoreError`] |
//! | [`QueueCatalog::create_queue`] | create-if-absent; the first creation's config (its creator too) wins | retry |
//! | [`QueueCatalog::queue`] | one queue's config, `None` if it was never created | retry |
//! | [`QueueCatalog::force_queue_home`] | compare (read) then write of the queue's generation: not linearizable | retry |
//! | [`QueueCatalog::update_queue_settings`] | compare-and-set on the settings' version: of changes racing from one version, at most one is written (Cassandra: a lightweight transaction at `SERIAL`) | `Uncertain` (may have been written: read again); else retry |
//! | [`QueueCatalog::list_queues`] | every queue, in no particular order | retry |
//! | [`MemberStore::heartbeat`] / [`MemberStore::members`] / [`MemberStore::leave`] | last write wins per node | retry |
//! | [`MemberStore::forget`] | removes a record written before a time; a later one stays | retry |
//! | [`SecretStore::cluster_secrets`] | create-if-absent: the first value written is every caller's current secret, on every node, until a rotation; returns the previous secret too while a rotation's overlap lasts | retry (`Corrupt`: a stored secret of the wrong size, do not retry) |
//! | [`SecretStore::rotate_cluster_secret`] | compare-and-set on the current secret: of rotations racing from one secret, at most one is written (Cassandra: a lightweight transaction at `SERIAL`); `to` must differ from `from`, and `signs_until <= accepted_until` | `Invalid` (bad arguments, nothing written); `Uncertain` (may have been written: read again); else retry |

pub mod cassandra;
mod catalog;
mod codec;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod embedded;
mod error;
pub mod leases;
mod members;
mod partitions;
pub mod queue_settings;
pub mod schedules;
mod secrets;
pub mod visits;

use std::sync::Arc;

use async_trait::async_trait;

pub use catalog::{GENERATION_STRIDE, MAX_GENERATION, QueueCatalog, QueueConfig, partition_index};
pub use error::{StoreError, StoreResult};
pub use members::{Member, MemberStore};
pub use partitions::{MAX_BUCKETS_PER_READ, PartitionStore};
pub(crate) use partitions::{check_metadata_range, taken_meta};
pub use queue_settings::QueueSettings;
pub(crate) use secrets::check_rotation;
pub use secrets::{ClusterSecrets, PreviousSecret, SECRET_BYTES, SecretStore};
// The row vocabulary is the core's: the engine plans in it, a backend stores it.
pub use crate::core::engine::rows::{
    MisplacedRecord, ParkedKeyMeta, PartitionMeta, PartitionWrite, ROW_BYTES, Record, RecordKey, RecordRange,
    RecordTask, RecordValue, RowRef, Section, StoredRow, SubqueueMeta, stored_task_bytes,
};

/// One backend under the four contracts a node serves from: the tasks'
/// ([`Store`]), the visit scheduler's ([`visits::VisitStore`]), the
/// schedules' ([`schedules::ScheduleStore`]) and the named leases'
/// ([`leases::LeaseStore`], which the rounds of the visit scheduler run
/// under). All are the same instance (a data directory has one opener; a
/// Cassandra keyspace, one session per node).
#[derive(Clone, Debug)]
pub struct Stores {
    /// The backend as the tasks' store.
    pub tasks: Arc<dyn Store>,
    /// The same backend as the visit scheduler's store.
    pub visits: Arc<dyn visits::VisitStore>,
    /// The same backend as the schedules' store.
    pub schedules: Arc<dyn schedules::ScheduleStore>,
    /// The same backend as the named leases' store.
    pub leases: Arc<dyn leases::LeaseStore>,
}

impl Stores {
    /// A backend that keeps the four contracts.
    pub fn of<S: Store + visits::VisitStore + schedules::ScheduleStore + leases::LeaseStore>(store: Arc<S>) -> Stores {
        Stores { tasks: store.clone(), visits: store.clone(), schedules: store.clone(), leases: store }
    }
}

/// The tasks' storage contract: what a backend must do for Fairway to keep
/// its guarantees (see [`crate::store`]), by what it stores: partitions,
/// the queue catalog, members and the cluster's secret. A consumer that
/// needs one part holds that part (`Arc<dyn PartitionStore>`, …).
#[async_trait]
pub trait Store: PartitionStore + QueueCatalog + MemberStore + SecretStore {
    /// Whether several nodes can use this store at once (and so need
    /// membership and fencing), or only one process can open it.
    fn is_shared(&self) -> bool;

    /// Orderly close: flush and release what the backend holds.
    async fn close(&self) -> StoreResult<()> {
        Ok(())
    }
}
