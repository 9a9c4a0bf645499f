//! What the writer, the reader and the keeper of one partition share: its
//! engine (touched only under its mutex, never across an await), its store,
//! its state, and the pollers waiting for leases to become durable.
//!
//! Invariants: the engine is touched only under its mutex, never across an
//! await; a poller gets its task only once the write of its lease record
//! succeeded ([`Shared::deliver`]); once the state leaves `Active` it never
//! returns to it.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, oneshot};

use super::config::WriterConfig;
use super::error::{CancelError, FinishError, PartitionError};
use crate::clock::{SharedClock, UnixMillis};
use crate::core::engine::{Added, Cancel, DeadLetterFilter, Finish, Finished, PartitionEngine, Purged};
use crate::hash::IdMap;
use crate::model::{PartitionId, StoredTask, TaskSpec};
use crate::store::{PartitionStore, RecordTask, StoreError};

/// Called after new tasks became ready, so that waiting pollers get them.
pub type ReadyHook = Arc<dyn Fn() + Send + Sync>;

/// Whether a partition may still hand out tasks and write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PartitionState {
    /// Owned and serving: it takes writes and hands out tasks.
    Active = 0,
    /// Fenced by a newer owner: hands out nothing more.
    Lost = 1,
    /// Released by this node (handed over, or at shutdown): takes no more writes.
    Closed = 2,
}

/// What a re-drive of dead letters did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Redriven {
    /// Put back in the queue.
    pub redriven: usize,
    /// Removed without being put back: a task with the same dedup id is
    /// pending or running.
    pub duplicates: usize,
    /// Read and left where they are: the filter did not choose them.
    pub passed_over: usize,
    /// Stopped before the last letter, at the limit asked for or at the
    /// bound of letters read in one call: another call may find more.
    pub more: bool,
}

/// What one write of a re-drive is to do: put back up to `limit` letters
/// the filter chooses, reading at most `read` letters after `after` (or
/// after the floor, if that is higher).
pub(super) struct RedriveStep {
    pub limit: usize,
    pub filter: Arc<DeadLetterFilter>,
    pub after: Option<(i64, i64)>,
    pub read: usize,
}

/// What one write of a re-drive did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct RedriveStepDone {
    pub redriven: usize,
    pub duplicates: usize,
    /// Letters read, those put back or removed included.
    pub read: usize,
    /// The key of the last letter read; where the next step reads after.
    pub through: Option<(i64, i64)>,
    /// No letter is left after `through`.
    pub end: bool,
}

/// A task on its way to the worker that polled for it: sent once its lease
/// record is durable.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    /// The partition of the queue the task came from.
    pub partition: u32,
    /// The task, as leased.
    pub task: StoredTask,
    /// When the lease runs out unless heartbeated, in ms since the Unix epoch.
    pub lease_deadline: UnixMillis,
}

pub(super) enum WriteCommand {
    /// New tasks; with `deliver`, a single task to lease at once to that
    /// poller (`in_turn`: in its key's turn beside a backlog, see
    /// [`crate::core::engine::PlanInput::in_turn`]).
    Append {
        specs: Vec<TaskSpec>,
        deliver: Option<oneshot::Sender<Delivery>>,
        in_turn: bool,
        reply: AppendReply,
    },
    Finish {
        finish: Finish,
        reply: FinishReply,
    },
    Redrive {
        step: RedriveStep,
        reply: RedriveReply,
    },
    /// Dead letters of another partition to write as this one's.
    Bury {
        letters: Vec<RecordTask>,
        reply: BuryReply,
    },
    /// A task to cancel.
    Cancel {
        cancel: Cancel,
        reply: CancelReply,
    },
    /// Cancel every task of the partition (see `crate::core::engine::cancel`).
    Purge {
        reply: PurgeReply,
    },
    SyncMetadata,
}

