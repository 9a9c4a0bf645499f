//! The tasks of a partition that are out with workers.
//!
//! Invariants:
//! 1. A lease is handed to a worker only once its record is durable
//!    (`Writing` → `Held`); so a new owner, loading the records, knows every
//!    task a worker may be running.
//! 2. One lease per task level id; a token names the level id and the attempt,
//!    so the token of an earlier attempt never matches a later lease.
//! 3. While a finishing write is in flight (`Finishing`), the lease can be
//!    neither finished again nor expired.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::clock::UnixMillis;
use crate::hash::IdMap;
use crate::model::StoredTask;

/// Where a lease stands, from the write of its record to its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// The lease record is being written; the worker has nothing yet.
    Writing,
    /// Durable and out with a worker (or, if `delivered` is false, with nobody).
    Held,
    /// A complete, fail or expiry write is in flight.
    Finishing,
}

/// A task out with a worker, or about to be: its task, record and deadline.
#[derive(Clone, Debug, PartialEq)]
pub struct Lease {
    /// The task as delivered (its level is the level it was dispatched from).
    pub task: StoredTask,
    /// Where its record is (`(0, seq)` in the lease section); 0 until the
    /// record is planned.
    pub seq: i64,
    /// When the lease runs out, in ms since the Unix epoch, unless a heartbeat
    /// extends it; the attempt then fails, retryably.
    pub deadline: UnixMillis,
    /// Where the lease stands.
    pub state: LeaseState,
    /// False when no worker got it (its poller left while it was written):
    /// it then expires at once and its attempt does not count.
    pub delivered: bool,
    /// The id the worker polled with, once it is known (`None` for a lease
    /// a previous owner handed out): for operators, see [`Leases::worker_took`].
    pub worker: Option<Arc<str>>,
}

/// Why a lease operation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// The token does not name a held lease: it expired and the task was
    /// delivered again, or it was finished.
    #[error(
        "the lease is no longer held by this token (it expired and the task was delivered again, or it was \
         finished or cancelled)"
    )]
    Stale,
    /// A completion or failure of this lease is being written; the worker may
    /// try again.
    #[error("a completion or failure of this task is being written; try again")]
    Busy,
    /// The task was cancelled (CancelTask): its worker should stop.
    #[error("the task was cancelled (CancelTask): stop working on it; a report on it completes it")]
    Cancelled,
}

/// The leases of a partition, by the level id their task was dispatched from.
#[derive(Debug, Default)]
pub struct Leases {
    by_id: IdMap<Lease>,
    /// `(deadline, level id)` of held leases.
    deadlines: BTreeSet<(UnixMillis, i64)>,
    /// Leases per fairness key, for the concurrency limit.
    per_key: HashMap<String, u32>,
}

impl Leases {
    /// Lease records (task, deadline, seq) read by a new owner: each gets a
    /// full timeout from `now`, as its worker may be heartbeating the
    /// previous owner. Of two records of one task, the later one counts.
    pub fn load(
        records: impl IntoIterator<Item = (StoredTask, UnixMillis, i64)>,
        now: UnixMillis,
        lease_ms: i64,
    ) -> Self {
        let mut leases = Leases::default();
        for (task, deadline, seq) in records {
            let id = task.level.id;
            if let Some(earlier) = leases.by_id.remove(&id) {
                leases.deadlines.remove(&(earlier.deadline, id));
                leases.count(&earlier.task.fairness_key, -1);
            }
            leases.count(&task.fairness_key, 1);
            let deadline = deadline.max(now + lease_ms);
            leases.deadlines.insert((deadline, id));
            leases
                .by_id
                .insert(id, Lease { task, seq, deadline, state: LeaseState::Held, delivered: true, worker: None });
        }
        leases
    }

    /// Records the place of the lease record of `id` about to be written,
    /// and the deadline written in it.
    pub fn set_written_place(&mut self, id: i64, seq: i64, deadline: UnixMillis) {
        if let Some(lease) = self.by_id.get_mut(&id) {
            lease.seq = seq;
            lease.deadline = deadline;
        }
    }

    /// The lowest seq of a lease record still in use, if any.
    pub fn lowest_seq(&self) -> Option<i64> {
        self.by_id.values().map(|l| l.seq).filter(|seq| *seq > 0).min()
    }

    /// How many leases there are, in any state.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no task is out with a worker or being leased.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The leases `key` holds, in any state: what its concurrency limit counts.
    pub fn running(&self, key: &str) -> u32 {
        self.per_key.get(key).copied().unwrap_or(0)
    }

    /// The lease of the task dispatched from level id `id`, if any.
    pub fn get(&self, id: i64) -> Option<&Lease> {
        self.by_id.get(&id)
    }

