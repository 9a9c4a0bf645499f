//! One subqueue (a priority level of a partition): its buffer of ready tasks
//! between the ack level and the read level, and the fair order over them.
//! The ack level never passes a slot whose lease or park is being written.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::clock::UnixMillis;
use crate::core::engine::rows::SubqueueMeta;
use crate::core::fairness::{CounterConfig, GroupLeads, KeyCounters};
use crate::model::{FairLevel, Priority, StoredTask};

/// A buffered level: a task waiting for dispatch, one whose lease is being
/// written, one being parked (`crate::core::engine::parked`), one being
/// moved to the front (`crate::core::engine::aged`), or the mark of one
/// dispatched or parked that the ack level has not passed yet. The ack level
/// never passes a `Leasing`, `Parking` or `Moving` slot.
#[derive(Clone, Debug)]
enum Slot {
    Ready(StoredTask),
    Leasing,
    Parking,
    Moving,
    Dispatched,
}

/// What the buffer knows of a level: whether a task that has waited past
/// `max_wait` there still needs moving to the front.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LevelState {
    /// A ready task in the buffer.
    Ready,
    /// A write that leases or moves its task is in flight: it may come back.
    InFlight,
    /// Nothing there waits any more: the task was dispatched or parked, or
    /// the level is at or below the ack level, or within the buffer's
    /// levels and not in it, or above them with the reader at the end.
    Gone,
    /// Above the read level, with rows not read yet: only the store knows.
    Unread,
}

/// How many tasks of one key wait in the buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyBacklog {
    /// The fairness key.
    pub fairness_key: String,
    /// Its ready tasks in the buffer.
    pub buffered: u64,
    /// How far ahead of the ack level the key's next task would land.
    pub pass_ahead: i64,
    /// When the oldest of its ready tasks in the buffer was first added, ms
    /// since the Unix epoch.
    pub oldest_added_at: UnixMillis,
}

/// One priority level of a partition: its levels, buffer and key counters.
/// The invariants are those of the module (`crate::core::engine`).
#[derive(Debug)]
pub(super) struct Subqueue {
    pub priority: Priority,
    pub ack: FairLevel,
    pub read: FairLevel,
    pub max: FairLevel,
    pub at_end: bool,
    pub counters: KeyCounters,
    /// What each group owes for tasks of its keys that went ahead of its
    /// order (the queue's `group_lead`); not persisted: a new owner starts
    /// with none.
    pub leads: GroupLeads,
    /// Written minus dispatched, carried in the metadata; approximate after a
    /// crash (dispatches since the last metadata write are counted again)
    /// until the reader reaches the end of the rows with no append in
    /// flight, where it is set to the ready tasks buffered.
    pub approx_backlog: i64,
    pub persisted_ack: FairLevel,
    buffer: BTreeMap<FairLevel, Slot>,
    ready: usize,
    /// The level of the lowest ready slot ([`NO_READY`] when none is): a
    /// search for ready tasks starts here, past the tasks out with workers
    /// at the front of the buffer. Lowered when a slot becomes ready
    /// ([`Self::insert_ready`], [`Self::restore`]), raised to the next
    /// ready slot when the one at it is taken or dropped.
    ready_from: FairLevel,
    /// Appends in flight: while non-zero the ack level does not move.
    pins: u32,
    /// The `after` level of the read in flight, if any.
    read_in_flight: Option<FairLevel>,
    /// Set when something may have landed below `R` after the read in
    /// flight looked: its result must not be trusted.
    read_stale: bool,
    /// Tasks written above `R` while a read was in flight: the read may have
    /// looked before they landed, so they are merged again once it returns.
    written_during_read: Vec<StoredTask>,
    acks_since_gc: u64,
    last_gc_ms: UnixMillis,
    /// The level of the last range delete asked for.
    gc_through: FairLevel,
    /// Ready tasks of keys at their limits, beyond the buffer's capacity.
    blocked_room: usize,
    /// Rows above `R` that a write in flight moves to the front: a read
    /// that returns one of them does not buffer it.
    moving_unread: BTreeSet<FairLevel>,
}

/// [`Subqueue::ready_from`] when no slot is ready.
const NO_READY: FairLevel = FairLevel { pass: i64::MAX, id: i64::MAX };

