//! Tasks that have waited longer than the queue's `max_wait`, found by
//! their waiting records whatever their levels.
//!
//! In a queue with a `max_wait` (and fair ordering) every task written to
//! the backlog gets, in the same write, a record in the `Waiting` section
//! keyed `(first added at, level id)` that says where its row is. Once
//! `max_wait` has passed since that time, the engine moves the task, if it
//! still waits, to the front of its subqueue: one write deletes its row and
//! writes it again at the ack level's pass with a new level id, so it goes
//! before every task of a later pass, and the tasks moved go in the order
//! they were added. A task whose row is above the read level is read by its
//! row first. Nothing is ever written at or below the ack level, and a row
//! is moved whole or not at all, so the levels' invariants hold
//! (`crate::core::engine`).
//!
//! Invariant: the window holds every stored waiting record with a key above
//! the floor and at or below `loaded_through` (all of them once
//! `complete`), and those of writes in flight are `pending`. Every record at
//! or below the floor is of a task that left the backlog (handed out,
//! parked, deleted) or was moved to the front by a durable write. The floor
//! is kept in the partition metadata, so a new owner reads above it, and
//! the records below the persisted floor are range-deleted. Reads and moves
//! are made by one task (the partition's writer), never at the same time.

use std::collections::{BTreeMap, BTreeSet};

use crate::clock::UnixMillis;
use crate::model::{FairLevel, Priority, StoredTask};

/// The key of a waiting record: `(first added at, ms since the Unix epoch;
/// level id of the row)`.
pub type WaitKey = (UnixMillis, i64);

/// Where a waiting record says its task's row is, and what the engine has
/// learnt of it.
#[derive(Clone, Debug)]
pub struct WaitingRow {
    /// The subqueue of the row.
    pub priority: Priority,
    /// The level of the row.
    pub level: FairLevel,
    /// The task, read from its row (a row above the read level is read
    /// before it is moved).
    pub fetched: Option<StoredTask>,
    /// Set while a write that moves the task is in flight.
    pub moving: bool,
}

/// The waiting records in memory: the oldest ones above the floor, up to a
/// capacity, and the keys of those being written.
#[derive(Debug)]
pub struct AgedWindow {
    rows: BTreeMap<WaitKey, WaitingRow>,
    pending: BTreeSet<WaitKey>,
    loaded_through: WaitKey,
    complete: bool,
    capacity: usize,
    persisted_floor: WaitKey,
    gc_through: WaitKey,
}

impl AgedWindow {
    /// Nothing known yet: the first [`Self::read_request`] reads above `floor`.
    pub fn new(capacity: usize, floor: WaitKey) -> Self {
        AgedWindow {
            rows: BTreeMap::new(),
            pending: BTreeSet::new(),
            loaded_through: floor,
            complete: false,
            capacity: capacity.max(1),
            persisted_floor: floor,
            gc_through: floor,
        }
    }

    /// Every record at or below this key is of a task that needs no move:
    /// just below the lowest record held or being written, and at most
    /// what has been read.
    pub fn floor(&self) -> WaitKey {
        let held = self.rows.keys().next().into_iter().chain(self.pending.first()).min();
        let below_held = held.map_or((i64::MAX, i64::MAX), |&(at, id)| (at, id.saturating_sub(1)));
        below_held.min(self.loaded_through).max(self.persisted_floor)
    }

    /// The key of a record for a task first added at `added_at` at level
    /// id `id`: moved one millisecond above the floor if it would be at or
    /// below it (a retried task keeps its first add time, and a clock may
    /// be behind an earlier owner's). The key is pending until the write
    /// is concluded ([`Self::written`], [`Self::not_written`]).
    pub fn key_for(&mut self, added_at: UnixMillis, id: i64) -> WaitKey {
        let floor = self.floor();
        let key = if (added_at, id) > floor { (added_at, id) } else { (floor.0 + 1, id) };
        self.pending.insert(key);
        key
    }

    /// The records of a write are durable.
    pub fn written(&mut self, records: impl IntoIterator<Item = (WaitKey, Priority, FairLevel)>) {
        for (key, priority, level) in records {
            self.pending.remove(&key);
            if self.complete || key <= self.loaded_through {
                self.rows.insert(key, WaitingRow { priority, level, fetched: None, moving: false });
            }
        }
        self.trim();
    }

    /// The records of a write failed; `may_have_applied`: they may be
    /// stored, and the window reads from below the lowest of them again.
    pub fn not_written(&mut self, keys: impl IntoIterator<Item = WaitKey>, may_have_applied: bool) {
        let keys: Vec<WaitKey> = keys.into_iter().collect();
        for key in &keys {
            self.pending.remove(key);
        }
        if let Some(lowest) = keys.into_iter().min().filter(|_| may_have_applied) {
            self.forget_from(lowest);
        }
    }

    /// Where to read from and how many, when the window runs low and the
    /// store may hold more.
    pub fn read_request(&self) -> Option<(WaitKey, usize)> {
        (!self.complete && self.rows.len() <= self.capacity / 2)
            .then(|| (self.loaded_through, self.capacity - self.rows.len()))
    }

    /// Takes the records read strictly above `after` (at most `limit` asked).
    pub fn apply_read(&mut self, after: WaitKey, records: Vec<(WaitKey, Priority, FairLevel)>, limit: usize) {
        if after != self.loaded_through {
            return;
        }
        if records.len() < limit {
            self.complete = true;
        }
        for (key, priority, level) in records {
            self.loaded_through = self.loaded_through.max(key);
            self.rows.entry(key).or_insert(WaitingRow { priority, level, fetched: None, moving: false });
        }
    }

