//! One task of a partition, found by its id for an operator (GetTask): where
//! it stands, and, for a task that waits, what it waits for.
//!
//! The owner's engine answers from memory for what memory holds (leases,
//! the buffer, the delayed window, parked tasks read back) and names, in a
//! [`StoreSearch`], where the store holds the rest; a task found there is
//! judged again by the engine ([`crate::core::engine::PartitionEngine::found_in_store`]),
//! since it may have been handed out while the store was read.
//!
//! Invariant: a lookup changes nothing, in memory or in the store.

use std::sync::Arc;

use crate::clock::UnixMillis;
use crate::model::{FairLevel, Priority, StoredTask};

/// A task and where it stands.
#[derive(Clone, Debug, PartialEq)]
pub struct FoundTask {
    /// The task as it is now: its attempt is that of its current or next delivery.
    pub task: StoredTask,
    /// Where it stands.
    pub state: TaskState,
    /// Cancelled (CancelTask) and not reached yet: it ends, completed, when
    /// it is next handed out or reported on.
    pub cancelled: bool,
}

/// Where a task stands in its partition.
#[derive(Clone, Debug, PartialEq)]
pub enum TaskState {
    /// In the backlog, ready; `Waiting` says what keeps it there.
    Pending(Waiting),
    /// To become ready at a time (added with a delay, or backing off after
    /// a failure), in ms since the Unix epoch.
    Delayed {
        /// When it becomes ready.
        ready_at: UnixMillis,
    },
    /// Out with a worker.
    Leased {
        /// When the lease runs out unless heartbeated, in ms since the Unix epoch.
        deadline: UnixMillis,
        /// The id the worker polled with; `None` when the lease was handed
        /// out by an earlier owner of the partition, or is being written.
        worker: Option<Arc<str>>,
        /// False when its poller left before the lease was written: the task
        /// goes back to the queue at once.
        delivered: bool,
    },
    /// A dead letter: its last attempt failed.
    Dead {
        /// When, in ms since the Unix epoch.
        failed_at: UnixMillis,
        /// The last failure's message.
        message: String,
        /// The key of its record among the dead letters.
        row: (i64, i64),
    },
}

/// What a pending task waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// Its turn: tasks ahead of it in fair (or deadline) order, or of a
    /// higher priority, go first.
    Turn,
    /// The whole queue is paused.
    QueuePaused,
    /// Its fairness key is paused.
    KeyPaused,
    /// Its key has as many tasks running as the queue's key concurrency allows.
    KeyConcurrency {
        /// Tasks of its key running now.
        running: u32,
        /// The queue's `key_concurrency`.
        limit: u32,
    },
    /// Its key used up its rate (`key_rate_per_second`, `key_burst`).
    KeyRate,
}

/// Where a task the engine does not hold in memory may be in the store:
/// each place past what memory covers.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreSearch {
    /// Per subqueue, the read level: the rows above it have not been read
    /// into the buffer, and those that exist wait.
    pub backlog_above: Vec<(Priority, FairLevel)>,
    /// Delayed records above this key are not in memory; `None`: all are.
    pub delayed_above: Option<(i64, i64)>,
    /// Parked slots with records not read back: `(slot, seq)`, the records
    /// `(slot, s)` with `s > seq`.
    pub parked_above: Vec<(i64, i64)>,
    /// Dead letters above this key wait to be put back or removed.
    pub dead_letters_above: (i64, i64),
}

/// Where a task was found in the store (see [`StoreSearch`]).
#[derive(Clone, Debug, PartialEq)]
pub enum StoredPlace {
    /// A backlog row above the read level, or a parked record.
    Waiting,
    /// A delayed record.
    Delayed {
        /// When it becomes ready, in ms since the Unix epoch.
        ready_at: UnixMillis,
    },
    /// A dead letter.
    Dead {
        /// When its last attempt failed, in ms since the Unix epoch.
        failed_at: UnixMillis,
        /// The failure's message.
        message: String,
        /// The key of its record.
        row: (i64, i64),
    },
}
