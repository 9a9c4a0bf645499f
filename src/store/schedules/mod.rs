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
//!
//! Every backend stores a record as the same bytes (JSON, through
//! [`encode_write`] and [`decode_record`]), with its version in a column of
//! its own for the compare-and-set. Requests the contract does not allow
//! are `Invalid` before anything is written: a record whose JSON is over
//! [`MAX_RECORD_BYTES`], a creation at a version other than 1, a
//! replacement at a version other than `expected + 1`, a shard at or above
//! [`SHARDS`], a list `limit` above [`MAX_LIST`]. Stored bytes that do not
//! decode, or that disagree with their row's id or version, are `Corrupt`.

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{StoreError, StoreResult};
use crate::core::schedules::{ScheduleSpec, ScheduleStats};

/// The shards schedules are spread over (fixed: a schedule's shard is a
/// hash of its id).
pub const SHARDS: u32 = 64;

/// The most records one list returns.
pub const MAX_LIST: usize = 1_000;

/// The most bytes of one record as stored (its JSON): 256 KiB.
pub const MAX_RECORD_BYTES: usize = 256 * 1024;

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
// One is returned per write and matched at once: boxing the record would
// only add an allocation to every conflict.
#[allow(clippy::large_enum_variant)]
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
    /// `false` when taken (nothing written). `Invalid` (nothing written) for
    /// another version or a record over [`MAX_RECORD_BYTES`].
    async fn create_schedule(&self, record: &ScheduleRecord) -> StoreResult<bool>;

    /// The record of `id`, `None` if absent.
    async fn schedule(&self, id: &str) -> StoreResult<Option<ScheduleRecord>>;

    /// Writes `record` (whose version must be `expected + 1`) if the stored
    /// one is at `expected`. `Invalid` (nothing written) for another version
    /// or a record over [`MAX_RECORD_BYTES`].
    async fn replace_schedule(&self, record: &ScheduleRecord, expected: u64) -> StoreResult<Replaced>;

    /// Deletes `id` if it is at version `expected`; `false` when absent or
    /// at another version.
    async fn delete_schedule(&self, id: &str, expected: u64) -> StoreResult<bool>;

    /// Up to `limit` records of `shard`, ascending by id, ids strictly after
    /// `after` if given. `Invalid` for a shard at or above [`SHARDS`] or a
    /// limit above [`MAX_LIST`].
    async fn list_schedules(&self, shard: u32, after: Option<&str>, limit: usize) -> StoreResult<Vec<ScheduleRecord>>;
}

/// The bytes `record` is stored as (JSON), after checking the write is one
/// the contract allows: a creation (`expected` is `None`) at version 1, a
/// replacement at `expected + 1`, of at most [`MAX_RECORD_BYTES`]. Every
/// backend calls it before it writes anything; the error is `Invalid`.
pub(crate) fn encode_write(record: &ScheduleRecord, expected: Option<u64>) -> StoreResult<Vec<u8>> {
    let id = &record.id;
    match expected {
        None if record.version != 1 => {
            return Err(StoreError::Invalid(format!(
                "schedule {id}: created at version {}; a schedule is created at version 1",
                record.version
            )));
        }
        Some(expected) if expected.checked_add(1) != Some(record.version) => {
            return Err(StoreError::Invalid(format!(
                "schedule {id}: written at version {} over version {expected}; a write is at the version it replaces + 1",
                record.version
            )));
        }
        _ => {}
    }
    // Cassandra keeps the version in a bigint.
    if i64::try_from(record.version).is_err() {
        return Err(StoreError::Invalid(format!("schedule {id}: version {} is over {}", record.version, i64::MAX)));
    }
    let bytes = serde_json::to_vec(record).expect("a schedule record serializes");
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(StoreError::Invalid(format!(
            "schedule record is {} bytes; the limit is {MAX_RECORD_BYTES}",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// A record from the bytes stored under `id` at `version` (see
/// [`encode_write`]); `Corrupt` if they do not decode or name another id or
/// version.
pub(crate) fn decode_record(id: &str, version: u64, bytes: &[u8]) -> StoreResult<ScheduleRecord> {
    let record: ScheduleRecord =
        serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt(format!("schedule {id}: {e}")))?;
    if record.id != id || record.version != version {
        return Err(StoreError::Corrupt(format!(
            "schedule {id} at version {version} holds the record of {} at version {}",
            record.id, record.version
        )));
    }
    Ok(record)
}

/// Checks the arguments of a list (see [`ScheduleStore::list_schedules`]);
/// `Invalid` for a shard at or above [`SHARDS`] or a limit above [`MAX_LIST`].
pub(crate) fn check_list(shard: u32, limit: usize) -> StoreResult<()> {
    if shard >= SHARDS {
        return Err(StoreError::Invalid(format!("schedule shard {shard}: there are {SHARDS} shards, from 0")));
    }
    if limit > MAX_LIST {
        return Err(StoreError::Invalid(format!("a list of {limit} schedules; the most is {MAX_LIST}")));
    }
    Ok(())
}
