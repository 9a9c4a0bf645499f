//! Tasks past the queue's `max_wait`: their waiting records, read and
//! written, and the moves that take the tasks to the front of their
//! subqueues (see `crate::core::engine::aged`).

use super::PartitionEngine;
use crate::clock::{UnixMillis, millis};
use crate::core::engine::aged::WaitKey;
use crate::core::engine::plan::{AppendPlan, MovedTask};
use crate::core::engine::policy::DispatchOrder;
use crate::core::engine::rows::{Record, RecordKey, RecordValue, Section};
use crate::core::engine::sizes::{SMALL_ROW_BYTES, requeue_bytes};
use crate::core::engine::subqueue::LevelState;
use crate::model::{FairLevel, Priority, StoredTask};

/// The most tasks one write moves to the front.
pub(super) const MAX_MOVES_PER_WRITE: usize = 64;

/// The bytes a waiting record adds to a write.
pub(super) const WAITING_RECORD_BYTES: usize = SMALL_ROW_BYTES;

/// What becomes of a due waiting record.
enum Due {
    /// Its task waits no more: the floor may pass it.
    Resolved,
    /// Its task is to be moved, from the buffer or from the row read.
    Move(StoredTask, bool),
    /// Its row is to be read first, or a write in flight decides.
    Later,
}

impl PartitionEngine {
    /// The queue's `max_wait` in ms, when tasks are moved to the front past
    /// it: a `max_wait` is set and the ordering is fair (FIFO and deadline
    /// orderings ignore it).
    pub(super) fn max_wait_ms(&self) -> Option<i64> {
        let max_wait = self.config.tasks.max_wait;
        (!max_wait.is_zero() && self.config.tasks.ordering == DispatchOrder::Fair).then(|| millis(max_wait))
    }

    /// The read of waiting records to make before planning, if the window
    /// runs low.
    pub fn waiting_read(&self) -> Option<(WaitKey, usize)> {
        self.max_wait_ms()?;
        self.aged.read_request()
    }

    /// Takes the waiting records read strictly above `after` (at most
    /// `limit` asked, from [`Self::waiting_read`]).
    pub fn apply_waiting_read(&mut self, after: WaitKey, records: Vec<(WaitKey, Priority, FairLevel)>, limit: usize) {
        self.aged.apply_read(after, records, limit);
    }

    /// Rows of due tasks above the read level to read before planning (at
    /// most `max`): their tasks are moved once read.
    pub fn aged_reads(&self, now: UnixMillis, max: usize) -> Vec<(WaitKey, Priority, FairLevel)> {
        let Some(max_wait) = self.max_wait_ms() else { return Vec::new() };
        self.aged
            .due(now, max_wait)
            .filter(|(_, row)| row.fetched.is_none())
            .filter(|(_, row)| self.subqueues[row.priority.index()].level_state(row.level) == LevelState::Unread)
            .take(max)
            .map(|(key, row)| (key, row.priority, row.level))
            .collect()
    }

    /// The row of an [`Self::aged_reads`] entry, as read: `None` if it is gone.
    pub fn apply_aged_read(&mut self, key: WaitKey, found: Option<StoredTask>) {
        match found {
            None => self.aged.resolved(key),
            Some(task) => {
                if let Some(row) = self.aged.row_mut(key) {
                    row.fetched = Some(task);
                }
            }
        }
    }

    /// Whether a task has waited past `max_wait` and may still need moving.
    pub(super) fn aged_due(&self, now: UnixMillis) -> bool {
        self.max_wait_ms().is_some_and(|max_wait| self.aged.next_due(max_wait).is_some_and(|due| due <= now))
    }

    /// The waiting record of `task`, just written to the backlog, if the
    /// queue has a `max_wait`.
    pub(super) fn plan_waiting_record(&mut self, plan: &mut AppendPlan, task: &StoredTask) {
        if self.max_wait_ms().is_none() {
            return;
        }
        let key = self.aged.key_for(task.created_at_unix_ms, task.level.id);
        plan.write.put.push(Record {
            at: RecordKey { section: Section::Waiting, key },
            value: RecordValue::Waiting { priority: task.priority, level: task.level },
        });
        plan.waiting.push((key, task.priority, task.level));
    }

