//! Polls: the best task across the partitions held, or a wait in arrival
//! order until one is ready.
//!
//! Invariants: waiting polls are served in arrival order; a task handed to
//! a poller that has gone away is put back before anyone else can miss it;
//! nothing is dispatched while the dispatch gate is closed.

use super::{DispatchedTask, MatchError, QueueMatcher};
use crate::core::engine::{Candidate, Next};
use crate::matcher::LeaseToken;
use crate::partition::{Delivery, PartitionState};
use std::collections::VecDeque;
use std::sync::MutexGuard;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::oneshot;

pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) deliver: oneshot::Sender<Delivery>,
}

impl QueueMatcher {
    pub(super) fn waiters(&self) -> MutexGuard<'_, VecDeque<Waiter>> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A task if one is ready now (waiting only for its lease to be written).
    pub async fn try_take(&self) -> Option<DispatchedTask> {
        self.take_ready(1, &mut |_| true).await.pop()
    }

    /// Up to `max` tasks ready now, each waited for until its lease is
    /// durable; taken together, so that their leases ride one write. Before
    /// each is taken, `fits` is asked whether the next best may be (by its
    /// size, say): the first it refuses ends the take, so the order holds.
    pub async fn take_ready(
        &self,
        max: usize,
        fits: &mut (dyn FnMut(&Candidate) -> bool + Send),
    ) -> Vec<DispatchedTask> {
        if self.closing.load(Ordering::Acquire) {
            return Vec::new();
        }
        self.poll_came();
        let mut deliveries = Vec::new();
        while deliveries.len() < max {
            let (deliver, delivery) = oneshot::channel();
            if !self.dispatch_one(&mut Some(deliver), fits) {
                break;
            }
            deliveries.push(delivery);
        }
        let delivered = futures::future::join_all(deliveries).await;
        delivered.into_iter().filter_map(Result::ok).map(|d| self.dispatched(d)).collect()
    }

    /// Notes that a poll came now (see [`QueueMatcher::worth_holding`]).
    fn poll_came(&self) {
        self.last_poll.store(self.clock.now_ms(), Ordering::Relaxed);
    }

    /// Waits up to `wait` for a task. `None` when the wait ends empty or the
    /// server shuts down. A task taken for this poll is waited for until its
    /// lease is durable, however short `wait` is. A poll that would wait
    /// beside `matcher.max_parked_polls` others is refused.
    pub async fn poll(&self, wait: Duration) -> Result<Option<DispatchedTask>, MatchError> {
        if self.closing.load(Ordering::Acquire) {
            return Ok(None);
        }
        self.poll_came();
        let (deliver, mut delivery) = oneshot::channel();
        let mut deliver = Some(deliver);
        if self.dispatch_one(&mut deliver, &mut |_| true) {
            return Ok(delivery.await.ok().map(|d| self.dispatched(d)));
        }
        let id = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        {
            let mut waiters = self.waiters();
            // Checked again under the lock that dispatchers take first, so a
            // task that became ready just now is not missed.
            if self.dispatch_one(&mut deliver, &mut |_| true) {
                drop(waiters);
                return Ok(delivery.await.ok().map(|d| self.dispatched(d)));
            }
            drop_gone(&mut waiters);
            let limit = self.settings.matcher.max_parked_polls;
            if waiters.len() >= limit {
                return Err(MatchError::TooManyPolls { queue: self.name().to_string(), limit });
            }
            waiters.push_back(Waiter { id, deliver: deliver.take().expect("not used") });
        }
        tokio::select! {
            delivered = &mut delivery => return Ok(delivered.ok().map(|d| self.dispatched(d))),
            _ = tokio::time::sleep(wait) => {}
        }
        let still_waiting = {
            let mut waiters = self.waiters();
            let position = waiters.iter().position(|w| w.id == id);
            position.map(|at| waiters.remove(at)).is_some()
        };
        if still_waiting {
            return Ok(None);
        }
        // A dispatcher took a task for this poll just now: it comes once its lease is written.
        Ok(delivery.await.ok().map(|d| self.dispatched(d)))
    }

    /// Serves waiting pollers, oldest first, while there are tasks. When
    /// this node holds no partition of the queue any more, they are answered
    /// empty, so that their workers poll again where the partitions are.
    pub fn dispatch_waiting(&self) {
        let mut waiters = self.waiters();
        if !self.look_at_partitions(|partitions| partitions.iter().any(|p| p.state() == PartitionState::Active)) {
            waiters.clear();
            return;
        }
        loop {
            drop_gone(&mut waiters);
            let Some(waiter) = waiters.pop_front() else { return };
            let mut deliver = Some(waiter.deliver);
            if !self.dispatch_one(&mut deliver, &mut |_| true) {
                waiters.push_front(Waiter { id: waiter.id, deliver: deliver.expect("not used without a task") });
                return;
            }
        }
    }

