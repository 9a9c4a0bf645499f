use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use std::collections::HashMap;

use super::writer::{AppendReply, FinishReply, RedriveReply};
use crate::clock::{SharedClock, UnixMillis};
use crate::model::{FairLevel, PartitionId, Priority, StoredTask, TaskSpec};
use crate::queue::{Added, EngineConfig, Finish, Finished, LeaseError, PartitionEngine, TaskCounts, spec_bytes};
use crate::store::codec::decode_lease;
use crate::store::{RecordRange, Section, Store, StoreError};

/// Group commit (section `[writer]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WriterConfig {
    /// The most tasks in one append.
    pub max_batch_tasks: usize,
    /// The most bytes one write of a partition carries, counting every task
    /// row, record and the metadata. Adds, completions, failures and
    /// re-drives take at most half of it; promotions of delayed tasks,
    /// lease records and expiries fill the rest and wait for the next write
    /// when it is full, so neither starves the other. On Cassandra a write
    /// is one mutation: keep this well below the largest one the cluster
    /// takes (half of `commitlog_segment_size`, 16 MiB with the default 32
    /// MiB segments; and the 16 MiB native frame). At least 4 ×
    /// `limits.max_payload_bytes`, so that a task always fits.
    pub max_write_bytes: usize,
    /// How often the keeper looks at ack levels and deletes.
    #[serde(with = "crate::config::duration_serde")]
    pub keeper_interval: Duration,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            max_batch_tasks: 1000,
            max_write_bytes: 4 * 1024 * 1024,
            keeper_interval: Duration::from_millis(500),
        }
    }
}

/// Why a partition could not do what was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Another owner took the partition; nothing was written.
    #[error("partition {0} is owned by another node now")]
    Lost(String),
    /// The partition is shutting down; nothing was written.
    #[error("partition {0} is shutting down")]
    Closed(String),
}

impl PartitionError {
    pub fn certainly_not_applied(&self) -> bool {
        match self {
            PartitionError::Store(e) => e.certainly_not_applied(),
            PartitionError::Lost(_) | PartitionError::Closed(_) => true,
        }
    }
}

/// Called after new tasks became ready, so that waiting pollers get them.
pub type ReadyHook = Arc<dyn Fn() + Send + Sync>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PartitionState {
    Active = 0,
    /// Fenced by a newer owner: hands out nothing more.
    Lost = 1,
    Closed = 2,
}

/// Why a finish (complete or fail) was not recorded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FinishError {
    /// The token no longer holds the lease: nothing was written.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    #[error(transparent)]
    Partition(#[from] PartitionError),
}

/// What a re-drive of dead letters did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Redriven {
    /// Put back in the queue.
    pub redriven: usize,
    /// Removed without being put back: a task with the same dedup id is
    /// pending or running.
    pub duplicates: usize,
}

/// A task on its way to the worker that polled for it: sent once its lease
/// record is durable.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    pub partition: u32,
    pub task: StoredTask,
    pub lease_deadline: UnixMillis,
}

pub(super) enum WriteCommand {
    /// New tasks; with `deliver`, a single task to lease at once to that poller.
    Append {
        specs: Vec<TaskSpec>,
        deliver: Option<oneshot::Sender<Delivery>>,
        reply: AppendReply,
    },
    Finish {
        finish: Finish,
        reply: FinishReply,
    },
    Redrive {
        limit: usize,
        reply: RedriveReply,
    },
    SyncMetadata,
}

