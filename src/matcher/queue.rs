use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::Duration;

use tokio::sync::oneshot;

use super::LeaseToken;
use super::registry::Settings;
use crate::clock::SharedClock;
use crate::cluster::DispatchGate;
use crate::model::{FairLevel, PartitionId, QueueName, StoredTask, TaskSpec};
use crate::partition::{Partition, PartitionError, PartitionState, ReadyHook};
use crate::queue::{Candidate, PartitionSnapshot};
use crate::store::{QueueConfig, Store};

/// A task handed to a worker.
#[derive(Clone, Debug, PartialEq)]
pub struct DispatchedTask {
    pub partition: u32,
    pub task: StoredTask,
    pub token: LeaseToken,
}

/// Where an added task went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddOutcome {
    pub task_id: i64,
    pub partition: u32,
    /// Handed straight to a waiting poller, not stored.
    pub sync_matched: bool,
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
}

impl MatchError {
    pub fn certainly_not_applied(&self) -> bool {
        match self {
            MatchError::Partition(e) => e.certainly_not_applied(),
            MatchError::ShuttingDown | MatchError::NoPartition(_) => true,
        }
    }
}

struct Waiter {
    deliver: oneshot::Sender<DispatchedTask>,
}

/// How an attempt to hand out one task ended.
enum Dispatch {
    Delivered,
    NoTask,
    /// The taker was gone; the task was put back.
    Refused,
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
    closing: AtomicBool,
    settings: Arc<Settings>,
    store: Arc<dyn Store>,
    clock: SharedClock,
    gate: Arc<DispatchGate>,
    on_ready: ReadyHook,
}

