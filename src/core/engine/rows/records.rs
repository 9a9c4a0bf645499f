//! The records a partition keeps beside its backlog's tasks, typed: where
//! each lives (its section and key) and what it holds. The engine and the
//! partition speak of these; only a store's backends turn them into bytes
//! and back.

use crate::model::{FairLevel, Priority, StoredTask};

/// The records a partition keeps beside its backlog, each section ordered by
/// its key. They live with the partition's tasks, so one conditional write
/// can change tasks, records and metadata together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Section {
    /// Tasks handed to workers, keyed `(0, lease sequence)`; a finished
    /// lease leaves a record of where its task was (not a tombstone) until a
    /// range delete below the oldest running lease removes it.
    Leases,
    /// Tasks that become ready later, keyed `(visible at, Unix ms; task id)`.
    Delayed,
    /// Tasks that failed their last attempt, keyed `(failed at, Unix ms; task id)`.
    DeadLetters,
    /// Dedup ids of pending or running tasks, keyed `(hash of the id, slot)`.
    Dedup,
    /// Waiting tasks of keys held at their limits, keyed `(slot of the key,
    /// or shared slot of the level, sequence)`; see `crate::core::engine::parked`.
    Parked,
    /// One record, key `(0, 0)`, that every write without a task row
    /// overwrites with a value of its own (an id of the owner's block), so
    /// that reading it back after a write of unknown outcome tells whether
    /// that write landed: other records can repeat an earlier write's bytes
    /// (a finish sent again).
    WriteMark,
    /// In a partition of a later generation: the tasks of the previous
    /// generation's partition it added again, keyed `(task id there, 0)`
    /// (see `crate::partition`'s drain).
    Drained,
    /// In a queue with a `max_wait`: where each task written to the backlog
    /// is, keyed `(first added at, Unix ms; level id)`, so that the tasks
    /// that have waited longest are found by one ordered read, whatever
    /// their levels (see `crate::core::engine::aged`).
    Waiting,
}

impl Section {
    /// The section's code in a store (after the priorities 1 to 5, and 0 for metadata).
    pub fn code(self) -> u8 {
        match self {
            Section::Leases => 6,
            Section::Delayed => 7,
            Section::DeadLetters => 8,
            Section::Dedup => 9,
            Section::Parked => 10,
            Section::WriteMark => 11,
            Section::Drained => 12,
            Section::Waiting => 13,
        }
    }
}

/// Where a record lives: its section and its two-part key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordKey {
    /// The section the record belongs to.
    pub section: Section,
    /// The record's key in its section, ordered by its first part, then its
    /// second; what they mean depends on the section.
    pub key: (i64, i64),
}

/// A record: its place and what it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Where the record lives.
    pub at: RecordKey,
    /// What it holds; which kinds a section holds is told at [`RecordValue`].
    pub value: RecordValue,
}

/// What a record holds. A backend encodes it (with `store::codec`) and
/// decodes it by its section: a record of [`Section::Leases`] holds a
/// [`RecordValue::Task`] or a [`RecordValue::FinishedLease`]; of
/// [`Section::Delayed`], [`Section::DeadLetters`] and [`Section::Parked`],
/// a [`RecordValue::Task`]; of [`Section::Dedup`], a [`RecordValue::Dedup`];
/// of [`Section::WriteMark`], a [`RecordValue::WriteMark`]; of
/// [`Section::Drained`], a [`RecordValue::Drained`]; of
/// [`Section::Waiting`], a [`RecordValue::Waiting`].
#[derive(Clone, Debug, PartialEq)]
pub enum RecordValue {
    /// A task with a time: a running lease, a delayed task, a dead letter or
    /// a parked task.
    Task(RecordTask),
    /// A lease that ended: where its task was, without the task.
    FinishedLease {
        /// The subqueue the task was in.
        priority: Priority,
        /// Its level there.
        level: FairLevel,
    },
    /// The task holding a dedup id while it is pending or running.
    Dedup {
        /// The producer's id.
        dedup_id: String,
        /// The task holding it.
        task_id: i64,
    },
    /// A value no earlier write wrote (an id of the writer's block).
    WriteMark(i64),
    /// A task of the previous generation added again: the id it has now.
    Drained {
        /// The id of the task added in its place.
        task_id: i64,
    },
    /// Where a task waiting in the backlog was written.
    Waiting {
        /// The subqueue of its row.
        priority: Priority,
        /// The level of its row.
        level: FairLevel,
    },
}