impl Subqueue {
    /// `leased` are the levels of tasks out with workers (from the lease records).
    pub(super) fn load(
        priority: Priority,
        meta: &SubqueueMeta,
        leased: impl Iterator<Item = FairLevel>,
        counters: CounterConfig,
        now: UnixMillis,
    ) -> Self {
        // What the previous owner dispatched above its ack level stays dispatched.
        let buffer: BTreeMap<FairLevel, Slot> = meta
            .dispatched_above_ack
            .iter()
            .copied()
            .chain(leased)
            .filter(|level| *level > meta.ack_level)
            .map(|level| (level, Slot::Dispatched))
            .collect();
        Subqueue {
            priority,
            ack: meta.ack_level,
            read: meta.ack_level,
            max: meta.max_level.max(meta.ack_level),
            at_end: false,
            counters: KeyCounters::seeded(counters, meta.top_keys.iter().cloned()),
            leads: GroupLeads::default(),
            approx_backlog: meta.approx_backlog.max(0),
            persisted_ack: meta.ack_level,
            buffer,
            ready: 0,
            ready_from: NO_READY,
            pins: 0,
            read_in_flight: None,
            read_stale: false,
            written_during_read: Vec::new(),
            acks_since_gc: 0,
            last_gc_ms: now,
            gc_through: FairLevel::ZERO,
            blocked_room: 0,
            moving_unread: BTreeSet::new(),
        }
    }

    pub(super) fn ready(&self) -> usize {
        self.ready
    }

    pub(super) fn pin(&mut self) {
        self.pins += 1;
    }

    pub(super) fn unpin(&mut self) {
        debug_assert!(self.pins > 0, "unpin without pin");
        self.pins = self.pins.saturating_sub(1);
    }

    /// Takes the tasks of a successful append into the buffer: all of them when
    /// the reader is at the end, else those at or below `R` (the reader finds
    /// the others); then trims back to `capacity` ready tasks.
    pub(super) fn merge_written(&mut self, tasks: impl Iterator<Item = StoredTask>, capacity: usize) {
        let mut written = 0;
        for task in tasks {
            debug_assert!(task.level > self.ack, "a task was written at or below the ack level");
            written += 1;
            self.max = self.max.max(task.level);
            if let Some(uncovered) = self.take_written(task)
                && self.read_in_flight.is_some()
            {
                self.written_during_read.push(uncovered);
            }
        }
        self.approx_backlog += written;
        self.trim(capacity);
    }

    /// After an append that may or may not have landed: make the reader look
    /// again from just below the lowest level it wrote.
    pub(super) fn rewind_before(&mut self, lowest_written: FairLevel) {
        self.read_stale = self.read_in_flight.is_some();
        let rewind_to = self.ack.max(lowest_written.predecessor());
        if rewind_to < self.read {
            self.drop_ready_above(rewind_to);
            self.read = rewind_to;
        }
        self.at_end = false;
    }

    /// What to read next, if the buffer runs low and the store may hold more.
    /// `blocked` ready tasks (of keys at their limits) do not count as ready,
    /// so that other keys' tasks are read past them.
    pub(super) fn read_request(
        &mut self,
        capacity: usize,
        reload_at: usize,
        blocked: usize,
    ) -> Option<(FairLevel, usize)> {
        // Room for blocked tasks is bounded: past it, blocked keys do hold others back.
        self.blocked_room = blocked.min(self.ready).min(3 * capacity);
        let dispatchable = self.ready - self.blocked_room;
        if self.at_end || self.read_in_flight.is_some() || dispatchable > reload_at {
            return None;
        }
        let limit = (capacity + self.blocked_room).saturating_sub(self.ready).max(1);
        self.read_in_flight = Some(self.read);
        Some((self.read, limit))
    }

    /// Ready tasks of keys `allowed` refuses.
    pub(super) fn blocked(&self, allowed: impl Fn(&str) -> bool) -> usize {
        self.ready_tasks().filter(|task| !allowed(&task.fairness_key)).count()
    }

