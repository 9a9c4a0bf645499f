//! Deletes of what every owner has acknowledged, the metadata and when to
//! write it, and what the engine reports about itself.

use super::{PartitionEngine, lease_key};
use crate::clock::{UnixMillis, millis};
use crate::core::engine::dispatch_tally::RecentDispatch;
use crate::core::engine::plan::GcRequest;
use crate::core::engine::report::{PartitionSnapshot, SubqueueSnapshot, TaskCounts};
use crate::core::engine::rows::{PartitionMeta, RecordKey, Section, SubqueueMeta};
use std::time::Duration;

impl PartitionEngine {
    /// Range deletes of records no owner reads any more: finished leases
    /// below the oldest running one, and delayed and waiting records below
    /// their floors persisted in the metadata. Each is unconditional and idempotent.
    pub fn record_deletes(&mut self) -> Vec<RecordKey> {
        let mut deletes = Vec::new();
        let subqueues = &self.subqueues;
        self.finished.retain(|_, (priority, level)| *level > subqueues[priority.index()].persisted_ack);
        let lowest = self
            .leases
            .lowest_seq()
            .into_iter()
            .chain(self.finished.keys().next().copied())
            .chain(self.kept_lease_records.values().copied())
            .min();
        let lease_floor = lowest.map_or(self.max_lease_seq, |lowest| lowest - 1);
        if lease_floor > self.lease_gc_through {
            self.lease_gc_through = lease_floor;
            deletes.push(lease_key(lease_floor));
        }
        let delayed_floor = self.delayed.floor();
        if delayed_floor > self.delayed_gc_through {
            self.delayed_gc_through = delayed_floor;
            deletes.push(RecordKey { section: Section::Delayed, key: delayed_floor });
        }
        if let Some(waiting_floor) = self.aged.gc_due() {
            deletes.push(RecordKey { section: Section::Waiting, key: waiting_floor });
        }
        deletes
    }

    /// Deletes that are due.
    pub fn gc_requests(&mut self, now: UnixMillis) -> Vec<GcRequest> {
        let (min_acks, interval) = (self.config.gc_min_acks, millis(self.config.gc_interval));
        self.subqueues
            .iter_mut()
            .filter_map(|s| {
                s.gc_due(now, min_acks, interval).map(|through| GcRequest { priority: s.priority, through })
            })
            .collect()
    }

    /// The metadata to write now, if the ack levels moved and the last write
    /// is older than `ack_sync_interval`.
    pub fn metadata_due(&self, now: UnixMillis) -> Option<PartitionMeta> {
        let due = now - self.last_meta_sync >= millis(self.config.ack_sync_interval);
        (due && self.metadata_moved()).then(|| self.metadata())
    }

    /// The metadata as it stands (for a final write at shutdown).
    pub fn metadata(&self) -> PartitionMeta {
        PartitionMeta {
            range_id: self.range_id,
            owner: self.owner.clone(),
            region: self.region.clone(),
            moved_from: self.moved_from.clone(),
            subqueues: std::array::from_fn(|i| {
                let subqueue = &self.subqueues[i];
                SubqueueMeta {
                    parked: self.parked.meta(subqueue.priority),
                    ..subqueue.meta(self.config.saved_top_keys)
                }
            }),
            delayed_through: self.delayed.floor(),
            dead_letters_through: self.dead_letters_through,
            waiting_through: self.aged.floor(),
            // Set only by the drain of the next generation, which fenced this owner first.
            drained: false,
            cancelled: self.cancelled.iter().copied().collect(),
            purged_below: self.purged_below,
        }
    }

    /// The metadata `meta` was written at `now`: its ack levels and parked keys
    /// are durable, and the next sync counts from `now`.
    pub fn metadata_persisted(&mut self, meta: &PartitionMeta, now: UnixMillis) {
        self.last_meta_sync = now;
        self.cancelled_moved = false;
        self.parked.metadata_persisted();
        self.aged.floor_persisted(meta.waiting_through);
        for (subqueue, saved) in self.subqueues.iter_mut().zip(&meta.subqueues) {
            subqueue.persisted_ack = subqueue.persisted_ack.max(saved.ack_level);
        }
    }

    /// Whether the metadata changed since it was last written: an ack level
    /// moved, a parked key's floor, or a cancelled task's mark went.
    pub(super) fn metadata_moved(&self) -> bool {
        self.subqueues.iter().any(|s| s.ack != s.persisted_ack)
            || self.parked.changed()
            || self.aged.floor_moved()
            || self.cancelled_moved
    }

    /// True when nothing older than `max_age` waits: a new task may then go
    /// straight to a waiting worker without passing anyone.
    pub fn backlog_negligible(&self, now: UnixMillis, max_age: Duration) -> bool {
        let max_age = millis(max_age);
        self.subqueues.iter().all(|s| s.backlog_negligible(now, max_age))
    }

    /// What this engine has counted since it was loaded.
    pub fn counts(&self) -> TaskCounts {
        self.counts
    }

    /// What was handed out lately, with each key's weight.
    fn recent_dispatch(&self, top_keys: usize, now: UnixMillis) -> RecentDispatch {
        let mut recent = self.tally.recent(top_keys, now);
        for key in &mut recent.keys {
            key.weight = self.config.weights.resolve(&key.fairness_key, None);
        }
        recent
    }

    /// The engine's state at `now`, with the `top_keys` keys of each subqueue
    /// that have the most ready tasks.
    pub fn snapshot(&self, top_keys: usize, now: UnixMillis) -> PartitionSnapshot {
        PartitionSnapshot {
            range_id: self.range_id,
            subqueues: self
                .subqueues
                .iter()
                .map(|s| {
                    let (tracked, approximate) = s.tracked_keys();
                    SubqueueSnapshot {
                        priority: s.priority,
                        ack_level: s.ack,
                        read_level: s.read,
                        max_level: s.max,
                        buffered: s.ready() as u64,
                        approx_backlog: s.approx_backlog.max(0) as u64,
                        dispatched_above_ack: s.dispatched_above_ack() as u64,
                        reader_at_end: s.at_end,
                        oldest_buffered_added_at: s.oldest_buffered_added_at(),
                        tracked_keys: tracked as u64,
                        approximate_keys: approximate,
                        top_keys: s.top_keys(top_keys),
                        parked_keys: self.parked.keys(s.priority) as u64,
                        parked_tasks: self.parked.tasks(s.priority),
                    }
                })
                .collect(),
            counts: self.counts,
            leased: self.leases.len() as u64,
            delayed: self.delayed.len() as u64,
            over_max_wait: self.over_max_wait(now),
            metadata_bytes: self.metadata().stored_bytes() as u64,
            largest_write_bytes: self.largest_write as u64,
            recent_dispatch: self.recent_dispatch(top_keys, now),
        }
    }
}