    /// The records whose tasks have waited `max_wait_ms` at `now`, oldest
    /// first, that no write in flight is moving.
    pub fn due(&self, now: UnixMillis, max_wait_ms: i64) -> impl Iterator<Item = (WaitKey, &WaitingRow)> {
        self.rows
            .iter()
            .take_while(move |((added_at, _), _)| added_at.saturating_add(max_wait_ms) <= now)
            .filter(|(_, row)| !row.moving)
            .map(|(key, row)| (*key, row))
    }

    /// When the oldest record held becomes due.
    pub fn next_due(&self, max_wait_ms: i64) -> Option<UnixMillis> {
        self.rows.keys().next().map(|(added_at, _)| added_at.saturating_add(max_wait_ms))
    }

    /// The record of `key`, to change what is known of it.
    pub fn row_mut(&mut self, key: WaitKey) -> Option<&mut WaitingRow> {
        self.rows.get_mut(&key)
    }

    /// The task of `key` needs no move any more (it left the backlog, or a
    /// durable write moved it): the floor may pass it.
    pub fn resolved(&mut self, key: WaitKey) {
        self.rows.remove(&key);
    }

    /// The metadata with floor `floor` is durable: records at or below it
    /// may be deleted.
    pub fn floor_persisted(&mut self, floor: WaitKey) {
        self.persisted_floor = self.persisted_floor.max(floor);
    }

    /// Whether the floor moved since it was last written.
    pub fn floor_moved(&self) -> bool {
        self.floor() != self.persisted_floor
    }

    /// The key to range-delete records through, if the persisted floor
    /// passed the last delete.
    pub fn gc_due(&mut self) -> Option<WaitKey> {
        (self.persisted_floor > self.gc_through).then(|| {
            self.gc_through = self.persisted_floor;
            self.persisted_floor
        })
    }

    /// Records held in memory.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.rows.len()
    }

    /// Forgets what is held from `lowest` up, to read it again.
    fn forget_from(&mut self, lowest: WaitKey) {
        self.rows.retain(|key, _| *key < lowest);
        let below = (lowest.0, lowest.1.saturating_sub(1));
        self.loaded_through = self.loaded_through.min(below).max(self.persisted_floor);
        self.complete = false;
    }

    fn trim(&mut self) {
        while self.rows.len() > self.capacity {
            let (key, _) = self.rows.pop_last().expect("not empty");
            self.loaded_through = self.rows.keys().next_back().copied().unwrap_or((key.0, key.1 - 1));
            self.complete = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Priority = Priority::DEFAULT;

    fn record(at: i64, id: i64) -> (WaitKey, Priority, FairLevel) {
        ((at, id), P, FairLevel::new(id * 10, id))
    }

    #[test]
    fn records_come_due_oldest_first_after_max_wait() {
        let mut window = AgedWindow::new(8, (0, 0));
        let (after, limit) = window.read_request().unwrap();
        window.apply_read(after, vec![record(100, 1), record(300, 2)], limit);
        assert!(window.read_request().is_none(), "a short read reached the end");
        let key = window.key_for(200, 3);
        window.written([(key, P, FairLevel::new(30, 3))]);
        assert_eq!(window.due(1_099, 1_000).count(), 0);
        let due: Vec<WaitKey> = window.due(1_250, 1_000).map(|(key, _)| key).collect();
        assert_eq!(due, vec![(100, 1), (200, 3)]);
        assert_eq!(window.next_due(1_000), Some(1_100));
    }

    #[test]
    fn the_floor_stays_below_what_is_held_or_being_written() {
        let mut window = AgedWindow::new(8, (0, 0));
        let (after, limit) = window.read_request().unwrap();
        window.apply_read(after, vec![record(100, 1), record(300, 2)], limit);
        assert_eq!(window.floor(), (100, 0), "below the first held");
        let pending = window.key_for(50, 7);
        assert_eq!(pending, (101, 7), "a key at or below the floor is moved above it");
        window.resolved((100, 1));
        window.resolved((300, 2));
        assert_eq!(window.floor(), (101, 6), "below the record being written");
        window.not_written([pending], false);
        assert_eq!(window.floor(), (300, 2), "everything read is resolved");
        assert_eq!(window.key_for(20, 9), (301, 9));
    }

    #[test]
    fn an_uncertain_write_is_read_again_from_below_its_records() {
        let mut window = AgedWindow::new(8, (10, 0));
        let (after, limit) = window.read_request().unwrap();
        assert_eq!(after, (10, 0), "a new owner reads above the floor");
        window.apply_read(after, vec![record(100, 1)], limit);
        let key = window.key_for(200, 2);
        window.not_written([key], true);
        assert_eq!(window.read_request().map(|(after, _)| after), Some((100, 1)), "read again above what was kept");
        window.floor_persisted((100, 1));
        assert_eq!(window.gc_due(), Some((100, 1)));
        assert_eq!(window.gc_due(), None, "once");
    }

    #[test]
    fn the_window_keeps_the_oldest_within_its_capacity() {
        let mut window = AgedWindow::new(2, (0, 0));
        let (after, limit) = window.read_request().unwrap();
        window.apply_read(after, vec![record(10, 1), record(20, 2)], limit);
        let key = window.key_for(30, 3);
        window.written([(key, P, FairLevel::new(30, 3))]);
        assert_eq!(window.len(), 2, "beyond what was read: the store has it, the next read finds it");
        let key = window.key_for(15, 4);
        window.written([(key, P, FairLevel::new(40, 4))]);
        assert_eq!(window.len(), 2, "trimmed back to capacity");
        assert_eq!(window.due(1_000, 0).map(|(key, _)| key).collect::<Vec<_>>(), vec![(10, 1), (15, 4)]);
    }
}
