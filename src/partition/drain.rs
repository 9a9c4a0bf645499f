//! The drain: after a forced failover (see `QueueCatalog::force_queue_home`),
//! a partition of the current generation adds again the tasks of the
//! partition of its index in the previous generation. It is the
//! partition's fourth task ([`Partition::start_drain`]), started when the
//! queue's config names a previous generation, and the only partition
//! task that writes another partition's rows: it fences the previous partition with
//! `take_ownership` and closes it (its metadata, `drained`); into its own
//! partition it adds tasks and buries dead letters through the writer, and
//! writes and forgets the marks ([`Section::Drained`], which the engine does
//! not keep) itself, the marks conditional on the partition's range id.
//!
//! Invariants:
//! - A task of a previous partition is added to the current partition of
//!   its index unless that partition holds a mark saying it was; the mark is
//!   written after the add, so a crash between gives a duplicate, never a loss.
//! - A previous partition is marked `drained` only after a last pass over
//!   it read whole once its own region handed it over to the current home
//!   (its owners there fenced first, through that region's Paxos) and this
//!   node took it (which reads it at `EACH_QUORUM`): nothing of the old
//!   region lands in it after that pass.
//! - Until then each pass reads what the current home's replicas have of it,
//!   so tasks that reached the new home before the loss are served at once;
//!   a pass that finds nothing new waits twice as long before the next, up
//!   to [`MAX_DRAIN_INTERVAL`], so that an old home away for long costs
//!   one read of its backlog a minute, not one every two seconds.
//! - A task added again keeps its history ([`TaskHistory`]): the attempt
//!   it is at and when it was first added, so `max_attempts` bounds it
//!   across failovers. A task leased there comes back at the attempt its
//!   lease was on: that attempt's outcome is unknown (its worker may still
//!   finish it, unreported), so it is not counted, as for a lease that was
//!   never delivered.
//! - The dead letters of a previous partition (above its floor) are moved
//!   as its tasks are: written as this partition's dead letters, with new
//!   ids, by its writer (fenced by its range id like every write), then
//!   marked. So ListDeadLetters and RedriveDeadLetters, which read the
//!   current generation, reach them. A cut between the two writes gives
//!   a dead letter twice, never none.
//! - An operator may declare the previous generation lost
//!   ([`abandon_previous`](super::abandon_previous)): its partitions are
//!   then written as handed over on the old region's behalf, without its replicas, and closed after a
//!   last pass, as if it had returned.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::handle::Partition;
use super::shared::PartitionState;
use crate::clock::SharedClock;
use crate::model::{FairLevel, PartitionId, Priority, StoredTask, TaskHistory, TaskSpec};
use crate::store::{
    MAX_BUCKETS_PER_READ, PartitionMeta, PartitionStore, Record, RecordKey, RecordRange, RecordTask, RecordValue,
    Section, StoreError,
};

/// How soon a partition whose previous one is not drained yet reads it
/// again, after a pass that added tasks.
const DRAIN_INTERVAL: Duration = Duration::from_secs(2);

/// The longest wait between two passes that add nothing.
const MAX_DRAIN_INTERVAL: Duration = Duration::from_secs(60);

/// Tasks read, marks checked and tasks added at a time.
const PAGE: usize = MAX_BUCKETS_PER_READ;

impl Partition {
    /// Starts this partition's drain of partition `previous` of the queue
    /// (the one of its index in the previous generation). The task ends
    /// with true once `previous` is drained for good, with false once this
    /// partition no longer hands out tasks; aborting it loses nothing (each
    /// add is marked after it is made).
    pub fn start_drain(self: &Arc<Self>, previous: u32) -> JoinHandle<bool> {
        let shared = self.shared();
        let drain = Drain {
            store: shared.store.clone(),
            clock: shared.clock.clone(),
            node: shared.node.clone(),
            region: shared.region.clone(),
            previous: PartitionId { queue: shared.id.queue.clone(), partition: previous },
            into: self.clone(),
        };
        tokio::spawn(async move { drain.run().await })
    }
}

/// What one pass of a drain did.
enum Step {
    /// The previous partition is drained for good.
    Drained,
    /// It is not yet; this many of its tasks were added.
    Added(usize),
}

/// One partition's drain of the partition of its index in the previous generation.
struct Drain {
    store: Arc<dyn PartitionStore>,
    clock: SharedClock,
    node: String,
    region: String,
    previous: PartitionId,
    into: Arc<Partition>,
}

impl Drain {
    /// Passes until the previous partition is drained (true) or this one is
    /// no longer held (false).
    async fn run(&self) -> bool {
        let mut wait = DRAIN_INTERVAL;
        loop {
            if self.into.state() != PartitionState::Active {
                return false;
            }
            match self.step().await {
                Ok(Step::Drained) => {
                    tracing::info!(partition = %self.into.id(), previous = %self.previous, "the previous generation is drained");
                    return true;
                }
                Ok(Step::Added(0)) => wait = (wait * 2).min(MAX_DRAIN_INTERVAL),
                Ok(Step::Added(_)) => wait = DRAIN_INTERVAL,
                Err(error) => tracing::warn!(partition = %self.into.id(), %error, "draining the previous generation"),
            }
            self.wait_for_hand_over(wait).await;
        }
    }

