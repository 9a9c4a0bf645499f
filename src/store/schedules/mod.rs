//! The schedules' storage contract, apart from its backends (the embedded
//! store and Cassandra). Every backend passes the generic tests of
//! `conformance` (behind the feature of that name).
//!
//! A schedule is one record, addressed by its id, and spread over
//! [`SHARDS`] shards by [`shard_of`]; a node fires the schedules of the
//! shards the cluster assigns it. Every change of a record is a
//! compare-and-set on its version: a node that read version `v` writes
//! `v + 1` only if the record is still at `v`. That fences every writer —
//! the firing node, a node that thinks it still owns the shard, the API
//! node recording a run's start or end — without a lock or a single
//! scheduler process.
//!
//! | operation | ordering and bounds | on error |
//! |---|---|---|
//! | [`ScheduleStore::create_schedule`] | create-if-absent at version 1; `false` if the id is taken | `Uncertain`: read it back |
//! | [`ScheduleStore::schedule`] | one record, linearizable with the compare-and-sets before it | retry |
//! | [`ScheduleStore::replace_schedule`] | compare-and-set: written at `expected + 1` only if at `expected`; [`Replaced::Conflict`] with the record as it is (or `None` if deleted) otherwise | `Uncertain`: read it back |
//! | [`ScheduleStore::delete_schedule`] | compare-and-set on the version; `false` if absent or at another version | `Uncertain`: read it back |
//! | [`ScheduleStore::list_schedules`] | one shard's records, ascending by id, ids strictly after `after`, at most `limit` (≤ [`MAX_LIST`]) | retry |

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::StoreResult;
use crate::core::schedules::{ScheduleSpec, ScheduleStats};

/// The shards schedules are spread over (fixed: a schedule's shard is a
/// hash of its id).
pub const SHARDS: u32 = 64;

/// The most records one list returns.
pub const MAX_LIST: usize = 1_000;

/// The shard of schedule `id`: FNV-1a of its bytes, modulo [`SHARDS`]
/// (stable across versions and platforms).
pub fn shard_of(id: &str) -> u32 {
    (crate::hash::fnv1a(id.bytes()) % u64::from(SHARDS)) as u32
}

/// What each run of a schedule is added as.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunTemplate {
    /// The queue its runs go to.
    pub queue: String,
    /// The payload handed to the worker.
    pub payload: Vec<u8>,
    /// The fairness key of its runs.
    pub fairness_key: String,
    /// The weight of that key (`None`: the queue's).
    pub fairness_weight: Option<f64>,
    /// The priority of its runs, 1 (highest) to 5.
    pub priority: u32,
}

/// A pause, with the operator's note.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    /// Why, in the operator's words.
    pub note: String,
    /// When it was paused, in ms since the Unix epoch.
    pub since: i64,
}

/// A schedule as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScheduleRecord {
    /// Its id: 1 to 200 bytes of `[A-Za-z0-9._:/-]`.
    pub id: String,
    /// Bumped by every write (the compare-and-set's operand).
    pub version: u64,
    /// When and how it runs.
    pub spec: ScheduleSpec,
    /// What each run is added as.
    pub template: RunTemplate,
    /// What it has done.
    pub stats: ScheduleStats,
    /// Set while it is paused.
    pub paused: Option<Pause>,
    /// Who created it (the authenticated principal), for operators.
    pub created_by: String,
}

/// The outcome of a compare-and-set.
#[derive(Clone, Debug, PartialEq)]
pub enum Replaced {
    /// Written, at the expected version + 1.
    Written,
    /// Not written: the record is at another version (as given), or gone.
    Conflict(Option<ScheduleRecord>),
}

/// What a backend must keep for schedules (see [`crate::store::schedules`]).
#[async_trait]
pub trait ScheduleStore: Send + Sync + std::fmt::Debug {
    /// Creates `record` (whose version must be 1) unless its id is taken;
    /// `false` when taken (nothing written).
    async fn create_schedule(&self, record: &ScheduleRecord) -> StoreResult<bool>;

    /// The record of `id`, `None` if absent.
    async fn schedule(&self, id: &str) -> StoreResult<Option<ScheduleRecord>>;

    /// Writes `record` (whose version must be `expected + 1`) if the stored
    /// one is at `expected`.
    async fn replace_schedule(&self, record: &ScheduleRecord, expected: u64) -> StoreResult<Replaced>;

    /// Deletes `id` if it is at version `expected`; `false` when absent or
    /// at another version.
    async fn delete_schedule(&self, id: &str, expected: u64) -> StoreResult<bool>;

    /// Up to `limit` records of `shard`, ascending by id, ids strictly after
    /// `after` if given.
    async fn list_schedules(&self, shard: u32, after: Option<&str>, limit: usize) -> StoreResult<Vec<ScheduleRecord>>;
}
