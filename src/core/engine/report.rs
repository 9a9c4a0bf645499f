//! What an engine reports about itself: snapshots of its levels and
//! backlog, and the counts of what it made durable.

use std::ops::AddAssign;

use super::subqueue::KeyBacklog;
use crate::model::{FairLevel, Priority};

#[derive(Clone, Debug, PartialEq)]
pub struct SubqueueSnapshot {
    pub priority: Priority,
    pub ack_level: FairLevel,
    pub read_level: FairLevel,
    pub max_level: FairLevel,
    pub buffered: u64,
    pub approx_backlog: u64,
    /// Tasks dispatched (or being leased) above the ack level: a task below
    /// them still waits, and holds the ack level back.
    pub dispatched_above_ack: u64,
    pub reader_at_end: bool,
    pub tracked_keys: u64,
    pub approximate_keys: bool,
    pub top_keys: Vec<KeyBacklog>,
    /// Keys held at their limits whose waiting tasks are parked...
    pub parked_keys: u64,
    /// ...and those tasks (a lower bound after a takeover, until read).
    pub parked_tasks: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PartitionSnapshot {
    pub range_id: i64,
    pub subqueues: Vec<SubqueueSnapshot>,
    /// Since this engine was loaded.
    pub counts: TaskCounts,
    /// Tasks out with workers (leases held or being written).
    pub leased: u64,
    /// Delayed tasks known in memory (all of them unless more wait unread).
    pub delayed: u64,
    /// The bytes of the metadata as it would be written now.
    pub metadata_bytes: u64,
    /// The bytes of the largest write since this engine was loaded.
    pub largest_write_bytes: u64,
}

/// What an engine has counted since it was loaded, each from the writes that
/// made it durable: a count only grows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskCounts {
    /// New tasks, from producers (not duplicates, retries or re-drives).
    pub added: u64,
    /// Leases written: tasks handed to workers, with sync matches and redeliveries.
    pub dispatched: u64,
    /// Leases ended by a worker's completion.
    pub completed: u64,
    /// Leases ended by a worker's failure (retried later, or dead letters now).
    pub failed: u64,
    /// Leases that ran out without a report from the worker that got the task.
    pub expired: u64,
}

impl TaskCounts {
    /// What was counted after `earlier` (an earlier reading of the same counts).
    pub fn since(self, earlier: TaskCounts) -> TaskCounts {
        TaskCounts {
            added: self.added.saturating_sub(earlier.added),
            dispatched: self.dispatched.saturating_sub(earlier.dispatched),
            completed: self.completed.saturating_sub(earlier.completed),
            failed: self.failed.saturating_sub(earlier.failed),
            expired: self.expired.saturating_sub(earlier.expired),
        }
    }

    /// Each count the larger of the two.
    pub fn max(self, other: TaskCounts) -> TaskCounts {
        TaskCounts {
            added: self.added.max(other.added),
            dispatched: self.dispatched.max(other.dispatched),
            completed: self.completed.max(other.completed),
            failed: self.failed.max(other.failed),
            expired: self.expired.max(other.expired),
        }
    }
}

impl AddAssign for TaskCounts {
    fn add_assign(&mut self, other: TaskCounts) {
        self.added += other.added;
        self.dispatched += other.dispatched;
        self.completed += other.completed;
        self.failed += other.failed;
        self.expired += other.expired;
    }
}
