//! What a store says when an operation fails: every [`StoreError`] variant
//! says whether the operation certainly did not apply, may have applied,
//! or may be retried. `crate::api::status` maps them to gRPC codes.

/// What a store knows about a failed operation. Every variant says whether
/// the operation certainly did not apply, may have applied, or may be retried.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The range id moved on: another owner took the partition. Certainly
    /// not applied; the caller must drop the partition.
    #[error("fenced: the partition's range id is now {current_range_id}")]
    Fenced {
        /// The range id the partition has now.
        current_range_id: i64,
    },
    /// The partition is homed in another region: only a node of `region`
    /// may take it (its fence lives in that region's Paxos). Certainly not
    /// applied.
    #[error("the partition is homed in region {region:?}; only a node of that region may take it")]
    HomedElsewhere {
        /// The region the partition's metadata names.
        region: String,
    },
    /// The store could not be reached or refused the work. Certainly not
    /// applied; retry later.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The outcome is unknown (a timeout, a lost connection mid-write). May
    /// have applied; the caller must re-read before trusting what it holds.
    #[error("store outcome unknown: {0}")]
    Uncertain(String),
    /// The request is not valid for this store (too large, bad value).
    /// Certainly not applied; retrying the same request fails again.
    #[error("invalid store request: {0}")]
    Invalid(String),
    /// The stored data cannot be decoded or breaks an invariant.
    #[error("corrupt store data: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// True when the store certainly did not apply the operation.
    pub fn certainly_not_applied(&self) -> bool {
        !matches!(self, StoreError::Uncertain(_))
    }

    /// True when the same operation may succeed if tried again later.
    pub fn retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_) | StoreError::Uncertain(_))
    }
}

impl From<crate::core::engine::rows::MisplacedRecord> for StoreError {
    fn from(misplaced: crate::core::engine::rows::MisplacedRecord) -> Self {
        StoreError::Corrupt(misplaced.to_string())
    }
}

/// The result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;
