//! One queue as this node serves it: the partitions it holds, the pollers
//! waiting on them, and what it reports. Its methods by concern: taking and
//! handing over partitions (`ownership`), adds (`adds`), finishes, heartbeats
//! and dead letters (`leases`), polls and dispatch (`polls`), reports (`stats`).
//!
//! Invariants: it reads and writes a partition's rows only through
//! [`crate::partition`]; a partition's counts are counted once, whether it
//! is held or retired.

mod adds;
mod drains;
mod held;
mod leases;
mod ownership;
mod polls;
mod stats;

pub use stats::{LevelStats, PartitionReport, PartitionView, QueueStats};

use self::polls::Waiter;

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use super::LeaseToken;
use super::Settings;
use crate::clock::{SharedClock, UnixMillis};
use crate::cluster::DispatchGate;
use crate::core::engine::{DispatchOrder, LeaseError, TaskCounts, TaskPolicy};
use crate::core::fairness::PartitionClocks;
use crate::histogram::LatencyHistogram;
use crate::model::{QueueName, StoredTask};
use crate::partition::{FinishError, Partition, PartitionError, ReadyHook};
use crate::store::{QueueConfig, Store};

/// A task handed to a worker.
#[derive(Clone, Debug, PartialEq)]
pub struct DispatchedTask {
    /// The partition of the queue the task came from.
    pub partition: u32,
    /// The task as delivered: its attempt counts this delivery.
    pub task: StoredTask,
    /// The token the worker names this delivery by to complete, fail or
    /// heartbeat it.
    pub token: LeaseToken,
    /// When the lease runs out unless heartbeated, in ms since the Unix epoch.
    pub lease_deadline: UnixMillis,
}

/// Where an added task went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddOutcome {
    /// The new task's id, or that of the task holding its dedup id.
    pub task_id: i64,
    /// The partition of the queue the task went to.
    pub partition: u32,
    /// Handed straight to a waiting poller (its lease written, not a backlog row).
    pub sync_matched: bool,
    /// Nothing added: `task_id` already holds the dedup id.
    pub duplicate: bool,
}

/// Why the queue could not do what was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MatchError {
    /// The partition failed (its store, or it is lost or closing); see
    /// [`PartitionError`].
    #[error(transparent)]
    Partition(#[from] PartitionError),
    /// The server is shutting down; nothing was written.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// No partition of the queue can take writes on this node.
    #[error("no partition of queue {0} is available on this node")]
    NoPartition(String),
    /// The lease token does not hold the lease (nothing was written).
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// No queue of that name was created.
    #[error("queue {0} does not exist: create it with CreateQueue (`fairway queue create`)")]
    UnknownQueue(String),
    /// A cancel was refused; nothing was written.
    #[error(transparent)]
    CancelRefused(#[from] crate::core::engine::CancelRefused),
    /// Creating the queue would pass a limit of the configuration.
    #[error("creating the queue would pass {key} ({limit}); nothing was created")]
    QueueLimit {
        /// The config key of the limit.
        key: &'static str,
        /// Its value.
        limit: u64,
    },
    /// A move of the queue's home was refused: an earlier one is not done.
    #[error("queue {queue} is being moved: {detail}; nothing was changed, retry once it is done")]
    MoveInProgress {
        /// The queue.
        queue: String,
        /// What is not done.
        detail: String,
    },
    /// The settings a change of the queue's would store pass a bound;
    /// nothing was written.
    #[error(transparent)]
    InvalidSettings(crate::model::ValidationError),
    /// Other changes of the queue's settings came first, each time.
    #[error(
        "the settings of queue {queue} were changed by others {attempts} times while this change was made; \
         nothing was written, retry"
    )]
    SettingsContended {
        /// The queue.
        queue: String,
        /// How many times the change was made again.
        attempts: usize,
    },
    /// The queue's settings were not at the version a change was made for.
    #[error("the settings of queue {queue} are at version {stored}, not {expected}; nothing was written")]
    StaleSettings {
        /// The queue.
        queue: String,
        /// The version the change was made for.
        expected: u64,
        /// The version stored.
        stored: u64,
    },
    /// `matcher.max_parked_polls` polls of the queue already wait on this node.
    #[error("{limit} polls of queue {queue} already wait on this node (matcher.max_parked_polls); retry later")]
    TooManyPolls {
        /// The queue.
        queue: String,
        /// The limit.
        limit: usize,
    },
}