impl RecordValue {
    /// A record of `task` at time `at_unix_ms` (see [`RecordTask::at_unix_ms`]), with no message.
    pub fn task(task: StoredTask, at_unix_ms: i64) -> Self {
        RecordValue::Task(RecordTask { task, at_unix_ms, message: String::new() })
    }

    /// The task record this is; [`MisplacedRecord`] naming `what` was read
    /// if it is another kind.
    pub fn into_task(self, what: &str) -> Result<RecordTask, MisplacedRecord> {
        match self {
            RecordValue::Task(task) => Ok(task),
            other => Err(other.misplaced(what)),
        }
    }

    /// The error for a record of this kind read where `what` belongs (a
    /// backend that decodes records by their section never returns one).
    pub fn misplaced(&self, what: &str) -> MisplacedRecord {
        let kind = match self {
            RecordValue::Task(_) => "a task record",
            RecordValue::FinishedLease { .. } => "a finished lease",
            RecordValue::Dedup { .. } => "a dedup record",
            RecordValue::WriteMark(_) => "a write mark",
            RecordValue::Drained { .. } => "a drained mark",
            RecordValue::Waiting { .. } => "a waiting record",
        };
        MisplacedRecord { kind, expected: what.to_owned() }
    }

    /// Its bytes as a backend stores them, at most (see [`ROW_BYTES`](super::ROW_BYTES) for the rest of the row).
    pub fn bytes(&self) -> usize {
        match self {
            RecordValue::Task(record) => stored_task_bytes(&record.task) + record.message.len() + RECORD_FIELDS_BYTES,
            RecordValue::FinishedLease { .. } | RecordValue::Waiting { .. } => RECORD_FIELDS_BYTES,
            RecordValue::Dedup { dedup_id, .. } => dedup_id.len() + 16,
            RecordValue::WriteMark(_) | RecordValue::Drained { .. } => 8,
        }
    }
}

/// The bytes of a task's value, in a task row or a record that holds it: its
/// payload, fairness key and dedup id, and room for its fixed fields.
pub fn stored_task_bytes(task: &StoredTask) -> usize {
    task.payload.len() + task.fairness_key.len() + task.dedup_id.as_ref().map_or(0, String::len) + 96
}

/// The bytes of a record's own fields besides its task and message: the
/// priority, level and time, with their framing.
const RECORD_FIELDS_BYTES: usize = 64;

/// A task kept in a record, with a time (deadline, ready at, failed at,
/// parked at) and a message.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordTask {
    /// The task, with the level and priority it had when the record was written.
    pub task: StoredTask,
    /// The record's time, in ms since the Unix epoch: a lease's deadline, when
    /// a delayed task is ready, when a dead letter failed, or when a task was
    /// parked.
    pub at_unix_ms: i64,
    /// A dead letter's failure message; empty in other records.
    pub message: String,
}

/// What one row of a partition holds, as a store's `read_row` returns it.
#[derive(Clone, Debug, PartialEq)]
pub enum StoredRow {
    /// A task of the backlog.
    Task(StoredTask),
    /// A record.
    Record(RecordValue),
}

/// Keys of one section in `(after, through]`: what a record read covers.
/// A read crosses only the rows, and the deleted rows, of its range, so a
/// bucketed section is read one bucket at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRange {
    /// The section read.
    pub section: Section,
    /// Keys strictly above this one are read...
    pub after: (i64, i64),
    /// ...up to this one, included.
    pub through: (i64, i64),
}

impl RecordRange {
    /// Every record of `section` with a key strictly above `after`.
    pub fn above(section: Section, after: (i64, i64)) -> Self {
        RecordRange { section, after, through: (i64::MAX, i64::MAX) }
    }

    /// Every record of `section`.
    pub fn all(section: Section) -> Self {
        Self::above(section, (i64::MIN, i64::MIN))
    }

    /// The records of one bucket (keys `(bucket, _)`) above `after` in it.
    pub fn bucket(section: Section, bucket: i64, after: i64) -> Self {
        RecordRange { section, after: (bucket, after), through: (bucket, i64::MAX) }
    }
}

/// One row of a partition: a task of a subqueue, or a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowRef {
    /// The task row at this level of this priority's subqueue.
    Task(Priority, FairLevel),
    /// The record at this key.
    Record(RecordKey),
}

/// A record of one kind read where another belongs: the stored rows are
/// corrupt (a store maps it to its `Corrupt` error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} read where {expected} belongs")]
pub struct MisplacedRecord {
    /// The kind of record read.
    pub kind: &'static str,
    /// What belongs where it was read.
    pub expected: String,
}
