//! What the engine asks its shell to do: one write, planned (tasks with ids
//! and passes, records to put and delete), a read, a delete of what every
//! owner has acknowledged.

use super::aged::WaitKey;
use super::cancel::{Cancel, CancelRefused};
use super::delayed::DelayKey;
use super::leases::LeaseError;
use super::outcomes::{Added, Finish, Finished};
use crate::clock::UnixMillis;
use crate::core::engine::rows::{PartitionWrite, RecordKey, RecordTask, RowRef, Section, StoredRow};
use crate::model::{FairLevel, PRIORITY_LEVELS, Priority, StoredTask, TaskSpec};

/// One write, planned: tasks with ids and passes assigned, records to put
/// and delete. The ack levels of the subqueues it adds to stay pinned until
/// the engine hears how it went ([`PartitionEngine::write_succeeded`](super::PartitionEngine::write_succeeded) or
/// [`PartitionEngine::write_failed`](super::PartitionEngine::write_failed)).
#[derive(Debug)]
pub struct AppendPlan {
    /// The range id the write is conditional on: the engine's when it planned.
    pub range_id: i64,
    /// What to write, all or nothing, with a store's `write`.
    pub write: PartitionWrite,
    /// One per spec, in order.
    pub added: Vec<Added>,
    /// One per finish, in order.
    pub finished: Vec<Result<Finished, LeaseError>>,
    /// Dead letters put back in the queue...
    pub redriven: usize,
    /// ...and removed without being put back: a task with the same dedup id
    /// is pending or running.
    pub redrive_duplicates: usize,
    /// The ids the dead letters moved in ([`PlanInput::bury`]) got, in order.
    pub buried: Vec<i64>,
    /// One per cancel ([`PlanInput::cancels`]), in order.
    pub cancels: Vec<Result<(), CancelRefused>>,
    /// Tasks this write marks cancelled.
    pub(super) cancelling: Vec<i64>,
    /// Cancelled tasks this write ends: their marks go once it is durable.
    pub(super) cancel_ended: Vec<i64>,
    /// Of those, the ones no report ended (counted as completed).
    pub(super) cancelled_unreported: u64,
    /// The threshold of the purge this write makes, if it makes one: every
    /// task of a lower id is cancelled.
    pub(super) purging: Option<i64>,
    /// Leases written by this write, to be delivered once it is durable.
    pub leases: Vec<(i64, StoredTask, UnixMillis)>,
    /// Of those, the ones of new tasks handed straight to a worker.
    pub(super) direct: Vec<i64>,
    pub(super) pinned: [bool; PRIORITY_LEVELS],
    /// Delayed records written.
    pub(super) delayed: Vec<(DelayKey, StoredTask)>,
    /// Delayed records made ready (taken out of the delayed buffer).
    pub(super) promoted: Vec<(DelayKey, StoredTask)>,
    /// Leases this write ends: (lease id, task id).
    pub(super) ending: Vec<(i64, i64)>,
    /// Of those, leases of tasks a worker got that ran out without a report.
    pub(super) expired: u64,
    pub(super) buckets: Vec<i64>,
    /// The delayed floor written with this plan (promotions up to it).
    pub(super) delayed_floor: Option<DelayKey>,
    /// The dead-letter floor written with this plan (re-drives up to it).
    pub(super) dead_letters_floor: Option<(i64, i64)>,
    /// Held leases whose records this write writes again higher: (id, seq).
    pub(super) moved_leases: Vec<(i64, i64)>,
    /// Tasks of held keys parked by this write, and their records.
    pub(super) parked: Vec<(RecordKey, StoredTask)>,
    /// Waiting records this write puts (a queue with a `max_wait`).
    pub(super) waiting: Vec<(WaitKey, Priority, FairLevel)>,
    /// Tasks past `max_wait` this write moves to the front.
    pub(super) moved: Vec<MovedTask>,
}

/// A task a write moves to the front of its subqueue: its waiting record,
/// the task as it was (at its old level), and whether it was in the buffer.
#[derive(Debug)]
pub(super) struct MovedTask {
    pub(super) key: WaitKey,
    pub(super) task: StoredTask,
    pub(super) buffered: bool,
}

