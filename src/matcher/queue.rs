use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::Duration;

use tokio::sync::oneshot;

use super::LeaseToken;
use super::registry::Settings;
use crate::clock::{SharedClock, UnixMillis};
use crate::cluster::DispatchGate;
use crate::core::engine::dedup::bucket_of;
use crate::core::engine::{Added, Candidate, Finish, Finished, LeaseError, Outcome, PartitionSnapshot, TaskCounts};
use crate::model::{PartitionId, Priority, QueueName, StoredTask, TaskSpec};
use crate::partition::{Delivery, FinishError, Partition, PartitionError, PartitionState, ReadyHook, Redriven};
use crate::store::codec::{RecordTask, decode_record_task};
use crate::store::{PartitionMeta, QueueConfig, RecordRange, Section, Store, StoreError};
use crate::telemetry::histogram::{HistogramReading, LatencyHistogram};

/// A task handed to a worker.
#[derive(Clone, Debug, PartialEq)]
pub struct DispatchedTask {
    pub partition: u32,
    pub task: StoredTask,
    pub token: LeaseToken,
    pub lease_deadline: UnixMillis,
}

/// Where an added task went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddOutcome {
    pub task_id: i64,
    pub partition: u32,
    /// Handed straight to a waiting poller (its lease written, not a backlog row).
    pub sync_matched: bool,
    /// Nothing added: `task_id` already holds the dedup id.
    pub duplicate: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MatchError {
    #[error(transparent)]
    Partition(#[from] PartitionError),
    /// The server is shutting down; nothing was written.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// No partition of the queue can take writes on this node.
    #[error("no partition of queue {0} is available on this node")]
    NoPartition(String),
    /// The lease token does not hold the lease (nothing was written).
    #[error(transparent)]
    Lease(#[from] LeaseError),
}

impl From<FinishError> for MatchError {
    fn from(error: FinishError) -> Self {
        match error {
            FinishError::Lease(lease) => MatchError::Lease(lease),
            FinishError::Partition(partition) => MatchError::Partition(partition),
        }
    }
}

impl MatchError {
    pub fn certainly_not_applied(&self) -> bool {
        match self {
            MatchError::Partition(e) => e.certainly_not_applied(),
            MatchError::ShuttingDown | MatchError::NoPartition(_) | MatchError::Lease(_) => true,
        }
    }
}

struct Waiter {
    id: u64,
    deliver: oneshot::Sender<Delivery>,
}

/// One queue as this node serves it: the partitions of the queue this node
/// owns, and the pollers waiting on them. See the module docs.
pub struct QueueMatcher {
    name: QueueName,
    config: QueueConfig,
    partitions: RwLock<Vec<Arc<Partition>>>,
    /// Adoptions and releases, one at a time.
    ownership: tokio::sync::Mutex<()>,
    waiters: Mutex<VecDeque<Waiter>>,
    next_partition: AtomicUsize,
    /// Where the next dispatch starts looking: ties between partitions go
    /// round.
    next_dispatch: AtomicUsize,
    next_waiter: AtomicU64,
    closing: AtomicBool,
    settings: Arc<Settings>,
    store: Arc<dyn Store>,
    clock: SharedClock,
    gate: Arc<DispatchGate>,
    on_ready: ReadyHook,
    /// What partitions no longer held counted while this node held them. A
    /// partition's counts move here in the same step as it leaves the list
    /// (under the list's write lock), so that a reading (under the read
    /// lock) counts it once; what it counts after that (finishing its
    /// queued writes) is added once it has stopped.
    retired: Mutex<TaskCounts>,
    /// Partitions taken from an owner that had not handed them over.
    takeovers: AtomicU64,
    /// Partitions dropped without a write at a heartbeat lapse, which the
    /// store may still say this node owns: while it lives, their rightful
    /// node waits for it to hand them over.
    abandoned: Mutex<BTreeSet<u32>>,
    /// From AddTask to delivery (see [`QueueMatcher::stats`]).
    dispatch_latency: LatencyHistogram,
}

impl std::fmt::Debug for QueueMatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueMatcher").field("name", &self.name).finish()
    }
}

