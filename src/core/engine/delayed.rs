//! Tasks that become ready later: new tasks with a delay, and retries
//! waiting out their backoff. They are stored in the `Delayed` section keyed
//! by `(ready at, id)`, so the earliest are found by one ordered read, never
//! by a scan of the backlog.
//!
//! Invariant: the buffer holds every stored delayed record with a key above
//! the `floor` and at or below `loaded_through` (all of them once
//! `complete`), except those being promoted right now. Every record at or
//! below the floor was made ready; the floor is kept in the partition
//! metadata, so a new owner reads from there and does not scan the
//! tombstones of promoted records. Reads and promotions are made by one task
//! (the partition's writer), never at the same time.

use std::collections::BTreeMap;

use crate::clock::UnixMillis;
use crate::model::StoredTask;

/// The key of a delayed record:
/// `(ready at, ms since the Unix epoch; level id of the task)`.
pub type DelayKey = (UnixMillis, i64);

/// The delayed records in memory: the earliest ones above the floor, up to a
/// capacity.
#[derive(Debug)]
pub struct Delayed {
    buffer: BTreeMap<DelayKey, StoredTask>,
    loaded_through: DelayKey,
    complete: bool,
    capacity: usize,
    floor: DelayKey,
}

impl Delayed {
    /// Nothing known yet: the first [`Self::read_request`] reads from `floor`.
    pub fn new(capacity: usize, floor: DelayKey) -> Self {
        Delayed { buffer: BTreeMap::new(), loaded_through: floor, complete: false, capacity, floor }
    }

    /// Every delayed record at or below this key was made ready.
    pub fn floor(&self) -> DelayKey {
        self.floor
    }

    /// A promotion up to `key` is durable, with the floor written beside it.
    pub fn raise_floor(&mut self, key: DelayKey) {
        self.floor = self.floor.max(key);
    }

    /// A key for a new record that is above the floor (and `pending`, a
    /// floor being written): moved one millisecond later if it is not.
    pub fn key_above_floor(&self, key: DelayKey, pending: Option<DelayKey>) -> DelayKey {
        let floor = pending.map_or(self.floor, |p| p.max(self.floor));
        if key > floor { key } else { (floor.0 + 1, key.1) }
    }

    /// The delayed task with id `task_id` among those in memory, with its
    /// key. Looks at every one: for an operator's lookup.
    pub fn find(&self, task_id: i64) -> Option<(DelayKey, &StoredTask)> {
        self.buffer.iter().find(|(_, task)| task.task_id == task_id).map(|(key, task)| (*key, task))
    }

    /// Where the records not in memory start: every delayed record waiting
    /// above the floor and at or below it is in memory; `None` when all are.
    pub fn unread_after(&self) -> Option<DelayKey> {
        (!self.complete).then_some(self.loaded_through)
    }

    /// Delayed records buffered in memory.
    pub fn len(&self) -> usize {
        self.buffer.len()
    }

    /// Whether no delayed record is buffered in memory.
    pub fn is_empty(&self) -> bool {
        self.buffer.is_empty()
    }

    /// Where to read from and how many, when the buffer runs low and the store may hold more.
    pub fn read_request(&self) -> Option<(DelayKey, usize)> {
        (!self.complete && self.buffer.len() <= self.capacity / 2)
            .then(|| (self.loaded_through, self.capacity - self.buffer.len()))
    }

    /// Takes the records read strictly above `after` (at most `limit` asked).
    pub fn apply_read(&mut self, after: DelayKey, records: Vec<(DelayKey, StoredTask)>, limit: usize) {
        if after != self.loaded_through {
            return;
        }
        if records.len() < limit {
            self.complete = true;
        }
        for (key, task) in records {
            self.loaded_through = self.loaded_through.max(key);
            self.buffer.insert(key, task);
        }
    }

    /// A delayed record this owner wrote.
    pub fn added(&mut self, key: DelayKey, task: StoredTask) {
        if self.complete || key <= self.loaded_through {
            self.buffer.insert(key, task);
            self.trim();
        }
    }

