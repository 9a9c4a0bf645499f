//! Cancelling one task by its id (CancelTask), or every task of a
//! partition at once (PurgeQueue).
//!
//! A dead letter is cancelled by deleting its row. Any other task is
//! cancelled by a mark kept in the partition's metadata: the task ends,
//! completed and never delivered, when it is next handed out (from the
//! buffer, a parked record or the store, once read) or, when a worker holds
//! it, at once: its lease runs out now, its heartbeats are refused, and a
//! report on it completes it whatever it says.
//!
//! A purge cancels with one number, the partition's next unused task id
//! when its write is planned: every task of a lower id was added before the
//! purge and ends as a marked one does; tasks added after it have higher
//! ids (ids grow with time in a partition, across owners too, see
//! `crate::core::engine::ids`) and stay. A task keeps its id when it is
//! retried, delayed, parked or moved, so the purge reaches it wherever it
//! is; only a dead letter outlives a purge, and one put back after it gets
//! a new id. The tasks of the buffer are taken at once as dispatches to no
//! one, a few hundred a write; the rest as the reader reaches them (a
//! delayed task when it is due, a parked one when its key is dispatched
//! again).
//!
//! Invariants: a mark is durable (in the metadata, fenced by the range id)
//! before the cancel is answered, so a new owner honours it; a marked task
//! reaches no worker after the mark is durable; marks are bounded
//! ([`MAX_CANCELLED`] per partition), and one goes when its task ends.

use crate::core::engine::rows::RecordKey;

/// The most cancelled tasks a partition keeps marks of before they are
/// reached; a cancel past it is refused.
pub const MAX_CANCELLED: usize = 1_000;

/// One task to cancel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cancel {
    /// The task's id in its partition.
    pub task_id: i64,
    /// The row of the task's dead letter, when it is one: deleted.
    pub dead_letter: Option<RecordKey>,
}

/// What a purge cancelled, as the partition counted it when the purge
/// landed (approximate as its counts are).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Purged {
    /// Tasks waiting, parked ones included.
    pub waiting: u64,
    /// Delayed tasks known in memory.
    pub delayed: u64,
    /// Tasks out with workers: their leases run out, their heartbeats are refused.
    pub running: u64,
}

/// Why a cancel was refused, with nothing written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CancelRefused {
    /// [`MAX_CANCELLED`] marks are kept already.
    #[error(
        "{MAX_CANCELLED} cancelled tasks of this partition wait to be reached (the most kept); try again once some are"
    )]
    Full,
}
