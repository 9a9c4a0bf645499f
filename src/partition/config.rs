//! Section `[writer]`: how a partition groups its writes.
//!
//! Invariant: a config that passes [`WriterConfig::validate`] (and, for its
//! bound from `[limits]`, the whole config's check) lets every batch make
//! progress: at least one task per write, and a keeper that ticks.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::ValidationError;

/// Group commit (section `[writer]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WriterConfig {
    /// The most tasks in one append.
    pub max_batch_tasks: usize,
    /// The most bytes one write of a partition carries, counting every task
    /// row, record and the metadata. Adds, completions, failures and
    /// re-drives take at most half of it; promotions of delayed tasks,
    /// lease records and expiries fill the rest and wait for the next write
    /// when it is full, so neither starves the other. On Cassandra a write
    /// is one mutation: keep this well below the largest one the cluster
    /// takes (half of `commitlog_segment_size`, 16 MiB with the default 32
    /// MiB segments; and the 16 MiB native frame). At least 4 ×
    /// `limits.max_payload_bytes`, so that a task always fits.
    pub max_write_bytes: usize,
    /// How often the keeper looks at ack levels and deletes.
    #[serde(with = "crate::clock::duration_serde")]
    pub keeper_interval: Duration,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            max_batch_tasks: 1000,
            max_write_bytes: 4 * 1024 * 1024,
            keeper_interval: Duration::from_millis(500),
        }
    }
}

impl WriterConfig {
    /// Checks section `[writer]` alone (its bound from `[limits]` is checked
    /// with the whole config); the error names the key.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.max_batch_tasks == 0 {
            return Err(ValidationError::new("writer.max_batch_tasks", "must be at least 1"));
        }
        if self.keeper_interval.is_zero() {
            return Err(ValidationError::new("writer.keeper_interval", "must be longer than 0s"));
        }
        Ok(())
    }
}
