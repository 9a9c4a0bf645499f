//! What this node reports of the queue: per partition, and summed for telemetry.
//!
//! Invariants: a reading counts each partition once (held, or retired in
//! the same step as it leaves the list); partitions held elsewhere are read
//! through [`crate::partition::StoredPartition`].

use std::collections::HashMap;

use super::QueueMatcher;
use crate::core::engine::{PartitionSnapshot, TaskCounts};
use crate::histogram::HistogramReading;
use crate::model::Priority;
use crate::partition::{PartitionMeta, PartitionState};
use crate::store::StoreError;
use std::sync::atomic::Ordering;

/// What this node counts and holds of one queue, for telemetry.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueStats {
    /// Counted since this node started, over every partition it has held.
    pub counts: TaskCounts,
    /// Partitions taken from an owner that had not handed them over.
    pub takeovers: u64,
    /// Partitions held and served now.
    pub owned_partitions: u64,
    /// Per priority level, over the partitions held.
    pub levels: Vec<LevelStats>,
    /// Tasks out with workers.
    pub leased: u64,
    /// Delayed tasks and retries waiting out their backoff, known in memory.
    pub delayed: u64,
    /// Tasks waiting past the queue's `max_wait` (see
    /// [`PartitionSnapshot::over_max_wait`](crate::core::engine::PartitionSnapshot)).
    pub over_max_wait: u64,
    /// Polls waiting for a task now.
    pub waiting_pollers: u64,
    /// Tasks leased here and held for the next poll (counted in `leased`).
    pub held_for_polls: u64,
    /// Milliseconds from AddTask to delivery to a worker, of tasks
    /// delivered on their first pass through the backlog (not delayed, not
    /// retries or re-drives), sync matches included.
    pub dispatch_latency: HistogramReading,
}

/// One priority level of a queue, over the partitions this node holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LevelStats {
    /// The priority level counted.
    pub priority: Priority,
    /// Tasks written and not yet dispatched (approximate; see `SubqueueSnapshot`).
    pub backlog: u64,
    /// Tasks above the ack level: the backlog, and tasks dispatched above a
    /// task that still waits.
    pub ack_lag: u64,
    /// Seconds since the oldest task buffered in any partition was first
    /// added (0 with none): the oldest waiting task's age where the reader
    /// is at the end, else a lower bound of it.
    pub oldest_waiting_seconds: u64,
}

impl LevelStats {
    /// Nothing counted yet at `priority`.
    pub fn empty(priority: Priority) -> Self {
        LevelStats { priority, backlog: 0, ack_lag: 0, oldest_waiting_seconds: 0 }
    }
}

/// What `describe` reports of one partition this node holds.
#[derive(Clone, Debug)]
pub struct PartitionReport {
    /// The partition's number in the queue.
    pub partition: u32,
    /// Whether it hands out tasks, was lost to another owner, or is closing.
    pub state: PartitionState,
    /// Its engine now; `None` once it no longer hands out tasks.
    pub snapshot: Option<PartitionSnapshot>,
}

/// One partition of the queue as this node sees it.
#[derive(Clone, Debug)]
pub enum PartitionView {
    /// Held here: as it is now.
    Held(PartitionReport),
    /// Held by another node or by none: as its owner last wrote its
    /// metadata (`None`: never created).
    Stored(u32, Option<Box<PartitionMeta>>),
}

impl PartitionView {
    /// Tasks written and not yet dispatched, over every priority level
    /// (approximate; see `SubqueueSnapshot`). A partition held here that may
    /// hand out nothing now (being handed over) counts none.
    pub fn backlog(&self) -> u64 {
        match self {
            PartitionView::Held(report) => {
                report.snapshot.iter().flat_map(|s| &s.subqueues).map(|s| s.approx_backlog).sum()
            }
            PartitionView::Stored(_, meta) => {
                meta.iter().flat_map(|m| &m.subqueues).map(|s| s.approx_backlog.max(0) as u64).sum()
            }
        }
    }
}

impl QueueMatcher {
    /// The partitions this node holds, in the order held, with up to `top_keys`
    /// keys per priority level each.
    pub fn describe(&self, top_keys: usize) -> Vec<PartitionReport> {
        self.partitions()
            .iter()
            .map(|p| PartitionReport { partition: p.id().partition, state: p.state(), snapshot: p.snapshot(top_keys) })
            .collect()
    }

    /// Every partition of the queue, in order: the ones held here as they
    /// are (with up to `top_keys` keys each), the others as the store has
    /// them (one read each).
    pub async fn partition_views(&self, top_keys: usize) -> Result<Vec<PartitionView>, StoreError> {
        let mut held: HashMap<u32, PartitionReport> =
            self.describe(top_keys).into_iter().map(|report| (report.partition, report)).collect();
        let mut views = Vec::with_capacity(self.partition_count() as usize);
        for partition in self.config().partition_numbers() {
            views.push(match held.remove(&partition) {
                Some(report) => PartitionView::Held(report),
                None => PartitionView::Stored(partition, self.stored(partition).meta().await?.map(Box::new)),
            });
        }
        Ok(views)
    }

    /// Tasks of the queue written and not yet dispatched, over every
    /// partition ([`PartitionView::backlog`]).
    pub async fn backlog(&self) -> Result<u64, StoreError> {
        Ok(self.partition_views(0).await?.iter().map(PartitionView::backlog).sum())
    }

    /// What this node counts and holds of the queue now. Counts never
    /// decrease between readings, but for a moment while a partition is
    /// being handed over (what it counts after its removal from the list is
    /// added once it has stopped).
    pub fn stats(&self) -> QueueStats {
        let (partitions, mut counts) = {
            let partitions = self.partitions.read().unwrap_or_else(|p| p.into_inner());
            (partitions.clone(), *self.retired())
        };
        let mut stats = QueueStats {
            takeovers: self.takeovers.load(Ordering::Relaxed),
            levels: Priority::all().map(LevelStats::empty).collect(),
            waiting_pollers: self.waiting_pollers() as u64,
            held_for_polls: self.held_for_polls() as u64,
            dispatch_latency: self.dispatch_latency.read(),
            ..QueueStats::default()
        };
        let now = self.clock.now_ms();
        for partition in &partitions {
            let Some(snapshot) = partition.snapshot(0) else {
                counts += partition.counts();
                continue;
            };
            counts += snapshot.counts;
            stats.owned_partitions += 1;
            stats.leased += snapshot.leased;
            stats.delayed += snapshot.delayed;
            stats.over_max_wait += snapshot.over_max_wait;
            for (level, subqueue) in stats.levels.iter_mut().zip(&snapshot.subqueues) {
                level.backlog += subqueue.approx_backlog;
                level.ack_lag += subqueue.approx_backlog + subqueue.dispatched_above_ack;
                let age = subqueue.oldest_buffered_added_at.map_or(0, |at| (now - at).max(0) as u64 / 1000);
                level.oldest_waiting_seconds = level.oldest_waiting_seconds.max(age);
            }
        }
        stats.counts = counts;
        stats
    }
}