/// What this node counts and holds of one queue, for telemetry.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueStats {
    /// Counted since this node started, over every partition it has held.
    pub counts: TaskCounts,
    /// Partitions taken from an owner that had not handed them over.
    pub takeovers: u64,
    /// Partitions held and served now.
    pub owned_partitions: u64,
    /// Per priority level, over the partitions held.
    pub levels: Vec<LevelStats>,
    /// Tasks out with workers.
    pub leased: u64,
    /// Delayed tasks and retries waiting out their backoff, known in memory.
    pub delayed: u64,
    pub waiting_pollers: u64,
    /// Milliseconds from AddTask to delivery to a worker, of tasks
    /// delivered on their first pass through the backlog (not delayed, not
    /// retries or re-drives), sync matches included.
    pub dispatch_latency: HistogramReading,
}

/// One priority level of a queue, over the partitions this node holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LevelStats {
    pub priority: Priority,
    /// Tasks written and not yet dispatched (approximate; see `SubqueueSnapshot`).
    pub backlog: u64,
    /// Tasks above the ack level: the backlog, and tasks dispatched above a
    /// task that still waits.
    pub ack_lag: u64,
}

/// What `describe` reports of one partition this node holds.
#[derive(Clone, Debug)]
pub struct PartitionReport {
    pub partition: u32,
    pub state: PartitionState,
    pub snapshot: Option<PartitionSnapshot>,
}

impl QueueMatcher {
    /// A queue with none of its partitions taken yet (see [`Self::adopt`]).
    pub(super) fn new(
        name: QueueName,
        config: QueueConfig,
        store: Arc<dyn Store>,
        clock: SharedClock,
        settings: Arc<Settings>,
        gate: Arc<DispatchGate>,
    ) -> Arc<QueueMatcher> {
        let dispatch_latency = LatencyHistogram::new(settings.dispatch_latency_otlp.clone(), name.as_str());
        Arc::new_cyclic(|weak: &Weak<QueueMatcher>| {
            let weak = weak.clone();
            QueueMatcher {
                name,
                config,
                partitions: RwLock::new(Vec::new()),
                ownership: tokio::sync::Mutex::new(()),
                waiters: Mutex::new(VecDeque::new()),
                next_partition: AtomicUsize::new(0),
                next_dispatch: AtomicUsize::new(0),
                next_waiter: AtomicU64::new(0),
                closing: AtomicBool::new(false),
                settings,
                store,
                clock,
                gate,
                on_ready: Arc::new(move || {
                    if let Some(matcher) = weak.upgrade() {
                        matcher.dispatch_waiting();
                    }
                }),
                retired: Mutex::new(TaskCounts::default()),
                takeovers: AtomicU64::new(0),
                abandoned: Mutex::new(BTreeSet::new()),
                dispatch_latency,
            }
        })
    }

    pub fn name(&self) -> &QueueName {
        &self.name
    }

    pub fn config(&self) -> QueueConfig {
        self.config
    }

    /// The partitions this node holds, and in which state.
    pub fn held(&self) -> Vec<(u32, PartitionState)> {
        self.partitions().iter().map(|p| (p.id().partition, p.state())).collect()
    }

    /// Whether this node holds `partition` and may write to it.
    pub fn holds(&self, partition: u32) -> bool {
        self.partitions().iter().any(|p| p.id().partition == partition && p.state() == PartitionState::Active)
    }

    /// Takes `partition` if this node does not hold it yet and `may_take`
    /// accepts its stored owner (a previous owner that is gone or has handed
    /// it over). Returns whether it took it.
    pub async fn adopt(&self, partition: u32, may_take: impl Fn(&str) -> bool) -> Result<bool, MatchError> {
        let _one_at_a_time = self.ownership.lock().await;
        if self.closing.load(Ordering::Acquire) {
            return Err(MatchError::ShuttingDown);
        }
        if self.holds(partition) {
            return Ok(false);
        }
        // Held but not active (fenced or closing): its counts are final.
        self.remove_partitions(|p| p.id().partition == partition);
        let id = PartitionId { queue: self.name.clone(), partition };
        let stored = self.store.load_partition(&id).await.map_err(PartitionError::from)?;
        let not_handed_over =
            stored.as_ref().is_some_and(|meta| !meta.owner.is_empty() && meta.owner != self.settings.node);
        if let Some(meta) = &stored
            && not_handed_over
            && !may_take(&meta.owner)
        {
            return Ok(false);
        }
        let opened = Partition::open(
            id,
            stored.map_or(0, |m| m.range_id),
            self.settings.node.clone(),
            self.store.clone(),
            self.clock.clone(),
            self.settings.engine_for(&self.name),
            self.settings.writer.clone(),
            self.on_ready.clone(),
        )
        .await?;
        self.write_partitions().push(opened);
        self.abandoned().remove(&partition);
        if not_handed_over {
            self.takeovers.fetch_add(1, Ordering::Relaxed);
        }
        Ok(true)
    }