    /// Takes a read's result. Returns false when the read is stale (`R`
    /// moved, or an append of unknown outcome happened, while it was in
    /// flight) and was ignored; the reader then reads again from `R`.
    pub(super) fn apply_read(
        &mut self,
        after: FairLevel,
        tasks: Vec<StoredTask>,
        limit: usize,
        capacity: usize,
    ) -> bool {
        self.read_in_flight = None;
        let written_during_read = std::mem::take(&mut self.written_during_read);
        if after != self.read || std::mem::take(&mut self.read_stale) {
            return false;
        }
        let reached_end = tasks.len() < limit;
        for task in tasks {
            debug_assert!(task.level > after, "a read returned a level at or below its bound");
            self.read = self.read.max(task.level);
            self.max = self.max.max(task.level);
            self.insert_ready(task);
        }
        if reached_end {
            self.at_end = true;
        }
        for task in written_during_read {
            self.take_written(task);
        }
        // At the end of the rows the buffer holds every waiting task: the
        // count, approximate after a crash, is exact again. Not while an
        // append is in flight: the read may have seen its rows, which its
        // merge then counts once more.
        if self.at_end && self.pins == 0 {
            self.approx_backlog = self.ready as i64;
        }
        self.trim(capacity);
        true
    }

    /// A failed read leaves `R` and `at_end` as they were: the next read
    /// from `R` finds whatever was written meanwhile.
    pub(super) fn read_failed(&mut self) {
        self.read_in_flight = None;
        self.read_stale = false;
        self.written_during_read.clear();
    }

    /// True when this level might hold tasks not in memory yet.
    pub(super) fn may_have_unread(&self) -> bool {
        !self.at_end
    }

    /// The lowest ready task whose key `allowed` accepts; keys refused are
    /// passed over and keep their levels.
    pub(super) fn first_ready(&self, allowed: impl Fn(&str) -> bool) -> Option<&StoredTask> {
        if self.ready == 0 {
            return None;
        }
        self.ready_tasks().find(|task| allowed(&task.fairness_key))
    }

    /// The ready task whose key `allowed` accepts that goes first when each
    /// competes at its pass lowered by `boost(task)` (at most `max_boost`
    /// passes; ties to the lower level), with that effective pass. Only
    /// the first ready task of each key competes, so a key's tasks keep
    /// their order. The scan stops at the first task whose pass, lowered by
    /// the most any boost can be, is not below the best found: no later
    /// task can do better. At most the buffer, bounded by
    /// `engine.buffer_tasks`.
    pub(super) fn boosted_first(
        &self,
        allowed: impl Fn(&str) -> bool,
        boost: impl Fn(&StoredTask) -> i64,
        max_boost: i64,
    ) -> Option<(&StoredTask, i64)> {
        if self.ready == 0 {
            return None;
        }
        let mut best: Option<(&StoredTask, i64)> = None;
        let mut seen: HashSet<&str> = HashSet::new();
        for task in self.ready_tasks() {
            if best.is_some_and(|(_, effective)| task.level.pass.saturating_sub(max_boost) >= effective) {
                break;
            }
            if !seen.insert(task.fairness_key.as_str()) || !allowed(&task.fairness_key) {
                continue;
            }
            let effective = task.level.pass.saturating_sub(boost(task).clamp(0, max_boost));
            if best.is_none_or(|(_, b)| effective < b) {
                best = Some((task, effective));
            }
        }
        best
    }

    /// The ready task whose key `allowed` accepts that goes first by
    /// deadline at `now` ([`deadline_rank`] with `late_slack`, then the
    /// deadline, then the level). The buffer holds the oldest tasks waiting,
    /// so the choice is exact while no more than the buffer's capacity
    /// wait. One pass over the buffer, whose size is bounded by
    /// `engine.buffer_tasks`.
    pub(super) fn earliest_deadline(
        &self,
        now: UnixMillis,
        late_slack: i64,
        allowed: impl Fn(&str) -> bool,
    ) -> Option<&StoredTask> {
        if self.ready == 0 {
            return None;
        }
        self.ready_tasks()
            .filter(|task| allowed(&task.fairness_key))
            .min_by_key(|task| (deadline_rank(task, now, late_slack), task.deadline_or_created(), task.level))
    }

    /// Hands out the ready task at `level`; its slot waits for its lease.
    pub(super) fn take(&mut self, level: FairLevel) -> Option<StoredTask> {
        self.take_as(level, Slot::Leasing)
    }

    /// Takes the ready task at `level` to park it; its slot waits for the write.
    pub(super) fn take_to_park(&mut self, level: FairLevel) -> Option<StoredTask> {
        self.take_as(level, Slot::Parking)
    }

