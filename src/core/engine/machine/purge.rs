//! Purging a partition (see `crate::core::engine::cancel`): one number in
//! the metadata cancels every task that was there when the purge landed,
//! and a sweep takes those of the buffer as dispatches to no one, so that
//! they go without a worker polling.

use super::{MAX_MAINTENANCE_PER_WRITE, PartitionEngine};
use crate::clock::UnixMillis;
use crate::core::engine::cancel::Purged;
use crate::core::engine::plan::AppendPlan;
use crate::model::StoredTask;

impl PartitionEngine {
    /// Whether the task of `task_id` was in the partition when a purge landed.
    pub(super) fn is_purged(&self, task_id: i64) -> bool {
        task_id < self.purged_below
    }

    /// Plans a purge: every id handed out so far is below the threshold it
    /// writes, every id of a task added after it above.
    pub(super) fn plan_purge(&self, plan: &mut AppendPlan) {
        plan.purging = Some(self.ids.next_unused().max(self.purged_below));
    }

    /// A purge's write is durable, or may be: its tasks out with workers
    /// have their leases run out now, and the buffer is swept.
    pub(super) fn purge_written(&mut self, below: i64, now: UnixMillis) {
        self.purged_below = self.purged_below.max(below);
        let leased: Vec<i64> =
            self.leases.levels().filter(|task| task.task_id < below).map(|task| task.level.id).collect();
        for level_id in leased {
            self.leases.expire(level_id, now);
        }
        self.purge_sweeping = true;
    }

    /// Tasks that a purge cancelled may have come into the buffer (read,
    /// put back after a failed write, or written again by a move): the next
    /// write looks for them.
    pub(super) fn purged_may_be_buffered(&mut self) {
        self.purge_sweeping |= self.purged_below > 0;
    }

    /// Takes tasks of the buffers that a purge cancelled, as dispatches to
    /// no one: their leases are written with this write and run out at once
    /// (see [`Self::take`]). At most [`MAX_MAINTENANCE_PER_WRITE`] wait to be
    /// written at a time; the sweep stops when it finds no more.
    pub(super) fn sweep_purged(&mut self, now: UnixMillis) {
        if !self.purge_sweeping {
            return;
        }
        let room = MAX_MAINTENANCE_PER_WRITE.saturating_sub(self.unwritten_leases.len());
        let below = self.purged_below;
        let mut found = Vec::new();
        // A task parked by a write of unknown outcome is ready in the buffer
        // and may be read back from its record as well: while the copy
        // read back holds its lease, the buffered one is passed over, and
        // the sweep goes on until that lease has ended and it can be taken.
        let passed_over = std::cell::Cell::new(false);
        let sweepable = |task: &StoredTask| {
            let leased = task.task_id < below && self.leases.get(task.level.id).is_some();
            passed_over.set(passed_over.get() || leased);
            task.task_id < below && !leased
        };
        for subqueue in &self.subqueues {
            let levels = subqueue.ready_levels_where(sweepable, room - found.len());
            found.extend(levels.into_iter().map(|level| (subqueue.priority, level)));
        }
        if found.len() < room && !passed_over.get() {
            self.purge_sweeping = false;
        }
        for (priority, level) in found {
            self.take_level(priority, level, false, now);
        }
    }

    /// What a purge landing now cancels.
    pub fn purge_counts(&self) -> Purged {
        let waiting =
            self.subqueues.iter().map(|s| s.approx_backlog.max(0) as u64 + self.parked.tasks(s.priority)).sum();
        Purged { waiting, delayed: self.delayed.len() as u64, running: self.leases.len() as u64 }
    }

    /// Whether the writer has a sweep of purged tasks to make.
    pub fn purge_sweeping(&self) -> bool {
        self.purge_sweeping
    }

    /// The threshold of the last purge (0: none).
    pub fn purged_below(&self) -> i64 {
        self.purged_below
    }
}
