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
    pub queue: QueueName,
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
    pub fairness_key: String,
    /// `None`: the queue's weight for the key (or the default weight).
    pub fairness_weight: Option<f64>,
    pub priority: Priority,
    pub payload: Vec<u8>,
}

impl TaskSpec {
    /// The task as it is stored, at `level`, first attempt.
    pub fn at_level(&self, level: FairLevel, created_at_unix_ms: i64) -> StoredTask {
        StoredTask {
            level,
            priority: self.priority,
            fairness_key: self.fairness_key.clone(),
            fairness_weight: self.fairness_weight,
            payload: self.payload.clone(),
            created_at_unix_ms,
            attempt: 1,
        }
    }
}

/// A task as written to a store: its spec plus the level and bookkeeping the
/// partition gave it.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredTask {
    pub level: FairLevel,
    pub priority: Priority,
    pub fairness_key: String,
    pub fairness_weight: Option<f64>,
    pub payload: Vec<u8>,
    pub created_at_unix_ms: i64,
    pub attempt: u32,
}