    /// Takes the ready task at `level` to move it to the front; its slot
    /// waits for the write.
    pub(super) fn take_to_move(&mut self, level: FairLevel) -> Option<StoredTask> {
        self.take_as(level, Slot::Moving)
    }

    /// The ready task with id `task_id` in the buffer, if there is one.
    /// Looks at every slot: for an operator's lookup.
    pub(super) fn find_ready(&self, task_id: i64) -> Option<&StoredTask> {
        self.ready_tasks().find(|task| task.task_id == task_id)
    }

    /// What is known at `level` (see [`LevelState`]).
    pub(super) fn level_state(&self, level: FairLevel) -> LevelState {
        if level <= self.ack {
            return LevelState::Gone;
        }
        match self.buffer.get(&level) {
            Some(Slot::Ready(_)) => LevelState::Ready,
            Some(Slot::Leasing | Slot::Moving) => LevelState::InFlight,
            Some(Slot::Parking | Slot::Dispatched) => LevelState::Gone,
            None if self.moving_unread.contains(&level) => LevelState::InFlight,
            None if level <= self.read || self.at_end => LevelState::Gone,
            None => LevelState::Unread,
        }
    }

    /// A write in flight moves the row at `level`, above `R`, to the front.
    pub(super) fn moving_unread(&mut self, level: FairLevel) {
        self.moving_unread.insert(level);
    }

    /// The write that moved the task at `level` to the front is durable:
    /// its old slot goes (the row is gone), and a read in flight, which may
    /// have seen the old row (above `R` from the start, or since a rewind),
    /// is not trusted. The backlog counts the task once, at its new row
    /// (merged by the same write).
    pub(super) fn moved(&mut self, level: FairLevel) {
        if matches!(self.buffer.get(&level), Some(Slot::Moving)) {
            self.buffer.remove(&level);
        }
        if self.moving_unread.remove(&level) {
            self.approx_backlog -= 1;
        }
        self.read_stale |= self.read_in_flight.is_some();
    }

    /// Puts back a task whose move from the buffer was not written: ready
    /// again if its level is still within the buffer's, else only in the
    /// store (a rewind while the move was in flight lowered `R` below it),
    /// where the reader finds it.
    pub(super) fn restore_moved(&mut self, task: StoredTask) {
        if self.at_end || task.level <= self.read {
            return self.restore(task);
        }
        if matches!(self.buffer.get(&task.level), Some(Slot::Moving)) {
            self.buffer.remove(&task.level);
            self.approx_backlog += 1;
        }
    }

    /// The write that moved the row at `level`, above `R` when it was
    /// planned, failed; if it `may_have_applied`, a read in flight is not
    /// trusted. A read that passed the row meanwhile did not buffer it: the
    /// reader reads again from below it. A read that reached the end of the
    /// rows passed it too, without raising `R` to it.
    pub(super) fn move_failed(&mut self, level: FairLevel, may_have_applied: bool) {
        self.moving_unread.remove(&level);
        self.read_stale |= may_have_applied && self.read_in_flight.is_some();
        if level <= self.read || self.at_end {
            self.rewind_before(level);
        }
    }

    fn take_as(&mut self, level: FairLevel, state: Slot) -> Option<StoredTask> {
        let slot = self.buffer.get_mut(&level)?;
        if !matches!(slot, Slot::Ready(_)) {
            return None;
        }
        let Slot::Ready(task) = std::mem::replace(slot, state) else { unreachable!("checked") };
        self.ready -= 1;
        self.approx_backlog -= 1;
        if level == self.ready_from {
            let above = self.buffer.range((std::ops::Bound::Excluded(level), std::ops::Bound::Unbounded));
            let next_ready = above.filter(|(_, slot)| matches!(slot, Slot::Ready(_))).map(|(level, _)| *level).next();
            self.ready_from = next_ready.unwrap_or(NO_READY);
        }
        Some(task)
    }

    /// The lease, or the parked record, of the task taken at `level` is durable.
    pub(super) fn leased(&mut self, level: FairLevel) {
        if let Some(slot @ (Slot::Leasing | Slot::Parking)) = self.buffer.get_mut(&level) {
            *slot = Slot::Dispatched;
        }
    }

