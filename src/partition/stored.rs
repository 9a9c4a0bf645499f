//! Any partition as the store has it, by id, held on this node or not: its
//! metadata, its dead letters, and the one unconditional metadata write a
//! node makes for a partition it does not run (freeing it).
//!
//! Invariants: this view never writes a partition's task rows; every read
//! of a partition's rows outside its own tasks (the writer, reader, keeper
//! and drain) goes through here, so the dead letters have one reader, used
//! by the writer's redrive and by any node's listing alike;
//! [`StoredPartition::release`] is only for a partition this node does not
//! run (abandoned, or of a previous generation), whose owner it may still
//! be named, and the store fences it by the range id in `freed`.

use std::sync::Arc;

use crate::model::{FairLevel, PartitionId, Priority, StoredTask};
use crate::store::{PartitionMeta, PartitionStore, Record, RecordKey, RecordRange, RecordTask, Section, StoreError};

/// A dead letter as stored: its row's key, and the task with its last
/// failure.
pub type DeadLetter = (RecordKey, RecordTask);

/// One partition as the store has it (see the module docs).
#[derive(Clone)]
pub struct StoredPartition {
    store: Arc<dyn PartitionStore>,
    id: PartitionId,
}

impl std::fmt::Debug for StoredPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredPartition").field("id", &self.id).finish()
    }
}

impl StoredPartition {
    /// Partition `id` of `store`.
    pub fn new(store: Arc<dyn PartitionStore>, id: PartitionId) -> StoredPartition {
        StoredPartition { store, id }
    }

    /// Which partition this is.
    pub fn id(&self) -> &PartitionId {
        &self.id
    }

    /// Its metadata as its owner last wrote it; `None`: never created.
    pub async fn meta(&self) -> Result<Option<PartitionMeta>, StoreError> {
        self.store.load_partition(&self.id).await
    }

    /// Up to `page` of its dead letters with keys above `after`, in key
    /// order (oldest first).
    pub async fn dead_letters(&self, after: (i64, i64), page: usize) -> Result<Vec<DeadLetter>, StoreError> {
        let range = RecordRange::above(Section::DeadLetters, after);
        let records = self.store.read_records(&self.id, range, page).await?;
        records.into_iter().map(|record| Ok((record.at, record.value.into_task("a dead letter")?))).collect()
    }

    /// Up to `page` records of `range`, in key order.
    pub async fn records(&self, range: RecordRange, page: usize) -> Result<Vec<Record>, StoreError> {
        self.store.read_records(&self.id, range, page).await
    }

    /// Up to `page` backlog rows of the `priority` subqueue above `above`,
    /// in level order.
    pub async fn backlog(
        &self,
        priority: Priority,
        above: FairLevel,
        page: usize,
    ) -> Result<Vec<StoredTask>, StoreError> {
        self.store.read(&self.id, priority, above, page).await
    }

    /// Writes `freed` (its metadata, with no owner: see
    /// [`PartitionMeta::handed_over`]) as its metadata; `Fenced` when a node
    /// took it since `freed`'s range id.
    pub async fn release(&self, freed: &PartitionMeta) -> Result<(), StoreError> {
        self.store.update_metadata(&self.id, freed).await
    }
}
