//! Finding one task by its id (see `crate::core::engine::lookup`): read
//! only, and not on the hot path; each look goes over every lease, buffered
//! task and delayed or parked task in memory.

use super::PartitionEngine;
use crate::clock::UnixMillis;
use crate::core::engine::lookup::{FoundTask, StoreSearch, StoredPlace, TaskState, Waiting};
use crate::model::StoredTask;

impl PartitionEngine {
    /// The task with id `task_id` as memory has it; `None` when it is not
    /// there (see [`Self::store_search`] for where else it may be).
    pub fn find_task(&self, task_id: i64, now: UnixMillis) -> Option<FoundTask> {
        let mut found = self.find_in_memory(task_id, now)?;
        found.cancelled = self.is_cancelled(task_id);
        Some(found)
    }

    /// Whether the task of `task_id` waits, ready, in a subqueue's buffer
    /// (not parked, leased or delayed).
    #[cfg(test)]
    pub(crate) fn is_buffered(&self, task_id: i64) -> bool {
        self.subqueues.iter().any(|s| s.find_ready(task_id).is_some())
    }

    fn find_in_memory(&self, task_id: i64, now: UnixMillis) -> Option<FoundTask> {
        if let Some(lease) = self.leases.of_task(task_id) {
            let state = TaskState::Leased {
                deadline: lease.deadline,
                worker: lease.worker.clone(),
                delivered: lease.delivered,
            };
            return Some(FoundTask { task: lease.task.clone(), state, cancelled: false });
        }
        let ready = self.subqueues.iter().find_map(|s| s.find_ready(task_id));
        if let Some(task) = ready.or_else(|| self.parked.find_ready(task_id)) {
            return Some(self.waiting(task.clone(), now));
        }
        self.delayed.find(task_id).map(|((ready_at, _), task)| FoundTask {
            task: task.clone(),
            state: TaskState::Delayed { ready_at },
            cancelled: false,
        })
    }

    /// Where the store holds what memory does not.
    pub fn store_search(&self) -> StoreSearch {
        StoreSearch {
            backlog_above: self.subqueues.iter().map(|s| (s.priority, s.read)).collect(),
            delayed_above: self.delayed.unread_after(),
            parked_above: self.parked.unread(),
            dead_letters_above: self.dead_letters_through,
        }
    }

    /// A task found at `place` in the store, as it stands now: handed out
    /// meanwhile if a lease of it runs.
    pub fn found_in_store(&self, task: StoredTask, place: StoredPlace, now: UnixMillis) -> FoundTask {
        if let Some(found) = self.leases.of_task(task.task_id).and_then(|_| self.find_task(task.task_id, now)) {
            return found;
        }
        let cancelled = self.is_cancelled(task.task_id);
        match place {
            StoredPlace::Waiting => FoundTask { cancelled, ..self.waiting(task, now) },
            StoredPlace::Delayed { ready_at } => FoundTask { task, state: TaskState::Delayed { ready_at }, cancelled },
            // A dead letter outlives a purge, and a cancel removes it.
            StoredPlace::Dead { failed_at, message, row } => {
                FoundTask { task, state: TaskState::Dead { failed_at, message, row }, cancelled: false }
            }
        }
    }

    /// Whether no task of this partition ever had the id: ids grow with
    /// time, and it is above every id handed out.
    pub fn id_unused(&self, task_id: i64) -> bool {
        task_id >= self.ids.next_unused()
    }

    fn waiting(&self, task: StoredTask, now: UnixMillis) -> FoundTask {
        let key = task.fairness_key.as_str();
        let limit = self.config.tasks.key_concurrency;
        let running = self.leases.running(key);
        let waiting = if self.pauses.holds_all() {
            Waiting::QueuePaused
        } else if self.pauses.holds(key) {
            Waiting::KeyPaused
        } else if limit > 0 && running >= limit {
            Waiting::KeyConcurrency { running, limit }
        } else if !self.rates.allows(key, now) {
            Waiting::KeyRate
        } else {
            Waiting::Turn
        };
        FoundTask { task, state: TaskState::Pending(waiting), cancelled: false }
    }
}