    /// Ready tasks to park, lowest first, at most `max`: those `park`
    /// accepts. `park` is told whether the task holds the ack level back
    /// (every slot below it is dispatched, parked, or being parked).
    pub(super) fn to_park(&self, max: usize, mut park: impl FnMut(&StoredTask, bool) -> bool) -> Vec<FairLevel> {
        let mut levels = Vec::new();
        let mut holds_ack = true;
        for (level, slot) in &self.buffer {
            if levels.len() >= max {
                break;
            }
            match slot {
                Slot::Dispatched | Slot::Parking => {}
                Slot::Leasing | Slot::Moving => holds_ack = false,
                Slot::Ready(task) if park(task, holds_ack) => levels.push(*level),
                Slot::Ready(_) => holds_ack = false,
            }
        }
        levels
    }

    /// Puts back a task that was taken but whose lease, parked record or
    /// move was not written.
    pub(super) fn restore(&mut self, task: StoredTask) {
        match self.buffer.get_mut(&task.level) {
            Some(slot @ (Slot::Leasing | Slot::Parking | Slot::Moving)) => {
                self.ready_from = self.ready_from.min(task.level);
                *slot = Slot::Ready(task);
                self.ready += 1;
                self.approx_backlog += 1;
            }
            _ => debug_assert!(false, "restore of a level that was not being leased"),
        }
    }

    /// Moves the ack level over the dispatched prefix of the buffer, up to `R`.
    pub(super) fn advance_ack(&mut self) {
        if self.pins > 0 {
            return;
        }
        while let Some(entry) = self.buffer.first_entry() {
            if !matches!(entry.get(), Slot::Dispatched) || *entry.key() > self.read {
                break;
            }
            self.ack = *entry.key();
            entry.remove();
            self.acks_since_gc += 1;
        }
    }

    /// The level to delete through, when enough acks or time have gone by:
    /// the ack level as persisted by a fenced write, never the one in
    /// memory. An owner deposed while paused still deletes when it wakes
    /// (deletes are not fenced), and a new owner gives new keys passes from
    /// the persisted ack level, below the old owner's level in memory; the
    /// persisted level is below everything the new owner writes.
    pub(super) fn gc_due(&mut self, now: UnixMillis, min_acks: u64, interval_ms: i64) -> Option<FairLevel> {
        let due = self.acks_since_gc >= min_acks || (self.acks_since_gc > 0 && now - self.last_gc_ms >= interval_ms);
        (due && self.persisted_ack > self.gc_through).then(|| {
            self.acks_since_gc = 0;
            self.last_gc_ms = now;
            self.gc_through = self.persisted_ack;
            self.persisted_ack
        })
    }

    /// Whether the oldest ready task is younger than `max_age_ms` and nothing
    /// waits unread in the store.
    pub(super) fn backlog_negligible(&self, now: UnixMillis, max_age_ms: i64) -> bool {
        if !self.at_end {
            return false;
        }
        self.buffer.values().all(|slot| match slot {
            Slot::Ready(task) => now - task.created_at_unix_ms < max_age_ms,
            Slot::Moving => false,
            Slot::Leasing | Slot::Parking | Slot::Dispatched => true,
        })
    }

    pub(super) fn meta(&self, saved_top_keys: usize) -> SubqueueMeta {
        SubqueueMeta {
            ack_level: self.ack,
            max_level: self.max,
            approx_backlog: self.approx_backlog.max(0),
            top_keys: self.counters.top(saved_top_keys, self.ack.pass),
            // Slots being parked count: the write that parks them carries
            // this metadata, and if it fails the metadata is not written.
            dispatched_above_ack: self
                .buffer
                .iter()
                .filter(|(_, slot)| matches!(slot, Slot::Dispatched | Slot::Parking))
                .map(|(level, _)| *level)
                .collect(),
            parked: Vec::new(),
        }
    }

    /// Tasks dispatched, parked, or being leased or parked, above the ack level.
    pub(super) fn dispatched_above_ack(&self) -> usize {
        self.buffer.len() - self.ready
    }

    /// The ready tasks in the buffer, in level order.
    fn ready_tasks(&self) -> impl Iterator<Item = &StoredTask> {
        self.buffer.range(self.ready_from..).map(|(_, slot)| slot).filter_map(|slot| match slot {
            Slot::Ready(task) => Some(task),
            _ => None,
        })
    }

