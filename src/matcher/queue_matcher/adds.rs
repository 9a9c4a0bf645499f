//! Adds: to a waiting poller at once (sync match), held for the next poll
//! (see `held`), or to a partition held here.
//!
//! Invariants: a task goes to a partition this node holds and that is
//! active, or is refused with nothing written; a sync match passes no one
//! out of turn: it is made only when nothing older than
//! `backlog_negligible_age` waits, or when the task is at the front of the
//! fair order of every partition held here (its key quiet, its share not
//! ahead of the queue's, nothing of a higher priority waiting), so that
//! only tasks at its own pass, the lowest, wait while it goes.

use super::polls::drop_gone;
use super::{AddOutcome, MatchError, QueueMatcher};
use crate::core::engine::dedup::bucket_of;
use crate::core::engine::{Added, Next};
use crate::model::TaskSpec;
use crate::partition::{Delivery, Partition, PartitionState};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::oneshot;

impl QueueMatcher {
    /// Adds a task durably to `partition` if given, else to the partition
    /// its dedup id belongs to, else to one of the partitions this node
    /// holds (round robin).
    pub async fn add(&self, spec: TaskSpec, partition: Option<u32>) -> Result<AddOutcome, MatchError> {
        if self.closing.load(Ordering::Acquire) {
            return Err(MatchError::ShuttingDown);
        }
        let partition = match partition.or_else(|| self.partition_for(&spec)) {
            Some(number) => self.held_partition(number)?,
            None => self.pick_partition()?,
        };
        let in_turn = self.in_turn(&spec, &partition);
        let matched = |added: Added| AddOutcome {
            task_id: added.task_id(),
            partition: partition.id().partition,
            sync_matched: true,
            duplicate: false,
        };
        if let Some(poller) = self.sync_match_poller(&spec, in_turn) {
            return Ok(matched(partition.append_to(spec, poller, in_turn).await?));
        }
        let hold = self.hold.load(Ordering::Relaxed);
        if in_turn && hold > 0 && self.held.len() < self.settings.matcher.max_held_tasks && self.worth_holding(hold) {
            let (deliver, delivery) = oneshot::channel();
            let added = partition.append_to(spec, deliver, true).await?;
            // Nothing comes when the write went to the backlog instead (a
            // task of the key went there first) or its outcome is unknown.
            let Ok(delivery) = delivery.await else {
                return Ok(AddOutcome { sync_matched: false, ..matched(added) });
            };
            self.held.hold(delivery, partition.clone(), std::time::Duration::from_millis(hold));
            // A poll that came while the write was made may wait for it.
            self.dispatch_waiting();
            return Ok(matched(added));
        }
        let added = partition.append(vec![spec]).await?[0];
        Ok(AddOutcome {
            task_id: added.task_id(),
            partition: partition.id().partition,
            sync_matched: false,
            duplicate: matches!(added, Added::Duplicate { .. }),
        })
    }

    /// Whether a task matched in its turn, with no poll waiting, is worth
    /// holding for `hold_ms` rather than sending to the backlog: a poll came
    /// to this node within that time, so polls keep coming and the next is
    /// likely before the hold ends, and a task is ready in a partition held
    /// here, so the workers are busy beside a backlog (in the backlog the
    /// task would wait for them and pay a second write). A queue no worker
    /// polls, or whose workers are waiting for tasks, holds nothing.
    pub(super) fn worth_holding(&self, hold_ms: u64) -> bool {
        let now = self.clock.now_ms();
        let since_poll = now.saturating_sub(self.last_poll.load(Ordering::Relaxed));
        since_poll <= i64::try_from(hold_ms).unwrap_or(i64::MAX)
            && self.partitions().iter().any(|p| matches!(p.next(now), Next::Ready(_)))
    }

    /// The oldest waiting poller, taken from the line, when a new task may
    /// go straight to it: sync match is on, the task is ready now and has no
    /// dedup id, and it is `in_turn` or nothing older than
    /// `backlog_negligible_age` waits in any partition (so that it passes
    /// no one).
    fn sync_match_poller(&self, spec: &TaskSpec, in_turn: bool) -> Option<oneshot::Sender<Delivery>> {
        if !self.settings.matcher.sync_match
            || !spec.delay.is_zero()
            || spec.dedup_id.is_some()
            || self.key_paused(&spec.fairness_key)
        {
            return None;
        }
        let mut waiters = self.waiters();
        drop_gone(&mut waiters);
        let now = self.clock.now_ms();
        if waiters.is_empty() || !self.gate.is_open(now) {
            return None;
        }
        let age = self.settings.matcher.backlog_negligible_age;
        if !in_turn && !self.partitions().iter().all(|p| p.backlog_negligible(now, age)) {
            return None;
        }
        waiters.pop_front().map(|w| w.deliver)
    }

    /// Whether `spec`, added to `partition` now, would be at the front of
    /// the fair order of every partition held here: at the front of its
    /// own, and nothing of a higher priority ready or unread in any.
    fn in_turn(&self, spec: &TaskSpec, partition: &Partition) -> bool {
        let now = self.clock.now_ms();
        if !self.settings.matcher.sync_match || !self.gate.is_open(now) || !partition.at_front(spec, now) {
            return false;
        }
        self.partitions().iter().all(|p| match p.next(now) {
            Next::Ready(best) => spec.priority <= best.priority,
            Next::Unread(priority) => spec.priority <= priority,
            Next::Empty => true,
        })
    }

    /// The partition a task must go to: the one of its dedup id, if it has one.
    pub fn partition_for(&self, spec: &TaskSpec) -> Option<u32> {
        let dedup_id = spec.dedup_id.as_deref()?;
        let config = self.config();
        Some(config.partition_number((bucket_of(dedup_id) as u64 % u64::from(config.partitions)) as u32))
    }

    fn pick_partition(&self) -> Result<Arc<Partition>, MatchError> {
        let turn = self.next_partition.fetch_add(1, Ordering::Relaxed);
        self.look_at_partitions(|partitions| {
            let active = || partitions.iter().filter(|p| p.state() == PartitionState::Active);
            let count = active().count();
            active().nth(turn % count.max(1)).cloned()
        })
        .ok_or_else(|| MatchError::NoPartition(self.name.to_string()))
    }

    /// The active partition `number`, if this node holds it.
    pub(super) fn held_partition(&self, number: u32) -> Result<Arc<Partition>, MatchError> {
        self.look_at_partitions(|partitions| {
            partitions.iter().find(|p| p.id().partition == number && p.state() == PartitionState::Active).cloned()
        })
        .ok_or_else(|| MatchError::NoPartition(format!("{}/{number}", self.name)))
    }
}