impl WriteCommand {
    pub fn fail(self, error: PartitionError) {
        match self {
            WriteCommand::Append { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            WriteCommand::Finish { reply, .. } => {
                let _ = reply.send(Err(FinishError::Partition(error)));
            }
            WriteCommand::Redrive { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            WriteCommand::SyncMetadata => {}
        }
    }
}

pub(super) struct Shared {
    pub id: PartitionId,
    /// This node's name, recorded as the owner when it takes the partition.
    pub node: String,
    pub engine: Mutex<PartitionEngine>,
    pub store: Arc<dyn Store>,
    pub clock: SharedClock,
    pub wake_reader: Notify,
    /// Wakes the writer when the engine has a write due without a command.
    pub wake_writer: Notify,
    /// Pollers waiting for tasks whose lease records are being written, by lease id.
    pub deliveries: Mutex<HashMap<i64, oneshot::Sender<Delivery>>>,
    pub on_ready: ReadyHook,
    pub state: AtomicU8,
    pub config: WriterConfig,
}

impl Shared {
    pub fn engine(&self) -> MutexGuard<'_, PartitionEngine> {
        self.engine.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn state(&self) -> PartitionState {
        match self.state.load(Ordering::Acquire) {
            0 => PartitionState::Active,
            1 => PartitionState::Lost,
            _ => PartitionState::Closed,
        }
    }

    pub fn set_state(&self, state: PartitionState) {
        self.state.fetch_max(state as u8, Ordering::AcqRel);
    }

    pub fn lost(&self) -> PartitionError {
        PartitionError::Lost(self.id.to_string())
    }

    fn deliveries(&self) -> MutexGuard<'_, HashMap<i64, oneshot::Sender<Delivery>>> {
        self.deliveries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Hands leases now durable to their pollers; a lease whose poller has
    /// gone goes back to the queue.
    pub fn deliver(&self, leases: Vec<(i64, StoredTask, UnixMillis)>) {
        let mut undelivered = Vec::new();
        {
            let mut deliveries = self.deliveries();
            for (id, task, lease_deadline) in leases {
                let delivery = Delivery { partition: self.id.partition, task, lease_deadline };
                let sent = deliveries.remove(&id).is_some_and(|to| to.send(delivery).is_ok());
                if !sent {
                    undelivered.push(id);
                }
            }
        }
        if !undelivered.is_empty() {
            let now = self.clock.now_ms();
            let mut engine = self.engine();
            for id in undelivered {
                engine.lease_undelivered(id, now);
            }
            drop(engine);
            self.wake_writer.notify_one();
        }
    }

    /// Pollers to send the tasks of these leases to, once they are durable.
    pub fn await_leases(&self, pollers: impl Iterator<Item = (i64, oneshot::Sender<Delivery>)>) {
        self.deliveries().extend(pollers);
    }

    /// Leases that were not written: their pollers get nothing.
    pub fn forget_deliveries(&self, ids: &[i64]) {
        let mut deliveries = self.deliveries();
        for id in ids {
            deliveries.remove(id);
        }
    }

    pub fn drop_deliveries(&self) {
        self.deliveries().clear();
    }
}

/// An owned partition: its engine, and the tasks that drive it.
pub struct Partition {
    shared: Arc<Shared>,
    writes: mpsc::Sender<WriteCommand>,
    stop: CancellationToken,
    tasks: tokio::sync::Mutex<JoinSet<()>>,
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partition").field("id", &self.shared.id).finish()
    }
}

impl Partition {
    /// Takes ownership of the partition from range id `stored_range` (0: it
    /// does not exist yet, and is created) and starts its writer, reader and
    /// keeper.
    #[allow(clippy::too_many_arguments)]
    pub async fn open(
        id: PartitionId,
        stored_range: i64,
        node: String,
        store: Arc<dyn Store>,
        clock: SharedClock,
        engine_config: EngineConfig,
        config: WriterConfig,
        on_ready: ReadyHook,
    ) -> Result<Arc<Partition>, PartitionError> {
        let meta = store.take_ownership(&id, stored_range, &node).await?;
        let (leases, finished) = load_leases(store.as_ref(), &id).await?;
        tracing::info!(partition = %id, range_id = meta.range_id, leases = leases.len(), "took ownership");
        let engine = PartitionEngine::load_with_leases(&meta, leases, finished, engine_config, clock.now_ms());
        let shared = Arc::new(Shared {
            id,
            node,
            engine: Mutex::new(engine),
            store,
            clock,
            wake_reader: Notify::new(),
            wake_writer: Notify::new(),
            deliveries: Mutex::new(HashMap::new()),
            on_ready,
            state: AtomicU8::new(PartitionState::Active as u8),
            config,
        });
        let (writes, commands) = mpsc::channel(4096);
        let stop = CancellationToken::new();
        let mut tasks = JoinSet::new();
        tasks.spawn(super::writer::run(shared.clone(), commands, stop.clone()));
        tasks.spawn(super::reader::run(shared.clone(), stop.clone()));
        tasks.spawn(super::writer::keep(shared.clone(), writes.clone(), stop.clone()));
        Ok(Arc::new(Partition { shared, writes, stop, tasks: tokio::sync::Mutex::new(tasks) }))
    }