    /// The levels of at most `max` ready tasks in the buffer that `choose`
    /// picks, in level order.
    pub(super) fn ready_levels_where(&self, choose: impl Fn(&StoredTask) -> bool, max: usize) -> Vec<FairLevel> {
        self.ready_tasks().filter(|task| choose(task)).map(|task| task.level).take(max).collect()
    }

    /// The ready task at `level`, if there is one.
    pub(super) fn ready_task(&self, level: FairLevel) -> Option<&StoredTask> {
        match self.buffer.get(&level) {
            Some(Slot::Ready(task)) => Some(task),
            _ => None,
        }
    }

    /// Ready tasks in the buffer first added at or before `cutoff`. One
    /// pass over the buffer, bounded by `engine.buffer_tasks`.
    pub(super) fn ready_older_than(&self, cutoff: UnixMillis) -> usize {
        self.ready_tasks().filter(|task| task.created_at_unix_ms <= cutoff).count()
    }

    /// When the oldest ready task in the buffer was first added: the oldest
    /// waiting of the level when the reader is at the end, a lower bound of
    /// its age otherwise (a task not read yet, of a key far ahead, may be
    /// older). One pass over the buffer, bounded by `engine.buffer_tasks`.
    pub(super) fn oldest_buffered_added_at(&self) -> Option<UnixMillis> {
        self.ready_tasks().map(|task| task.created_at_unix_ms).min()
    }

    pub(super) fn top_keys(&self, n: usize) -> Vec<KeyBacklog> {
        if n == 0 {
            return Vec::new();
        }
        let mut per_key: HashMap<&str, (u64, UnixMillis)> = HashMap::new();
        for task in self.ready_tasks() {
            let (buffered, oldest) = per_key.entry(task.fairness_key.as_str()).or_insert((0, UnixMillis::MAX));
            *buffered += 1;
            *oldest = (*oldest).min(task.created_at_unix_ms);
        }
        let mut keys: Vec<KeyBacklog> = per_key
            .into_iter()
            .map(|(key, (buffered, oldest_added_at))| KeyBacklog {
                fairness_key: key.to_owned(),
                buffered,
                pass_ahead: self.counters.peek(key).map_or(0, |next| (next - self.ack.pass).max(0)),
                oldest_added_at,
            })
            .collect();
        keys.sort_by(|a, b| b.buffered.cmp(&a.buffered).then_with(|| a.fairness_key.cmp(&b.fairness_key)));
        keys.truncate(n);
        keys
    }

    /// Buffers a written task if the buffer covers its level (at or below
    /// `R`, or anywhere once the reader is at the end); hands it back if not.
    fn take_written(&mut self, task: StoredTask) -> Option<StoredTask> {
        if !self.at_end && task.level > self.read {
            return Some(task);
        }
        let level = task.level;
        if self.insert_ready(task) && self.at_end {
            self.read = self.read.max(level);
        }
        None
    }

    fn insert_ready(&mut self, task: StoredTask) -> bool {
        if task.level <= self.ack || self.moving_unread.contains(&task.level) {
            return false;
        }
        let std::collections::btree_map::Entry::Vacant(slot) = self.buffer.entry(task.level) else { return false };
        self.ready_from = self.ready_from.min(task.level);
        slot.insert(Slot::Ready(task));
        self.ready += 1;
        true
    }

    /// Keeps the lowest `capacity` ready tasks (after tasks put back by
    /// [`Self::restore`], which other writes may have filled the buffer
    /// around).
    pub(super) fn fit(&mut self, capacity: usize) {
        self.trim(capacity);
    }

    /// Keeps the lowest `capacity` ready tasks; `R` falls to the last kept.
    /// Dispatched marks above the cut stay, so a later read cannot hand their
    /// tasks out again.
    fn trim(&mut self, capacity: usize) {
        let capacity = capacity + self.blocked_room;
        if self.ready <= capacity {
            return;
        }
        let cut =
            self.ready_tasks().nth(capacity - 1).map(|task| task.level).expect("more than `capacity` ready tasks");
        self.drop_ready_above(cut);
        self.read = cut;
        self.at_end = false;
    }

    fn drop_ready_above(&mut self, level: FairLevel) {
        let above: Vec<FairLevel> = self
            .buffer
            .range((std::ops::Bound::Excluded(level), std::ops::Bound::Unbounded))
            .filter(|(_, slot)| matches!(slot, Slot::Ready(_)))
            .map(|(level, _)| *level)
            .collect();
        self.ready -= above.len();
        for level in above {
            self.buffer.remove(&level);
        }
        if self.ready_from > level {
            self.ready_from = NO_READY;
        }
    }

