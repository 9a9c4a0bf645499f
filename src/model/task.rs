use std::fmt;
use std::sync::Arc;

use super::{FairLevel, Priority};

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
        }
    }

    /// The task as it is stored, at `level`, first attempt; its id is the level's.
    pub fn at_level(&self, level: FairLevel, created_at_unix_ms: i64) -> StoredTask {
        StoredTask {
            level,
            task_id: level.id,
            priority: self.priority,
            fairness_key: self.fairness_key.clone(),
            fairness_weight: self.fairness_weight,
            payload: self.payload.clone(),
            created_at_unix_ms,
            attempt: 1,
            dedup_id: self.dedup_id.clone(),
            dedup_slot: 0,
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
}