    /// Checks that every partition this node holds is still its own (see
    /// [`Partition::verify`]).
    pub async fn verify_held(&self) {
        for partition in self.partitions() {
            if partition.state() == PartitionState::Active
                && let Err(error) = partition.verify().await
            {
                tracing::debug!(partition = %partition.id(), %error, "could not verify ownership");
            }
        }
    }

    /// Hands `partition` over: finishes its writes and writes its ack levels
    /// with no owner, so that the next owner takes it at once.
    pub async fn release(&self, partition: u32) {
        let _one_at_a_time = self.ownership.lock().await;
        for (partition, counted) in self.remove_partitions(|p| p.id().partition == partition) {
            tracing::info!(partition = %partition.id(), "handing over");
            partition.release().await;
            self.retire(&partition, counted);
        }
        self.dispatch_waiting();
    }

    /// Drops every partition without writing: this node may have been
    /// declared dead, and others may own them now.
    pub async fn abandon_all(&self) {
        let _one_at_a_time = self.ownership.lock().await;
        for (partition, counted) in self.remove_partitions(|_| true) {
            tracing::warn!(partition = %partition.id(), "abandoning");
            partition.abandon().await;
            self.retire(&partition, counted);
            self.abandoned().insert(partition.id().partition);
        }
        self.dispatch_waiting();
    }

    /// Whether `partition` was abandoned and not handed over since.
    pub fn was_abandoned(&self, partition: u32) -> bool {
        self.abandoned().contains(&partition)
    }

    /// Hands over an abandoned partition that is not this node's to take
    /// again: if the store still names this node its owner, writes its
    /// metadata back with no owner, on the condition that its range id has
    /// not moved (a node that took it since fences this write). The ack
    /// levels written are the ones stored, never ahead of them.
    pub async fn hand_over_abandoned(&self, partition: u32) -> Result<(), MatchError> {
        let _one_at_a_time = self.ownership.lock().await;
        if self.holds(partition) || !self.was_abandoned(partition) {
            return Ok(());
        }
        let id = PartitionId { queue: self.name.clone(), partition };
        let stored = self.store.load_partition(&id).await.map_err(PartitionError::from)?;
        if let Some(meta) = stored.filter(|meta| meta.owner == self.settings.node) {
            let freed = PartitionMeta { owner: String::new(), ..meta };
            match self.store.update_metadata(&id, &freed).await {
                Ok(()) => tracing::info!(partition = %id, "handed over after abandoning it"),
                Err(StoreError::Fenced { .. }) => {}
                Err(error) => return Err(PartitionError::from(error).into()),
            }
        }
        self.abandoned().remove(&partition);
        Ok(())
    }