    pub fn id(&self) -> &PartitionId {
        &self.shared.id
    }

    pub fn state(&self) -> PartitionState {
        self.shared.state()
    }

    /// Writes the tasks durably; what became of each, in order. Tasks that
    /// would take more than a write's share for commands go in several
    /// writes, each all-or-nothing.
    pub async fn append(&self, specs: Vec<TaskSpec>) -> Result<Vec<Added>, PartitionError> {
        let share = self.shared.config.max_write_bytes / 2;
        let mut added = Vec::with_capacity(specs.len());
        let mut specs = specs.into_iter().peekable();
        while specs.peek().is_some() {
            let mut bytes = 0;
            let mut chunk = Vec::new();
            while let Some(spec) = specs.next_if(|spec| chunk.is_empty() || bytes + spec_bytes(spec) <= share) {
                bytes += spec_bytes(&spec);
                chunk.push(spec);
            }
            added.extend(self.command(|reply| WriteCommand::Append { specs: chunk, deliver: None, reply }).await??);
        }
        Ok(added)
    }

    /// Writes one task as a lease of the poller behind `deliver` (sync
    /// match): the task goes to it once durable, and comes back to the
    /// queue if its lease expires.
    pub async fn append_to(&self, spec: TaskSpec, deliver: oneshot::Sender<Delivery>) -> Result<Added, PartitionError> {
        let added = self.command(|reply| WriteCommand::Append { specs: vec![spec], deliver: Some(deliver), reply });
        Ok(added.await??[0])
    }

    /// Records a worker's report on a lease.
    pub async fn finish(&self, finish: Finish) -> Result<Finished, FinishError> {
        self.command(|reply| WriteCommand::Finish { finish, reply }).await?
    }

    /// Puts up to `limit` dead letters back in the queue, in as many writes
    /// as their bytes need.
    pub async fn redrive(&self, limit: usize) -> Result<Redriven, PartitionError> {
        let mut total = Redriven::default();
        while total.redriven + total.duplicates < limit {
            let left = limit - total.redriven - total.duplicates;
            let step = self.command(|reply| WriteCommand::Redrive { limit: left, reply }).await??;
            if step.redriven + step.duplicates == 0 {
                break;
            }
            total.redriven += step.redriven;
            total.duplicates += step.duplicates;
        }
        Ok(total)
    }

    async fn command<T>(&self, command: impl FnOnce(oneshot::Sender<T>) -> WriteCommand) -> Result<T, PartitionError> {
        match self.state() {
            PartitionState::Active => {}
            PartitionState::Lost => return Err(self.shared.lost()),
            PartitionState::Closed => return Err(PartitionError::Closed(self.shared.id.to_string())),
        }
        let (reply, result) = oneshot::channel();
        let closed = || PartitionError::Closed(self.shared.id.to_string());
        self.writes.send(command(reply)).await.map_err(|_| closed())?;
        result.await.map_err(|_| closed())
    }

    /// Extends a lease (in memory: a new owner gives every lease it loads a
    /// full timeout, so heartbeats need no write).
    pub fn heartbeat(&self, lease_id: i64, attempt: u32) -> Result<UnixMillis, FinishError> {
        let now = self.shared.clock.now_ms();
        match self.with_engine(|e| e.heartbeat(lease_id, attempt, now)) {
            Some(result) => Ok(result?),
            None => Err(FinishError::Partition(self.shared.lost())),
        }
    }

