//! The settings of a partition's engine (section `[engine]`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::policy::TaskPolicy;
use crate::core::fairness::{CounterConfig, Weights};
use crate::model::ValidationError;
use crate::model::validate;

/// How a partition buffers, persists and collects (section `[engine]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Ready tasks kept in memory per priority level.
    pub buffer_tasks: usize,
    /// The reader refills a level when its ready tasks fall to this many.
    pub reload_at: usize,
    /// The ack levels are written at least this often while they move.
    #[serde(with = "crate::clock::duration_serde")]
    pub ack_sync_interval: Duration,
    /// An append carries the metadata (ack levels) when the last metadata
    /// write is older than this.
    #[serde(with = "crate::clock::duration_serde")]
    pub piggyback_interval: Duration,
    /// Delete acknowledged tasks once this many have been acked...
    pub gc_min_acks: u64,
    /// ...or once this much time has passed since the last delete.
    #[serde(with = "crate::clock::duration_serde")]
    pub gc_interval: Duration,
    /// Fairness keys saved in the metadata for the next owner.
    pub saved_top_keys: usize,
    /// Once this many tasks are dispatched above the ack level of a
    /// priority level, a key at its concurrency or rate limit that holds the
    /// ack level back is parked: its waiting tasks move to records of their
    /// own, and the ack level moves on (docs/fairness.md §5c).
    pub park_after: usize,
    /// The most keys parked in slots of their own at once in a partition
    /// (each is a few dozen bytes of its metadata). Past it, held keys'
    /// tasks are parked in one slot per priority level, handed out in the
    /// order they were parked. 0 parks nothing: a held key then holds the
    /// ack level back.
    pub max_parked_keys: usize,
    /// How much per-key state each subqueue keeps (section `[engine.counters]`).
    pub counters: CounterConfig,
    /// The fairness weights of the keys (section `[engine.weights]`).
    pub weights: Weights,
    /// The queue's task policy (from `[tasks]` and `[queues."name"]`).
    #[serde(skip)]
    pub tasks: TaskPolicy,
    /// A held lease whose record has this many newer lease records above
    /// it is written again on top, so that a lease held for hours does not
    /// keep the range delete of finished leases from passing it (1,024;
    /// not a setting: tests make it small).
    #[serde(skip)]
    pub move_lease_after: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            buffer_tasks: 1000,
            reload_at: 100,
            ack_sync_interval: Duration::from_secs(10),
            piggyback_interval: Duration::from_secs(1),
            gc_min_acks: 1000,
            gc_interval: Duration::from_secs(15),
            saved_top_keys: 100,
            park_after: 512,
            max_parked_keys: 1000,
            counters: CounterConfig::default(),
            weights: Weights::default(),
            tasks: TaskPolicy::default(),
            move_lease_after: 1024,
        }
    }
}

impl EngineConfig {
    /// Checks section `[engine]` (its `tasks` are checked with `[tasks]`);
    /// the error names the key.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if !(2..=1_000_000).contains(&self.buffer_tasks) {
            return Err(ValidationError::new("engine.buffer_tasks", "must be in [2, 1000000]"));
        }
        if self.reload_at >= self.buffer_tasks {
            return Err(ValidationError::new(
                "engine.reload_at",
                format!("is {}; it must be below engine.buffer_tasks ({})", self.reload_at, self.buffer_tasks),
            ));
        }
        for (key, d) in [("engine.ack_sync_interval", self.ack_sync_interval), ("engine.gc_interval", self.gc_interval)]
        {
            if d.is_zero() {
                return Err(ValidationError::new(key, "must be longer than 0s"));
            }
        }
        if !(1..=100_000).contains(&self.park_after) {
            return Err(ValidationError::new(
                "engine.park_after",
                "must be in [1, 100000] (it bounds the tasks dispatched above an ack level, kept in the metadata)",
            ));
        }
        if self.max_parked_keys > 100_000 {
            return Err(ValidationError::new(
                "engine.max_parked_keys",
                "must be at most 100000 (each parked key is an entry of the partition's metadata; 0 parks none)",
            ));
        }
        if self.gc_min_acks == 0 {
            return Err(ValidationError::new("engine.gc_min_acks", "must be at least 1"));
        }
        if self.counters.exact_keys == 0 {
            return Err(ValidationError::new("engine.counters.exact_keys", "must be at least 1"));
        }
        if !(1..=1 << 22).contains(&self.counters.sketch_width) {
            return Err(ValidationError::new("engine.counters.sketch_width", "must be in [1, 4194304]"));
        }
        validate::check_weight("engine.weights.default", self.weights.default)?;
        for (key, weight) in &self.weights.keys {
            validate::check_weight(&format!("engine.weights.keys.{key:?}"), *weight)?;
            validate::fairness_key(&format!("engine.weights.keys.{key:?}"), key)?;
        }
        for (i, group) in self.weights.groups.iter().enumerate() {
            let field = format!("engine.weights.groups[{i}]");
            if group.is_empty() {
                return Err(ValidationError::new(field, "is empty; it would put every key in one share"));
            }
            validate::fairness_key(&field, group)?;
        }
        Ok(())
    }
}