    fn abandoned(&self) -> MutexGuard<'_, BTreeSet<u32>> {
        self.abandoned.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn write_partitions(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Arc<Partition>>> {
        self.partitions.write().unwrap_or_else(|p| p.into_inner())
    }

    fn retired(&self) -> MutexGuard<'_, TaskCounts> {
        self.retired.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the partitions `which` selects off the list, and their counts so
    /// far into the retired counts in the same step; returns them with those
    /// counts.
    fn remove_partitions(&self, which: impl Fn(&Partition) -> bool) -> Vec<(Arc<Partition>, TaskCounts)> {
        let mut partitions = self.write_partitions();
        let (gone, kept): (Vec<_>, Vec<_>) = partitions.drain(..).partition(|p| which(p));
        *partitions = kept;
        let gone: Vec<(Arc<Partition>, TaskCounts)> = gone
            .into_iter()
            .map(|partition| {
                let counted = partition.counts();
                (partition, counted)
            })
            .collect();
        for (_, counted) in &gone {
            *self.retired() += *counted;
        }
        gone
    }

    /// Once a removed partition has stopped: what it counted after its removal.
    fn retire(&self, partition: &Partition, counted: TaskCounts) {
        let after_removal = partition.counts().since(counted);
        *self.retired() += after_removal;
    }

    fn waiters(&self) -> MutexGuard<'_, VecDeque<Waiter>> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a task durably to `partition` if given, else to the partition
    /// its dedup id belongs to, else to one of the partitions this node
    /// holds (round robin).
    pub async fn add(&self, spec: TaskSpec, partition: Option<u32>) -> Result<AddOutcome, MatchError> {
        if self.closing.load(Ordering::Acquire) {
            return Err(MatchError::ShuttingDown);
        }
        let partition = match partition.or_else(|| self.partition_for(&spec)) {
            Some(number) => self
                .partitions()
                .into_iter()
                .find(|p| p.id().partition == number && p.state() == PartitionState::Active)
                .ok_or_else(|| MatchError::NoPartition(format!("{}/{number}", self.name)))?,
            None => self.pick_partition()?,
        };
        if let Some(poller) = self.sync_match_poller(&spec) {
            let added = partition.append_to(spec, poller).await?;
            return Ok(AddOutcome {
                task_id: added.task_id(),
                partition: partition.id().partition,
                sync_matched: true,
                duplicate: false,
            });
        }
        let added = partition.append(vec![spec]).await?[0];
        Ok(AddOutcome {
            task_id: added.task_id(),
            partition: partition.id().partition,
            sync_matched: false,
            duplicate: matches!(added, Added::Duplicate { .. }),
        })
    }

    /// The oldest waiting poller, taken from the line, when a new task may
    /// go straight to it: sync match is on, the task is ready now and has no
    /// dedup id, and nothing older than `backlog_negligible_age` waits in
    /// any partition (so that it passes no one).
    fn sync_match_poller(&self, spec: &TaskSpec) -> Option<oneshot::Sender<Delivery>> {
        if !self.settings.matcher.sync_match || !spec.delay.is_zero() || spec.dedup_id.is_some() {
            return None;
        }
        let mut waiters = self.waiters();
        drop_gone(&mut waiters);
        let now = self.clock.now_ms();
        if waiters.is_empty() || !self.gate.is_open(now) {
            return None;
        }
        let age = self.settings.matcher.backlog_negligible_age;
        let negligible =
            self.partitions().iter().all(|p| p.with_engine(|e| e.backlog_negligible(now, age)).unwrap_or(true));
        if !negligible {
            return None;
        }
        waiters.pop_front().map(|w| w.deliver)
    }

    /// The partition a task must go to: the one of its dedup id, if it has one.
    pub fn partition_for(&self, spec: &TaskSpec) -> Option<u32> {
        let dedup_id = spec.dedup_id.as_deref()?;
        Some((bucket_of(dedup_id) as u64 % u64::from(self.config.partitions)) as u32)
    }

    fn pick_partition(&self) -> Result<Arc<Partition>, MatchError> {
        let active: Vec<Arc<Partition>> =
            self.partitions().into_iter().filter(|p| p.state() == PartitionState::Active).collect();
        if active.is_empty() {
            return Err(MatchError::NoPartition(self.name.to_string()));
        }
        let turn = self.next_partition.fetch_add(1, Ordering::Relaxed);
        Ok(active[turn % active.len()].clone())
    }

    /// The active partition `number`, if this node holds it.
    fn held_partition(&self, number: u32) -> Result<Arc<Partition>, MatchError> {
        self.partitions()
            .into_iter()
            .find(|p| p.id().partition == number && p.state() == PartitionState::Active)
            .ok_or_else(|| MatchError::NoPartition(format!("{}/{number}", self.name)))
    }

    /// Records a worker's report on the lease of `token`.
    pub async fn finish(&self, token: &LeaseToken, outcome: Outcome) -> Result<Finished, MatchError> {
        let partition = self.held_partition(token.partition)?;
        Ok(partition.finish(Finish { lease_id: token.lease_id, attempt: token.attempt, outcome }).await?)
    }

    /// Extends the lease of `token`; its new deadline.
    pub fn heartbeat(&self, token: &LeaseToken) -> Result<UnixMillis, MatchError> {
        Ok(self.held_partition(token.partition)?.heartbeat(token.lease_id, token.attempt)?)
    }

    /// Puts up to `limit` dead letters of `partition` back in the queue.
    pub async fn redrive(&self, partition: u32, limit: usize) -> Result<Redriven, MatchError> {
        Ok(self.held_partition(partition)?.redrive(limit).await?)
    }

    /// Up to `limit` dead letters of the queue, oldest failure first, with
    /// their partitions, within `max_bytes` of payloads and messages (the
    /// first always). Read from the store, so that any node can list them:
    /// per partition, above the floor of those put back (past their deleted
    /// rows), in pages, until its share of `max_bytes` is read.
    pub async fn dead_letters(&self, limit: usize, max_bytes: usize) -> Result<Vec<(u32, RecordTask)>, MatchError> {
        const PAGE: usize = 64;
        let size = |d: &RecordTask| d.task.payload.len() + d.message.len();
        let share = (max_bytes / self.config.partitions as usize).max(1);
        let mut dead = Vec::new();
        for partition in 0..self.config.partitions {
            let id = PartitionId { queue: self.name.clone(), partition };
            let meta = self.store.load_partition(&id).await.map_err(PartitionError::from)?;
            let mut after = meta.map_or((0, 0), |m| m.dead_letters_through);
            let (mut taken, mut bytes) = (0, 0);
            while taken < limit && bytes < share {
                let page = (limit - taken).min(PAGE);
                let range = RecordRange::above(Section::DeadLetters, after);
                let records = self.store.read_records(&id, range, page).await.map_err(PartitionError::from)?;
                let last_page = records.len() < page;
                for record in records {
                    after = record.at.key;
                    let letter = decode_record_task(&record.value).map_err(PartitionError::from)?;
                    (taken, bytes) = (taken + 1, bytes + size(&letter));
                    dead.push((partition, letter));
                }
                if last_page {
                    break;
                }
            }
        }
        dead.sort_by_key(|(partition, d)| (d.at_unix_ms, *partition, d.task.task_id));
        let mut total = 0;
        let within = dead.into_iter().take(limit).take_while(|(_, letter)| {
            let first = total == 0;
            total += size(letter).max(1);
            first || total <= max_bytes
        });
        Ok(within.collect())
    }

    /// A task if one is ready now (waiting only for its lease to be written).
    pub async fn try_take(&self) -> Option<DispatchedTask> {
        self.take_ready(1).await.pop()
    }

    /// Up to `max` tasks ready now, each waited for until its lease is
    /// durable; taken together, so that their leases ride one write.
    pub async fn take_ready(&self, max: usize) -> Vec<DispatchedTask> {
        if self.closing.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut deliveries = Vec::new();
        while deliveries.len() < max {
            let (deliver, delivery) = oneshot::channel();
            if !self.dispatch_one(&mut Some(deliver)) {
                break;
            }
            deliveries.push(delivery);
        }
        let delivered = futures::future::join_all(deliveries).await;
        delivered.into_iter().filter_map(Result::ok).map(|d| self.dispatched(d)).collect()
    }

    /// Waits up to `wait` for a task. `None` when the wait ends empty or the
    /// server shuts down. A task taken for this poll is waited for until its
    /// lease is durable, however short `wait` is.
    pub async fn poll(&self, wait: Duration) -> Option<DispatchedTask> {
        if self.closing.load(Ordering::Acquire) {
            return None;
        }
        let (deliver, mut delivery) = oneshot::channel();
        let mut deliver = Some(deliver);
        if self.dispatch_one(&mut deliver) {
            return delivery.await.ok().map(|d| self.dispatched(d));
        }
        let id = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        {
            let mut waiters = self.waiters();
            // Checked again under the lock that dispatchers take first, so a
            // task that became ready just now is not missed.
            if self.dispatch_one(&mut deliver) {
                drop(waiters);
                return delivery.await.ok().map(|d| self.dispatched(d));
            }
            drop_gone(&mut waiters);
            waiters.push_back(Waiter { id, deliver: deliver.take().expect("not used") });
        }
        tokio::select! {
            delivered = &mut delivery => return delivered.ok().map(|d| self.dispatched(d)),
            _ = tokio::time::sleep(wait) => {}
        }
        let still_waiting = {
            let mut waiters = self.waiters();
            let position = waiters.iter().position(|w| w.id == id);
            position.map(|at| waiters.remove(at)).is_some()
        };
        if still_waiting {
            return None;
        }
        // A dispatcher took a task for this poll just now: it comes once its lease is written.
        delivery.await.ok().map(|d| self.dispatched(d))
    }

    /// Serves waiting pollers, oldest first, while there are tasks. When
    /// this node holds no partition of the queue any more, they are answered
    /// empty, so that their workers poll again where the partitions are.
    pub fn dispatch_waiting(&self) {
        let mut waiters = self.waiters();
        if !self.partitions().iter().any(|p| p.state() == PartitionState::Active) {
            waiters.clear();
            return;
        }
        loop {
            drop_gone(&mut waiters);
            let Some(waiter) = waiters.pop_front() else { return };
            let mut deliver = Some(waiter.deliver);
            if !self.dispatch_one(&mut deliver) {
                waiters.push_front(Waiter { id: waiter.id, deliver: deliver.expect("not used without a task") });
                return;
            }
        }
    }

    /// Takes the best task across the partitions and starts its lease; the
    /// partition sends it to `deliver` once the lease is durable. False
    /// (and `deliver` left in place) when there is no task.
    fn dispatch_one(&self, deliver: &mut Option<oneshot::Sender<Delivery>>) -> bool {
        let now = self.clock.now_ms();
        if !self.gate.is_open(now) {
            return false;
        }
        let partitions = self.partitions();
        if partitions.is_empty() {
            return false;
        }
        // Across partitions only the priority and how far a task's pass is
        // ahead of its own partition's ack level compare: passes and ids of
        // different partitions are unrelated, and comparing them would serve
        // one backlogged partition and starve another. Ties go round.
        let rank = |c: &Candidate| (c.priority, c.pass_ahead);
        loop {
            let start = self.next_dispatch.fetch_add(1, Ordering::Relaxed);
            let mut best: Option<(usize, Candidate)> = None;
            for offset in 0..partitions.len() {
                let index = (start + offset) % partitions.len();
                let candidate = partitions[index].with_engine(|e| e.peek(now)).flatten();
                if let Some(candidate) = candidate
                    && best.is_none_or(|(_, b)| rank(&candidate) < rank(&b))
                {
                    best = Some((index, candidate));
                }
            }
            let Some((index, candidate)) = best else {
                return false;
            };
            let partition = &partitions[index];
            let Some(mut engine) = partition.lock_engine() else {
                continue;
            };
            let Some((task, _)) = engine.take(candidate, now) else {
                continue;
            };
            partition.await_lease(task.level.id, deliver.take().expect("one delivery per dispatch"));
            drop(engine);
            partition.after_dispatch();
            return true;
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

    pub fn waiting_pollers(&self) -> usize {
        let mut waiters = self.waiters();
        drop_gone(&mut waiters);
        waiters.len()
    }

    pub fn describe(&self, top_keys: usize) -> Vec<PartitionReport> {
        self.partitions()
            .iter()
            .map(|p| PartitionReport {
                partition: p.id().partition,
                state: p.state(),
                snapshot: p.with_engine(|e| e.snapshot(top_keys)),
            })
            .collect()
    }

    /// What this node counts and holds of the queue now. Counts never
    /// decrease between readings, but for a moment while a partition is
    /// being handed over (what it counts after its removal from the list is
    /// added once it has stopped).
    pub fn stats(&self) -> QueueStats {
        let (partitions, mut counts) = {
            let partitions = self.partitions.read().unwrap_or_else(|p| p.into_inner());
            (partitions.clone(), *self.retired())
        };
        let mut stats = QueueStats {
            takeovers: self.takeovers.load(Ordering::Relaxed),
            levels: Priority::all().map(|priority| LevelStats { priority, backlog: 0, ack_lag: 0 }).collect(),
            waiting_pollers: self.waiting_pollers() as u64,
            dispatch_latency: self.dispatch_latency.read(),
            ..QueueStats::default()
        };
        for partition in &partitions {
            let Some(snapshot) = partition.with_engine(|e| e.snapshot(0)) else {
                counts += partition.counts();
                continue;
            };
            counts += snapshot.counts;
            stats.owned_partitions += 1;
            stats.leased += snapshot.leased;
            stats.delayed += snapshot.delayed;
            for (level, subqueue) in stats.levels.iter_mut().zip(&snapshot.subqueues) {
                level.backlog += subqueue.approx_backlog;
                level.ack_lag += subqueue.approx_backlog + subqueue.dispatched_above_ack;
            }
        }
        stats.counts = counts;
        stats
    }

    /// Answers parked polls (empty), then hands every partition over in turn.
    pub async fn close(&self) {
        self.stop_polls();
        let _one_at_a_time = self.ownership.lock().await;
        // All at once: each may retry its last metadata write for a while.
        let partitions = self.remove_partitions(|_| true);
        futures::future::join_all(partitions.iter().map(|(partition, _)| partition.release())).await;
        for (partition, counted) in partitions {
            self.retire(&partition, counted);
        }
    }

    /// Parked polls return empty now, new polls at once.
    pub fn stop_polls(&self) {
        self.closing.store(true, Ordering::Release);
        self.waiters().clear();
    }
}

fn drop_gone(waiters: &mut VecDeque<Waiter>) {
    waiters.retain(|w| !w.deliver.is_closed());
}