    /// Waits `wait`, or less once the previous partition is handed over to
    /// this region (checked every [`DRAIN_INTERVAL`] with one metadata read):
    /// its last pass then comes at once.
    async fn wait_for_hand_over(&self, wait: Duration) {
        let until = tokio::time::Instant::now() + wait;
        loop {
            tokio::time::sleep_until(until.min(tokio::time::Instant::now() + DRAIN_INTERVAL)).await;
            if tokio::time::Instant::now() >= until {
                return;
            }
            match self.store.load_partition(&self.previous).await {
                Ok(Some(meta)) if meta.drained || meta.region == self.region => return,
                _ => {}
            }
        }
    }

    /// One pass: whether the previous partition is drained for good, or how
    /// many of its tasks were added.
    async fn step(&self) -> Result<Step, StoreError> {
        let Some(meta) = self.store.load_partition(&self.previous).await? else {
            // Not here yet: written in the old region only, or never. Its
            // region creates it when it hands it over.
            return Ok(Step::Added(0));
        };
        if meta.drained {
            self.forget_marks().await?;
            return Ok(Step::Drained);
        }
        if meta.region != self.region {
            let added = self.pass(&meta).await?;
            if added > 0 {
                tracing::info!(partition = %self.into.id(), previous = %self.previous, added, "added tasks of the previous generation");
            }
            return Ok(Step::Added(added));
        }
        // Handed over by its region: take it (reading it whole at
        // EACH_QUORUM, fencing any owner there), pass a last time, close it.
        let taken = self.store.take_ownership(&self.previous, meta.range_id, &self.node, &self.region).await?;
        let added = self.pass(&taken).await?;
        tracing::info!(partition = %self.into.id(), previous = %self.previous, added, "last pass over the previous generation");
        let closed = PartitionMeta { owner: String::new(), drained: true, ..taken };
        self.store.update_metadata(&self.previous, &closed).await?;
        self.forget_marks().await?;
        Ok(Step::Drained)
    }

    /// Adds again every task of the previous partition, as `meta` describes
    /// it, that has no mark here; the number added.
    async fn pass(&self, meta: &PartitionMeta) -> Result<usize, StoreError> {
        let (mut added, leased) = self.add_leased().await?;
        for priority in Priority::all() {
            let subqueue = &meta.subqueues[priority.index()];
            // Dispatched (the ack levels in the metadata can be seconds
            // behind): above the ack level, or with a lease record.
            let dispatched = |level: &FairLevel| {
                subqueue.dispatched_above_ack.contains(level) || leased.contains(&(priority, *level))
            };
            let mut after = subqueue.ack_level;
            loop {
                let page = self.store.read(&self.previous, priority, after, PAGE).await?;
                let Some(last) = page.last() else { break };
                after = last.level;
                let full = page.len() == PAGE;
                let ready = page.into_iter().filter(|t| !dispatched(&t.level)).map(|t| (t, 0));
                added += self.add_unmarked(ready.collect()).await?;
                if !full {
                    break;
                }
            }
            for parked in &subqueue.parked {
                let range = RecordRange::bucket(Section::Parked, parked.slot, parked.floor);
                added += self.add_records(range).await?;
            }
        }
        added += self.add_records(RecordRange::above(Section::Delayed, meta.delayed_through)).await?;
        added += self.move_dead_letters(meta.dead_letters_through).await?;
        Ok(added)
    }

    /// Writes the dead letters of the previous partition above `floor` (the
    /// ones not put back), that have no mark here, as dead letters of this
    /// one, then marks them; the number moved. Their task ids mark them as
    /// a task's do: a task both a dead letter and pending there (a letter
    /// put back, or a task buried, between two passes) comes over once.
    async fn move_dead_letters(&self, floor: (i64, i64)) -> Result<usize, StoreError> {
        let mut moved = 0;
        let mut range = RecordRange::above(Section::DeadLetters, floor);
        loop {
            let page = self.store.read_records(&self.previous, range, PAGE).await?;
            let Some(last) = page.last() else { return Ok(moved) };
            range.after = last.at.key;
            let full = page.len() == PAGE;
            let letters: Vec<RecordTask> = page
                .into_iter()
                .filter_map(|record| match record.value {
                    RecordValue::Task(letter) => Some(letter),
                    _ => None,
                })
                .collect();
            let ids: Vec<i64> = letters.iter().map(|l| l.task.task_id).collect();
            let unmarked = self.unmarked(&ids).await?;
            let letters: Vec<RecordTask> = letters.into_iter().filter(|l| unmarked.contains(&l.task.task_id)).collect();
            if !letters.is_empty() {
                let ids: Vec<i64> = letters.iter().map(|l| l.task.task_id).collect();
                let buried = self.into.bury(letters).await.map_err(|e| StoreError::Unavailable(e.to_string()))?;
                self.mark(&ids, &buried).await?;
                moved += ids.len();
            }
            if !full {
                return Ok(moved);
            }
        }
    }

