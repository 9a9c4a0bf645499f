//! Handing tasks out: the best candidate under the per-key limits, taking
//! and giving back, and the leases of the tasks handed out.

use std::sync::Arc;

use super::PartitionEngine;
use crate::clock::UnixMillis;
use crate::core::engine::leases::LeaseError;
use crate::core::engine::outcomes::{Candidate, Next};
use crate::core::engine::policy::DispatchOrder;
use crate::core::engine::subqueue::deadline_rank;
use crate::model::{FairLevel, Priority, StoredTask, TaskSpec};

impl PartitionEngine {
    /// Extends the lease of `lease_id` by the lease timeout from `now`.
    /// Refused once the task is cancelled.
    pub fn heartbeat(&mut self, lease_id: i64, attempt: u32, now: UnixMillis) -> Result<UnixMillis, LeaseError> {
        self.refuse_cancelled(lease_id, attempt)?;
        let deadline = now + self.config.tasks.lease_ms();
        self.leases.heartbeat(lease_id, attempt, deadline)
    }

    /// The deadline of the lease of `lease_id` at `attempt`, if it runs.
    pub fn lease_deadline(&self, lease_id: i64, attempt: u32) -> Option<UnixMillis> {
        self.leases.check(lease_id, attempt).ok().map(|lease| lease.deadline)
    }

    /// The dedup id of the task the lease of `lease_id` at `attempt` holds,
    /// if the lease is held.
    pub fn leased_dedup_id(&self, lease_id: i64, attempt: u32) -> Result<Option<String>, LeaseError> {
        self.refuse_cancelled(lease_id, attempt)?;
        Ok(self.leases.check(lease_id, attempt)?.task.dedup_id.clone())
    }

    /// `Cancelled` when the lease of `lease_id` at `attempt` is of a
    /// cancelled task, whether it is held or being ended: its worker is
    /// told so, rather than to try again.
    fn refuse_cancelled(&self, lease_id: i64, attempt: u32) -> Result<(), LeaseError> {
        let cancelled = self
            .leases
            .get(lease_id)
            .is_some_and(|lease| lease.task.attempt == attempt && self.is_cancelled(lease.task.task_id));
        if cancelled { Err(LeaseError::Cancelled) } else { Ok(()) }
    }

    /// Records that the lease of `lease_id` at `attempt` went to `worker`.
    pub fn worker_took(&mut self, lease_id: i64, attempt: u32, worker: Arc<str>) {
        self.leases.worker_took(lease_id, attempt, worker);
    }

    /// A lease was written but its worker had gone: it goes back to the queue.
    pub fn lease_undelivered(&mut self, lease_id: i64, now: UnixMillis) {
        self.leases.undelivered(lease_id, now);
    }

    /// Whether the queue limits keys' concurrency or rate, or pauses keys.
    pub fn keys_limited(&self) -> bool {
        self.config.tasks.key_concurrency > 0 || self.rates.limited() || self.pauses.any()
    }

    /// Whether a task of `key` may start now (not paused, within its
    /// concurrency and rate limits).
    pub(super) fn key_allowed(&self, key: &str, now: UnixMillis) -> bool {
        let concurrency = self.config.tasks.key_concurrency;
        !self.pauses.holds(key)
            && (concurrency == 0 || self.leases.running(key) < concurrency)
            && self.rates.allows(key, now)
    }

    /// Whether a buffered task of `key` may be dispatched now: its key is
    /// within its limits and not parked (a parked key's tasks go out of its
    /// records, in order).
    pub(super) fn dispatchable(&self, priority: Priority, key: &str, now: UnixMillis) -> bool {
        self.key_allowed(key, now) && (self.parked.is_empty() || !self.parked.is_parked(priority, key))
    }