impl std::fmt::Debug for QueueMatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueMatcher").field("name", &self.name).finish()
    }
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
        Arc::new_cyclic(|weak: &Weak<QueueMatcher>| {
            let weak = weak.clone();
            QueueMatcher {
                name,
                config,
                partitions: RwLock::new(Vec::new()),
                ownership: tokio::sync::Mutex::new(()),
                waiters: Mutex::new(VecDeque::new()),
                next_partition: AtomicUsize::new(0),
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
        self.write_partitions().retain(|p| p.id().partition != partition);
        let id = PartitionId { queue: self.name.clone(), partition };
        let stored = self.store.load_partition(&id).await.map_err(PartitionError::from)?;
        if let Some(meta) = &stored
            && !meta.owner.is_empty()
            && meta.owner != self.settings.node
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
            self.settings.engine.clone(),
            self.settings.writer.clone(),
            self.on_ready.clone(),
        )
        .await?;
        self.write_partitions().push(opened);
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
        let released: Vec<Arc<Partition>> = {
            let mut partitions = self.write_partitions();
            let (gone, kept) = partitions.drain(..).partition(|p| p.id().partition == partition);
            *partitions = kept;
            gone
        };
        for partition in released {
            tracing::info!(partition = %partition.id(), "handing over");
            partition.release().await;
        }
        self.dispatch_waiting();
    }

    /// Drops every partition without writing: this node may have been
    /// declared dead, and others may own them now.
    pub async fn abandon_all(&self) {
        let _one_at_a_time = self.ownership.lock().await;
        let partitions = std::mem::take(&mut *self.write_partitions());
        for partition in partitions {
            tracing::warn!(partition = %partition.id(), "abandoning");
            partition.abandon().await;
        }
        self.dispatch_waiting();
    }

    fn partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn write_partitions(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Arc<Partition>>> {
        self.partitions.write().unwrap_or_else(|p| p.into_inner())
    }

    fn waiters(&self) -> MutexGuard<'_, VecDeque<Waiter>> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a task: to a waiting poller while the backlog is negligible,
    /// else durably to one of the partitions this node holds (round robin),
    /// or to `partition` if given.
    pub async fn add(&self, spec: TaskSpec, partition: Option<u32>) -> Result<AddOutcome, MatchError> {
        if self.closing.load(Ordering::Acquire) {
            return Err(MatchError::ShuttingDown);
        }
        let partition = match partition {
            Some(number) => self
                .partitions()
                .into_iter()
                .find(|p| p.id().partition == number && p.state() == PartitionState::Active)
                .ok_or_else(|| MatchError::NoPartition(format!("{}/{number}", self.name)))?,
            None => self.pick_partition()?,
        };
        if self.settings.matcher.sync_match
            && let Some(outcome) = self.try_sync_match(&partition, &spec)
        {
            return Ok(outcome);
        }
        let ids = partition.append(vec![spec]).await?;
        Ok(AddOutcome { task_id: ids[0], partition: partition.id().partition, sync_matched: false })
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

    /// Hands the task to the first live waiting poller, if there is one and
    /// nothing older than `backlog_negligible_age` waits in any partition.
    fn try_sync_match(&self, partition: &Partition, spec: &TaskSpec) -> Option<AddOutcome> {
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
        let task_id = partition.with_engine(|e| e.allocate_unstored_id())??;
        let task = spec.at_level(FairLevel::new(0, task_id), now);
        let mut offer = self.dispatched(partition.id().partition, task);
        while let Some(waiter) = waiters.pop_front() {
            match waiter.deliver.send(offer) {
                Ok(()) => {
                    return Some(AddOutcome { task_id, partition: partition.id().partition, sync_matched: true });
                }
                Err(back) => offer = back,
            }
        }
        None
    }

    /// Waits up to `wait` for a task. `None` when the wait ends empty or the
    /// server shuts down.
    pub async fn poll(&self, wait: Duration) -> Option<DispatchedTask> {
        if self.closing.load(Ordering::Acquire) {
            return None;
        }
        if let Some(task) = self.take_now() {
            return Some(task);
        }
        let mut delivery = {
            let mut waiters = self.waiters();
            // Checked again under the lock that dispatchers take first, so a
            // task that became ready just now is not missed.
            if let Some(task) = self.take_now() {
                return Some(task);
            }
            drop_gone(&mut waiters);
            let (deliver, delivery) = oneshot::channel();
            waiters.push_back(Waiter { deliver });
            delivery
        };
        tokio::select! {
            task = &mut delivery => task.ok(),
            _ = tokio::time::sleep(wait) => {
                delivery.close();
                delivery.try_recv().ok()
            }
        }
    }

    /// A task if one is ready now, without waiting.
    pub fn take_now(&self) -> Option<DispatchedTask> {
        let mut taken = None;
        let outcome = self.dispatch_one(|task| {
            taken = Some(task);
            None
        });
        debug_assert!(!matches!(outcome, Dispatch::Refused));
        taken
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
            let outcome = self.dispatch_one(|task| deliver.take().expect("delivered once").send(task).err());
            match outcome {
                Dispatch::Delivered | Dispatch::Refused => continue,
                Dispatch::NoTask => {
                    let deliver = deliver.expect("not used without a task");
                    waiters.push_front(Waiter { deliver });
                    return;
                }
            }
        }
    }

    /// Takes the best task across the partitions and offers it to `deliver`,
    /// which hands it back if its taker is gone; a task handed back is put
    /// back in the buffer before the partition is unlocked.
    fn dispatch_one(&self, deliver: impl FnOnce(DispatchedTask) -> Option<DispatchedTask>) -> Dispatch {
        if !self.gate.is_open(self.clock.now_ms()) {
            return Dispatch::NoTask;
        }
        let partitions = self.partitions();
        loop {
            let mut best: Option<(usize, Candidate)> = None;
            for (index, partition) in partitions.iter().enumerate() {
                let candidate = partition.with_engine(|e| e.peek()).flatten();
                if let Some(candidate) = candidate
                    && best.is_none_or(|(_, b)| candidate < b)
                {
                    best = Some((index, candidate));
                }
            }
            let Some((index, candidate)) = best else {
                return Dispatch::NoTask;
            };
            let partition = &partitions[index];
            let Some(mut engine) = partition.lock_engine() else {
                continue;
            };
            let Some(task) = engine.take(candidate) else {
                continue;
            };
            let outcome = match deliver(self.dispatched(partition.id().partition, task)) {
                None => {
                    engine.settle();
                    Dispatch::Delivered
                }
                Some(back) => {
                    engine.restore(back.task);
                    Dispatch::Refused
                }
            };
            drop(engine);
            partition.after_dispatch();
            return outcome;
        }
    }

    fn dispatched(&self, partition: u32, task: StoredTask) -> DispatchedTask {
        DispatchedTask {
            partition,
            token: LeaseToken { queue: self.name.clone(), partition, task_id: task.level.id, attempt: task.attempt },
            task,
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

    /// Answers parked polls (empty), then hands every partition over in turn.
    pub async fn close(&self) {
        self.stop_polls();
        let _one_at_a_time = self.ownership.lock().await;
        let partitions = std::mem::take(&mut *self.write_partitions());
        for partition in partitions {
            partition.release().await;
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
