//! The rows of a partition, typed: its tasks' records, its metadata, and
//! the all-or-nothing write that changes them. The engine plans in these
//! words and the store keeps them; only a backend turns them into bytes.
//!
//! Invariant: nothing here knows an encoding. Every size is a structural
//! estimate on the safe side of what a backend stores (each backend's
//! codec is tested against it), so the engine can keep a write under the
//! store's limit without encoding it.

mod meta;
mod records;
mod write;

pub use meta::{ParkedKeyMeta, PartitionMeta, SubqueueMeta};
pub use records::{
    MisplacedRecord, Record, RecordKey, RecordRange, RecordTask, RecordValue, RowRef, Section, StoredRow,
    stored_task_bytes,
};
pub use write::{PartitionWrite, ROW_BYTES};
