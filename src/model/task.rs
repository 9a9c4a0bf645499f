//! The task as the domain sees it: a validated [`QueueName`], a
//! [`PartitionId`], the producer's [`TaskSpec`] and the [`StoredTask`] a
//! partition writes.
//!
//! Invariant: a `QueueName` or `TaskSpec` from outside the crate has passed
//! [`super::validate`]; only the crate sets a task's history (attempt count
//! and creation time), see [`TaskHistory`].

use std::fmt;
use std::sync::Arc;

use super::{FairLevel, Priority};
use crate::clock::UnixMillis;

/// A validated queue name (see [`super::validate::queue_name`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueName(Arc<str>);

impl QueueName {
    /// Wraps a name that already passed validation.
    pub(crate) fn new_unchecked(name: &str) -> Self {
        QueueName(Arc::from(name))
    }

    /// The name as validated.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One partition of a queue: the unit of ownership and storage.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionId {
    /// The queue the partition belongs to.
    pub queue: QueueName,
    /// The partition's number in its queue, 0 to the queue's partition count - 1.
    pub partition: u32,
}

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.queue, self.partition)
    }
}

/// What a producer asks for, after validation.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskSpec {
    /// The key the task is dispatched fairly by, at most 256 bytes (the empty
    /// key included).
    pub fairness_key: String,
    /// `None`: the queue's weight for the key (or the default weight).
    pub fairness_weight: Option<f64>,
    /// The strict priority level the task waits in.
    pub priority: Priority,
    /// The opaque bytes handed to the worker, at most `limits.max_payload_bytes`.
    pub payload: Vec<u8>,
    /// At most one pending or running task per dedup id and queue.
    pub dedup_id: Option<String>,
    /// The task becomes ready this long after it is added.
    pub delay: std::time::Duration,
    /// When the task should start at the latest, in ms since the Unix epoch;
    /// `None`: its add time. Only a queue with ordering `"deadline"` orders
    /// by it; it is kept across retries.
    pub deadline: Option<UnixMillis>,
    /// The work it stands for, 1 to `validate::MAX_TASK_COST`: in a queue
    /// in fair order its key's turn comes back `cost` times later than after
    /// a task of cost 1.
    pub cost: u32,
    /// The size of the work in the queue's units (records of an import,
    /// say), 1 to `validate::MAX_TASK_SIZE`; when given, the queue's
    /// `cost_curve` makes it into the cost, and `cost` is 1. Kept across
    /// retries.
    pub size: Option<u64>,
    /// What it brings from an earlier life; fresh for every producer's task.
    pub history: TaskHistory,
}

/// What a task added again carries of its earlier life: the drain of an old
/// generation after a forced failover adds each of its tasks again in the
/// new one, and they must not start over (a task that failed four times
/// keeps its count against `max_attempts`).
///
/// Invariant: only the crate makes a history other than fresh (its fields
/// are private and [`TaskHistory::carried`] is crate-only), so neither a
/// gRPC AddTask (whose message has no such field) nor an embedding program
/// can set a task's attempt count or creation time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskHistory {
    earlier: Option<Earlier>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Earlier {
    attempt: u32,
    created_at_unix_ms: i64,
}

impl TaskHistory {
    /// The history of `task`, to add it again as it stands: its next
    /// delivery is attempt `task.attempt`, created when it was.
    pub(crate) fn carried(task: &StoredTask) -> Self {
        TaskHistory { earlier: Some(Earlier { attempt: task.attempt, created_at_unix_ms: task.created_at_unix_ms }) }
    }

    /// Whether it is a new task's (nothing carried).
    pub fn is_fresh(&self) -> bool {
        self.earlier.is_none()
    }
}

impl TaskSpec {
    /// A ready task with no dedup id.
    pub fn new(fairness_key: impl Into<String>, priority: Priority, payload: Vec<u8>) -> Self {
        TaskSpec {
            fairness_key: fairness_key.into(),
            fairness_weight: None,
            priority,
            payload,
            dedup_id: None,
            delay: std::time::Duration::ZERO,
            deadline: None,
            cost: 1,
            size: None,
            history: TaskHistory::default(),
        }
    }

    /// The task as it is stored, at `level`; its id is the level's. A fresh
    /// one is at its first attempt, created `now`; one with a history keeps
    /// its attempt and creation time.
    pub fn at_level(&self, level: FairLevel, now: i64) -> StoredTask {
        let (attempt, created_at_unix_ms) =
            self.history.earlier.map_or((1, now), |e| (e.attempt, e.created_at_unix_ms));
        StoredTask {
            level,
            task_id: level.id,
            priority: self.priority,
            fairness_key: self.fairness_key.clone(),
            fairness_weight: self.fairness_weight,
            payload: self.payload.clone(),
            created_at_unix_ms,
            attempt,
            dedup_id: self.dedup_id.clone(),
            dedup_slot: 0,
            deadline_unix_ms: self.deadline,
            cost: self.cost,
            size: self.size,
        }
    }
}

/// A task as written to a store: its spec plus the level and bookkeeping the
/// partition gave it.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredTask {
    /// Where it sits in its subqueue; a retried task gets a new level.
    pub level: FairLevel,
    /// The id producers and workers see: the level id of its first write,
    /// kept across retries.
    pub task_id: i64,
    /// The strict priority level, and so the subqueue, the task waits in.
    pub priority: Priority,
    /// The key the task is dispatched fairly by.
    pub fairness_key: String,
    /// The weight the producer gave the key; `None`: the queue's weight for it.
    pub fairness_weight: Option<f64>,
    /// The opaque bytes handed to the worker.
    pub payload: Vec<u8>,
    /// When the task was first added, in ms since the Unix epoch; kept across
    /// retries.
    pub created_at_unix_ms: i64,
    /// 1 for the first delivery, one more for each retry.
    pub attempt: u32,
    /// The producer's dedup id, if any: at most one pending or running task has
    /// it per queue.
    pub dedup_id: Option<String>,
    /// Where its dedup record is (see `crate::core::engine::dedup`).
    pub dedup_slot: i64,
    /// The producer's deadline, in ms since the Unix epoch; `None`: none was
    /// given, and the task goes by its creation time. Kept across retries.
    pub deadline_unix_ms: Option<UnixMillis>,
    /// The producer's cost, 1 to `validate::MAX_TASK_COST`; kept across retries.
    pub cost: u32,
    /// The producer's size, made into the cost on the queue's curve when
    /// the task is given a pass; kept across retries.
    pub size: Option<u64>,
}

impl StoredTask {
    /// The time a queue with ordering `"deadline"` orders the task by: its
    /// deadline, or when it was first added if it has none.
    pub fn deadline_or_created(&self) -> UnixMillis {
        self.deadline_unix_ms.unwrap_or(self.created_at_unix_ms)
    }
}