    /// The task this partition would dispatch next, passing over keys at
    /// their limits. Strict priority: a level is not passed over while it
    /// may hold unread tasks. A parked key's oldest task competes with the
    /// backlog at the pass it was given, or at the ack level's if that is
    /// higher: it comes back like a key that was idle.
    ///
    /// With deadline ordering the buffered task chosen is the first by
    /// [`deadline_rank`] (its deadline, or for a late task now plus
    /// `tasks.late_slack`) while fewer than `engine.park_after` tasks are
    /// dispatched above the ack level, the oldest waiting one past that;
    /// and a candidate's `pass_ahead` is that rank, not a distance
    /// from the ack level: deadlines mean the same in every partition, so
    /// the matcher compares partitions by them.
    ///
    /// With an `age_boost` (fair ordering) each key's first buffered task
    /// competes at its pass lowered by its age's boost, under the same
    /// `park_after` limit, and its candidate carries that effective pass.
    pub fn peek(&self, now: UnixMillis) -> Option<Candidate> {
        match self.next(now) {
            Next::Ready(candidate) => Some(candidate),
            Next::Unread(_) | Next::Empty => None,
        }
    }

    /// What [`Self::peek`] finds, telling an empty partition from one whose
    /// level `Unread` may hold tasks not read yet (nothing of that level or
    /// a lower one may go before them).
    pub fn next(&self, now: UnixMillis) -> Next {
        let by_deadline = self.config.tasks.ordering == DispatchOrder::Deadline;
        let boosted = self.config.tasks.ordering == DispatchOrder::Fair && self.config.tasks.age_boost > 0;
        let max_boost = self.config.tasks.age_boost_passes(i64::MAX);
        let late_slack = crate::clock::millis(self.config.tasks.late_slack);
        for subqueue in &self.subqueues {
            let priority = subqueue.priority;
            let ahead = |task: &StoredTask| {
                if by_deadline {
                    deadline_rank(task, now, late_slack)
                } else {
                    task.level.pass.saturating_sub(subqueue.ack.pass).max(0)
                }
            };
            let allowed = |key: &str| self.dispatchable(priority, key, now);
            let candidate = |task: &StoredTask, parked: bool| {
                let pass = task.level.pass.max(subqueue.ack.pass);
                Candidate::at(task, priority, ahead(task), pass, parked)
            };
            // The oldest waiting task holds the ack level: past `park_after`
            // tasks dispatched above it, it goes next whatever its deadline
            // or its age, so that the ack level moves and the marks above
            // it stay bounded (and no task waits for ever behind urgent or
            // older ones).
            let out_of_order = subqueue.dispatched_above_ack() < self.config.park_after;
            let ready = if by_deadline && out_of_order {
                subqueue.earliest_deadline(now, late_slack, allowed).map(|task| candidate(task, false))
            } else if boosted && out_of_order {
                let boost = |task: &StoredTask| self.config.tasks.age_boost_passes(now - task.created_at_unix_ms);
                subqueue.boosted_first(allowed, boost, max_boost).map(|(task, effective)| {
                    let pass = effective.max(subqueue.ack.pass);
                    Candidate::at(task, priority, pass - subqueue.ack.pass, pass, false)
                })
            } else {
                subqueue.first_ready(allowed).map(|task| candidate(task, false))
            };
            let parked = self
                .parked
                .heads(priority)
                .filter(|task| self.key_allowed(&task.fairness_key, now) && self.leases.get(task.level.id).is_none())
                .map(|task| candidate(task, true))
                .min();
            if let Some(candidate) = ready.into_iter().chain(parked).min() {
                return Next::Ready(candidate);
            }
            if subqueue.may_have_unread() {
                return Next::Unread(priority);
            }
        }
        Next::Empty
    }