    /// The earliest due records (ready at or before `now`), at most `max`
    /// and while `fits` takes them, taken out of the buffer while they are
    /// promoted. Promotion keeps key order: the first that does not fit
    /// waits, and so do the ones after it.
    pub fn take_due(
        &mut self,
        now: UnixMillis,
        max: usize,
        mut fits: impl FnMut(&StoredTask) -> bool,
    ) -> Vec<(DelayKey, StoredTask)> {
        let due: Vec<DelayKey> = self
            .buffer
            .iter()
            .take_while(|((at, _), task)| *at <= now && fits(task))
            .take(max)
            .map(|(key, _)| *key)
            .collect();
        due.into_iter().map(|key| (key, self.buffer.remove(&key).expect("a buffered key"))).collect()
    }

    /// The promotion certainly failed: the records are still stored.
    pub fn promotion_failed(&mut self, records: Vec<(DelayKey, StoredTask)>) {
        self.buffer.extend(records);
    }

    /// The promotion may or may not have landed: forget what is buffered
    /// from the lowest of them up, and read it again.
    pub fn promotion_uncertain(&mut self, lowest: DelayKey) {
        self.buffer.retain(|key, _| *key < lowest);
        let below = self.buffer.keys().next_back().copied().unwrap_or(self.floor);
        self.loaded_through = below;
        self.complete = false;
    }

    /// When the next record is due, if one is buffered.
    pub fn next_due(&self) -> Option<UnixMillis> {
        self.buffer.keys().next().map(|(at, _)| *at)
    }

    fn trim(&mut self) {
        while self.buffer.len() > self.capacity {
            let (key, _) = self.buffer.pop_last().expect("not empty");
            self.loaded_through = self.buffer.keys().next_back().copied().unwrap_or((key.0, key.1 - 1));
            self.complete = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FairLevel, Priority, TaskSpec};

    fn task(id: i64) -> StoredTask {
        TaskSpec::new("k", Priority::DEFAULT, vec![]).at_level(FairLevel::new(0, id), 0)
    }

    #[test]
    fn due_records_come_out_in_time_order_and_only_when_due() {
        let mut delayed = Delayed::new(4, (0, 0));
        let (after, limit) = delayed.read_request().unwrap();
        delayed.apply_read(after, vec![((100, 1), task(1)), ((50, 2), task(2))], limit);
        assert_eq!(delayed.read_request(), None, "a short read reached the end");
        delayed.added((70, 3), task(3));
        assert!(delayed.take_due(49, 10, |_| true).is_empty());
        let due: Vec<DelayKey> = delayed.take_due(80, 10, |_| true).into_iter().map(|(k, _)| k).collect();
        assert_eq!(due, vec![(50, 2), (70, 3)]);
        assert_eq!(delayed.next_due(), Some(100));
    }

    #[test]
    fn records_past_a_partial_read_are_left_to_the_next_read() {
        let mut delayed = Delayed::new(2, (0, 0));
        let (after, limit) = delayed.read_request().unwrap();
        delayed.apply_read(after, vec![((10, 1), task(1)), ((20, 2), task(2))], limit);
        delayed.added((30, 3), task(3));
        assert_eq!(delayed.len(), 2, "beyond what was read: the store has it, the next read finds it");
        delayed.added((15, 4), task(4));
        assert_eq!(delayed.len(), 2, "trimmed back to capacity");
        assert_eq!(delayed.take_due(100, 10, |_| true).len(), 2);
        let (after, _) = delayed.read_request().unwrap();
        assert_eq!(after, (15, 4), "reads again after the last key kept");
    }

    #[test]
    fn an_uncertain_promotion_is_read_again() {
        let mut delayed = Delayed::new(8, (5, 0));
        let (after, limit) = delayed.read_request().unwrap();
        assert_eq!(after, (5, 0), "a new owner reads from the floor");
        delayed.apply_read(after, vec![((10, 1), task(1)), ((20, 2), task(2))], limit);
        let taken = delayed.take_due(15, 10, |_| true);
        delayed.promotion_uncertain(taken[0].0);
        assert!(delayed.is_empty());
        assert_eq!(delayed.read_request().unwrap().0, (5, 0));
    }

    #[test]
    fn new_keys_are_kept_above_the_floor() {
        let mut delayed = Delayed::new(8, (100, 7));
        assert_eq!(delayed.key_above_floor((90, 3), None), (101, 3));
        assert_eq!(delayed.key_above_floor((200, 3), None), (200, 3));
        assert_eq!(delayed.key_above_floor((200, 3), Some((300, 1))), (301, 3), "above a floor being written");
        delayed.raise_floor((250, 0));
        assert_eq!(delayed.floor(), (250, 0));
    }
}
