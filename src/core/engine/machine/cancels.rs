//! Cancelled tasks (see `crate::core::engine::cancel`): marks planned, made
//! durable, and honoured when a marked task is handed out or reported on.

use super::PartitionEngine;
use crate::clock::UnixMillis;
use crate::core::engine::cancel::{Cancel, CancelRefused, MAX_CANCELLED};
use crate::core::engine::plan::AppendPlan;
use crate::model::StoredTask;

impl PartitionEngine {
    /// Whether the task of `task_id` is cancelled, by its mark or by a
    /// purge, and not reached yet.
    pub fn is_cancelled(&self, task_id: i64) -> bool {
        self.is_purged(task_id) || (!self.cancelled.is_empty() && self.cancelled.contains(&task_id))
    }

    /// Plans `cancels`, one result each: a dead letter's row deleted, any
    /// other task marked (the write carries the metadata with the marks).
    pub(super) fn plan_cancels(&self, plan: &mut AppendPlan, cancels: &[Cancel]) {
        for cancel in cancels {
            let id = cancel.task_id;
            let result = match cancel.dead_letter {
                Some(row) => {
                    plan.write.delete.push(row);
                    Ok(())
                }
                None if self.is_cancelled(id) || plan.cancelling.contains(&id) => Ok(()),
                None if self.cancelled.len() + plan.cancelling.len() >= MAX_CANCELLED => Err(CancelRefused::Full),
                None => {
                    plan.cancelling.push(id);
                    Ok(())
                }
            };
            plan.cancels.push(result);
        }
    }

    /// Whether ending `task` now ends a cancelled task: its mark goes once
    /// the write is durable, and the task ends completed whatever the report.
    /// A task marked by this same write counts: its mark goes with it.
    pub(super) fn ends_cancelled(&self, plan: &mut AppendPlan, task: &StoredTask) -> bool {
        let cancelled = self.is_cancelled(task.task_id) || plan.cancelling.contains(&task.task_id);
        if cancelled {
            plan.cancel_ended.push(task.task_id);
        }
        cancelled
    }

    /// A write with these marks (`cancelling`), leases (`leased`: level id
    /// and task) and ends of cancelled tasks (`ended`) is durable: a marked
    /// task a worker holds has its lease run out now, and the marks of the
    /// tasks ended go.
    pub(super) fn cancels_written(
        &mut self,
        cancelling: &[i64],
        leased: impl Iterator<Item = (i64, i64)>,
        ended: &[i64],
        now: UnixMillis,
    ) {
        self.cancelled.extend(cancelling.iter().copied());
        for id in cancelling {
            if let Some(level_id) = self.leases.of_task(*id).map(|lease| lease.task.level.id) {
                self.leases.expire(level_id, now);
            }
        }
        if !self.cancelled.is_empty() || self.purged_below > 0 {
            for (level_id, task_id) in leased {
                if self.is_cancelled(task_id) {
                    self.leases.expire(level_id, now);
                }
            }
        }
        for id in ended {
            self.cancelled_moved |= self.cancelled.remove(id);
        }
    }
}