    /// The lease of the task with id `task_id` (kept across retries), if
    /// one runs. Looks at every lease: for an operator's lookup, not the
    /// hot path.
    pub fn of_task(&self, task_id: i64) -> Option<&Lease> {
        self.by_id.values().find(|lease| lease.task.task_id == task_id)
    }

    /// Records which worker the lease of `id` at `attempt` went to.
    pub fn worker_took(&mut self, id: i64, attempt: u32, worker: Arc<str>) {
        if let Some(lease) = self.by_id.get_mut(&id).filter(|lease| lease.task.attempt == attempt) {
            lease.worker = Some(worker);
        }
    }

    /// Tasks a new owner must not hand out again from the backlog.
    pub fn levels(&self) -> impl Iterator<Item = &StoredTask> {
        self.by_id.values().map(|l| &l.task)
    }

    /// A dispatched task whose lease record is about to be written.
    pub fn start(&mut self, task: StoredTask, deadline: UnixMillis) {
        self.count(&task.fairness_key, 1);
        let id = task.level.id;
        let lease = Lease { task, seq: 0, deadline, state: LeaseState::Writing, delivered: true, worker: None };
        let previous = self.by_id.insert(id, lease);
        debug_assert!(previous.is_none(), "a task leased twice");
    }

    /// The lease record is durable: the lease runs.
    pub fn written(&mut self, id: i64, delivered: bool, now: UnixMillis) {
        if let Some(lease) = self.by_id.get_mut(&id) {
            lease.state = LeaseState::Held;
            lease.delivered = delivered;
            if !delivered {
                lease.deadline = now;
            }
            self.deadlines.insert((lease.deadline, id));
        }
    }

    /// The task's worker is gone (it left before the lease was written):
    /// the lease expires now, and its attempt will not count.
    pub fn undelivered(&mut self, id: i64, now: UnixMillis) {
        if let Some(lease) = self.by_id.get_mut(&id)
            && lease.state == LeaseState::Held
        {
            self.deadlines.remove(&(lease.deadline, id));
            lease.delivered = false;
            lease.deadline = now;
            self.deadlines.insert((now, id));
        }
    }

    /// The lease record was certainly not written: the task goes back.
    pub fn not_written(&mut self, id: i64) -> Option<StoredTask> {
        let lease = self.by_id.remove(&id)?;
        self.count(&lease.task.fairness_key, -1);
        Some(lease.task)
    }

    /// Checks that `attempt` of task `id` holds its lease and may finish it.
    pub fn check(&self, id: i64, attempt: u32) -> Result<&Lease, LeaseError> {
        match self.by_id.get(&id) {
            Some(lease) if lease.task.attempt == attempt && lease.state == LeaseState::Held => Ok(lease),
            Some(lease) if lease.task.attempt == attempt && lease.state == LeaseState::Finishing => {
                Err(LeaseError::Busy)
            }
            _ => Err(LeaseError::Stale),
        }
    }

    /// Makes a held lease run out at `now` (its task was cancelled).
    pub fn expire(&mut self, id: i64, now: UnixMillis) {
        if let Some(lease) = self.by_id.get_mut(&id).filter(|lease| lease.state == LeaseState::Held) {
            self.deadlines.remove(&(lease.deadline, id));
            lease.deadline = lease.deadline.min(now);
            self.deadlines.insert((lease.deadline, id));
        }
    }

    /// Extends a held lease to `deadline`.
    pub fn heartbeat(&mut self, id: i64, attempt: u32, deadline: UnixMillis) -> Result<UnixMillis, LeaseError> {
        self.check(id, attempt)?;
        let lease = self.by_id.get_mut(&id).expect("checked");
        self.deadlines.remove(&(lease.deadline, id));
        lease.deadline = lease.deadline.max(deadline);
        self.deadlines.insert((lease.deadline, id));
        Ok(lease.deadline)
    }

    /// Starts finishing a held lease; the task as delivered.
    pub fn begin_finish(&mut self, id: i64, attempt: u32) -> Result<StoredTask, LeaseError> {
        self.check(id, attempt)?;
        let lease = self.by_id.get_mut(&id).expect("checked");
        self.deadlines.remove(&(lease.deadline, id));
        lease.state = LeaseState::Finishing;
        Ok(lease.task.clone())
    }

    /// The finishing write is durable: the lease is gone.
    pub fn finished(&mut self, id: i64) {
        if let Some(lease) = self.by_id.remove(&id) {
            self.count(&lease.task.fairness_key, -1);
        }
    }

    /// The finishing write failed: the lease is held again as it was.
    pub fn finish_failed(&mut self, id: i64) {
        if let Some(lease) = self.by_id.get_mut(&id) {
            lease.state = LeaseState::Held;
            self.deadlines.insert((lease.deadline, id));
        }
    }

