//! Keys held at their limits, parked off the ack path (docs/fairness.md §5c).
//!
//! A key at its concurrency or rate limit keeps its waiting tasks from being
//! dispatched, and the lowest of them would hold the ack level back while
//! every other key is dispatched above it. Once the marks above the ack
//! level pass `engine.park_after`, such a key is *parked*: its waiting
//! tasks are copied, in the order they would have been dispatched, into
//! records of a slot of its own, keyed `(slot, seq)`, and their backlog
//! slots count as dispatched, so the ack level moves on. When the key may
//! start a task again, the oldest record is handed out directly.
//!
//! Invariants:
//! 1. While a key is parked, none of its tasks is dispatched from the
//!    backlog: each is parked as it reaches the buffer, so the key's own
//!    order holds.
//! 2. Every record of a slot at or below its `floor` has been handed out;
//!    reads go above `seen` (at or above the floor), so in steady state
//!    they cross no deleted record.
//! 3. The directory holds at most `max_keys` keys and is carried in the
//!    metadata; a write that parks tasks carries the metadata, so a new
//!    owner knows every slot, and the levels of parked tasks are among the
//!    dispatched marks it loads.
//! 4. A key leaves the directory once nothing of it is parked, being parked,
//!    or being handed out.

use std::collections::{BTreeMap, HashMap};

use crate::model::{PRIORITY_LEVELS, Priority, StoredTask};
use crate::store::{ParkedKeyMeta, RecordKey, Section};

/// Where the parked record `seq` of `slot` lives.
pub fn parked_key(slot: i64, seq: i64) -> RecordKey {
    RecordKey { section: Section::Parked, key: (slot, seq) }
}

#[derive(Debug)]
struct ParkedKey {
    slot: i64,
    /// Every record at or below it was handed out (its delete is durable).
    floor: i64,
    /// The highest record known: in `head`, handed out, or being written.
    seen: i64,
    /// The oldest record not handed out, once read.
    head: Option<(i64, StoredTask)>,
    /// Records above `seen` in the store; `None` when not known (after a
    /// takeover, or a write of unknown outcome).
    unread: Option<u64>,
    /// The record handed out, whose lease (and delete) is being written.
    taken: Option<i64>,
    /// Records of the write in flight.
    parking: u64,
}

impl ParkedKey {
    fn is_empty(&self) -> bool {
        self.head.is_none() && self.taken.is_none() && self.parking == 0 && self.unread == Some(0)
    }
}

/// A read of the oldest parked record of a key above `after`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParkedRead {
    /// The priority level the key is parked at.
    pub priority: Priority,
    /// The parked key.
    pub fairness_key: String,
    /// The key's slot: its records are keyed `(slot, seq)` in the parked section.
    pub slot: i64,
    /// The read looks for the oldest record with a sequence number strictly
    /// above this one.
    pub after: i64,
}

/// The directory of parked keys of a partition.
#[derive(Debug, Default)]
pub struct ParkedKeys {
    /// Per priority level, by fairness key.
    by_key: [BTreeMap<String, ParkedKey>; PRIORITY_LEVELS],
    /// Leases of records handed out: lease id → the key it came from.
    by_lease: HashMap<i64, (Priority, String)>,
    max_keys: usize,
    /// Set when a floor moved or a key left since the metadata was written.
    changed: bool,
}

impl ParkedKeys {
    /// The directory a new owner finds in the metadata.
    pub fn load(saved: impl IntoIterator<Item = (Priority, ParkedKeyMeta)>, max_keys: usize) -> Self {
        let mut by_key: [BTreeMap<String, ParkedKey>; PRIORITY_LEVELS] = Default::default();
        for (priority, meta) in saved {
            let parked = ParkedKey {
                slot: meta.slot,
                floor: meta.floor,
                seen: meta.floor,
                head: None,
                unread: None,
                taken: None,
                parking: 0,
            };
            by_key[priority.index()].insert(meta.fairness_key, parked);
        }
        ParkedKeys { by_key, by_lease: HashMap::new(), max_keys, changed: false }
    }

