use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::IdBlock;
use super::subqueue::{KeyBacklog, Subqueue};
use crate::clock::{UnixMillis, millis};
use crate::fairness::{CounterConfig, Weights, stride};
use crate::model::{FairLevel, PRIORITY_LEVELS, Priority, StoredTask, TaskSpec};
use crate::store::PartitionMeta;

/// How a partition buffers, persists and collects (section `[partition]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Ready tasks kept in memory per priority level.
    pub buffer_tasks: usize,
    /// The reader refills a level when its ready tasks fall to this many.
    pub reload_at: usize,
    /// The ack levels are written at least this often while they move.
    #[serde(with = "crate::config::duration_serde")]
    pub ack_sync_interval: Duration,
    /// An append carries the metadata (ack levels) when the last metadata
    /// write is older than this.
    #[serde(with = "crate::config::duration_serde")]
    pub piggyback_interval: Duration,
    /// Delete acknowledged tasks once this many have been acked...
    pub gc_min_acks: u64,
    /// ...or once this much time has passed since the last delete.
    #[serde(with = "crate::config::duration_serde")]
    pub gc_interval: Duration,
    /// Fairness keys saved in the metadata for the next owner.
    pub saved_top_keys: usize,
    pub counters: CounterConfig,
    pub weights: Weights,
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
            counters: CounterConfig::default(),
            weights: Weights::default(),
        }
    }
}

/// A batch of tasks with ids and passes assigned, to be written in one append.
/// Their subqueues' ack levels stay pinned until the engine hears how it went.
#[derive(Debug)]
pub struct AppendPlan {
    pub range_id: i64,
    /// In the order of the specs they came from.
    pub tasks: Vec<StoredTask>,
    /// Metadata to write with the append, when it is due.
    pub metadata: Option<PartitionMeta>,
    pinned: [bool; PRIORITY_LEVELS],
}

/// A read the reader should perform: tasks of `priority` strictly above `after`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadRequest {
    pub priority: Priority,
    pub after: FairLevel,
    pub limit: usize,
}

/// A delete the collector should perform: everything of `priority` at or below `through`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcRequest {
    pub priority: Priority,
    pub through: FairLevel,
}