    /// Takes the best task across the partitions and starts its lease; the
    /// partition sends it to `deliver` once the lease is durable. False
    /// (and `deliver` left in place) when there is no task, or `fits`
    /// refuses the best one.
    fn dispatch_one(
        &self,
        deliver: &mut Option<oneshot::Sender<Delivery>>,
        fits: &mut dyn FnMut(&Candidate) -> bool,
    ) -> bool {
        let now = self.clock.now_ms();
        if !self.gate.is_open(now) {
            return false;
        }
        // A task held for a poll was at the front of the fair order when
        // it was added, and is leased already: it goes first.
        match self.held.take(fits) {
            Ok(Some(held)) => {
                self.held.give(held, deliver.take().expect("one delivery per dispatch"));
                return true;
            }
            Ok(None) => {}
            Err(_) => return false,
        }
        let partitions = self.partitions();
        if partitions.is_empty() {
            return false;
        }
        // Across partitions the priority goes first, then the rank on the
        // queue's clock of that priority (`PartitionClocks`: passes of
        // different partitions are unrelated, and a partition that was not
        // ready for a moment gets its missed turns back). With deadline
        // ordering the rank is the deadline itself, which every partition
        // reads alike: earliest deadline first across them too. Ties go
        // round. The clocks are held through the dispatch, so that the
        // rank dispatched is the one chosen.
        let by_deadline = self.by_deadline;
        let mut clocks = self.clocks.lock().unwrap_or_else(|p| p.into_inner());
        if clocks.tracked() > partitions.len() {
            clocks.retain(|number| partitions.iter().any(|p| p.id().partition == number));
        }
        loop {
            let start = self.next_dispatch.fetch_add(1, Ordering::Relaxed);
            let mut best: Option<(usize, Candidate, i64)> = None;
            for offset in 0..partitions.len() {
                let index = (start + offset) % partitions.len();
                let number = partitions[index].id().partition;
                let candidate = match partitions[index].next(now) {
                    Next::Ready(candidate) => candidate,
                    Next::Unread(first) => {
                        clocks.idle_before(number, Some(first));
                        continue;
                    }
                    Next::Empty => {
                        clocks.idle_before(number, None);
                        continue;
                    }
                };
                clocks.idle_before(number, Some(candidate.priority));
                let rank = match by_deadline {
                    true => candidate.pass_ahead,
                    false => clocks.rank(number, candidate.priority, candidate.pass),
                };
                if best.is_none_or(|(_, b, r)| (candidate.priority, rank) < (b.priority, r)) {
                    best = Some((index, candidate, rank));
                }
            }
            let Some((index, candidate, rank)) = best.filter(|(_, candidate, _)| fits(candidate)) else {
                return false;
            };
            let to = deliver.take().expect("one delivery per dispatch");
            match partitions[index].dispatch(candidate, now, to) {
                Ok(()) => {
                    if !by_deadline {
                        clocks.dispatched(candidate.priority, rank);
                    }
                    return true;
                }
                Err(to) => *deliver = Some(to),
            }
        }
    }

    fn dispatched(&self, delivery: Delivery) -> DispatchedTask {
        let Delivery { partition, task, lease_deadline } = delivery;
        // A task keeps the level id of its first write until it is delayed,
        // retried or re-driven, which give it a new level: until then it has
        // been ready since it was created.
        if task.level.id == task.task_id {
            let waited = self.clock.now_ms().saturating_sub(task.created_at_unix_ms).max(0);
            self.dispatch_latency.observe_ms(waited as u64);
        }
        DispatchedTask {
            partition,
            token: LeaseToken { queue: self.name.clone(), partition, lease_id: task.level.id, attempt: task.attempt },
            task,
            lease_deadline,
        }
    }

    /// Polls waiting for a task now, not counting those whose caller has gone.
    pub fn waiting_pollers(&self) -> usize {
        let mut waiters = self.waiters();
        drop_gone(&mut waiters);
        waiters.len()
    }

    /// Tasks leased and held here for the next poll (see `held`): their
    /// leases count as running, though no worker has them yet.
    pub fn held_for_polls(&self) -> usize {
        self.held.len()
    }

    /// Parked polls return empty now, new polls at once; held tasks go
    /// back to the queue.
    pub fn stop_polls(&self) {
        self.closing.store(true, Ordering::Release);
        self.waiters().clear();
        self.held.hand_back_all();
    }
}

pub(super) fn drop_gone(waiters: &mut VecDeque<Waiter>) {
    waiters.retain(|w| !w.deliver.is_closed());
}
