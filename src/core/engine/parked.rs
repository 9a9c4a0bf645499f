//! Keys held at their limits, parked off the ack path (docs/fairness.md §5c).
//!
//! A key at its concurrency or rate limit keeps its waiting tasks from being
//! dispatched, and the lowest of them would hold the ack level back while
//! every other key is dispatched above it. Once the marks above the ack
//! level pass `engine.park_after`, such a task is *parked*: copied into a
//! record keyed `(slot, seq)`, its backlog slot counting as dispatched, so
//! the ack level moves on. Its key enters the *directory* with a slot of its
//! own while the directory has room (`max_keys` keys); past that, the task
//! goes to the *shared slot* of its priority level. A slot's records come
//! back oldest first, each handed out directly when its key may start.
//!
//! Invariants:
//! 1. While a key is in the directory, none of its tasks is dispatched from
//!    the backlog: each is parked as it reaches the buffer, so the key's own
//!    order holds. The shared slot keeps the order its records were parked
//!    in, but makes no such promise per key.
//! 2. Every record of a slot at or below its `floor` has been handed out,
//!    and every record at or below `seen` is in memory (ready or being
//!    handed out) or has been handed out; reads go above `seen`, so in
//!    steady state they cross no deleted record.
//! 3. The directory holds at most `max_keys` keys, and there is at most one
//!    shared slot per priority level: memory and metadata are bounded by
//!    configuration whatever the number of held keys. Both are carried in
//!    the metadata; a write that parks tasks carries it, so a new owner
//!    knows every slot, and the levels of parked tasks are among the
//!    dispatched marks it loads.
//! 4. A key leaves the directory once nothing of it is parked, being parked,
//!    or being handed out. A shared slot, once used, stays with its floor.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::core::engine::rows::{ParkedKeyMeta, RecordKey, Section};
use crate::model::{PRIORITY_LEVELS, Priority, StoredTask};

/// Where the parked record `seq` of `slot` lives.
pub fn parked_key(slot: i64, seq: i64) -> RecordKey {
    RecordKey { section: Section::Parked, key: (slot, seq) }
}

/// The shared slot of `priority`: negative, where a key's slot is a fresh
/// id (positive), so the two never meet.
pub fn shared_slot(priority: Priority) -> i64 {
    -1 - priority.index() as i64
}

/// The records of one slot, as far as the engine knows them.
#[derive(Debug)]
struct ParkedSlot {
    slot: i64,
    /// Every record at or below it was handed out (its delete is durable).
    floor: i64,
    /// The highest record read or parked into memory.
    seen: i64,
    /// Records read and not handed out, by seq: the oldest competes for
    /// dispatch. One but for records whose lease was not written.
    ready: BTreeMap<i64, StoredTask>,
    /// Records handed out, whose leases (and deletes) are being written.
    taken: BTreeSet<i64>,
    /// Records above `seen` in the store; `None` when not known (after a
    /// takeover, or a write of unknown outcome).
    unread: Option<u64>,
    /// Records of the write in flight.
    parking: u64,
}

impl ParkedSlot {
    fn new(slot: i64, floor: i64, unread: Option<u64>) -> Self {
        ParkedSlot { slot, floor, seen: floor, ready: BTreeMap::new(), taken: BTreeSet::new(), unread, parking: 0 }
    }

    fn is_empty(&self) -> bool {
        self.ready.is_empty() && self.taken.is_empty() && self.parking == 0 && self.unread == Some(0)
    }

    fn head(&self) -> Option<&StoredTask> {
        self.ready.values().next()
    }

    fn wants_read(&self) -> bool {
        self.ready.is_empty() && self.unread != Some(0)
    }

    /// Raises the floor below the oldest record still in memory; whether it moved.
    fn raise_floor(&mut self) -> bool {
        let kept = self.ready.keys().chain(&self.taken).min();
        let through = kept.map_or(self.seen, |seq| seq - 1);
        let moved = through > self.floor;
        self.floor = self.floor.max(through);
        moved
    }
}

/// A record handed out: its slot, and the key and level it is parked at.
#[derive(Debug)]
struct Taken {
    priority: Priority,
    fairness_key: String,
    slot: i64,
    seq: i64,
}

/// A read of the oldest record of a slot above `after`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParkedRead {
    /// The priority level the key is parked at.
    pub priority: Priority,
    /// The parked key (empty for a shared slot).
    pub fairness_key: String,
    /// The slot: its records are keyed `(slot, seq)` in the parked section.
    pub slot: i64,
    /// The read looks for the oldest record with a sequence number strictly
    /// above this one.
    pub after: i64,
}

