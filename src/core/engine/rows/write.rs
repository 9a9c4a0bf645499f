//! One all-or-nothing write to a partition, and the byte estimates that
//! keep it under a backend's limit.

use super::{PartitionMeta, Record, RecordKey, stored_task_bytes};
use crate::model::{FairLevel, Priority, StoredTask};

/// One all-or-nothing write to a partition.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PartitionWrite {
    /// Tasks into the backlog, at their levels.
    pub tasks: Vec<StoredTask>,
    /// Records written (replacing a record at the same key).
    pub put: Vec<Record>,
    /// Records removed (removing an absent one is not an error). A key is
    /// never both put and deleted in one write.
    pub delete: Vec<RecordKey>,
    /// Task rows removed from the backlog (removing an absent one is not an
    /// error): a task moved to another level by the same write. A level is
    /// never both written and removed in one write.
    pub delete_tasks: Vec<(Priority, FairLevel)>,
    /// The partition's metadata, if the write carries it; its range id must be
    /// the one the write is conditional on.
    pub metadata: Option<PartitionMeta>,
}

impl PartitionWrite {
    /// Whether the write carries nothing: no task, record, delete or metadata.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
            && self.put.is_empty()
            && self.delete.is_empty()
            && self.delete_tasks.is_empty()
            && self.metadata.is_none()
    }

    /// What the write carries, in bytes: every task row, record, delete and
    /// the metadata, each with [`ROW_BYTES`] for its key and framing. An
    /// estimate on the safe side of what a backend sends (see
    /// [`stored_task_bytes`]).
    pub fn bytes(&self) -> usize {
        let tasks: usize = self.tasks.iter().map(|t| stored_task_bytes(t) + ROW_BYTES).sum();
        let put: usize = self.put.iter().map(|r| r.value.bytes() + ROW_BYTES).sum();
        let meta = self.metadata.as_ref().map_or(0, |m| m.stored_bytes() + ROW_BYTES);
        tasks + put + (self.delete.len() + self.delete_tasks.len()) * ROW_BYTES + meta
    }
}

/// The bytes of one row besides its value: its key columns, timestamps and
/// the store's framing (generous: Cassandra's own is about 40).
pub const ROW_BYTES: usize = 96;
