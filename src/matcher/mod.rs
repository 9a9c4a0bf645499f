//! Matching tasks to workers.
//!
//! A [`QueueMatcher`] serves one queue from the partitions this node owns:
//! a poll takes the best buffered task across them — by priority, then by how
//! far its pass is ahead of its partition's ack level — or waits in line until
//! one arrives or its wait ends (then it gets nothing, never an error). While
//! the backlog is negligible, a new task goes straight to a waiting poller
//! without being stored ("sync match"). [`Queues`] opens queues on first use.
//!
//! Invariants: pollers are served in arrival order; a task handed to a poller
//! that has gone away is put back before anyone else can miss it.

mod listing;
mod queue_matcher;
mod queues;
mod settings;
mod stored_settings;
mod token;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::{ValidationError, validate};

pub use listing::{MAX_STORED_READS_PER_PAGE, QueuePage, QueueSummary};
pub use queue_matcher::{
    AddOutcome, DispatchedTask, LevelStats, MatchError, PartitionReport, PartitionView, QueueMatcher, QueueStats,
};
pub use queues::Queues;
pub use settings::Settings;
pub use token::LeaseToken;

/// Section `[matcher]` of the config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MatcherConfig {
    /// Partitions of every queue (1 to 256).
    pub partitions_per_queue: u32,
    /// How long a poll waits when it does not say.
    #[serde(with = "crate::clock::duration_serde")]
    pub default_poll_wait: Duration,
    /// A new task may skip storage and go straight to a waiting poller only
    /// while nothing older than this waits.
    #[serde(with = "crate::clock::duration_serde")]
    pub backlog_negligible_age: Duration,
    /// Whether sync match is on at all.
    pub sync_match: bool,
    /// How long a task matched in its turn while no poll waits is held for
    /// the next poll (its lease written with it) before it goes back to the
    /// queue; 0 holds none. A task is held only while a task of the queue
    /// waits in the backlog and polls keep coming (one came within this
    /// time). A task is matched in its turn when its key is quiet (nothing
    /// of it waiting or running on this node, within its limits) and its
    /// key's share is not ahead of the queue's: it would be at the front of
    /// the fair order (docs/fairness.md, "Quiet keys").
    #[serde(with = "crate::clock::duration_serde")]
    pub quiet_hold: Duration,
    /// The most tasks of one queue held for a poll at once; more go to the
    /// queue as usual.
    pub max_held_tasks: usize,
    /// The queues an AddTask may create when they do not exist, with
    /// `partitions_per_queue` partitions: names, or prefixes ending in `*`
    /// (`"*"`: every queue; `[]`: only CreateQueue creates queues). Every
    /// other request on a queue that does not exist gets `NOT_FOUND`.
    pub create_on_add: Vec<String>,
    /// The most queues the store may hold; a creation past it is refused.
    pub max_queues: usize,
    /// The most queues one principal may create by adding to them
    /// (`create_on_add`), counted from the creator the store records with
    /// each queue; its next creation is refused (`RESOURCE_EXHAUSTED`), others'
    /// are not. Queues made by CreateQueue (an admin
    /// RPC), by the scheduler, or with authentication off count for no one.
    /// At least 1; above `max_queues` it never binds.
    pub max_queues_per_principal: usize,
    /// The most partitions of all queues together; a creation past it is
    /// refused (each partition a node holds costs it a few tasks and its
    /// buffer).
    pub max_partitions: u32,
    /// The most polls of one queue waiting on a node at once; a poll past
    /// it is refused (`RESOURCE_EXHAUSTED`) rather than parked.
    pub max_parked_polls: usize,
}

/// The longest `matcher.quiet_hold`: a held task's lease runs meanwhile.
const MAX_QUIET_HOLD: Duration = Duration::from_secs(10);
/// The most `matcher.max_held_tasks`.
const MAX_HELD_TASKS: usize = 100_000;

impl Default for MatcherConfig {
    fn default() -> Self {
        MatcherConfig {
            partitions_per_queue: 1,
            default_poll_wait: Duration::from_secs(30),
            backlog_negligible_age: Duration::from_secs(5),
            sync_match: true,
            quiet_hold: Duration::from_secs(1),
            max_held_tasks: 1_024,
            create_on_add: vec!["*".to_owned()],
            max_queues: 1_000,
            max_queues_per_principal: 100,
            max_partitions: 4_096,
            max_parked_polls: 10_000,
        }
    }
}

impl MatcherConfig {
    /// Checks section `[matcher]` alone (its bound from `[limits]` is
    /// checked with the whole config); the error names the key.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::partitions("matcher.partitions_per_queue", self.partitions_per_queue)?;
        for (i, pattern) in self.create_on_add.iter().enumerate() {
            crate::model::pattern::check(&format!("matcher.create_on_add[{i}]"), pattern)?;
        }
        if self.quiet_hold > MAX_QUIET_HOLD {
            return Err(ValidationError::new("matcher.quiet_hold", "must be at most 10s (0: hold no task)"));
        }
        if !(1..=MAX_HELD_TASKS).contains(&self.max_held_tasks) {
            return Err(ValidationError::new("matcher.max_held_tasks", "must be 1 to 100000"));
        }
        if self.max_parked_polls == 0 {
            return Err(ValidationError::new("matcher.max_parked_polls", "must be at least 1"));
        }
        if self.max_queues == 0 {
            return Err(ValidationError::new("matcher.max_queues", "must be at least 1"));
        }
        if self.max_queues_per_principal == 0 {
            return Err(ValidationError::new("matcher.max_queues_per_principal", "must be at least 1"));
        }
        if self.max_partitions < self.partitions_per_queue {
            return Err(ValidationError::new(
                "matcher.max_partitions",
                format!("is {}; it must be at least matcher.partitions_per_queue", self.max_partitions),
            ));
        }
        Ok(())
    }

    /// Whether an add may create queue `name` (see [`MatcherConfig::create_on_add`]).
    pub fn creates_on_add(&self, name: &crate::model::QueueName) -> bool {
        self.create_on_add.iter().any(|pattern| crate::model::pattern::matches(pattern, name.as_str()))
    }
}
