//! A chaos run's history: every operation a client invoked, with when it
//! started and ended and what came of it, one JSON object per line. The
//! workload writes it; the checker reads it; nothing else is trusted.

use serde::{Deserialize, Serialize};

/// What came of an operation, as the client saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    /// It succeeded.
    Ok,
    /// It certainly did not happen (`UNAVAILABLE`, refused).
    Failed,
    /// It may have happened (`fairway-maybe-applied`, or a transport error
    /// after the request left).
    Maybe,
}

/// One operation of the history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Op {
    /// `AddTask` of a task whose payload is `value` (unique in the run).
    Add {
        /// The task's payload, unique in the run.
        value: String,
        /// The task's fairness key.
        key: String,
    },
    /// A poll that returned the task `value` (polls that return nothing are
    /// not recorded), from `partition`, as its `attempt`-th delivery.
    Deliver {
        /// The payload of the task delivered.
        value: String,
        /// The task's fairness key.
        key: String,
        /// The partition of the queue the task came from.
        partition: u32,
        /// Which delivery of the task this was: 1 for the first.
        attempt: u32,
        /// The lease token of this delivery.
        lease_token: String,
    },
    /// `CompleteTask` of the delivery with `lease_token`.
    Complete {
        /// The payload of the task completed.
        value: String,
        /// The lease token of the delivery completed.
        lease_token: String,
    },
    /// `FailTask` (retryable) of the delivery with `lease_token`.
    Fail {
        /// The payload of the task failed.
        value: String,
        /// The lease token of the delivery failed.
        lease_token: String,
    },
    /// A fault the nemesis injected, or ended.
    Nemesis {
        /// The fault, or its end, in words: `kill -9 127.0.0.1:7071`,
        /// `healed the network`.
        what: String,
    },
}

/// One line of the history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// The client (or the nemesis) that invoked it.
    pub(crate) process: u32,
    /// When it was invoked and when its answer came, in ms since the run began.
    pub(crate) start_ms: u64,
    /// When its answer came, in ms since the run began.
    pub(crate) end_ms: u64,
    /// What came of it, as the client saw it.
    pub(crate) outcome: Outcome,
    /// The gRPC code of a failure, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) error: String,
    /// What the operation was: its fields go in the line's JSON object, named
    /// by `op`.
    #[serde(flatten)]
    pub(crate) op: Op,
}

/// Parses a history, line by line; the error names the line.
pub(crate) fn parse(text: &str) -> Result<Vec<Entry>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| serde_json::from_str(line).map_err(|e| format!("history line {}: {e}", n + 1)))
        .collect()
}

/// One line of history text.
pub(crate) fn line(entry: &Entry) -> String {
    serde_json::to_string(entry).expect("a history entry serializes")
}