    /// Whether `key` is parked at `priority`: its tasks go out of its records,
    /// not out of the backlog.
    pub fn is_parked(&self, priority: Priority, key: &str) -> bool {
        self.by_key[priority.index()].contains_key(key)
    }

    /// Whether a key not parked yet may enter the directory.
    pub fn has_room(&self) -> bool {
        self.len() < self.max_keys
    }

    /// Keys parked, over every priority level.
    pub fn len(&self) -> usize {
        self.by_key.iter().map(BTreeMap::len).sum()
    }

    /// Whether no key is parked at any priority level.
    pub fn is_empty(&self) -> bool {
        self.by_key.iter().all(BTreeMap::is_empty)
    }

    fn get_mut(&mut self, priority: Priority, key: &str) -> Option<&mut ParkedKey> {
        self.by_key[priority.index()].get_mut(key)
    }

    /// Parks `task` as record `seq` of its key, entering the key with
    /// `new_slot` if it is not parked yet. Returns where the record goes.
    pub fn park(&mut self, task: &StoredTask, seq: i64, new_slot: impl FnOnce() -> i64) -> RecordKey {
        let parked = self.by_key[task.priority.index()].entry(task.fairness_key.clone()).or_insert_with(|| {
            let slot = new_slot();
            ParkedKey { slot, floor: 0, seen: 0, head: None, unread: Some(0), taken: None, parking: 0 }
        });
        parked.parking += 1;
        parked_key(parked.slot, seq)
    }

    /// The write that parked `records` (in the order parked) is durable.
    pub fn parked(&mut self, records: &[(RecordKey, StoredTask)]) {
        for (at, task) in records {
            let Some(parked) = self.get_mut(task.priority, &task.fairness_key) else { continue };
            parked.parking = parked.parking.saturating_sub(1);
            match parked.unread {
                Some(0) if parked.head.is_none() => {
                    parked.seen = parked.seen.max(at.key.1);
                    parked.head = Some((at.key.1, task.clone()));
                }
                Some(unread) => parked.unread = Some(unread + 1),
                None => {}
            }
        }
    }

    /// The write that parked `records` failed; if it `may_have_applied`,
    /// they may be in the store and are read again.
    pub fn park_failed(&mut self, records: &[(RecordKey, StoredTask)], may_have_applied: bool) {
        for (_, task) in records {
            let Some(parked) = self.get_mut(task.priority, &task.fairness_key) else { continue };
            parked.parking = parked.parking.saturating_sub(1);
            if may_have_applied {
                parked.unread = None;
            }
            self.leave_if_empty(task.priority, &task.fairness_key);
        }
    }

    /// The oldest parked task of each key of `priority` that is read.
    pub fn heads(&self, priority: Priority) -> impl Iterator<Item = &StoredTask> {
        self.by_key[priority.index()].values().filter_map(|parked| parked.head.as_ref().map(|(_, task)| task))
    }

    /// Hands out the head of the key whose head has level id `level_id`;
    /// its lease is `lease_id` (the task's level id).
    pub fn take(&mut self, priority: Priority, level_id: i64) -> Option<StoredTask> {
        let (key, parked) = self.by_key[priority.index()]
            .iter_mut()
            .find(|(_, parked)| parked.head.as_ref().is_some_and(|(_, task)| task.level.id == level_id))?;
        let (seq, task) = parked.head.take().expect("found by its head");
        parked.taken = Some(seq);
        self.by_lease.insert(task.level.id, (priority, key.clone()));
        Some(task)
    }

    /// The record to delete with the lease record of `lease_id`, if its
    /// task came from a parked record.
    pub fn record_of_lease(&self, lease_id: i64) -> Option<RecordKey> {
        let (priority, key) = self.by_lease.get(&lease_id)?;
        let parked = self.by_key[priority.index()].get(key)?;
        Some(parked_key(parked.slot, parked.taken?))
    }

