//! What the engine answers: how an attempt ended, what became of an added
//! task or a finished lease, and which task a partition offers next.

use std::time::Duration;

use crate::clock::UnixMillis;
use crate::model::{FairLevel, Priority, StoredTask};

/// How a worker ended its attempt.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The task is done: its lease ends, its dedup id is freed, and it is not
    /// delivered again.
    Complete,
    /// The attempt failed: the task is tried again later, or becomes a dead letter.
    Fail {
        /// Whether the task may be tried again; false makes it a dead letter at
        /// once.
        retryable: bool,
        /// What went wrong, as the worker says; a dead letter keeps it.
        message: String,
        /// The least wait before the next attempt, if the worker asks for one;
        /// the backoff may wait longer.
        retry_after: Option<Duration>,
    },
}

/// A worker's report on the lease of task level id `lease_id`, attempt `attempt`.
#[derive(Clone, Debug, PartialEq)]
pub struct Finish {
    /// The lease's id: the level id of the task when it was dispatched.
    pub lease_id: i64,
    /// The attempt the worker was given; a report on any other attempt is
    /// refused as stale.
    pub attempt: u32,
    /// How the attempt ended.
    pub outcome: Outcome,
}

/// What became of a finished lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finished {
    /// The task is done and gone; its dedup id is freed.
    Completed,
    /// The task waits for another attempt.
    Retrying {
        /// The earliest time of the next attempt, in ms since the Unix epoch.
        not_before: UnixMillis,
    },
    /// No attempt left, or the failure was not retryable: the task is a dead
    /// letter now.
    Buried,
}

/// What became of an added task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    /// A new task was written.
    Added {
        /// The new task's id (the level id of its first write).
        task_id: i64,
    },
    /// Its dedup id is held by this pending or running task: nothing added.
    Duplicate {
        /// The id of the task that holds the dedup id.
        task_id: i64,
    },
}

impl Added {
    /// The task id either way: the new task's, or that of the task holding the
    /// dedup id.
    pub fn task_id(self) -> i64 {
        match self {
            Added::Added { task_id } | Added::Duplicate { task_id } => task_id,
        }
    }
}

/// A dispatchable task. Within a partition candidates order by
/// `(priority, pass ahead of the ack level, level)`; across partitions only
/// the first two compare (the matcher breaks ties in turn).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Candidate {
    /// The task's priority level: the highest (1) goes first, whatever the pass.
    pub priority: Priority,
    /// How far the task's pass is above its subqueue's ack level pass (0 or
    /// more): the lowest goes first. With deadline ordering, the pass itself
    /// (the task's deadline, raised to the ack pass), which compares across
    /// partitions.
    pub pass_ahead: i64,
    /// The task's level in its subqueue (for a parked task, the level it had in
    /// the backlog).
    pub level: FairLevel,
    /// The pass the task competes at in its partition: its level's, or the
    /// ack level's when that is higher (a parked task's). Passes of
    /// different partitions are unrelated (see
    /// [`crate::core::fairness::PartitionClocks`]).
    pub pass: i64,
    /// The oldest parked task of a key, not a task of the backlog.
    pub(super) parked: bool,
    /// The bytes of the task's payload and fairness key: what its size in a
    /// response is besides a bounded overhead.
    pub bytes: usize,
}

/// What a partition would hand out next (`PartitionEngine::next`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// The best task that may go now.
    Ready(Candidate),
    /// Nothing ready, but tasks of this priority may wait unread: nothing
    /// of it or of a lower priority may go before them.
    Unread(Priority),
    /// Nothing to hand out.
    Empty,
}

impl Candidate {
    /// A task already leased and waiting for a poll: it goes first, and
    /// only its size is asked of it.
    pub fn held(task: &StoredTask) -> Candidate {
        Candidate::at(task, task.priority, 0, task.level.pass, false)
    }

    pub(super) fn at(task: &StoredTask, priority: Priority, pass_ahead: i64, pass: i64, parked: bool) -> Candidate {
        let bytes = task.payload.len().saturating_add(task.fairness_key.len());
        Candidate { priority, pass_ahead, level: task.level, pass, parked, bytes }
    }
}
