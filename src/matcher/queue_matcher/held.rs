//! Tasks matched in their turn before any poll asked for them: a task of a
//! key quiet on this node, at the front of the fair order when it is added
//! while no poll waits, beside a backlog, and while polls keep coming, is
//! written with its lease at once (one write, as a sync match) and held
//! here; the next poll takes it without a write of its own. A task held longer than `matcher.quiet_hold` is handed back:
//! its lease expires at once, its attempt not counted, and it goes to the
//! queue with the partition's next write.
//!
//! Invariants: at most `matcher.max_held_tasks` tasks are held per queue;
//! each is taken by one poll or handed back, never both (whoever removes it
//! from the line, under its lock, owns it); a task of a partition no longer
//! active is never handed out from here.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::core::engine::Candidate;
use crate::partition::{Delivery, Partition, PartitionState};

/// A task whose lease is written, waiting for a poll.
pub(super) struct HeldTask {
    delivery: Delivery,
    partition: Arc<Partition>,
    until: Instant,
}

/// The oldest held task is refused by the poll's `fits`.
#[derive(Debug)]
pub(super) struct DoesNotFit;

/// The line of held tasks of one queue, oldest first.
#[derive(Default)]
pub(super) struct HeldTasks {
    line: Arc<Mutex<VecDeque<HeldTask>>>,
}

fn lock(line: &Mutex<VecDeque<HeldTask>>) -> MutexGuard<'_, VecDeque<HeldTask>> {
    line.lock().unwrap_or_else(|p| p.into_inner())
}

impl HeldTasks {
    /// How many tasks are held now.
    pub(super) fn len(&self) -> usize {
        lock(&self.line).len()
    }

    /// Holds `delivery` (of `partition`) for a poll for up to `hold`; then
    /// hands it back.
    pub(super) fn hold(&self, delivery: Delivery, partition: Arc<Partition>, hold: Duration) {
        let until = Instant::now() + hold;
        lock(&self.line).push_back(HeldTask { delivery, partition, until });
        let line: Weak<Mutex<VecDeque<HeldTask>>> = Arc::downgrade(&self.line);
        tokio::spawn(async move {
            tokio::time::sleep_until(until).await;
            if let Some(line) = line.upgrade() {
                hand_back_due(&line, Instant::now());
            }
        });
    }

    /// The oldest held task, if `fits` takes it (`Err` when it does not);
    /// a held task of a partition no longer active is dropped (its new
    /// owner restores its lease, which runs out).
    pub(super) fn take(&self, fits: &mut dyn FnMut(&Candidate) -> bool) -> Result<Option<HeldTask>, DoesNotFit> {
        let mut line = lock(&self.line);
        while let Some(held) = line.front() {
            if held.partition.state() != PartitionState::Active {
                line.pop_front();
                continue;
            }
            if !fits(&Candidate::held(&held.delivery.task)) {
                return Err(DoesNotFit);
            }
            return Ok(line.pop_front());
        }
        Ok(None)
    }

    /// Sends a task taken from the line to a poll; if the poll has gone,
    /// the task goes back to the front of the line for the next.
    pub(super) fn give(&self, held: HeldTask, to: tokio::sync::oneshot::Sender<Delivery>) {
        let HeldTask { delivery, partition, until } = held;
        if let Err(delivery) = to.send(delivery) {
            lock(&self.line).push_front(HeldTask { delivery, partition, until });
        }
    }

    /// Hands every held task back (the queue stops serving polls here).
    pub(super) fn hand_back_all(&self) {
        let held: Vec<HeldTask> = lock(&self.line).drain(..).collect();
        for task in held {
            task.partition.hand_back(task.delivery.task.level.id);
        }
    }
}

/// Hands back the tasks held until `now` or earlier.
fn hand_back_due(line: &Mutex<VecDeque<HeldTask>>, now: Instant) {
    let due: Vec<HeldTask> = {
        let mut line = lock(line);
        let count = line.iter().take_while(|held| held.until <= now).count();
        line.drain(..count).collect()
    };
    for task in due {
        tracing::debug!(partition = %task.partition.id(), task = task.delivery.task.task_id, "a held task found no poll in time; handed back");
        task.partition.hand_back(task.delivery.task.level.id);
    }
}