impl From<crate::partition::CancelError> for MatchError {
    fn from(error: crate::partition::CancelError) -> Self {
        match error {
            crate::partition::CancelError::Refused(refused) => MatchError::CancelRefused(refused),
            crate::partition::CancelError::Partition(partition) => MatchError::Partition(partition),
        }
    }
}

impl From<FinishError> for MatchError {
    fn from(error: FinishError) -> Self {
        match error {
            FinishError::Lease(lease) => MatchError::Lease(lease),
            FinishError::Partition(partition) => MatchError::Partition(partition),
        }
    }
}

impl MatchError {
    /// True when nothing was written: the request may be retried as it is.
    pub fn certainly_not_applied(&self) -> bool {
        match self {
            MatchError::Partition(e) => e.certainly_not_applied(),
            MatchError::ShuttingDown
            | MatchError::NoPartition(_)
            | MatchError::Lease(_)
            | MatchError::UnknownQueue(_)
            | MatchError::CancelRefused(_)
            | MatchError::QueueLimit { .. }
            | MatchError::MoveInProgress { .. }
            | MatchError::InvalidSettings(_)
            | MatchError::SettingsContended { .. }
            | MatchError::StaleSettings { .. }
            | MatchError::TooManyPolls { .. } => true,
        }
    }
}

/// One queue as this node serves it: the partitions of the queue this node
/// owns, and the pollers waiting on them. See the module docs.
pub struct QueueMatcher {
    name: QueueName,
    /// Its partition count (fixed) and home (moves: see [`Self::set_home`]).
    config: RwLock<QueueConfig>,
    partitions: RwLock<Vec<Arc<Partition>>>,
    /// Adoptions and releases, one at a time.
    ownership: tokio::sync::Mutex<()>,
    waiters: Mutex<VecDeque<Waiter>>,
    next_partition: AtomicUsize,
    /// Where the next dispatch starts looking: ties between partitions go
    /// round.
    next_dispatch: AtomicUsize,
    /// The fair order across the partitions held (see [`PartitionClocks`]).
    clocks: Mutex<PartitionClocks>,
    /// Across partitions by deadline (the queue's ordering is `"deadline"`)
    /// rather than on the clocks.
    by_deadline: bool,
    next_waiter: AtomicU64,
    closing: AtomicBool,
    settings: Arc<Settings>,
    store: Arc<dyn Store>,
    clock: SharedClock,
    gate: Arc<DispatchGate>,
    on_ready: ReadyHook,
    /// What partitions no longer held counted while this node held them. A
    /// partition's counts move here in the same step as it leaves the list
    /// (under the list's write lock), so that a reading (under the read
    /// lock) counts it once; what it counts after that (finishing its
    /// queued writes) is added once it has stopped.
    retired: Mutex<TaskCounts>,
    /// Partitions taken from an owner that had not handed them over.
    takeovers: AtomicU64,
    /// Partitions dropped without a write at a heartbeat lapse, which the
    /// store may still say this node owns: while it lives, their rightful
    /// node waits for it to hand them over.
    abandoned: Mutex<BTreeSet<u32>>,
    /// The drains of the previous generation into the partitions held here.
    drains: drains::Drains,
    /// From AddTask to delivery (see [`QueueMatcher::stats`]).
    dispatch_latency: LatencyHistogram,
    /// Tasks matched in their turn, held for the next poll.
    held: held::HeldTasks,
    /// How long a task is held, in ms: `matcher.quiet_hold`, at most half
    /// the queue's lease timeout (a held task's lease runs meanwhile).
    hold: AtomicU64,
    /// When the last poll came to this node (the clock's ms; 0 before
    /// any): a task is held only while polls keep coming.
    last_poll: AtomicI64,
    /// Held while the stored settings are applied to the partitions.
    retuning: Mutex<()>,
}

/// How long a task matched in its turn is held for the next poll, in ms.
fn hold_ms(settings: &Settings, tasks: &TaskPolicy) -> u64 {
    crate::clock::millis(settings.matcher.quiet_hold.min(tasks.lease_timeout / 2)) as u64
}

impl std::fmt::Debug for QueueMatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueMatcher").field("name", &self.name).finish()
    }
}