/// The parked keys of a partition and the shared slots of its levels.
#[derive(Debug, Default)]
pub struct ParkedKeys {
    /// The directory: per priority level, by fairness key.
    by_key: [BTreeMap<String, ParkedSlot>; PRIORITY_LEVELS],
    /// Per priority level, the slot of the held keys past the directory.
    shared: [Option<ParkedSlot>; PRIORITY_LEVELS],
    /// Records handed out, by the lease id of their task.
    by_lease: HashMap<i64, Taken>,
    max_keys: usize,
    /// Set when a floor moved or a key left since the metadata was written.
    changed: bool,
}

impl ParkedKeys {
    /// The directory and shared slots a new owner finds in the metadata.
    pub fn load(saved: impl IntoIterator<Item = (Priority, ParkedKeyMeta)>, max_keys: usize) -> Self {
        let mut parked = ParkedKeys { max_keys, ..ParkedKeys::default() };
        for (priority, meta) in saved {
            let slot = ParkedSlot::new(meta.slot, meta.floor, None);
            if meta.slot == shared_slot(priority) {
                parked.shared[priority.index()] = Some(slot);
            } else {
                parked.by_key[priority.index()].insert(meta.fairness_key, slot);
            }
        }
        parked
    }

    /// Whether `key` is in the directory at `priority`: its tasks go out of
    /// its records, not out of the backlog.
    pub fn is_parked(&self, priority: Priority, key: &str) -> bool {
        self.by_key[priority.index()].contains_key(key)
    }

    /// Keys in the directory, over every priority level.
    pub fn len(&self) -> usize {
        self.by_key.iter().map(BTreeMap::len).sum()
    }

    /// Whether the directory is empty at every priority level.
    pub fn is_empty(&self) -> bool {
        self.by_key.iter().all(BTreeMap::is_empty)
    }

    /// The slot `slot` of `priority`: the shared one, or that of `key`.
    fn slot_mut(&mut self, priority: Priority, slot: i64, key: &str) -> Option<&mut ParkedSlot> {
        if slot == shared_slot(priority) {
            self.shared[priority.index()].as_mut()
        } else {
            self.by_key[priority.index()].get_mut(key).filter(|parked| parked.slot == slot)
        }
    }

    fn slots(&self, priority: Priority) -> impl Iterator<Item = &ParkedSlot> {
        self.shared[priority.index()].iter().chain(self.by_key[priority.index()].values())
    }

