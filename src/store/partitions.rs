//! The partition contract: one conditional write at a time per partition,
//! fenced by its range id. Every write an owner makes is conditional on the
//! range id it took the partition at, so once another node takes it (the
//! range id moves on) none of the old owner's writes can land.

use async_trait::async_trait;

use super::{PartitionMeta, PartitionWrite, Record, RecordRange, RowRef, Section, StoreError, StoreResult, StoredRow};
use crate::model::{FairLevel, PartitionId, Priority, StoredTask};

/// The metadata `stored` becomes when `owner`, a node fencing in `region`,
/// takes it at range `expected + 1`: `HomedElsewhere` if it is homed in
/// another region. A taker of no region (its fence spans every region:
/// automatic failover) may take any. The caller has caught up a partition
/// written in another region.
pub(crate) fn taken_meta(
    stored: PartitionMeta,
    expected: i64,
    owner: &str,
    region: &str,
) -> StoreResult<PartitionMeta> {
    if !region.is_empty() && !stored.region.is_empty() && stored.region != region {
        return Err(StoreError::HomedElsewhere { region: stored.region });
    }
    Ok(PartitionMeta {
        range_id: expected + 1,
        owner: owner.to_owned(),
        region: region.to_owned(),
        moved_from: String::new(),
        ..stored
    })
}

/// Metadata written with an append must carry the range id it is written under.
pub(crate) fn check_metadata_range(range_id: i64, metadata: Option<&PartitionMeta>) -> StoreResult<()> {
    match metadata {
        Some(meta) if meta.range_id != range_id => {
            Err(StoreError::Invalid(format!("metadata of range {} written under range {range_id}", meta.range_id)))
        }
        _ => Ok(()),
    }
}
/// The most buckets one [`PartitionStore::read_buckets`] names.
pub const MAX_BUCKETS_PER_READ: usize = 100;

