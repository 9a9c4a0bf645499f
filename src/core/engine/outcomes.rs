//! What the engine answers: how an attempt ended, what became of an added
//! task or a finished lease, and which task a partition offers next.

use std::time::Duration;

use crate::clock::UnixMillis;
use crate::model::{FairLevel, Priority};

/// How a worker ended its attempt.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Complete,
    Fail { retryable: bool, message: String, retry_after: Option<Duration> },
}

/// A worker's report on the lease of task level id `lease_id`, attempt `attempt`.
#[derive(Clone, Debug, PartialEq)]
pub struct Finish {
    pub lease_id: i64,
    pub attempt: u32,
    pub outcome: Outcome,
}

/// What became of a finished lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finished {
    Completed,
    Retrying { not_before: UnixMillis },
    Buried,
}

/// What became of an added task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    Added {
        task_id: i64,
    },
    /// Its dedup id is held by this pending or running task: nothing added.
    Duplicate {
        task_id: i64,
    },
}

impl Added {
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
    pub priority: Priority,
    pub pass_ahead: i64,
    pub level: FairLevel,
    /// The oldest parked task of a key, not a task of the backlog.
    pub(super) parked: bool,
}