    /// The lease of a parked task, and the delete of its record, are durable.
    pub fn lease_written(&mut self, lease_id: i64) {
        let Some((priority, key)) = self.by_lease.remove(&lease_id) else { return };
        if let Some(parked) = self.get_mut(priority, &key)
            && let Some(seq) = parked.taken.take()
        {
            parked.floor = parked.floor.max(seq);
            self.changed = true;
        }
        self.leave_if_empty(priority, &key);
    }

    /// The lease of a parked task was not delivered (its write failed, or
    /// it was given back before it): the task is its key's head again. If
    /// the write landed, its record is gone and the lease record holds the
    /// task for a new owner; a later lease of the same task supersedes it.
    pub fn lease_not_written(&mut self, lease_id: i64, task: StoredTask) {
        let Some((priority, key)) = self.by_lease.remove(&lease_id) else { return };
        if let Some(parked) = self.get_mut(priority, &key)
            && let Some(seq) = parked.taken.take()
            && parked.head.replace((seq, task)).is_some()
        {
            // A later record had been read meanwhile: it is read again after this one.
            parked.seen = seq;
            parked.unread = parked.unread.map(|n| n + 1);
        }
        self.leave_if_empty(priority, &key);
    }

    /// Whether `lease_id` is the lease of a parked task.
    pub fn holds_lease(&self, lease_id: i64) -> bool {
        self.by_lease.contains_key(&lease_id)
    }

    /// Keys with no head read and records that may wait in the store, at most `max`.
    pub fn reads(&self, max: usize) -> Vec<ParkedRead> {
        Priority::all()
            .flat_map(|priority| {
                self.by_key[priority.index()]
                    .iter()
                    .filter(|(_, parked)| parked.head.is_none() && parked.unread != Some(0))
                    .map(move |(key, parked)| ParkedRead {
                        priority,
                        fairness_key: key.clone(),
                        slot: parked.slot,
                        after: parked.seen,
                    })
            })
            .take(max)
            .collect()
    }

    /// The result of a read: the oldest record above `read.after` that
    /// belongs to the key, if any. Ignored if the key moved meanwhile.
    pub fn apply_read(&mut self, read: &ParkedRead, found: Option<(i64, StoredTask)>) {
        let Some(parked) = self.get_mut(read.priority, &read.fairness_key) else { return };
        if parked.seen != read.after || parked.head.is_some() {
            return;
        }
        match found {
            Some((seq, task)) => {
                parked.seen = seq;
                parked.head = Some((seq, task));
                parked.unread = parked.unread.map(|n| n.saturating_sub(1));
            }
            None => parked.unread = Some(0),
        }
        self.leave_if_empty(read.priority, &read.fairness_key);
    }

    /// Records parked and not handed out (exact unless a count is unknown).
    pub fn tasks(&self, priority: Priority) -> u64 {
        self.by_key[priority.index()]
            .values()
            .map(|parked| u64::from(parked.head.is_some()) + parked.unread.unwrap_or(0) + parked.parking)
            .sum()
    }

    /// Keys parked at `priority`.
    pub fn keys(&self, priority: Priority) -> usize {
        self.by_key[priority.index()].len()
    }

    /// The directory entries of `priority`, for the metadata.
    pub fn meta(&self, priority: Priority) -> Vec<ParkedKeyMeta> {
        self.by_key[priority.index()]
            .iter()
            .map(|(key, parked)| ParkedKeyMeta { fairness_key: key.clone(), slot: parked.slot, floor: parked.floor })
            .collect()
    }

    /// Whether a floor moved, or a key left, since the metadata was written.
    pub fn changed(&self) -> bool {
        self.changed
    }

    /// The metadata was written with the directory as it stands:
    /// [`Self::changed`] is false until a floor moves or a key leaves.
    pub fn metadata_persisted(&mut self) {
        self.changed = false;
    }

    fn leave_if_empty(&mut self, priority: Priority, key: &str) {
        let keys = &mut self.by_key[priority.index()];
        if keys.get(key).is_some_and(ParkedKey::is_empty) {
            keys.remove(key);
            self.changed = true;
        }
    }
}