    /// Sends `delivery`'s task to it once the lease of `lease_id` is durable.
    /// Call with the engine locked, right after taking the task.
    pub fn await_lease(&self, lease_id: i64, delivery: oneshot::Sender<Delivery>) {
        self.shared.await_leases(std::iter::once((lease_id, delivery)));
        self.shared.wake_writer.notify_one();
    }

    /// Runs `f` on the engine, if the partition may still hand out tasks.
    pub fn with_engine<T>(&self, f: impl FnOnce(&mut PartitionEngine) -> T) -> Option<T> {
        if self.state() != PartitionState::Active {
            return None;
        }
        let mut engine = self.shared.engine();
        Some(f(&mut engine))
    }

    /// What the engine has counted, whatever the partition's state.
    pub fn counts(&self) -> TaskCounts {
        self.shared.engine().counts()
    }

    /// Locks the engine for a multi-step decision; `None` if the partition
    /// may not hand out tasks.
    pub fn lock_engine(&self) -> Option<MutexGuard<'_, PartitionEngine>> {
        (self.state() == PartitionState::Active).then(|| self.shared.engine())
    }

    /// After tasks were taken: refill if the buffer runs low.
    pub fn after_dispatch(&self) {
        if self.shared.engine().wants_read(self.shared.clock.now_ms()) {
            self.shared.wake_reader.notify_one();
        }
    }

    pub fn now_ms(&self) -> i64 {
        self.shared.clock.now_ms()
    }

    /// Checks the stored range id: if another node took the partition (and
    /// this one has not written since, so has not been fenced yet), stop
    /// handing out its tasks now. Returns whether this node still owns it.
    pub async fn verify(&self) -> Result<bool, PartitionError> {
        let ours = self.shared.engine().range_id();
        let Some(stored) = self.shared.store.load_partition(&self.shared.id).await? else {
            return Ok(true);
        };
        // A higher range id under this node's name is its own id-block renewal.
        if stored.range_id > ours && stored.owner != self.shared.node {
            let stored = stored.range_id;
            tracing::warn!(partition = %self.shared.id, ours, stored, "taken by another node: dropping it");
            self.shared.set_state(PartitionState::Lost);
            return Ok(false);
        }
        Ok(true)
    }

    /// Stops in order and hands the partition over: no new writes; queued
    /// writes are finished; the ack levels are written a last time with no
    /// owner, so that the next owner may take it at once; reader and keeper stop.
    pub async fn release(&self) {
        if self.shared.state() == PartitionState::Lost {
            // Fenced, or dropped after a write of unknown outcome: nothing
            // of what it holds may be written.
            return self.abandon().await;
        }
        self.shared.engine().set_owner(String::new());
        self.shared.set_state(PartitionState::Closed);
        self.stop_tasks().await;
    }

    /// Stops without writing anything more: for when this node may have been
    /// declared dead and another may own the partition now.
    pub async fn abandon(&self) {
        self.shared.set_state(PartitionState::Lost);
        self.stop_tasks().await;
    }

    async fn stop_tasks(&self) {
        self.stop.cancel();
        let mut tasks = self.tasks.lock().await;
        while tasks.join_next().await.is_some() {}
    }
}

/// The lease records of the partition: running leases (task, deadline,
/// seq), and finished ones (seq, priority, level).
type LeaseRecords = (Vec<(StoredTask, UnixMillis, i64)>, Vec<(i64, Priority, FairLevel)>);

async fn load_leases(store: &dyn Store, id: &PartitionId) -> Result<LeaseRecords, PartitionError> {
    const PAGE: usize = 1000;
    let (mut running, mut finished) = (Vec::new(), Vec::new());
    let mut after = (i64::MIN, i64::MIN);
    loop {
        let page = store.read_records(id, RecordRange::above(Section::Leases, after), PAGE).await?;
        let short = page.len() < PAGE;
        for record in page {
            after = record.at.key;
            let seq = record.at.key.1;
            match decode_lease(&record.value)? {
                Ok(lease) => running.push((lease.task, lease.at_unix_ms, seq)),
                Err((priority, level)) => finished.push((seq, priority, level)),
            }
        }
        if short {
            return Ok((running, finished));
        }
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
