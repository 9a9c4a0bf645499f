//! What the engine asks to read, and what it makes of the answers: the
//! backlog above the read level, delayed records, parked tasks, dedup buckets.

use super::{MAX_MAINTENANCE_PER_WRITE, PartitionEngine};
use crate::clock::UnixMillis;
use crate::core::engine::dedup::{DedupEntry, DedupIndex, bucket_of};
use crate::core::engine::delayed::DelayKey;
use crate::core::engine::parked::ParkedRead;
use crate::core::engine::plan::ReadRequest;
use crate::model::{FairLevel, Priority, StoredTask};

impl PartitionEngine {
    /// Dedup buckets of `dedup_ids` (of new tasks, or of dead letters to put
    /// back) not known in memory: read them from the store and pass them to
    /// [`Self::resolve_bucket`] before planning.
    pub fn unresolved_buckets<'a>(&self, dedup_ids: impl Iterator<Item = &'a str>) -> Vec<i64> {
        let mut buckets: Vec<i64> = dedup_ids.map(bucket_of).filter(|b| !self.dedup.is_resolved(*b)).collect();
        buckets.sort_unstable();
        buckets.dedup();
        buckets
    }

    /// The partition was created by this owner (no row of it existed): its
    /// dedup section is empty and only this owner writes it, so no bucket is
    /// read but those of writes that failed. Called before any plan.
    pub fn created_here(&mut self) {
        self.dedup = DedupIndex::of_new_partition();
    }

    /// Takes a dedup bucket read from the store (one of
    /// [`Self::unresolved_buckets`]).
    pub fn resolve_bucket(&mut self, bucket: i64, entries: Vec<DedupEntry>) {
        self.dedup.resolve(bucket, entries);
    }

    /// Whether the writer has work without a command: lease records to
    /// write, expired leases, delayed tasks now ready, or delayed records to
    /// read (after taking the partition, or after a write of unknown outcome).
    pub fn write_due(&self, now: UnixMillis) -> bool {
        !self.unwritten_leases.is_empty()
            || self.leases.next_deadline().is_some_and(|d| d <= now)
            || self.delayed.next_due().is_some_and(|d| d <= now)
            || self.delayed.read_request().is_some()
            || !self.parked.reads(1).is_empty()
            || !self.to_park(now).is_empty()
            || self.aged_due(now)
            || self.purge_sweeping
    }

    /// Reads of the oldest parked task of keys whose head is not in memory,
    /// to make before planning (at most `max`).
    pub fn parked_reads(&self, max: usize) -> Vec<ParkedRead> {
        self.parked.reads(max)
    }

    /// The result of a parked read: the oldest record above `read.after`.
    pub fn apply_parked_read(&mut self, read: &ParkedRead, found: Option<(i64, StoredTask)>) {
        self.parked.apply_read(read, found);
    }

    /// Ready tasks to park now, lowest first per level: every ready task of
    /// a key in the directory, and, once `park_after` tasks are dispatched
    /// above the ack level, the one that holds it back if its key is at its
    /// limits. Such a key enters the directory while it has room; past
    /// that, the task goes to its level's shared slot (see
    /// [`ParkedKeys::park`](crate::core::engine::parked::ParkedKeys::park)).
    /// None with `max_parked_keys = 0`, but for keys already in the
    /// directory. At most [`MAX_MAINTENANCE_PER_WRITE`].
    pub(super) fn to_park(&self, now: UnixMillis) -> Vec<(Priority, FairLevel)> {
        if !self.keys_limited() {
            return Vec::new();
        }
        let max_keys = self.config.max_parked_keys;
        let mut levels = Vec::new();
        let mut entering: Vec<(Priority, String)> = Vec::new();
        for subqueue in &self.subqueues {
            let priority = subqueue.priority;
            let pinned = max_keys > 0 && subqueue.dispatched_above_ack() >= self.config.park_after;
            if !pinned && self.parked.is_empty() {
                continue;
            }
            let max = MAX_MAINTENANCE_PER_WRITE - levels.len();
            let found = subqueue.to_park(max, |task, holds_ack| {
                let key = task.fairness_key.as_str();
                if self.parked.is_parked(priority, key) || entering.iter().any(|(p, k)| *p == priority && k == key) {
                    return true;
                }
                let held = pinned && holds_ack && !self.key_allowed(key, now);
                if held && self.parked.len() + entering.len() < max_keys {
                    entering.push((priority, key.to_owned()));
                }
                held
            });
            levels.extend(found.into_iter().map(|level| (priority, level)));
        }
        levels
    }

    /// The read of delayed records to make before planning, if the buffer runs low.
    pub fn delayed_read(&self) -> Option<(DelayKey, usize)> {
        self.delayed.read_request()
    }

    /// Takes the delayed records read strictly above `after` (at most `limit`
    /// asked, from [`Self::delayed_read`]); fewer than `limit` means there are
    /// no more.
    pub fn apply_delayed_read(&mut self, after: DelayKey, records: Vec<(DelayKey, StoredTask)>, limit: usize) {
        self.delayed.apply_read(after, records, limit);
    }

    /// Reads the reader should start now; each must be concluded with
    /// [`Self::apply_read`] or [`Self::read_failed`].
    pub fn read_requests(&mut self, now: UnixMillis) -> Vec<ReadRequest> {
        let (capacity, reload_at) = (self.config.buffer_tasks, self.config.reload_at);
        let blocked = self.blocked_ready(now);
        self.subqueues
            .iter_mut()
            .zip(blocked)
            .filter_map(|(s, blocked)| {
                s.read_request(capacity, reload_at, blocked).map(|(after, limit)| ReadRequest {
                    priority: s.priority,
                    after,
                    limit,
                })
            })
            .collect()
    }

    /// Whether some level wants a read (without starting one).
    pub fn wants_read(&self, now: UnixMillis) -> bool {
        let blocked = self.blocked_ready(now);
        self.subqueues
            .iter()
            .zip(blocked)
            .any(|(s, blocked)| s.may_have_unread() && s.ready().saturating_sub(blocked) <= self.config.reload_at)
    }

    /// Per subqueue, the ready tasks of keys at their limits now.
    fn blocked_ready(&self, now: UnixMillis) -> Vec<usize> {
        let limited = self.keys_limited();
        self.subqueues
            .iter()
            .map(|s| if limited { s.blocked(|key| self.dispatchable(s.priority, key, now)) } else { 0 })
            .collect()
    }

    /// Takes the result of a read; false if it was stale and ignored.
    pub fn apply_read(&mut self, request: ReadRequest, tasks: Vec<StoredTask>) -> bool {
        if tasks.iter().any(|task| self.is_purged(task.task_id)) {
            self.purged_may_be_buffered();
        }
        let capacity = self.config.buffer_tasks;
        self.subqueues[request.priority.index()].apply_read(request.after, tasks, request.limit, capacity)
    }

    /// A read from [`Self::read_requests`] failed: nothing changes, and the
    /// level is read again later.
    pub fn read_failed(&mut self, request: ReadRequest) {
        self.subqueues[request.priority.index()].read_failed();
    }
}
