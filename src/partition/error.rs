//! Why a partition could not do what was asked.
//!
//! Invariant: every error says whether the request may have been applied
//! ([`PartitionError::certainly_not_applied`]), so that a caller retries
//! only what was certainly not written.

use crate::core::engine::{CancelRefused, LeaseError};
use crate::store::StoreError;

/// Why a partition could not do what was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    /// The store failed; see [`StoreError`] for whether anything was written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Another owner took the partition; nothing was written.
    #[error("partition {0} is owned by another node now")]
    Lost(String),
    /// The partition is shutting down; nothing was written.
    #[error("partition {0} is shutting down")]
    Closed(String),
}

/// A record of the wrong kind in a partition's rows is corrupt stored data.
impl From<crate::core::engine::rows::MisplacedRecord> for PartitionError {
    fn from(misplaced: crate::core::engine::rows::MisplacedRecord) -> Self {
        PartitionError::Store(misplaced.into())
    }
}

impl PartitionError {
    /// True when nothing was written: the request may be retried as it is.
    pub fn certainly_not_applied(&self) -> bool {
        match self {
            PartitionError::Store(e) => e.certainly_not_applied(),
            PartitionError::Lost(_) | PartitionError::Closed(_) => true,
        }
    }
}

/// Why a finish (complete or fail) was not recorded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FinishError {
    /// The token no longer holds the lease: nothing was written.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// The partition could not record it; see [`PartitionError`].
    #[error(transparent)]
    Partition(#[from] PartitionError),
}

/// Why a cancel was not recorded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CancelError {
    /// Refused with nothing written: too many cancelled tasks wait.
    #[error(transparent)]
    Refused(#[from] CancelRefused),
    /// The partition could not record it; see [`PartitionError`].
    #[error(transparent)]
    Partition(#[from] PartitionError),
}