    /// Whether a new task `spec`, added now, would be at the front of this
    /// partition's fair order among the tasks of its priority: its key is
    /// quiet here (fair ordering, no lease of the key running, the key
    /// within its limits and not parked, the task ready now without a dedup
    /// id) and its key's counter is at or below the ack level's pass, so
    /// that [`Self::plan`] would give it the ack level's pass, the lowest any
    /// waiting task has. A key with a task waiting in the subqueue has a
    /// counter above that task's pass (at or above the ack level's), so a
    /// task at the front never passes one of its own key.
    pub fn at_front(&self, spec: &TaskSpec, now: UnixMillis) -> bool {
        if self.config.tasks.ordering != DispatchOrder::Fair || !spec.delay.is_zero() || spec.dedup_id.is_some() {
            return false;
        }
        let (priority, key) = (spec.priority, spec.fairness_key.as_str());
        // Tasks past `max_wait` go first: none is to be moved to the front.
        self.dispatchable(priority, key, now) && self.quiet(spec) && !self.aged_due(now)
    }

    /// No lease of `spec`'s key runs, and its counter is at or below the
    /// ack level's pass of its subqueue.
    pub(super) fn quiet(&self, spec: &TaskSpec) -> bool {
        let subqueue = &self.subqueues[spec.priority.index()];
        let (share, _) = self.config.weights.share(&spec.fairness_key, spec.fairness_weight);
        self.leases.running(&spec.fairness_key) == 0
            && subqueue.counters.peek(share).is_none_or(|next| next <= subqueue.ack.pass)
    }

    /// Hands out the task of a candidate from [`Self::peek`] and starts its
    /// lease, with the deadline returned. The lease record goes with the
    /// next write ([`Self::plan`]); until it is durable the task must not
    /// reach a worker, and the ack level does not pass it.
    ///
    /// A cancelled task is taken too, but `None` comes back: its lease is
    /// written with no worker waiting, so it runs out at once and the task
    /// ends, completed (see `crate::core::engine::cancel`).
    pub fn take(&mut self, candidate: Candidate, now: UnixMillis) -> Option<(StoredTask, UnixMillis)> {
        self.take_level(candidate.priority, candidate.level, candidate.parked, now)
    }

    /// [`Self::take`] of the task at `level` of `priority` (a parked one's
    /// if `parked`).
    pub(super) fn take_level(
        &mut self,
        priority: Priority,
        level: FairLevel,
        parked: bool,
        now: UnixMillis,
    ) -> Option<(StoredTask, UnixMillis)> {
        let task = if parked {
            self.parked.take(priority, level.id)?
        } else {
            self.subqueues[priority.index()].take(level)?
        };
        let cancelled = self.is_cancelled(task.task_id);
        if !cancelled {
            self.rates.consume(&task.fairness_key, now);
        }
        let deadline = now + self.config.tasks.lease_ms();
        self.leases.start(task.clone(), deadline);
        self.unwritten_leases.push(task.level.id);
        (!cancelled).then_some((task, deadline))
    }

    /// Takes the next task and treats its lease as written at once: for
    /// drivers that persist nothing (tests and models of the engine).
    pub fn take_next(&mut self, now: UnixMillis) -> Option<StoredTask> {
        let candidate = self.peek(now)?;
        let (task, _) = self.take(candidate, now)?;
        self.unwritten_leases.retain(|id| *id != task.level.id);
        self.leases.written(task.level.id, true, now);
        self.parked.lease_written(task.level.id);
        self.subqueues[task.priority.index()].leased(task.level);
        self.counts.dispatched += 1;
        self.tally.record(&task.fairness_key, task.cost, now);
        Some(task)
    }

    /// Gives back a task from [`Self::take`] whose lease was not written yet.
    pub fn untake(&mut self, task: StoredTask) {
        let id = task.level.id;
        self.unwritten_leases.retain(|unwritten| *unwritten != id);
        if let Some(task) = self.leases.not_written(id) {
            self.rates.refund(&task.fairness_key);
            if self.parked.holds_lease(id) {
                self.parked.lease_not_written(id, task);
            } else {
                self.subqueues[task.priority.index()].restore(task);
            }
        }
    }

    /// Moves the ack levels over what has been dispatched.
    pub fn settle(&mut self) {
        for subqueue in &mut self.subqueues {
            subqueue.advance_ack();
        }
    }
}
