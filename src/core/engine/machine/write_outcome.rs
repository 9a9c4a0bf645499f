//! What a planned write did: merged into the engine once durable, undone
//! (or kept in doubt) when it failed.

use super::PartitionEngine;
use crate::clock::UnixMillis;
use crate::core::engine::outcomes::{Added, Finished};
use crate::core::engine::plan::AppendPlan;

impl PartitionEngine {
    /// The write is durable: merge its tasks, start its leases, end the
    /// leases it finished, release the pins.
    pub fn write_succeeded(&mut self, plan: AppendPlan, now: UnixMillis) {
        if let Some(meta) = &plan.write.metadata {
            self.metadata_persisted(meta, now);
        }
        self.count_succeeded(&plan, now);
        self.largest_write = self.largest_write.max(plan.write.bytes());
        if let Some(floor) = plan.delayed_floor {
            self.delayed.raise_floor(floor);
        }
        if let Some(floor) = plan.dead_letters_floor {
            self.dead_letters_through = self.dead_letters_through.max(floor);
        }
        for (key, task) in plan.delayed {
            self.delayed.added(key, task);
        }
        for (id, _) in plan.ending {
            if let Some(lease) = self.leases.get(id) {
                self.finished.insert(lease.seq, (lease.task.priority, lease.task.level));
            }
            self.leases.finished(id);
            self.kept_lease_records.remove(&id);
        }
        for (id, task, _) in &plan.leases {
            self.leases.written(*id, true, now);
            self.parked.lease_written(*id);
            self.kept_lease_records.remove(id);
            self.maybe_leased.remove(id);
            self.subqueues[task.priority.index()].leased(task.level);
        }
        for (_, task) in &plan.parked {
            self.subqueues[task.priority.index()].leased(task.level);
            self.maybe_leased.remove(&task.level.id);
        }
        for (id, seq) in &plan.moved_leases {
            self.leases.moved(*id, *seq);
            self.kept_lease_records.remove(id);
        }
        if let Some(below) = plan.purging {
            self.purge_written(below, now);
        }
        if plan.write.tasks.iter().any(|task| self.is_purged(task.task_id)) {
            // Moved or promoted: back in the buffer, to be swept.
            self.purged_may_be_buffered();
        }
        let leased = plan.leases.iter().map(|(id, task, _)| (*id, task.task_id));
        self.cancels_written(&plan.cancelling, leased, &plan.cancel_ended, now);
        self.parked.parked(&plan.parked);
        let capacity = self.config.buffer_tasks;
        for subqueue in &mut self.subqueues {
            if plan.pinned[subqueue.priority.index()] {
                let priority = subqueue.priority;
                subqueue.merge_written(plan.write.tasks.iter().filter(|t| t.priority == priority).cloned(), capacity);
                subqueue.unpin();
            }
            subqueue.advance_ack();
        }
        self.aged_written(&plan.moved, &plan.waiting);
    }

    fn count_succeeded(&mut self, plan: &AppendPlan, now: UnixMillis) {
        // A cancelled task's lease is written only to end it: not a dispatch.
        let mut dispatched = 0;
        for (_, task, _) in &plan.leases {
            if !self.is_cancelled(task.task_id) {
                self.tally.record(&task.fairness_key, task.cost, now);
                dispatched += 1;
            }
        }
        let counts = &mut self.counts;
        counts.added += plan.added.iter().filter(|added| matches!(added, Added::Added { .. })).count() as u64;
        counts.dispatched += dispatched;
        for finished in &plan.finished {
            match finished {
                Ok(Finished::Completed) => counts.completed += 1,
                Ok(Finished::Retrying { .. } | Finished::Buried) => counts.failed += 1,
                Err(_) => {}
            }
        }
        counts.expired += plan.expired;
        counts.completed += plan.cancelled_unreported;
    }

    /// The write failed. If it `may_have_applied`, whatever it touched is
    /// read again from the store before it is trusted.
    pub fn write_failed(&mut self, plan: AppendPlan, may_have_applied: bool, now: UnixMillis) {
        // A held lease's record written again higher may have landed: its
        // end is then written there (superseding both), and the earlier
        // record is kept until it is.
        // A purge that may have landed is kept: a later metadata write
        // without it would undo it. Its sweep's tasks are back in the buffer.
        if let Some(below) = plan.purging.filter(|_| may_have_applied) {
            self.purge_written(below, now);
        }
        self.purged_may_be_buffered();
        if may_have_applied {
            for (id, seq) in &plan.moved_leases {
                if let Some(lease) = self.leases.get(*id) {
                    self.kept_lease_records.entry(*id).or_insert(lease.seq);
                }
                self.leases.moved(*id, *seq);
            }
        }
        for bucket in plan.buckets {
            self.dedup.forget(bucket);
        }
        for (id, _) in plan.ending {
            self.leases.finish_failed(id);
        }
        for (id, _, _) in plan.leases {
            let direct = plan.direct.contains(&id);
            if direct && may_have_applied {
                // The lease record alone holds this new task: keep the lease,
                // undelivered, so that it expires at once and the task goes
                // to the queue if the record landed.
                self.leases.written(id, false, now);
                continue;
            }
            // Written or not, the task was not delivered: it is ready again
            // (a parked one is its key's head again, its record deleted or not).
            // A lease record that landed is range-deleted once it is older
            // than every lease in use; a new owner that loads it takes the
            // task's later lease record if there is one (see `Leases::load`),
            // else treats it as held and retries the task when it expires.
            let seq = self.leases.get(id).map_or(0, |lease| lease.seq);
            if let Some(task) = self.leases.not_written(id) {
                self.rates.refund(&task.fairness_key);
                if self.parked.holds_lease(id) {
                    if may_have_applied {
                        // If the write landed, its lease record alone holds the task.
                        // The earliest such record is kept: the range delete stops below it.
                        self.kept_lease_records.entry(id).or_insert(seq);
                    }
                    self.parked.lease_not_written(id, task);
                } else if !direct {
                    if may_have_applied {
                        self.maybe_leased.insert(id);
                    }
                    self.subqueues[task.priority.index()].restore(task);
                }
            }
        }
        for (_, task) in &plan.parked {
            self.subqueues[task.priority.index()].restore(task.clone());
        }
        self.parked.park_failed(&plan.parked, may_have_applied);
        // Before the rewind below, which reads again what a move may have changed.
        self.aged_not_written(&plan.moved, &plan.waiting, may_have_applied);
        let delayed_lowest = plan.delayed.iter().chain(&plan.promoted).map(|(key, _)| *key).min();
        if may_have_applied {
            if let Some(lowest) = delayed_lowest {
                self.delayed.promotion_uncertain(lowest);
            }
        } else {
            self.delayed.promotion_failed(plan.promoted);
        }
        for subqueue in &mut self.subqueues {
            if !plan.pinned[subqueue.priority.index()] {
                continue;
            }
            if may_have_applied {
                let priority = subqueue.priority;
                let lowest = plan
                    .write
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
}
