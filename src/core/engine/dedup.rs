//! The dedup ids of a partition's pending, delayed and running tasks.
//!
//! Stored in the `Dedup` section keyed `(hash of the id, slot)`: ids whose
//! hashes collide take the next slots of the same bucket. The owner keeps in
//! memory only the buckets it has read or written ("resolved"); a bucket is
//! resolved from the store before the owner decides anything about its ids.
//!
//! An owner that created the partition knows its whole section: it was empty,
//! and only the owner writes it. Its index is *complete*: a bucket it does not
//! hold is empty, and none is read, but those of writes that failed.
//!
//! Invariant: a resolved bucket equals the stored one, except for writes in
//! flight; after a failed write its buckets are forgotten and resolved again
//! (in a complete index they are held as unknown until then; past
//! [`MAX_UNKNOWN_BUCKETS`] of them the index stops being complete).

use std::collections::{HashMap, HashSet};

use crate::hash::{fnv1a, splitmix64};

/// The most slots of one bucket a lookup reads. Ids share a bucket only when
/// their 64-bit hashes collide, so a bucket holds one id but for crafted ids.
pub const MAX_DEDUP_SLOTS: usize = 1024;

/// The most buckets a complete index holds as unknown (forgotten after a
/// failed write, not read since) before it stops being complete.
pub const MAX_UNKNOWN_BUCKETS: usize = 4096;

/// A dedup id held by a task, as its record stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DedupEntry {
    /// Its place in the bucket: 0 for the first id, one more for each id whose
    /// hash collides.
    pub slot: i64,
    /// The producer's dedup id.
    pub dedup_id: String,
    /// The id of the pending, delayed or running task that holds it.
    pub task_id: i64,
}

/// The bucket of a dedup id.
pub fn bucket_of(dedup_id: &str) -> i64 {
    splitmix64(fnv1a(dedup_id.bytes())) as i64
}

/// The dedup ids of the buckets the owner has resolved, by bucket.
#[derive(Debug, Default)]
pub struct DedupIndex {
    buckets: HashMap<i64, Vec<DedupEntry>>,
    /// Every bucket not in `buckets` is empty, but those in `unknown`.
    complete: bool,
    unknown: HashSet<i64>,
}

impl DedupIndex {
    /// The index of a partition just created: its section is empty.
    pub fn of_new_partition() -> DedupIndex {
        DedupIndex { complete: true, ..DedupIndex::default() }
    }

    /// Whether `bucket` is known in memory (read from the store or written
    /// since, or empty in a complete index).
    pub fn is_resolved(&self, bucket: i64) -> bool {
        self.buckets.contains_key(&bucket) || (self.complete && !self.unknown.contains(&bucket))
    }

    /// A bucket as read from the store.
    pub fn resolve(&mut self, bucket: i64, entries: Vec<DedupEntry>) {
        self.unknown.remove(&bucket);
        self.buckets.insert(bucket, entries);
    }

    /// The task holding `dedup_id`; its bucket must be resolved.
    pub fn find(&self, dedup_id: &str) -> Option<&DedupEntry> {
        let bucket = bucket_of(dedup_id);
        debug_assert!(self.is_resolved(bucket), "dedup lookup in an unresolved bucket");
        self.buckets.get(&bucket)?.iter().find(|e| e.dedup_id == dedup_id)
    }

    /// Records that `task_id` holds `dedup_id`; the record key `(bucket, slot)` to write.
    pub fn insert(&mut self, dedup_id: &str, task_id: i64) -> (i64, i64) {
        let bucket = bucket_of(dedup_id);
        let entries = self.buckets.entry(bucket).or_default();
        let slot = entries.iter().map(|e| e.slot + 1).max().unwrap_or(0);
        entries.push(DedupEntry { slot, dedup_id: dedup_id.to_owned(), task_id });
        (bucket, slot)
    }

    /// Frees `dedup_id`; the record key to delete, if it was held.
    pub fn remove(&mut self, dedup_id: &str) -> Option<(i64, i64)> {
        let bucket = bucket_of(dedup_id);
        let entries = self.buckets.get_mut(&bucket)?;
        let index = entries.iter().position(|e| e.dedup_id == dedup_id)?;
        let entry = entries.swap_remove(index);
        if entries.is_empty() {
            self.buckets.remove(&bucket);
        }
        Some((bucket, entry.slot))
    }

    /// Drops a bucket from memory (after a failed write): it is read again
    /// before its ids are decided.
    pub fn forget(&mut self, bucket: i64) {
        self.buckets.remove(&bucket);
        if self.complete {
            self.unknown.insert(bucket);
            if self.unknown.len() > MAX_UNKNOWN_BUCKETS {
                self.complete = false;
                self.unknown = HashSet::new();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colliding_ids_share_a_bucket_in_separate_slots() {
        let mut index = DedupIndex::default();
        let bucket = bucket_of("a");
        // An id whose hash collides with "a" holds slot 0 of the bucket.
        index.resolve(bucket, vec![DedupEntry { slot: 0, dedup_id: "collides".into(), task_id: 1 }]);
        assert_eq!(index.find("a"), None);
        assert_eq!(index.insert("a", 2), (bucket, 1), "the next slot of the same bucket");
        assert_eq!(index.find("a").unwrap().task_id, 2);
        assert_eq!(index.remove("a"), Some((bucket, 1)));
        assert!(index.is_resolved(bucket), "the colliding id still holds its slot");
        assert_eq!(index.buckets[&bucket][0].dedup_id, "collides");
    }

    #[test]
    fn a_new_partition_reads_only_the_buckets_of_failed_writes() {
        let mut index = DedupIndex::of_new_partition();
        assert!(index.is_resolved(bucket_of("a")), "an empty section: nothing to read");
        assert_eq!(index.find("a"), None);
        index.insert("a", 1);
        index.insert("b", 2);
        index.forget(bucket_of("a"));
        assert!(!index.is_resolved(bucket_of("a")), "after a failed write, read again");
        assert!(index.is_resolved(bucket_of("b")) && index.is_resolved(bucket_of("c")), "the rest stays known");
        index.resolve(bucket_of("a"), vec![DedupEntry { slot: 0, dedup_id: "a".into(), task_id: 1 }]);
        assert_eq!(index.find("a").map(|e| e.task_id), Some(1), "the write had landed");
        assert!(index.unknown.is_empty());
    }

    #[test]
    fn too_many_unknown_buckets_end_the_complete_index() {
        let mut index = DedupIndex::of_new_partition();
        index.insert("kept", 1);
        for bucket in 0..=MAX_UNKNOWN_BUCKETS as i64 {
            index.forget(bucket);
        }
        assert!(!index.complete && index.unknown.is_empty(), "memory bounded: {} unknown", index.unknown.len());
        assert!(index.is_resolved(bucket_of("kept")), "what it holds it still knows");
        assert!(!index.is_resolved(bucket_of("never seen")), "the rest is read");
    }

    #[test]
    fn insert_then_remove_frees_the_id() {
        let mut index = DedupIndex::default();
        index.resolve(bucket_of("x"), vec![]);
        let key = index.insert("x", 9);
        assert_eq!(key, (bucket_of("x"), 0));
        assert_eq!(index.find("x").unwrap().task_id, 9);
        assert_eq!(index.remove("x"), Some(key));
        assert!(!index.is_resolved(bucket_of("x")), "an empty bucket is dropped");
    }
}