impl WriteCommand {
    pub(super) fn fail(self, error: PartitionError) {
        match self {
            WriteCommand::Append { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            WriteCommand::Finish { reply, .. } => {
                let _ = reply.send(Err(FinishError::Partition(error)));
            }
            WriteCommand::Redrive { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            WriteCommand::Bury { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            WriteCommand::Cancel { reply, .. } => {
                let _ = reply.send(Err(CancelError::Partition(error)));
            }
            WriteCommand::Purge { reply } => {
                let _ = reply.send(Err(error));
            }
            WriteCommand::SyncMetadata => {}
        }
    }
}

pub(super) struct Shared {
    pub id: PartitionId,
    /// This node's name, recorded as the owner when it takes the partition.
    pub node: String,
    /// This node's region, recorded as the partition's when it takes it.
    pub region: String,
    pub engine: Mutex<PartitionEngine>,
    pub store: Arc<dyn PartitionStore>,
    pub clock: SharedClock,
    pub wake_reader: Notify,
    /// Wakes the writer when the engine has a write due without a command.
    pub wake_writer: Notify,
    /// Pollers waiting for tasks whose lease records are being written, by lease id.
    pub deliveries: Mutex<IdMap<oneshot::Sender<Delivery>>>,
    pub on_ready: ReadyHook,
    pub state: AtomicU8,
    pub config: WriterConfig,
    /// The region a release hands the partition over to: the writer names it
    /// in the metadata only in its last write, after every queued one.
    pub hand_over_to: Mutex<Option<String>>,
    /// Set once the last metadata write of a stopping partition landed (or
    /// the partition was found taken): nothing is left to hand over.
    pub handed_over: std::sync::atomic::AtomicBool,
}

impl Shared {
    pub(super) fn engine(&self) -> MutexGuard<'_, PartitionEngine> {
        self.engine.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn state(&self) -> PartitionState {
        match self.state.load(Ordering::Acquire) {
            0 => PartitionState::Active,
            1 => PartitionState::Lost,
            _ => PartitionState::Closed,
        }
    }

    pub(super) fn set_state(&self, state: PartitionState) {
        self.state.fetch_max(state as u8, Ordering::AcqRel);
    }

    pub(super) fn lost(&self) -> PartitionError {
        PartitionError::Lost(self.id.to_string())
    }

    fn deliveries(&self) -> MutexGuard<'_, IdMap<oneshot::Sender<Delivery>>> {
        self.deliveries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Hands leases now durable to their pollers; a lease whose poller has
    /// gone goes back to the queue.
    pub(super) fn deliver(&self, leases: Vec<(i64, StoredTask, UnixMillis)>) {
        let mut undelivered = Vec::new();
        {
            let mut deliveries = self.deliveries();
            for (id, task, lease_deadline) in leases {
                let delivery = Delivery { partition: self.id.partition, task, lease_deadline };
                let sent = deliveries.remove(&id).is_some_and(|to| to.send(delivery).is_ok());
                if !sent {
                    undelivered.push(id);
                }
            }
        }
        if !undelivered.is_empty() {
            let now = self.clock.now_ms();
            let mut engine = self.engine();
            for id in undelivered {
                engine.lease_undelivered(id, now);
            }
            drop(engine);
            self.wake_writer.notify_one();
        }
    }

    /// Pollers to send the tasks of these leases to, once they are durable.
    pub(super) fn await_leases(&self, pollers: impl Iterator<Item = (i64, oneshot::Sender<Delivery>)>) {
        self.deliveries().extend(pollers);
    }

    /// Leases that were not written: their pollers get nothing.
    pub(super) fn forget_deliveries(&self, ids: &[i64]) {
        let mut deliveries = self.deliveries();
        for id in ids {
            deliveries.remove(id);
        }
    }

    pub(super) fn drop_deliveries(&self) {
        self.deliveries().clear();
    }
}

pub(super) type AppendReply = oneshot::Sender<Result<Vec<Added>, PartitionError>>;
pub(super) type FinishReply = oneshot::Sender<Result<Finished, FinishError>>;
pub(super) type RedriveReply = oneshot::Sender<Result<RedriveStepDone, PartitionError>>;
/// The ids the dead letters got here, in order.
pub(super) type BuryReply = oneshot::Sender<Result<Vec<i64>, PartitionError>>;
pub(super) type CancelReply = oneshot::Sender<Result<(), CancelError>>;
pub(super) type PurgeReply = oneshot::Sender<Result<Purged, PartitionError>>;

/// A fenced write means another node owns the partition: stop handing out.
pub(super) fn on_write_error(shared: &Shared, error: StoreError) -> PartitionError {
    if let StoreError::Fenced { current_range_id } = error {
        tracing::warn!(partition = %shared.id, current_range_id, "fenced: dropping the partition");
        shared.set_state(PartitionState::Lost);
        (shared.on_ready)();
        return shared.lost();
    }
    PartitionError::Store(error)
}
