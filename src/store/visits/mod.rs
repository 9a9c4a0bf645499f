//! The origin-visit scheduler's storage contract, apart from its backends
//! (the embedded store, Cassandra, and an in-memory one for simulations).
//! Every backend passes the generic tests of `conformance` (behind the feature of that name).
//!
//! What is kept, per visit type:
//! - the **state** of each origin (its listing, visit statistics and
//!   placement), by URL;
//! - one **index** per (policy, lister): entries ascending by `(key, url)`;
//! - the **wake-ups**: origins waiting for their cooldowns, by time;
//! - the **queue-position clock** of origins without an update date.
//!
//! And per lister: its visit types and when its last listing finished, and
//! its counts per visit type.
//!
//! | operation | ordering and bounds | on error |
//! |---|---|---|
//! | [`VisitStore::read_origins`] | one state per URL asked, in order | retry |
//! | [`VisitStore::apply`] | each write whole: state, index entries, wake-up; counts best effort | some writes may have applied: re-read before writing those origins again |
//! | [`VisitStore::read_index`] | ascending `(key, url)`, keys in the range asked (from a key, inclusive; below one, exclusive), at most `limit` | retry |
//! | [`VisitStore::read_wakes`] | ascending `(at, url)`, `at` at or below `through`, at most `limit` | retry |
//! | [`VisitStore::add_lister`] | adds visit types to a lister (creating it); idempotent | retry |
//! | [`VisitStore::finish_listing`] | last write wins | retry |
//! | [`VisitStore::listers`] | every lister, by name | retry |
//! | [`VisitStore::metrics`] | one lister's counts per visit type | retry |
//! | [`VisitStore::queue_position`] / [`VisitStore::set_queue_position`] | last write wins; 0 when never set | retry |
//!
//! Counts are changed by deltas written with each origin's write. A write
//! whose outcome was uncertain and is applied again may count twice: the
//! counts are figures for operators, never used to decide.

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod memory;

use std::collections::BTreeSet;

use async_trait::async_trait;

use super::StoreResult;
use crate::clock::UnixMillis;
use crate::core::visits::{IndexEntry, KeyRange, ListerMetrics, OriginState, OriginWrite, Policy};

/// A lister, as the scheduler knows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListerRecord {
    /// Name and instance, e.g. `gitlab/framagit`.
    pub name: String,
    /// The visit types whose origins it lists.
    pub visit_types: BTreeSet<String>,
    /// When its last listing finished.
    pub listing_finished: Option<UnixMillis>,
}

/// The most index entries or wake-ups one read returns.
pub const MAX_READ: usize = 10_000;

/// What a backend must keep for the origin-visit scheduler (see
/// [`crate::store::visits`]).
#[async_trait]
pub trait VisitStore: Send + Sync + std::fmt::Debug {
    /// The state of each origin of `visit_type` at `urls`, in the order asked;
    /// `None` for one never written.
    async fn read_origins(&self, visit_type: &str, urls: &[String]) -> StoreResult<Vec<Option<OriginState>>>;

    /// Applies each of `writes` whole (state, index entries, wake-ups; counts
    /// best effort). On an error, some writes may have applied: re-read those
    /// origins before writing them again.
    async fn apply(&self, writes: &[OriginWrite]) -> StoreResult<()>;

    /// Up to `limit` entries of the index of (`visit_type`, `policy`,
    /// `lister`), ascending by `(key, url)`, with keys in `keys`.
    async fn read_index(
        &self,
        visit_type: &str,
        policy: Policy,
        lister: &str,
        keys: KeyRange,
        limit: usize,
    ) -> StoreResult<Vec<IndexEntry>>;

    /// Up to `limit` wake-ups of `visit_type` due at or before `through` (ms
    /// since the Unix epoch), as `(at, url)`, ascending.
    async fn read_wakes(
        &self,
        visit_type: &str,
        through: UnixMillis,
        limit: usize,
    ) -> StoreResult<Vec<(UnixMillis, String)>>;

    /// Adds `visit_types` to `lister`'s, creating the lister if it is new.
    /// Idempotent.
    async fn add_lister(&self, lister: &str, visit_types: &[String]) -> StoreResult<()>;

    /// Records that `lister`'s last listing finished at `at` (ms since the Unix
    /// epoch); the last write wins.
    async fn finish_listing(&self, lister: &str, at: UnixMillis) -> StoreResult<()>;

    /// Every lister, by name.
    async fn listers(&self) -> StoreResult<Vec<ListerRecord>>;

    /// `lister`'s counts, per visit type.
    async fn metrics(&self, lister: &str) -> StoreResult<Vec<(String, ListerMetrics)>>;

    /// The queue-position clock of `visit_type` (virtual ms); 0 if never set.
    async fn queue_position(&self, visit_type: &str) -> StoreResult<i64>;

    /// Sets the queue-position clock of `visit_type`; the last write wins.
    async fn set_queue_position(&self, visit_type: &str, position: i64) -> StoreResult<()>;
}

/// A state's bytes, as every backend stores them (JSON: readable with
/// `cqlsh`, and new fields can be added with defaults).
pub fn encode_state(state: &OriginState) -> Vec<u8> {
    serde_json::to_vec(state).expect("an origin state serializes")
}

/// A state from its bytes (see [`encode_state`]); `Corrupt` if they do not decode.
pub fn decode_state(bytes: &[u8]) -> StoreResult<OriginState> {
    serde_json::from_slice(bytes).map_err(|e| super::StoreError::Corrupt(format!("origin state: {e}")))
}