impl AppendPlan {
    /// A row this write creates or changes, with what it writes there:
    /// reading it back tells whether the write landed.
    /// Only rows no earlier write can have written the same way: a new task
    /// row, or the write mark.
    pub fn probe(&self) -> Option<(RowRef, StoredRow)> {
        if let Some(task) = self.write.tasks.first() {
            return Some((RowRef::Task(task.priority, task.level), StoredRow::Task(task.clone())));
        }
        let mark = self.write.put.iter().find(|record| record.at.section == Section::WriteMark)?;
        Some((RowRef::Record(mark.at), StoredRow::Record(mark.value.clone())))
    }

    /// Whether new task `id` is leased by this write straight to a worker.
    pub fn leased_directly(&self, id: i64) -> bool {
        self.direct.contains(&id)
    }

    /// The tasks this write parks.
    pub fn parked_tasks(&self) -> impl Iterator<Item = i64> + '_ {
        self.parked.iter().map(|(_, task)| task.task_id)
    }

    /// The tasks whose leases this write ends (completed, failed or expired).
    pub fn ended_tasks(&self) -> impl Iterator<Item = i64> + '_ {
        self.ending.iter().map(|(_, task_id)| *task_id)
    }
}

/// What one write should carry besides what the engine itself has due
/// (lease records to write, expired leases, delayed tasks now ready).
#[derive(Debug)]
pub struct PlanInput<'a> {
    /// New tasks from producers, in order; each gets an id and a pass, and
    /// `added` answers it.
    pub specs: &'a [TaskSpec],
    /// Indexes (ascending) of specs to hand straight to a waiting worker:
    /// their lease is written instead of a backlog row ("sync match"). Such
    /// specs have no delay and no dedup id.
    pub direct: &'a [usize],
    /// Indexes (ascending) among `direct` of tasks matched in their key's
    /// turn beside a backlog (a quiet key's): their key's counter advances
    /// as if they had gone through the backlog, so that they count against
    /// its share.
    pub in_turn: &'a [usize],
    /// Workers' reports ending their leases, in order; `finished` answers each.
    pub finishes: &'a [Finish],
    /// Dead letters to put back in the queue, as read from the store.
    pub redrive: Vec<(RecordKey, StoredTask)>,
    /// Where the floor of dead letters rises with them: to the last letter
    /// put back while every letter from the floor up to it is put back too
    /// (none when a filter left the first letter where it is).
    pub redrive_floor: Option<(i64, i64)>,
    /// Dead letters moved in from elsewhere (an old generation's partition,
    /// after a forced failover), in order: each is written as a dead letter
    /// here, with an id of this partition, above the dead-letter floor, its
    /// failure time, message and task otherwise as they were.
    pub bury: &'a [RecordTask],
    /// Tasks to cancel (see `crate::core::engine::cancel`); `cancels`
    /// answers each.
    pub cancels: &'a [Cancel],
    /// Whether to purge the partition: cancel every task in it now (see
    /// `crate::core::engine::cancel`).
    pub purge: bool,
    /// The most bytes the write may carry ([`PartitionWrite::bytes`]). The
    /// commands above always go in (their sender keeps them within half of
    /// it); what the engine has due goes in while it fits, and the rest
    /// waits for the next write.
    pub max_bytes: usize,
}

impl Default for PlanInput<'_> {
    fn default() -> Self {
        PlanInput {
            specs: &[],
            direct: &[],
            in_turn: &[],
            finishes: &[],
            redrive: Vec::new(),
            redrive_floor: None,
            bury: &[],
            cancels: &[],
            purge: false,
            max_bytes: usize::MAX,
        }
    }
}

/// A read the reader should perform: tasks of `priority` strictly above `after`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadRequest {
    /// The subqueue to read.
    pub priority: Priority,
    /// The level to read strictly above: the subqueue's read level `R`.
    pub after: FairLevel,
    /// The most tasks to read (1 at least): what the buffer has room for.
    pub limit: usize,
}

/// A delete the collector should perform: everything of `priority` at or below `through`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcRequest {
    /// The subqueue to delete from.
    pub priority: Priority,
    /// The level to delete through: the ack level last made durable.
    pub through: FairLevel,
}

/// The append needs more ids than the block has left: take a new range id first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the id block of range {range_id} is used up")]
pub struct IdsExhausted {
    /// The range id whose block is used up.
    pub range_id: i64,
}