/// A dispatchable task, compared across partitions by
/// `(priority, pass ahead of its ack level, id)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Candidate {
    pub priority: Priority,
    pub pass_ahead: i64,
    pub level: FairLevel,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SubqueueSnapshot {
    pub priority: Priority,
    pub ack_level: FairLevel,
    pub read_level: FairLevel,
    pub max_level: FairLevel,
    pub buffered: u64,
    pub approx_backlog: u64,
    pub reader_at_end: bool,
    pub tracked_keys: u64,
    pub approximate_keys: bool,
    pub top_keys: Vec<KeyBacklog>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PartitionSnapshot {
    pub range_id: i64,
    pub subqueues: Vec<SubqueueSnapshot>,
    pub added: u64,
    pub dispatched: u64,
}

/// The engine of one owned partition. See the module docs for its invariants.
#[derive(Debug)]
pub struct PartitionEngine {
    range_id: i64,
    /// The node that owns the partition, as written in its metadata.
    owner: String,
    ids: IdBlock,
    subqueues: Vec<Subqueue>,
    config: EngineConfig,
    last_meta_sync: UnixMillis,
    added: u64,
    dispatched: u64,
}

/// The append needs more ids than the block has left: take a new range id first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the id block of range {range_id} is used up")]
pub struct IdsExhausted {
    pub range_id: i64,
}

impl PartitionEngine {
    /// Starts from the metadata returned by a successful `take_ownership`.
    pub fn load(meta: &PartitionMeta, config: EngineConfig, now: UnixMillis) -> Self {
        let subqueues = Priority::all()
            .map(|p| Subqueue::load(p, &meta.subqueues[p.index()], config.counters.clone(), now))
            .collect();
        PartitionEngine {
            range_id: meta.range_id,
            owner: meta.owner.clone(),
            ids: IdBlock::for_range(meta.range_id),
            subqueues,
            config,
            last_meta_sync: now,
            added: 0,
            dispatched: 0,
        }
    }

    pub fn range_id(&self) -> i64 {
        self.range_id
    }

    /// The owner written with the next metadata ("" to hand the partition over).
    pub fn set_owner(&mut self, owner: String) {
        self.owner = owner;
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// After a `take_ownership` that renewed the range id (and so the id block).
    pub fn renew_range(&mut self, range_id: i64) {
        assert!(range_id > self.range_id, "range ids only grow");
        self.range_id = range_id;
        self.ids = IdBlock::for_range(range_id);
    }

    /// Assigns ids and passes to a batch and pins the ack levels it touches.
    /// Every plan must be concluded with [`Self::append_succeeded`] or
    /// [`Self::append_failed`].
    pub fn prepare_append(&mut self, specs: &[TaskSpec], now: UnixMillis) -> Result<AppendPlan, IdsExhausted> {
        if self.ids.remaining() < specs.len() as i64 {
            return Err(IdsExhausted { range_id: self.range_id });
        }
        let mut pinned = [false; PRIORITY_LEVELS];
        let mut tasks = Vec::with_capacity(specs.len());
        for spec in specs {
            let index = spec.priority.index();
            let subqueue = &mut self.subqueues[index];
            if !pinned[index] {
                subqueue.pin();
                pinned[index] = true;
            }
            let weight = self.config.weights.resolve(&spec.fairness_key, spec.fairness_weight);
            let pass = subqueue.counters.next_pass(&spec.fairness_key, subqueue.ack.pass, stride(weight));
            let id = self.ids.take().expect("checked the block has room");
            tasks.push(spec.at_level(FairLevel::new(pass, id), now));
        }
        let piggyback = now - self.last_meta_sync >= millis(self.config.piggyback_interval);
        let metadata = (piggyback && self.ack_moved()).then(|| self.metadata());
        Ok(AppendPlan { range_id: self.range_id, tasks, metadata, pinned })
    }

    /// The append is durable: merge its tasks and release the pins.
    pub fn append_succeeded(&mut self, plan: AppendPlan, now: UnixMillis) {
        if let Some(meta) = &plan.metadata {
            self.metadata_persisted(meta, now);
        }
        self.added += plan.tasks.len() as u64;
        let capacity = self.config.buffer_tasks;
        for subqueue in &mut self.subqueues {
            if !plan.pinned[subqueue.priority.index()] {
                continue;
            }
            let priority = subqueue.priority;
            subqueue.merge_written(plan.tasks.iter().filter(|t| t.priority == priority).cloned(), capacity);
            subqueue.unpin();
            subqueue.advance_ack();
        }
    }

    /// The append failed. If it `may_have_applied`, the reader looks again
    /// from below its lowest level, so a write that landed is not missed.
    pub fn append_failed(&mut self, plan: AppendPlan, may_have_applied: bool) {
        for subqueue in &mut self.subqueues {
            if !plan.pinned[subqueue.priority.index()] {
                continue;
            }
            if may_have_applied {
                let priority = subqueue.priority;
                let lowest = plan
                    .tasks
                    .iter()
                    .filter(|t| t.priority == priority)
                    .map(|t| t.level)
                    .min()
                    .expect("a pinned subqueue has tasks in the plan");
                subqueue.rewind_before(lowest);
            }
            subqueue.unpin();
            subqueue.advance_ack();
        }
    }

    /// Reads the reader should start now; each must be concluded with
    /// [`Self::apply_read`] or [`Self::read_failed`].
    pub fn read_requests(&mut self) -> Vec<ReadRequest> {
        let (capacity, reload_at) = (self.config.buffer_tasks, self.config.reload_at);
        self.subqueues
            .iter_mut()
            .filter_map(|s| {
                s.read_request(capacity, reload_at).map(|(after, limit)| ReadRequest {
                    priority: s.priority,
                    after,
                    limit,
                })
            })
            .collect()
    }

    /// Whether some level wants a read (without starting one).
    pub fn wants_read(&self) -> bool {
        self.subqueues.iter().any(|s| s.may_have_unread() && s.ready() <= self.config.reload_at)
    }

    /// Takes the result of a read; false if it was stale and ignored.
    pub fn apply_read(&mut self, request: ReadRequest, tasks: Vec<StoredTask>) -> bool {
        let capacity = self.config.buffer_tasks;
        self.subqueues[request.priority.index()].apply_read(request.after, tasks, request.limit, capacity)
    }

    pub fn read_failed(&mut self, request: ReadRequest) {
        self.subqueues[request.priority.index()].read_failed();
    }

    /// The task this partition would dispatch next. Strict priority: a level
    /// is not passed over while it may hold unread tasks.
    pub fn peek(&self) -> Option<Candidate> {
        for subqueue in &self.subqueues {
            if let Some(task) = subqueue.first_ready() {
                return Some(Candidate {
                    priority: subqueue.priority,
                    pass_ahead: task.level.pass.saturating_sub(subqueue.ack.pass),
                    level: task.level,
                });
            }
            if subqueue.may_have_unread() {
                return None;
            }
        }
        None
    }

    /// Hands out the task of a candidate from [`Self::peek`]. The ack level
    /// moves only at [`Self::settle`], so a task that finds no taker can be
    /// given back with [`Self::restore`] first.
    pub fn take(&mut self, candidate: Candidate) -> Option<StoredTask> {
        let task = self.subqueues[candidate.priority.index()].take(candidate.level)?;
        self.dispatched += 1;
        Some(task)
    }

    /// Peeks and takes in one step.
    pub fn take_next(&mut self) -> Option<StoredTask> {
        let candidate = self.peek()?;
        self.take(candidate)
    }

    pub fn restore(&mut self, task: StoredTask) {
        self.dispatched -= 1;
        self.subqueues[task.priority.index()].restore(task);
    }

    /// Moves the ack levels over what has been dispatched.
    pub fn settle(&mut self) {
        for subqueue in &mut self.subqueues {
            subqueue.advance_ack();
        }
    }

    /// Deletes that are due.
    pub fn gc_requests(&mut self, now: UnixMillis) -> Vec<GcRequest> {
        let (min_acks, interval) = (self.config.gc_min_acks, millis(self.config.gc_interval));
        self.subqueues
            .iter_mut()
            .filter_map(|s| {
                s.gc_due(now, min_acks, interval).map(|through| GcRequest { priority: s.priority, through })
            })
            .collect()
    }

    /// The metadata to write now, if the ack levels moved and the last write
    /// is older than `ack_sync_interval`.
    pub fn metadata_due(&self, now: UnixMillis) -> Option<PartitionMeta> {
        let due = now - self.last_meta_sync >= millis(self.config.ack_sync_interval);
        (due && self.ack_moved()).then(|| self.metadata())
    }

    /// The metadata as it stands (for a final write at shutdown).
    pub fn metadata(&self) -> PartitionMeta {
        PartitionMeta {
            range_id: self.range_id,
            owner: self.owner.clone(),
            subqueues: std::array::from_fn(|i| self.subqueues[i].meta(self.config.saved_top_keys)),
        }
    }

    pub fn metadata_persisted(&mut self, meta: &PartitionMeta, now: UnixMillis) {
        self.last_meta_sync = now;
        for (subqueue, saved) in self.subqueues.iter_mut().zip(&meta.subqueues) {
            subqueue.persisted_ack = subqueue.persisted_ack.max(saved.ack_level);
        }
    }

    fn ack_moved(&self) -> bool {
        self.subqueues.iter().any(|s| s.ack != s.persisted_ack)
    }

    /// True when nothing older than `max_age` waits: a new task may then go
    /// straight to a waiting worker without passing anyone.
    pub fn backlog_negligible(&self, now: UnixMillis, max_age: Duration) -> bool {
        let max_age = millis(max_age);
        self.subqueues.iter().all(|s| s.backlog_negligible(now, max_age))
    }

    /// An id for a task handed straight to a worker without being stored.
    pub fn allocate_unstored_id(&mut self) -> Option<i64> {
        self.ids.take()
    }

    pub fn snapshot(&self, top_keys: usize) -> PartitionSnapshot {
        PartitionSnapshot {
            range_id: self.range_id,
            subqueues: self
                .subqueues
                .iter()
                .map(|s| {
                    let (tracked, approximate) = s.tracked_keys();
                    SubqueueSnapshot {
                        priority: s.priority,
                        ack_level: s.ack,
                        read_level: s.read,
                        max_level: s.max,
                        buffered: s.ready() as u64,
                        approx_backlog: s.approx_backlog.max(0) as u64,
                        reader_at_end: s.at_end,
                        tracked_keys: tracked as u64,
                        approximate_keys: approximate,
                        top_keys: s.top_keys(top_keys),
                    }
                })
                .collect(),
            added: self.added,
            dispatched: self.dispatched,
        }
    }
}
