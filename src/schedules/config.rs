//! Section `[schedules]`: how a node fires the schedules it is assigned.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::ValidationError;

/// Recurring schedules (section `[schedules]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulesConfig {
    /// Whether this node fires schedules. Every node that does fires the
    /// shards the cluster assigns it (rendezvous over the live nodes); the
    /// API runs on every node whatever this says.
    pub firing: bool,
    /// The longest time between two looks at a node's schedules (a look
    /// happens sooner when the earliest `can_start_by` comes sooner).
    #[serde(with = "crate::clock::duration_serde")]
    pub scan_interval: Duration,
    /// A run in flight this long without news is probed: its task added
    /// again under its dedup id, which adds nothing if the task is still
    /// there, and replaces it (counting the lost one as a failure) if not.
    #[serde(with = "crate::clock::duration_serde")]
    pub probe_after: Duration,
    /// The catch-up window of schedules created without one.
    #[serde(with = "crate::clock::duration_serde")]
    pub default_catchup_window: Duration,
    /// The most schedules one of the 64 shards holds (a schedule's shard is
    /// a hash of its id): 4,096 by default, about 260,000 schedules in all.
    pub max_schedules_per_shard: usize,
    /// Up to this many schedules, the metrics carry one series per schedule
    /// (label `schedule`); beyond it, only totals.
    pub max_schedule_series: usize,
    /// How many schedules one look acts on at once (fires, fails, probes):
    /// each act is a few store round trips (compare-and-sets on Cassandra),
    /// so one at a time would bound a node to a few dozen fires a second.
    /// The most urgent are started first.
    pub concurrent_fires: usize,
}

impl Default for SchedulesConfig {
    fn default() -> Self {
        SchedulesConfig {
            firing: true,
            scan_interval: Duration::from_secs(2),
            probe_after: Duration::from_secs(300),
            default_catchup_window: Duration::from_secs(24 * 3600),
            max_schedules_per_shard: 4096,
            max_schedule_series: 1000,
            concurrent_fires: 16,
        }
    }
}

impl SchedulesConfig {
    /// Checks every key against its bounds.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let fail = |key: &str, message: String| Err(ValidationError::new(format!("schedules.{key}"), message));
        let second = Duration::from_secs(1);
        let hour = Duration::from_secs(3600);
        for (key, value, low, high) in [
            ("scan_interval", self.scan_interval, Duration::from_millis(100), Duration::from_secs(60)),
            ("probe_after", self.probe_after, second, 24 * hour),
            ("default_catchup_window", self.default_catchup_window, second, 366 * 24 * hour),
        ] {
            if value < low || value > high {
                return fail(key, format!("is {value:?}; it must be {low:?} to {high:?}"));
            }
        }
        if !(1..=1_000_000).contains(&self.max_schedules_per_shard) {
            return fail(
                "max_schedules_per_shard",
                format!("is {}; it must be 1 to 1000000", self.max_schedules_per_shard),
            );
        }
        if self.max_schedule_series > 100_000 {
            return fail("max_schedule_series", format!("is {}; it must be at most 100000", self.max_schedule_series));
        }
        if !(1..=256).contains(&self.concurrent_fires) {
            return fail("concurrent_fires", format!("is {}; it must be 1 to 256", self.concurrent_fires));
        }
        Ok(())
    }
}