    /// Held leases past their deadline, earliest first, at most `max` and
    /// while `fits` takes their tasks, set to finishing.
    pub fn take_expired(
        &mut self,
        now: UnixMillis,
        max: usize,
        mut fits: impl FnMut(&StoredTask) -> bool,
    ) -> Vec<Lease> {
        let due: Vec<(UnixMillis, i64)> = self
            .deadlines
            .iter()
            .take_while(|(d, id)| *d <= now && fits(&self.by_id[id].task))
            .take(max)
            .copied()
            .collect();
        due.into_iter()
            .map(|entry| {
                self.deadlines.remove(&entry);
                let lease = self.by_id.get_mut(&entry.1).expect("a deadline of a lease");
                lease.state = LeaseState::Finishing;
                lease.clone()
            })
            .collect()
    }

    /// Held leases whose records lie below `seq`, at most `max`: (id, task, deadline).
    pub fn held_below(&self, seq: i64, max: usize) -> Vec<(i64, StoredTask, UnixMillis)> {
        self.by_id
            .iter()
            .filter(|(_, lease)| lease.state == LeaseState::Held && lease.seq > 0 && lease.seq < seq)
            .take(max)
            .map(|(id, lease)| (*id, lease.task.clone(), lease.deadline))
            .collect()
    }

    /// The record of lease `id` was written again at `seq` (the earlier one
    /// is superseded: of two records of a task, the later counts).
    pub fn moved(&mut self, id: i64, seq: i64) {
        if let Some(lease) = self.by_id.get_mut(&id) {
            lease.seq = lease.seq.max(seq);
        }
    }

    /// The earliest deadline of a held lease.
    pub fn next_deadline(&self) -> Option<UnixMillis> {
        self.deadlines.first().map(|(d, _)| *d)
    }

    fn count(&mut self, key: &str, delta: i32) {
        let count = self.per_key.entry(key.to_owned()).or_default();
        *count = count.saturating_add_signed(delta);
        if *count == 0 {
            self.per_key.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FairLevel, Priority, TaskSpec};

    fn task(id: i64, key: &str) -> StoredTask {
        TaskSpec::new(key, Priority::DEFAULT, vec![]).at_level(FairLevel::new(1, id), 0)
    }

    #[test]
    fn a_lease_runs_from_written_to_finished() {
        let mut leases = Leases::default();
        leases.start(task(7, "a"), 100);
        assert_eq!(leases.check(7, 1).unwrap_err(), LeaseError::Stale, "not durable yet");
        leases.written(7, true, 0);
        assert_eq!(leases.running("a"), 1);
        assert_eq!(leases.heartbeat(7, 1, 150), Ok(150));
        assert!(leases.take_expired(149, 10, |_| true).is_empty(), "the heartbeat moved the deadline");
        assert_eq!(leases.check(7, 2).unwrap_err(), LeaseError::Stale, "another attempt's token");
        leases.begin_finish(7, 1).unwrap();
        assert_eq!(leases.begin_finish(7, 1).unwrap_err(), LeaseError::Busy);
        assert!(leases.take_expired(1_000, 10, |_| true).is_empty(), "a finishing lease does not expire");
        leases.finish_failed(7);
        assert_eq!(leases.take_expired(1_000, 10, |_| true).len(), 1, "held again, so it expires");
        leases.finished(7);
        assert_eq!(leases.running("a"), 0);
        assert!(leases.is_empty());
    }

    #[test]
    fn loaded_leases_get_a_full_timeout() {
        let leases = Leases::load([(task(1, "a"), 50, 10), (task(2, "b"), 5_000, 11)], 1_000, 2_000);
        assert_eq!(leases.get(1).unwrap().deadline, 3_000);
        assert_eq!(leases.get(2).unwrap().deadline, 5_000);
        assert_eq!(leases.next_deadline(), Some(3_000));
        assert_eq!(leases.lowest_seq(), Some(10));
    }

    #[test]
    fn of_two_records_of_one_task_the_later_counts() {
        let leases = Leases::load([(task(1, "a"), 50, 10), (task(1, "a"), 60, 12)], 0, 1);
        assert_eq!((leases.len(), leases.running("a")), (1, 1));
        assert_eq!(leases.get(1).unwrap().seq, 12);
    }

    #[test]
    fn an_undelivered_lease_expires_at_once() {
        let mut leases = Leases::default();
        leases.start(task(3, "a"), 10_000);
        leases.written(3, false, 500);
        let expired = leases.take_expired(500, 10, |_| true);
        assert_eq!(expired.len(), 1);
        assert!(!expired[0].delivered);
    }
}