    pub(super) fn tracked_keys(&self) -> (usize, bool) {
        (self.counters.exact_len(), self.counters.sketch().is_some())
    }
}

/// How a task ranks in a queue ordered by deadline at `now`: by its
/// deadline while that has not passed; once it has, as if it were due
/// `late_slack` from now. A late task thus waits behind the tasks due
/// within `late_slack` (serving it first would make them late in turn: the
/// domino of plain earliest-deadline-first under overload) and goes before
/// those that can wait longer (so that work on time but not urgent does
/// not starve it). A task given no deadline is due at its add time and
/// never counted late.
pub(crate) fn deadline_rank(task: &StoredTask, now: UnixMillis, late_slack: i64) -> i64 {
    match task.deadline_unix_ms {
        Some(deadline) if deadline < now => now.saturating_add(late_slack),
        Some(deadline) => deadline,
        None => task.created_at_unix_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TaskSpec;

    fn subqueue() -> Subqueue {
        let mut subqueue = Subqueue::load(
            Priority::DEFAULT,
            &SubqueueMeta::default(),
            std::iter::empty(),
            CounterConfig::default(),
            0,
        );
        subqueue.at_end = true;
        subqueue
    }

    fn task(key: &str, pass: i64, id: i64) -> StoredTask {
        TaskSpec::new(key, Priority::DEFAULT, Vec::new()).at_level(FairLevel::new(pass, id), 0)
    }

    /// The first ready task `allowed` accepts, once `ready_from` is checked
    /// against a search of the whole buffer.
    fn first(subqueue: &Subqueue, allowed: impl Fn(&str) -> bool) -> Option<(i64, i64)> {
        let lowest = subqueue.buffer.iter().find(|(_, slot)| matches!(slot, Slot::Ready(_))).map(|(level, _)| *level);
        assert_eq!(lowest.unwrap_or(NO_READY), subqueue.ready_from);
        subqueue.first_ready(allowed).map(|task| (task.level.pass, task.level.id))
    }

    #[test]
    fn the_first_ready_task_is_found_past_taken_ones_and_below_them_once_one_is_put_back_or_written() {
        let mut subqueue = subqueue();
        subqueue.merge_written((1..=5).map(|i| task(if i % 2 == 0 { "b" } else { "a" }, 10 * i, i)), 100);
        let taken: Vec<StoredTask> =
            [10, 20].map(|pass| subqueue.take(FairLevel::new(pass, pass / 10)).unwrap()).into();
        assert_eq!(first(&subqueue, |_| true), Some((30, 3)), "past the two taken");
        assert_eq!(first(&subqueue, |key| key == "b"), Some((40, 4)), "a key refused is passed over");
        subqueue.restore(taken[1].clone());
        assert_eq!(first(&subqueue, |_| true), Some((20, 2)), "one put back goes first again");
        subqueue.take(FairLevel::new(20, 2)).unwrap();
        subqueue.merge_written(std::iter::once(task("c", 5, 6)), 100);
        assert_eq!(first(&subqueue, |_| true), Some((5, 6)), "a task written below the ones taken");
        for level in [FairLevel::new(5, 6), FairLevel::new(30, 3), FairLevel::new(40, 4), FairLevel::new(50, 5)] {
            subqueue.take(level).unwrap();
        }
        assert_eq!(subqueue.ready(), 0);
        assert_eq!(first(&subqueue, |_| true), None);
        subqueue.restore(taken[0].clone());
        assert_eq!(first(&subqueue, |_| true), Some((10, 1)), "the lowest of all, put back last");
        assert_eq!(subqueue.ready_levels_where(|_| true, 10), vec![FairLevel::new(10, 1)]);
        subqueue.merge_written((7..=9).map(|i| task("d", 10 * i, i)), 2);
        assert_eq!(first(&subqueue, |key| key == "d"), Some((70, 7)), "trimmed to two ready tasks");
        subqueue.take(FairLevel::new(10, 1)).unwrap();
        subqueue.rewind_before(FairLevel::new(60, 0));
        assert_eq!(first(&subqueue, |_| true), None, "dropped by a rewind below them");
    }
}
