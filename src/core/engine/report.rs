//! What an engine reports about itself: snapshots of its levels and
//! backlog, and the counts of what it made durable.

use std::ops::AddAssign;

use super::dispatch_tally::RecentDispatch;
use super::subqueue::KeyBacklog;
use crate::clock::UnixMillis;
use crate::model::{FairLevel, Priority};

/// One priority level of a partition as its engine sees it, for status and metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct SubqueueSnapshot {
    /// The priority level of this subqueue.
    pub priority: Priority,
    /// The ack level `A`: every task at or below it was dispatched.
    pub ack_level: FairLevel,
    /// The read level `R`: every task in `(A, R]` not dispatched yet is in the
    /// buffer.
    pub read_level: FairLevel,
    /// The highest level written, as far as this engine knows (best effort).
    pub max_level: FairLevel,
    /// Ready tasks in the buffer.
    pub buffered: u64,
    /// Tasks written and not dispatched, approximate after a crash (0 at least).
    pub approx_backlog: u64,
    /// Tasks dispatched (or being leased) above the ack level: a task below
    /// them still waits, and holds the ack level back.
    pub dispatched_above_ack: u64,
    /// Whether the store holds no task above `R` besides appends in flight: the
    /// buffer has the whole backlog.
    pub reader_at_end: bool,
    /// Fairness keys whose next pass is tracked exactly.
    pub tracked_keys: u64,
    /// Whether keys past `counters.exact_keys` share a sketch, so that their
    /// passes are upper bounds.
    pub approximate_keys: bool,
    /// When the oldest ready task in the buffer was first added (ms since
    /// the Unix epoch): the oldest waiting task of the level when
    /// `reader_at_end`, else a lower bound of the oldest one's age.
    pub oldest_buffered_added_at: Option<UnixMillis>,
    /// The keys with the most ready tasks in the buffer, most first (at most as
    /// many as asked for).
    pub top_keys: Vec<KeyBacklog>,
    /// Keys held at their limits parked in slots of their own...
    pub parked_keys: u64,
    /// ...and the tasks parked, the shared slot's included (a lower bound
    /// after a takeover, until read).
    pub parked_tasks: u64,
}

/// A partition's engine at one moment: its subqueues, counts and sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct PartitionSnapshot {
    /// The range id the engine owns the partition under: its fencing token.
    pub range_id: i64,
    /// Its priority levels, highest first.
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
    /// Tasks that have waited past the queue's `max_wait` and still wait (0
    /// without one): those in the buffer, and those above the read level
    /// whose waiting records are in memory (a lower bound when more are due).
    pub over_max_wait: u64,
    /// What was handed out over the last 10 to 20 s, the `top_keys` keys
    /// with the most cost by name.
    pub recent_dispatch: RecentDispatch,
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