    /// Moves due tasks to the front, oldest first, while `fits` takes them
    /// (at most [`MAX_MOVES_PER_WRITE`]); records whose tasks wait no more
    /// are resolved (every due one in the window: one pass over it, bounded
    /// by `engine.buffer_tasks`). A task that cannot go in yet (no room, its
    /// row not read yet, a write in flight) keeps its place, and those after
    /// it wait too, so that moves keep the order of the records.
    pub(super) fn plan_aged_moves(
        &mut self,
        plan: &mut AppendPlan,
        now: UnixMillis,
        fits: &mut dyn FnMut(usize) -> bool,
    ) {
        let Some(max_wait) = self.max_wait_ms() else { return };
        let due: Vec<(WaitKey, Due)> = self
            .aged
            .due(now, max_wait)
            .map(|(key, row)| {
                let subqueue = &self.subqueues[row.priority.index()];
                let due = match subqueue.level_state(row.level) {
                    LevelState::Gone => Due::Resolved,
                    LevelState::InFlight => Due::Later,
                    LevelState::Ready => Due::Move(subqueue_task(subqueue, row.level), true),
                    LevelState::Unread => match &row.fetched {
                        Some(task) => Due::Move(task.clone(), false),
                        None => Due::Later,
                    },
                };
                (key, due)
            })
            .collect();
        let mut moving = true;
        for (key, due) in due {
            match due {
                Due::Resolved => self.aged.resolved(key),
                // Its row is read first, or a write in flight decides: the
                // younger ones wait for it, so that moves keep their order.
                Due::Later => moving = false,
                Due::Move(task, buffered) if moving => {
                    moving = plan.moved.len() < MAX_MOVES_PER_WRITE && fits(requeue_bytes(&task));
                    if moving {
                        self.plan_move(plan, key, task, buffered);
                    }
                }
                Due::Move(..) => {}
            }
        }
    }

    /// Deletes `task`'s row and writes it again at the ack level's pass with
    /// a new level id: the front of its subqueue, behind the tasks moved
    /// before it.
    fn plan_move(&mut self, plan: &mut AppendPlan, key: WaitKey, task: StoredTask, buffered: bool) {
        let (priority, from) = (task.priority, task.level);
        let index = priority.index();
        let subqueue = &mut self.subqueues[index];
        if buffered {
            if subqueue.take_to_move(from).is_none() {
                return;
            }
        } else {
            subqueue.moving_unread(from);
        }
        self.pin(plan, index);
        let pass = self.subqueues[index].ack.pass;
        let id = self.ids.take().expect("checked the block has room");
        let moved = StoredTask { level: FairLevel::new(pass, id), ..task.clone() };
        plan.write.delete_tasks.push((priority, from));
        plan.write.tasks.push(moved);
        if let Some(row) = self.aged.row_mut(key) {
            row.moving = true;
        }
        plan.moved.push(MovedTask { key, task, buffered });
    }

    /// The moves and waiting records of a durable write.
    pub(super) fn aged_written(&mut self, moved: &[MovedTask], waiting: &[(WaitKey, Priority, FairLevel)]) {
        for moved in moved {
            self.subqueues[moved.task.priority.index()].moved(moved.task.level);
            self.aged.resolved(moved.key);
        }
        self.aged.written(waiting.iter().copied());
    }

    /// The moves and waiting records of a write that failed. A task moved
    /// from the buffer is ready there again; if the write may have landed,
    /// its old row may be gone, so the reader reads again from below it.
    /// The row of one moved from above the read level is read again before
    /// it is moved.
    pub(super) fn aged_not_written(
        &mut self,
        moved: &[MovedTask],
        waiting: &[(WaitKey, Priority, FairLevel)],
        may_have_applied: bool,
    ) {
        for moved in moved {
            let subqueue = &mut self.subqueues[moved.task.priority.index()];
            if moved.buffered {
                subqueue.restore_moved(moved.task.clone());
            } else {
                subqueue.move_failed(moved.task.level, may_have_applied);
            }
            if let Some(row) = self.aged.row_mut(moved.key) {
                row.moving = false;
                if may_have_applied {
                    row.fetched = None;
                }
            }
        }
        // After every restore: a rewind drops the ready tasks above its level.
        let capacity = self.config.buffer_tasks;
        for moved in moved.iter().filter(|moved| moved.buffered) {
            let subqueue = &mut self.subqueues[moved.task.priority.index()];
            if may_have_applied {
                subqueue.rewind_before(moved.task.level);
            }
            // Other writes may have filled the buffer while the move was in flight.
            subqueue.fit(capacity);
        }
        self.aged.not_written(waiting.iter().map(|(key, _, _)| *key), may_have_applied);
    }

    /// Tasks waiting past `max_wait` at `now` in this partition: the ready
    /// ones in the buffer, and the due records of tasks above the read
    /// level (at most the window's: a lower bound when more are due). 0
    /// without a `max_wait`.
    pub(super) fn over_max_wait(&self, now: UnixMillis) -> u64 {
        let Some(max_wait) = self.max_wait_ms() else { return 0 };
        let buffered: usize = self.subqueues.iter().map(|s| s.ready_older_than(now - max_wait)).sum();
        let unread = self
            .aged
            .due(now, max_wait)
            .filter(|(_, row)| self.subqueues[row.priority.index()].level_state(row.level) == LevelState::Unread)
            .count();
        (buffered + unread) as u64
    }
}

/// The ready task at `level` of `subqueue` (its state said it is there).
fn subqueue_task(subqueue: &crate::core::engine::subqueue::Subqueue, level: FairLevel) -> StoredTask {
    subqueue.ready_task(level).cloned().expect("a ready level holds a task")
}