/// A partition's rows: its metadata (with the fencing range id), its
/// tasks by priority and level, and its records by section and key.
#[async_trait]
pub trait PartitionStore: Send + Sync + std::fmt::Debug + 'static {
    /// The partition's metadata as stored, `None` if it was never created.
    /// Not linearizable with concurrent writes: use it to learn the range id
    /// to pass to [`PartitionStore::take_ownership`].
    async fn load_partition(&self, partition: &PartitionId) -> StoreResult<Option<PartitionMeta>>;

    /// Takes (or renews) ownership: if the stored range id is `expected`
    /// (0: the partition does not exist yet, and is created), it becomes
    /// `expected + 1` and the stored metadata is returned with it. Every
    /// write of a previous owner fails from then on; every write that
    /// succeeded before is visible to the new owner's reads.
    ///
    /// The partition is taken for `region` (the region whose Paxos fences the
    /// taker; empty: the fence spans every region): a partition whose
    /// metadata names another region is refused (`HomedElsewhere`) unless
    /// `region` is empty, and one written in another region (its metadata
    /// names another, or `moved_from` is set) is first caught up, so
    /// that every write acknowledged in the old region is visible to reads
    /// in this one (on Cassandra: the partition read at `EACH_QUORUM`, which
    /// repairs the replicas it reads). The returned metadata names `region`
    /// and no `moved_from`.
    ///
    /// Errors: `Fenced` if the range id is not `expected` (nothing changed);
    /// `HomedElsewhere` (nothing changed); `Uncertain` if the outcome is
    /// unknown (load and try again); `Unavailable` when the old region of a
    /// moved partition cannot be read. `owner` is recorded in the metadata,
    /// for operators.
    async fn take_ownership(
        &self,
        partition: &PartitionId,
        expected: i64,
        owner: &str,
        region: &str,
    ) -> StoreResult<PartitionMeta>;

    /// Applies the whole `write` at once, if the range id is still
    /// `range_id`. Tasks' levels are unique; writing a level twice replaces
    /// the task.
    ///
    /// Errors: `Fenced` (nothing written, the caller lost the partition),
    /// `Unavailable` (nothing written, may retry), `Uncertain` (may have
    /// been written: re-read before trusting the buffer), `Invalid` (too
    /// large for the backend, or metadata of another range; nothing written).
    async fn write(&self, partition: &PartitionId, range_id: i64, write: &PartitionWrite) -> StoreResult<()>;

    /// Writes `tasks` (and `metadata`, if given): a [`PartitionStore::write`] with no records.
    async fn append(
        &self,
        partition: &PartitionId,
        range_id: i64,
        tasks: &[StoredTask],
        metadata: Option<&PartitionMeta>,
    ) -> StoreResult<()> {
        let write = PartitionWrite { tasks: tasks.to_vec(), metadata: metadata.cloned(), ..PartitionWrite::default() };
        self.write(partition, range_id, &write).await
    }

    /// What one row holds, `None` if absent. Linearizable with every conditional write that
    /// completed or was fenced before it: after an append of unknown outcome
    /// and a [`PartitionStore::take_ownership`] by the same owner, it tells whether the
    /// append landed (serial consistency on Cassandra).
    async fn read_row(&self, partition: &PartitionId, row: RowRef) -> StoreResult<Option<StoredRow>>;

    /// Up to `limit` records of `range` (keys in `(after, through]` of one
    /// section), in ascending key order. Fewer than `limit` means there were
    /// no more. Only the range is read: on Cassandra, a clustering slice
    /// bounded on both sides.
    async fn read_records(&self, partition: &PartitionId, range: RecordRange, limit: usize)
    -> StoreResult<Vec<Record>>;

    /// The records of each of `buckets` (keys `(bucket, _)` of `section`),
    /// at most `per_bucket` of each, in ascending key order. At most
    /// [`MAX_BUCKETS_PER_READ`] buckets. Only those buckets are read: on
    /// Cassandra, one query with a clustering slice per bucket.
    async fn read_buckets(
        &self,
        partition: &PartitionId,
        section: Section,
        buckets: &[i64],
        per_bucket: usize,
    ) -> StoreResult<Vec<Record>>;

    /// Up to `limit` tasks of the subqueue with level strictly above `after`,
    /// in ascending level order. Fewer than `limit` means there were no more
    /// at the time of the read.
    async fn read(
        &self,
        partition: &PartitionId,
        priority: Priority,
        after: FairLevel,
        limit: usize,
    ) -> StoreResult<Vec<StoredTask>>;

    /// Deletes every task of the subqueue at or below `through`. Idempotent
    /// and unconditional: callers only delete at or below their ack level.
    async fn delete_through(&self, partition: &PartitionId, priority: Priority, through: FairLevel) -> StoreResult<()>;

    /// Deletes every record of `section` with a key at or below `through`.
    /// Idempotent and unconditional: callers only delete records that no
    /// owner reads any more (below a floor the metadata records).
    async fn delete_records_through(
        &self,
        partition: &PartitionId,
        section: Section,
        through: (i64, i64),
    ) -> StoreResult<()>;

    /// Writes the metadata if the range id is still `metadata.range_id`.
    /// Errors as for [`PartitionStore::append`].
    async fn update_metadata(&self, partition: &PartitionId, metadata: &PartitionMeta) -> StoreResult<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn homed(region: &str, moved_from: &str) -> PartitionMeta {
        PartitionMeta {
            range_id: 3,
            owner: "n".into(),
            region: region.into(),
            moved_from: moved_from.into(),
            ..PartitionMeta::default()
        }
    }

    #[test]
    fn a_hand_over_names_the_next_region_only_when_it_changes() {
        let to_b = homed("a", "").handed_over("b");
        assert_eq!((to_b.owner.as_str(), to_b.region.as_str(), to_b.moved_from.as_str()), ("", "b", "a"));
        assert_eq!(to_b.range_id, 3, "a hand-over keeps the range id (the next owner fences)");
        let within = homed("a", "").handed_over("a");
        assert_eq!((within.region.as_str(), within.moved_from.as_str()), ("a", ""));
        let global = homed("", "").handed_over("b");
        assert_eq!((global.region.as_str(), global.moved_from.as_str()), ("", ""), "no region: stays so");
    }

    #[test]
    fn a_taker_of_another_region_is_refused_and_one_of_none_takes_any() {
        let stored = homed("a", "");
        assert_eq!(
            taken_meta(stored.clone(), 3, "m", "b").unwrap_err(),
            StoreError::HomedElsewhere { region: "a".into() }
        );
        let taken = taken_meta(stored.clone(), 3, "m", "a").unwrap();
        assert_eq!((taken.range_id, taken.owner.as_str(), taken.region.as_str()), (4, "m", "a"));
        assert_eq!(taken_meta(stored, 3, "m", "").unwrap().region, "");
        let moved = taken_meta(homed("b", "a"), 3, "m", "b").unwrap();
        assert_eq!((moved.region.as_str(), moved.moved_from.as_str()), ("b", ""), "taking clears the move");
    }
}
