//! Cancelling one task by its id (CancelTask).
//!
//! A dead letter is cancelled by deleting its row. Any other task is
//! cancelled by a mark kept in the partition's metadata: the task ends,
//! completed and never delivered, when it is next handed out (from the
//! buffer, a parked record or the store, once read) or, when a worker holds
//! it, at once: its lease runs out now, its heartbeats are refused, and a
//! report on it completes it whatever it says.
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

/// Why a cancel was refused, with nothing written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CancelRefused {
    /// [`MAX_CANCELLED`] marks are kept already.
    #[error(
        "{MAX_CANCELLED} cancelled tasks of this partition wait to be reached (the most kept); try again once some are"
    )]
    Full,
}