    /// Parks `task` as record `seq`: in its key's slot if the key is in the
    /// directory; else in a new slot `new_slot` if the directory has room,
    /// the key entering it; else in the shared slot of its level. Returns
    /// where the record goes.
    pub fn park(&mut self, task: &StoredTask, seq: i64, new_slot: impl FnOnce() -> i64) -> RecordKey {
        let room = self.len() < self.max_keys;
        let priority = task.priority;
        let parked = match self.by_key[priority.index()].entry(task.fairness_key.clone()) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) if room => entry.insert(ParkedSlot::new(new_slot(), 0, Some(0))),
            Entry::Vacant(_) => {
                self.shared[priority.index()].get_or_insert_with(|| ParkedSlot::new(shared_slot(priority), 0, Some(0)))
            }
        };
        parked.parking += 1;
        parked_key(parked.slot, seq)
    }

    /// The write that parked `records` (in the order parked) is durable.
    pub fn parked(&mut self, records: &[(RecordKey, StoredTask)]) {
        for (at, task) in records {
            let Some(parked) = self.slot_mut(task.priority, at.key.0, &task.fairness_key) else { continue };
            parked.parking = parked.parking.saturating_sub(1);
            match parked.unread {
                Some(0) if parked.ready.is_empty() => {
                    parked.seen = parked.seen.max(at.key.1);
                    parked.ready.insert(at.key.1, task.clone());
                }
                Some(unread) => parked.unread = Some(unread + 1),
                None => {}
            }
        }
    }

    /// The write that parked `records` failed; if it `may_have_applied`,
    /// they may be in the store and are read again.
    pub fn park_failed(&mut self, records: &[(RecordKey, StoredTask)], may_have_applied: bool) {
        for (at, task) in records {
            let Some(parked) = self.slot_mut(task.priority, at.key.0, &task.fairness_key) else { continue };
            parked.parking = parked.parking.saturating_sub(1);
            if may_have_applied {
                parked.unread = None;
            }
            self.leave_if_empty(task.priority, at.key.0, &task.fairness_key);
        }
    }

    /// The oldest parked task of each slot of `priority` that is read.
    pub fn heads(&self, priority: Priority) -> impl Iterator<Item = &StoredTask> {
        self.slots(priority).filter_map(ParkedSlot::head)
    }

    /// Hands out the head whose level id is `level_id`; its lease is
    /// `level_id` too (the task's level id).
    pub fn take(&mut self, priority: Priority, level_id: i64) -> Option<StoredTask> {
        let index = priority.index();
        let parked = self.shared[index]
            .iter_mut()
            .chain(self.by_key[index].values_mut())
            .find(|parked| parked.head().is_some_and(|task| task.level.id == level_id))?;
        let (seq, task) = parked.ready.pop_first().expect("found by its head");
        parked.taken.insert(seq);
        let taken = Taken { priority, fairness_key: task.fairness_key.clone(), slot: parked.slot, seq };
        self.by_lease.insert(level_id, taken);
        Some(task)
    }

    /// The record to delete with the lease record of `lease_id`, if its
    /// task came from a parked record.
    pub fn record_of_lease(&self, lease_id: i64) -> Option<RecordKey> {
        self.by_lease.get(&lease_id).map(|taken| parked_key(taken.slot, taken.seq))
    }

    /// The lease of a parked task, and the delete of its record, are durable.
    pub fn lease_written(&mut self, lease_id: i64) {
        let Some(taken) = self.by_lease.remove(&lease_id) else { return };
        if let Some(parked) = self.slot_mut(taken.priority, taken.slot, &taken.fairness_key)
            && parked.taken.remove(&taken.seq)
            && parked.raise_floor()
        {
            self.changed = true;
        }
        self.leave_if_empty(taken.priority, taken.slot, &taken.fairness_key);
    }

    /// The lease of a parked task was not delivered (its write failed, or
    /// it was given back before it): the task is ready in its slot again.
    /// If the write landed, its record is gone and the lease record holds
    /// the task for a new owner; a later lease of the same task supersedes it.
    pub fn lease_not_written(&mut self, lease_id: i64, task: StoredTask) {
        let Some(taken) = self.by_lease.remove(&lease_id) else { return };
        if let Some(parked) = self.slot_mut(taken.priority, taken.slot, &taken.fairness_key)
            && parked.taken.remove(&taken.seq)
        {
            parked.ready.insert(taken.seq, task);
        }
    }

    /// Whether `lease_id` is the lease of a parked task.
    pub fn holds_lease(&self, lease_id: i64) -> bool {
        self.by_lease.contains_key(&lease_id)
    }

    /// Slots with no head read and records that may wait in the store, at
    /// most `max` (shared slots first).
    pub fn reads(&self, max: usize) -> Vec<ParkedRead> {
        Priority::all()
            .flat_map(|priority| {
                let index = priority.index();
                let shared = self.shared[index].iter().map(|parked| ("", parked));
                let keys = self.by_key[index].iter().map(|(key, parked)| (key.as_str(), parked));
                shared.chain(keys).filter(|(_, parked)| parked.wants_read()).map(move |(key, parked)| ParkedRead {
                    priority,
                    fairness_key: key.to_owned(),
                    slot: parked.slot,
                    after: parked.seen,
                })
            })
            .take(max)
            .collect()
    }

    /// The result of a read: the oldest record of the slot above
    /// `read.after`, if any. Ignored if the slot moved meanwhile.
    pub fn apply_read(&mut self, read: &ParkedRead, found: Option<(i64, StoredTask)>) {
        let Some(parked) = self.slot_mut(read.priority, read.slot, &read.fairness_key) else { return };
        if parked.seen != read.after || !parked.ready.is_empty() {
            return;
        }
        match found {
            Some((seq, task)) => {
                parked.seen = seq;
                parked.ready.insert(seq, task);
                parked.unread = parked.unread.map(|n| n.saturating_sub(1));
            }
            None => parked.unread = Some(0),
        }
        self.leave_if_empty(read.priority, read.slot, &read.fairness_key);
    }

    /// The parked task with id `task_id` among those read into memory and
    /// not handed out. Looks at every one: for an operator's lookup.
    pub fn find_ready(&self, task_id: i64) -> Option<&StoredTask> {
        Priority::all()
            .flat_map(|p| self.slots(p))
            .flat_map(|parked| parked.ready.values())
            .find(|task| task.task_id == task_id)
    }

    /// The slots whose records above a sequence number are not in memory:
    /// `(slot, seen)`, the records to read being `(slot, seq > seen)`.
    pub fn unread(&self) -> Vec<(i64, i64)> {
        Priority::all()
            .flat_map(|p| self.slots(p))
            .filter(|parked| parked.unread != Some(0))
            .map(|parked| (parked.slot, parked.seen))
            .collect()
    }

    /// Records parked and not handed out (exact unless a count is unknown),
    /// the shared slot's included.
    pub fn tasks(&self, priority: Priority) -> u64 {
        self.slots(priority).map(|parked| parked.ready.len() as u64 + parked.unread.unwrap_or(0) + parked.parking).sum()
    }

    /// Keys in the directory at `priority`.
    pub fn keys(&self, priority: Priority) -> usize {
        self.by_key[priority.index()].len()
    }

    /// The slots of `priority`, for the metadata: the directory's, and the
    /// shared one (with an empty key) once used.
    pub fn meta(&self, priority: Priority) -> Vec<ParkedKeyMeta> {
        let shared = self.shared[priority.index()].iter().map(|parked| (String::new(), parked));
        let keys = self.by_key[priority.index()].iter().map(|(key, parked)| (key.clone(), parked));
        keys.chain(shared)
            .map(|(fairness_key, parked)| ParkedKeyMeta { fairness_key, slot: parked.slot, floor: parked.floor })
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

    /// Removes `key` from the directory if `slot` is its and nothing of it is left.
    fn leave_if_empty(&mut self, priority: Priority, slot: i64, key: &str) {
        let keys = &mut self.by_key[priority.index()];
        if keys.get(key).is_some_and(|parked| parked.slot == slot && parked.is_empty()) {
            keys.remove(key);
            self.changed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FairLevel, TaskSpec};

    const P: Priority = Priority::DEFAULT;

    fn task(id: i64, key: &str) -> StoredTask {
        TaskSpec::new(key, P, vec![]).at_level(FairLevel::new(1, id), 0)
    }

    fn floor_of(parked: &ParkedKeys, slot: i64) -> i64 {
        parked.meta(P).iter().find(|meta| meta.slot == slot).expect("the slot is in the metadata").floor
    }

    /// Parks `tasks` as records 10, 11, ... in one durable write.
    fn park_all(parked: &mut ParkedKeys, tasks: &[StoredTask]) -> Vec<RecordKey> {
        let mut next_slot = 100;
        let records: Vec<(RecordKey, StoredTask)> = (10..)
            .zip(tasks)
            .map(|(seq, task)| {
                let at = parked.park(task, seq, || {
                    next_slot += 1;
                    next_slot
                });
                (at, task.clone())
            })
            .collect();
        parked.parked(&records);
        records.into_iter().map(|(at, _)| at).collect()
    }

    #[test]
    fn past_the_directory_keys_share_their_level_slot_which_a_new_owner_finds() {
        let mut parked = ParkedKeys::load([], 1);
        let at = park_all(&mut parked, &[task(1, "a"), task(2, "b"), task(3, "a")]);
        assert_eq!(at, [parked_key(101, 10), parked_key(shared_slot(P), 11), parked_key(101, 12)]);
        assert_eq!((parked.len(), parked.tasks(P)), (1, 3), "one key in the directory, three tasks parked");
        assert!(parked.is_parked(P, "a") && !parked.is_parked(P, "b"), "b is in no directory");

        let loaded = ParkedKeys::load(parked.meta(P).into_iter().map(|meta| (P, meta)), 1);
        let reads = loaded.reads(10);
        let slots: Vec<(i64, &str)> = reads.iter().map(|read| (read.slot, read.fairness_key.as_str())).collect();
        assert_eq!(slots, [(shared_slot(P), ""), (101, "a")], "a new owner reads both slots");
        assert_eq!(loaded.len(), 1, "the shared slot is no key of the directory");
    }

    #[test]
    fn records_handed_out_together_keep_the_floor_below_the_oldest_not_written() {
        let shared = shared_slot(P);
        let mut parked = ParkedKeys::load([], 0);
        park_all(&mut parked, &[task(1, "a"), task(2, "b")]);
        assert_eq!(parked.take(P, 1).map(|t| t.fairness_key), Some("a".into()));
        let read = parked.reads(1).pop().expect("the next record is read while the first is handed out");
        assert_eq!((read.slot, read.after), (shared, 10));
        parked.apply_read(&read, Some((11, task(2, "b"))));
        assert_eq!(parked.take(P, 2).map(|t| t.fairness_key), Some("b".into()));
        assert_eq!(parked.record_of_lease(1), Some(parked_key(shared, 10)));
        assert_eq!(parked.record_of_lease(2), Some(parked_key(shared, 11)));

        parked.lease_written(2);
        assert!(floor_of(&parked, shared) < 10, "record 10 is not handed out yet");
        parked.lease_not_written(1, task(1, "a"));
        assert_eq!(parked.heads(P).map(|t| t.level.id).collect::<Vec<_>>(), [1], "a is ready again");
        assert_eq!(parked.take(P, 1).map(|t| t.level.id), Some(1));
        parked.lease_written(1);
        assert_eq!(floor_of(&parked, shared), 11, "both records were handed out");
        assert_eq!(parked.tasks(P), 0);
        assert_eq!(parked.meta(P).len(), 1, "the shared slot stays in the metadata with its floor");
    }
}
