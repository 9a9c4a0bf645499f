//! What each change adds to a write, in bytes, so that the engine can keep
//! a write under the store's limit ([`PartitionWrite::bytes`](crate::core::engine::rows::PartitionWrite::bytes)).

use crate::core::engine::rows::{PartitionMeta, ROW_BYTES, RecordTask, stored_task_bytes};
use crate::model::{StoredTask, TaskSpec};

/// The bytes of a record that holds a task (a lease, a delayed task or a
/// retry, a dead letter), with `message`.
pub(super) fn record_bytes(task: &StoredTask, message: usize) -> usize {
    stored_task_bytes(task) + message + 64 + ROW_BYTES
}

/// The bytes of `meta`, and of what `parks` tasks parked with it may add
/// to it (their levels, and their keys if they enter the directory).
pub(super) fn meta_bytes(meta: &PartitionMeta, parks: usize) -> usize {
    meta.stored_bytes() + ROW_BYTES + parks * (16 + crate::model::validate::MAX_FAIRNESS_KEY_BYTES + 24)
}

/// The bytes of a finished lease's record, or of a dedup record's delete.
pub(super) const SMALL_ROW_BYTES: usize = 64 + ROW_BYTES;

/// The bytes a new task adds to a write: its row (or delayed record, or
/// lease record) and its dedup record.
pub fn spec_bytes(spec: &TaskSpec) -> usize {
    let dedup = spec.dedup_id.as_ref().map_or(0, |id| id.len() + SMALL_ROW_BYTES);
    spec.payload.len() + spec.fairness_key.len() + 96 + 64 + ROW_BYTES + dedup
}

/// The bytes of ending the lease of `task`: its finished record, a retry or
/// dead-letter record holding it (with `message`), and its dedup record's delete.
pub(super) fn ending_bytes(task: &StoredTask, message: usize) -> usize {
    SMALL_ROW_BYTES + record_bytes(task, message) + SMALL_ROW_BYTES
}

/// The bytes of writing `letter`, moved in from another partition, as a
/// dead letter.
pub fn bury_bytes(letter: &RecordTask) -> usize {
    record_bytes(&letter.task, letter.message.len())
}

/// The bytes of putting `task` back in the backlog from a record: its new
/// row, the record's delete and its dedup record.
pub(super) fn requeue_bytes(task: &StoredTask) -> usize {
    stored_task_bytes(task) + ROW_BYTES + 2 * SMALL_ROW_BYTES
}