impl QueueMatcher {
    /// A queue with none of its partitions taken yet (see [`Self::adopt`]).
    pub(super) fn new(
        name: QueueName,
        config: QueueConfig,
        store: Arc<dyn Store>,
        clock: SharedClock,
        settings: Arc<Settings>,
        gate: Arc<DispatchGate>,
    ) -> Arc<QueueMatcher> {
        let dispatch_latency = LatencyHistogram::new(settings.dispatch_latency_otlp.clone(), name.as_str());
        let tasks = settings.engine_for(&name, &config.settings).tasks;
        let hold = AtomicU64::new(hold_ms(&settings, &tasks));
        let by_deadline = tasks.ordering == DispatchOrder::Deadline;
        Arc::new_cyclic(|weak: &Weak<QueueMatcher>| {
            let weak = weak.clone();
            QueueMatcher {
                name,
                config: RwLock::new(config),
                partitions: RwLock::new(Vec::new()),
                ownership: tokio::sync::Mutex::new(()),
                waiters: Mutex::new(VecDeque::new()),
                next_partition: AtomicUsize::new(0),
                next_dispatch: AtomicUsize::new(0),
                clocks: Mutex::new(PartitionClocks::default()),
                by_deadline,
                next_waiter: AtomicU64::new(0),
                closing: AtomicBool::new(false),
                settings,
                store,
                clock,
                gate,
                on_ready: Arc::new(move || {
                    if let Some(matcher) = weak.upgrade() {
                        matcher.dispatch_waiting();
                    }
                }),
                retired: Mutex::new(TaskCounts::default()),
                takeovers: AtomicU64::new(0),
                abandoned: Mutex::new(BTreeSet::new()),
                drains: drains::Drains::default(),
                dispatch_latency,
                held: held::HeldTasks::default(),
                hold,
                last_poll: AtomicI64::new(0),
                retuning: Mutex::new(()),
            }
        })
    }

    /// The queue's name.
    pub fn name(&self) -> &QueueName {
        &self.name
    }

    /// The queue's settings as last read from the store.
    pub fn config(&self) -> QueueConfig {
        self.config.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether the queue's stored settings pause `key` (or the whole queue).
    pub fn key_paused(&self, key: &str) -> bool {
        let config = self.config.read().unwrap_or_else(|p| p.into_inner());
        config.settings.paused || (!config.settings.paused_keys.is_empty() && config.settings.paused_keys.contains(key))
    }

    /// The queue's partition count, fixed at its creation.
    pub fn partition_count(&self) -> u32 {
        self.config.read().unwrap_or_else(|p| p.into_inner()).partitions
    }

    /// Records the queue's config as read from the store, if it is not
    /// older than the one known (a read at a lagging replica can return an
    /// earlier generation): the next ownership pass hands its partitions
    /// over to a new home, and those of an earlier generation to the next.
    pub fn update_config(&self, stored: &QueueConfig) {
        let newer = {
            let mut config = self.config.write().unwrap_or_else(|p| p.into_inner());
            if stored.generation < config.generation || *stored == *config {
                return;
            }
            if (&stored.home, stored.generation) != (&config.home, config.generation) {
                tracing::info!(
                    queue = %self.name,
                    from = %config.home,
                    to = %stored.home,
                    generation = stored.generation,
                    "the queue's home moved"
                );
            }
            // A read at a lagging replica can return earlier settings too.
            let newer = stored.settings.version > config.settings.version;
            let settings = if newer { stored.settings.clone() } else { config.settings.clone() };
            *config = QueueConfig { settings, ..stored.clone() };
            newer
        };
        if newer {
            self.apply_stored_settings();
        }
    }

    /// Runs every partition held here with the stored settings known now
    /// (see [`Partition::retune`]). One at a time, each with the settings
    /// known when it starts: the last one to run leaves every partition
    /// with the newest.
    pub(super) fn apply_stored_settings(&self) {
        let _one_at_a_time = self.retuning.lock().unwrap_or_else(|p| p.into_inner());
        let settings = self.config.read().unwrap_or_else(|p| p.into_inner()).settings.clone();
        tracing::info!(queue = %self.name, version = settings.version, "applying the queue's stored settings");
        let engine = self.settings.engine_for(&self.name, &settings);
        self.hold.store(hold_ms(&self.settings, &engine.tasks), Ordering::Relaxed);
        for partition in self.partitions() {
            partition.retune(&engine, Settings::pauses(&settings));
        }
        self.dispatch_waiting();
    }

    /// A copy of the list, for work that calls into the partitions (which
    /// take their own locks) without the list's lock held.
    fn partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// `look` at the list under its read lock, without a copy: `look` may
    /// read each partition's id and state (an atomic), and nothing that
    /// takes a lock.
    fn look_at_partitions<R>(&self, look: impl FnOnce(&[Arc<Partition>]) -> R) -> R {
        look(&self.partitions.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn write_partitions(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Arc<Partition>>> {
        self.partitions.write().unwrap_or_else(|p| p.into_inner())
    }
}