    /// Adds again the tasks of running leases, each ready when its lease runs
    /// out (as the lease's own expiry would have made it: a worker may still
    /// hold it); the number added, and the levels every lease record
    /// (running or finished) names: tasks dispatched, which a pass does not
    /// add from their rows.
    async fn add_leased(&self) -> Result<(usize, HashSet<(Priority, FairLevel)>), StoreError> {
        let (mut added, mut leased) = (0, HashSet::new());
        let mut range = RecordRange::all(Section::Leases);
        loop {
            let page = self.store.read_records(&self.previous, range, PAGE).await?;
            let Some(last) = page.last() else { return Ok((added, leased)) };
            range.after = last.at.key;
            let full = page.len() == PAGE;
            let mut running = Vec::new();
            for record in page {
                match record.value {
                    RecordValue::Task(lease) => {
                        leased.insert((lease.task.priority, lease.task.level));
                        running.push((lease.task, lease.at_unix_ms));
                    }
                    RecordValue::FinishedLease { priority, level } => {
                        leased.insert((priority, level));
                    }
                    _ => {}
                }
            }
            added += self.add_unmarked(running).await?;
            if !full {
                return Ok((added, leased));
            }
        }
    }

    /// Adds again the tasks of the records of `range` that have no mark here.
    async fn add_records(&self, mut range: RecordRange) -> Result<usize, StoreError> {
        let mut added = 0;
        loop {
            let page = self.store.read_records(&self.previous, range, PAGE).await?;
            let Some(last) = page.last() else { return Ok(added) };
            range.after = last.at.key;
            let full = page.len() == PAGE;
            let tasks = page
                .into_iter()
                .filter_map(|record| match record.value {
                    // Parked: ready now. Delayed: when it was to be ready.
                    RecordValue::Task(task) if record.at.section == Section::Parked => Some((task.task, 0)),
                    RecordValue::Task(task) => Some((task.task, task.at_unix_ms)),
                    _ => None,
                })
                .collect();
            added += self.add_unmarked(tasks).await?;
            if !full {
                return Ok(added);
            }
        }
    }

    /// Adds the tasks (each with the time it becomes ready, 0: now) that
    /// have no mark here, then marks them; the number added.
    async fn add_unmarked(&self, tasks: Vec<(StoredTask, i64)>) -> Result<usize, StoreError> {
        if tasks.is_empty() {
            return Ok(0);
        }
        let all: Vec<i64> = tasks.iter().map(|(t, _)| t.task_id).collect();
        let mut unmarked = self.unmarked(&all).await?;
        let now = self.clock.now_ms();
        let (ids, specs): (Vec<i64>, Vec<TaskSpec>) = tasks
            .into_iter()
            .filter(|(task, _)| unmarked.remove(&task.task_id))
            .map(|(task, ready_at)| (task.task_id, spec_of(task, (ready_at - now).max(0))))
            .unzip();
        if specs.is_empty() {
            return Ok(0);
        }
        let added = self.into.append(specs).await.map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let added: Vec<i64> = added.iter().map(|a| a.task_id()).collect();
        self.mark(&ids, &added).await?;
        Ok(ids.len())
    }

    /// Those of the previous partition's task ids `ids` that have no mark here.
    async fn unmarked(&self, ids: &[i64]) -> Result<HashSet<i64>, StoreError> {
        let marked: HashSet<i64> = self
            .store
            .read_buckets(self.into.id(), Section::Drained, ids, 1)
            .await?
            .iter()
            .map(|r| r.at.key.0)
            .collect();
        Ok(ids.iter().copied().filter(|id| !marked.contains(id)).collect())
    }

    /// Marks the previous partition's task ids `ids` as added here, with
    /// the ids they got here (`added`, in the same order).
    async fn mark(&self, ids: &[i64], added: &[i64]) -> Result<(), StoreError> {
        let marks = ids
            .iter()
            .zip(added)
            .map(|(id, added)| Record {
                at: RecordKey { section: Section::Drained, key: (*id, 0) },
                value: RecordValue::Drained { task_id: *added },
            })
            .collect();
        self.into.put_records(marks).await
    }

    /// The marks are read only while the previous partition is not drained.
    async fn forget_marks(&self) -> Result<(), StoreError> {
        self.store.delete_records_through(self.into.id(), Section::Drained, (i64::MAX, i64::MAX)).await
    }
}

/// The task `task` added again, ready in `delay_ms`, with its history: the
/// attempt it is at and when it was first added. It gets an id of the new
/// partition (its mark maps the old one to it), its place in the fair order
/// anew and, if it has a dedup id, holds it there.
fn spec_of(task: StoredTask, delay_ms: i64) -> TaskSpec {
    TaskSpec {
        history: TaskHistory::carried(&task),
        fairness_key: task.fairness_key,
        fairness_weight: task.fairness_weight,
        priority: task.priority,
        payload: task.payload,
        dedup_id: task.dedup_id,
        delay: Duration::from_millis(delay_ms as u64),
        deadline: task.deadline_unix_ms,
        cost: task.cost,
        size: task.size,
    }
}
