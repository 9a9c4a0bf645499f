//! [`Partition`]: the handle the matcher holds on one owned partition. It
//! opens the partition (takes ownership, loads its leases, starts its
//! tasks), passes commands to the writer, and reads the engine under its
//! mutex.
//!
//! Invariants: a partition is opened only by taking ownership first (its
//! range id fences every earlier owner); the handle writes nothing itself
//! but the drain's marks ([`Partition::put_records`], conditional on the
//! range id): every other write goes through the writer; it stops its tasks
//! before it reports a partition released or abandoned.

use std::sync::atomic::AtomicU8;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::config::WriterConfig;
use super::error::{CancelError, FinishError, PartitionError};
use super::shared::{Delivery, PartitionState, ReadyHook, RedriveStep, Redriven, Shared, WriteCommand};
use crate::clock::{SharedClock, UnixMillis};
use crate::core::engine::{
    Added, Cancel, Candidate, DeadLetterFilter, EngineConfig, Finish, Finished, Next, PartitionEngine,
    PartitionSnapshot, Pauses, Purged, TaskCounts, bury_bytes, spec_bytes,
};
use crate::hash::IdMap;
use crate::model::{FairLevel, PartitionId, Priority, StoredTask, TaskSpec};
use crate::store::{
    PartitionStore, PartitionWrite, Record, RecordKey, RecordRange, RecordTask, RecordValue, Section, StoreError,
};

/// Dead letters one write of a re-drive reads, at most.
const REDRIVE_READ_PER_WRITE: usize = 256;

/// An owned partition: its engine, and the tasks that drive it.
pub struct Partition {
    pub(super) shared: Arc<Shared>,
    writes: mpsc::Sender<WriteCommand>,
    stop: CancellationToken,
    tasks: tokio::sync::Mutex<JoinSet<()>>,
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partition").field("id", &self.shared.id).finish()
    }
}

/// What a node opens a partition with: the same for every partition of a
/// queue on that node.
#[derive(Clone)]
pub struct PartitionSetup {
    /// This node's name, written into the metadata as the owner.
    pub node: String,
    /// This node's region (`cluster.region`), written into the metadata as
    /// the partition's: only nodes of that region take it next.
    pub region: String,
    /// Where the partition's rows live.
    pub store: Arc<dyn PartitionStore>,
    /// What the engine reads the time from.
    pub clock: SharedClock,
    /// The engine's settings (section `[engine]`, with the queue's task policy).
    pub engine: EngineConfig,
    /// The keys (or the whole queue) paused when it opens.
    pub pauses: Pauses,
    /// Group commit (section `[writer]`).
    pub writer: WriterConfig,
    /// Called when tasks become ready, so that waiting polls are served.
    pub on_ready: ReadyHook,
}

impl Partition {
    /// Takes ownership of the partition from range id `stored_range` (0: it
    /// does not exist yet, and is created) and starts its writer, reader and
    /// keeper.
    pub async fn open(
        id: PartitionId,
        stored_range: i64,
        setup: PartitionSetup,
    ) -> Result<Arc<Partition>, PartitionError> {
        let PartitionSetup { node, region, store, clock, engine: engine_config, pauses, writer: config, on_ready } =
            setup;
        let meta = store.take_ownership(&id, stored_range, &node, &region).await?;
        let (leases, finished) = load_leases(store.as_ref(), &id).await?;
        tracing::info!(partition = %id, range_id = meta.range_id, leases = leases.len(), "took ownership");
        let mut engine = PartitionEngine::load_with_leases(&meta, leases, finished, engine_config, clock.now_ms());
        if pauses.any() {
            let config = engine.config().clone();
            engine.retune(&config, pauses);
        }
        if stored_range == 0 {
            engine.created_here();
        }
        let shared = Arc::new(Shared {
            id,
            node,
            region,
            engine: Mutex::new(engine),
            store,
            clock,
            wake_reader: Notify::new(),
            wake_writer: Notify::new(),
            deliveries: Mutex::new(IdMap::default()),
            on_ready,
            state: AtomicU8::new(PartitionState::Active as u8),
            config,
            hand_over_to: Mutex::new(None),
            handed_over: std::sync::atomic::AtomicBool::new(false),
        });
        let (writes, commands) = mpsc::channel(4096);
        let stop = CancellationToken::new();
        let mut tasks = JoinSet::new();
        tasks.spawn(super::writer::run(shared.clone(), commands, stop.clone()));
        tasks.spawn(super::reader::run(shared.clone(), stop.clone()));
        tasks.spawn(super::keeper::run(shared.clone(), writes.clone(), stop.clone()));
        Ok(Arc::new(Partition { shared, writes, stop, tasks: tokio::sync::Mutex::new(tasks) }))
    }

    /// What its tasks share (for the drain, started on this handle).
    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Which partition of which queue this is.
    pub fn id(&self) -> &PartitionId {
        &self.shared.id
    }

    /// Writes `records` of a section the engine does not keep
    /// ([`Section::Drained`]), conditional on this owner's range id.
    pub async fn put_records(&self, records: Vec<Record>) -> Result<(), StoreError> {
        debug_assert!(records.iter().all(|r| r.at.section == Section::Drained));
        let range_id = self.shared.engine().range_id();
        let write = PartitionWrite { put: records, ..PartitionWrite::default() };
        self.shared.store.write(&self.shared.id, range_id, &write).await
    }

    /// Whether it still hands out tasks, was lost to another owner, or is closed.
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
            added.extend(
                self.command(|reply| WriteCommand::Append { specs: chunk, deliver: None, in_turn: false, reply })
                    .await??,
            );
        }
        Ok(added)
    }

    /// Writes dead letters of another partition (an old generation's, moved
    /// by the drain after a forced failover) as this partition's, each with
    /// a new id, in fenced writes like any (within a write's share for
    /// commands, each all-or-nothing); the ids, in order.
    pub async fn bury(&self, letters: Vec<RecordTask>) -> Result<Vec<i64>, PartitionError> {
        let share = self.shared.config.max_write_bytes / 2;
        let mut ids = Vec::with_capacity(letters.len());
        let mut letters = letters.into_iter().peekable();
        while letters.peek().is_some() {
            let mut bytes = 0;
            let mut chunk = Vec::new();
            while let Some(letter) = letters.next_if(|l| chunk.is_empty() || bytes + bury_bytes(l) <= share) {
                bytes += bury_bytes(&letter);
                chunk.push(letter);
            }
            ids.extend(self.command(|reply| WriteCommand::Bury { letters: chunk, reply }).await??);
        }
        Ok(ids)
    }

    /// Writes one task as a lease of the poller behind `deliver` (sync
    /// match): the task goes to it once durable, and comes back to the
    /// queue if its lease expires. `in_turn`: matched in its key's turn
    /// beside a backlog, so its key's counter advances.
    pub async fn append_to(
        &self,
        spec: TaskSpec,
        deliver: oneshot::Sender<Delivery>,
        in_turn: bool,
    ) -> Result<Added, PartitionError> {
        let added =
            self.command(|reply| WriteCommand::Append { specs: vec![spec], deliver: Some(deliver), in_turn, reply });
        Ok(added.await??[0])
    }

    /// A lease written for a task no poll took (held for the next poll,
    /// which did not come in time): it expires now, its attempt not
    /// counted, and the task goes back to the queue with the next write.
    pub fn hand_back(&self, lease_id: i64) {
        let now = self.shared.clock.now_ms();
        if self.with_engine(|e| e.lease_undelivered(lease_id, now)).is_some() {
            self.shared.wake_writer.notify_one();
        }
    }

    /// Cancels the task of `task_id` (see `crate::core::engine::cancel`):
    /// the row `dead_letter` of its dead letter deleted, or its mark
    /// written; a lease of it then runs out at once.
    pub async fn cancel(&self, task_id: i64, dead_letter: Option<(i64, i64)>) -> Result<(), CancelError> {
        let dead_letter = dead_letter.map(|key| RecordKey { section: Section::DeadLetters, key });
        let cancel = Cancel { task_id, dead_letter };
        self.command(|reply| WriteCommand::Cancel { cancel, reply }).await??;
        self.shared.wake_writer.notify_one();
        Ok(())
    }

    /// Purges the partition (see `crate::core::engine::cancel`): once this
    /// returns, every task in it is cancelled, and what it held is counted.
    pub async fn purge(&self) -> Result<Purged, PartitionError> {
        let purged = self.command(|reply| WriteCommand::Purge { reply }).await??;
        self.shared.wake_writer.notify_one();
        Ok(purged)
    }

    /// Records a worker's report on a lease.
    pub async fn finish(&self, finish: Finish) -> Result<Finished, FinishError> {
        self.command(|reply| WriteCommand::Finish { finish, reply }).await?
    }

    /// Puts back in the queue up to `limit` dead letters that `filter`
    /// chooses, oldest first, reading at most `max_read` letters, in as many
    /// writes as their bytes and the letters read need (each write reads at
    /// most `REDRIVE_READ_PER_WRITE`, so that adds and reports wait for no
    /// long scan).
    pub async fn redrive(
        &self,
        limit: usize,
        filter: &DeadLetterFilter,
        max_read: usize,
    ) -> Result<Redriven, PartitionError> {
        let filter = Arc::new(filter.clone());
        let mut total = Redriven::default();
        let (mut after, mut read) = (None, 0);
        loop {
            let taken = total.redriven + total.duplicates;
            if taken >= limit || read >= max_read {
                total.more = true;
                return Ok(total);
            }
            let step = RedriveStep {
                limit: limit - taken,
                filter: filter.clone(),
                after,
                read: (max_read - read).min(REDRIVE_READ_PER_WRITE),
            };
            let done = self.command(|reply| WriteCommand::Redrive { step, reply }).await??;
            total.redriven += done.redriven;
            total.duplicates += done.duplicates;
            total.passed_over += done.read - done.redriven - done.duplicates;
            read += done.read;
            after = done.through.or(after);
            if done.end || done.read == 0 {
                return Ok(total);
            }
        }
    }

    async fn command<T>(&self, command: impl FnOnce(oneshot::Sender<T>) -> WriteCommand) -> Result<T, PartitionError> {
        match self.state() {
            PartitionState::Active => {}
            PartitionState::Lost => return Err(self.shared.lost()),
            PartitionState::Closed => return Err(PartitionError::Closed(self.shared.id.to_string())),
        }
        let (reply, result) = oneshot::channel();
        let closed = || PartitionError::Closed(self.shared.id.to_string());
        // Queued at once while the channel has room: an awaited send spends
        // the task's cooperative budget, and the sends of a batch of adds
        // made in one task (AddTasks) that ran out of it went out in
        // another order than the batch's, so its tasks got ids, and a key
        // its tasks' order, out of the producer's order.
        match self.writes.try_send(command(reply)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(command)) => self.writes.send(command).await.map_err(|_| closed())?,
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(closed()),
        }
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

    /// Records that the lease of `lease_id` at `attempt` went to `worker_id`.
    pub fn worker_took(&self, lease_id: i64, attempt: u32, worker_id: &str) {
        self.with_engine(|e| e.worker_took(lease_id, attempt, Arc::from(worker_id)));
    }

    /// The dedup id of the task a held lease is on (an error when the lease
    /// is not held).
    pub fn leased_dedup_id(&self, lease_id: i64, attempt: u32) -> Result<Option<String>, FinishError> {
        match self.with_engine(|e| e.leased_dedup_id(lease_id, attempt)) {
            Some(result) => Ok(result?),
            None => Err(FinishError::Partition(self.shared.lost())),
        }
    }

    /// The task this partition would hand out next, if it may hand out any.
    pub fn peek(&self, now: UnixMillis) -> Option<Candidate> {
        self.with_engine(|e| e.peek(now)).flatten()
    }

    /// What this partition would hand out next ([`Next::Empty`] when it
    /// may hand out nothing).
    pub fn next(&self, now: UnixMillis) -> Next {
        self.with_engine(|e| e.next(now)).unwrap_or(Next::Empty)
    }

    /// Whether `spec`, added now, would be at the front of this partition's
    /// fair order (see [`crate::core::engine::PartitionEngine::at_front`]).
    pub fn at_front(&self, spec: &TaskSpec, now: UnixMillis) -> bool {
        self.with_engine(|e| e.at_front(spec, now)).unwrap_or(false)
    }

    /// Takes `candidate` (from [`Self::peek`]) and starts its lease: the task
    /// goes to `deliver` once its lease record is durable, never before. Gives
    /// `deliver` back when the candidate is gone (another poller took it, or
    /// the partition may no longer hand out tasks).
    pub fn dispatch(
        &self,
        candidate: Candidate,
        now: UnixMillis,
        deliver: oneshot::Sender<Delivery>,
    ) -> Result<(), oneshot::Sender<Delivery>> {
        if self.state() != PartitionState::Active {
            return Err(deliver);
        }
        let mut engine = self.shared.engine();
        let Some((task, _)) = engine.take(candidate, now) else {
            // Gone, or cancelled: the lease of a cancelled task is written
            // only to end it.
            drop(engine);
            self.shared.wake_writer.notify_one();
            return Err(deliver);
        };
        // Registered under the engine's lock, so that the writer that
        // writes the lease record finds the poller waiting for it.
        self.shared.await_leases(std::iter::once((task.level.id, deliver)));
        let wants_read = engine.wants_read(now);
        drop(engine);
        self.shared.wake_writer.notify_one();
        if wants_read {
            self.shared.wake_reader.notify_one();
        }
        Ok(())
    }

    /// Runs on with the task policy and weights of `config` and with
    /// `pauses` (see [`PartitionEngine::retune`]); the reader and writer
    /// look again at what they may do, and pollers waiting are offered what
    /// a resumed key has.
    pub fn retune(&self, config: &EngineConfig, pauses: Pauses) {
        if self.with_engine(|e| e.retune(config, pauses)).is_some() {
            self.shared.wake_reader.notify_one();
            self.shared.wake_writer.notify_one();
            (self.shared.on_ready)();
        }
    }

    /// A snapshot of the engine, if the partition may still hand out tasks.
    pub fn snapshot(&self, top_keys: usize) -> Option<PartitionSnapshot> {
        let now = self.shared.clock.now_ms();
        self.with_engine(|e| e.snapshot(top_keys, now))
    }

    /// Whether every ready task is younger than `max_age` (true when the
    /// partition may no longer hand out tasks).
    pub fn backlog_negligible(&self, now: UnixMillis, max_age: Duration) -> bool {
        self.with_engine(|e| e.backlog_negligible(now, max_age)).unwrap_or(true)
    }

    /// What the engine has counted, whatever the partition's state.
    pub fn counts(&self) -> TaskCounts {
        self.shared.engine().counts()
    }

    /// Runs `f` on the engine, if the partition may still hand out tasks.
    pub(super) fn with_engine<T>(&self, f: impl FnOnce(&mut PartitionEngine) -> T) -> Option<T> {
        if self.state() != PartitionState::Active {
            return None;
        }
        let mut engine = self.shared.engine();
        Some(f(&mut engine))
    }

    /// The current time by the partition's clock, in ms since the Unix epoch.
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

    /// Stops in order and hands the partition over to a node of `to_region`:
    /// no new writes; queued writes are finished, still naming this node;
    /// then, last, the ack levels are written with no owner (and `to_region`
    /// as the partition's region, if it is another), so that the next owner
    /// may take it at once; reader and keeper stop. Returns whether it was
    /// handed over (or found taken): false when that last write could not be
    /// made, and the store may still name this node its owner.
    pub async fn release(&self, to_region: &str) -> bool {
        if self.shared.state() == PartitionState::Lost {
            // Fenced, or dropped after a write of unknown outcome: nothing
            // of what it holds may be written.
            self.abandon().await;
            return false;
        }
        *self.shared.hand_over_to.lock().unwrap_or_else(|p| p.into_inner()) = Some(to_region.to_owned());
        self.shared.set_state(PartitionState::Closed);
        self.stop_tasks().await;
        self.shared.handed_over.load(std::sync::atomic::Ordering::Acquire)
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

async fn load_leases(store: &dyn PartitionStore, id: &PartitionId) -> Result<LeaseRecords, PartitionError> {
    const PAGE: usize = 1000;
    let (mut running, mut finished) = (Vec::new(), Vec::new());
    let mut after = (i64::MIN, i64::MIN);
    loop {
        let page = store.read_records(id, RecordRange::above(Section::Leases, after), PAGE).await?;
        let short = page.len() < PAGE;
        for record in page {
            after = record.at.key;
            let seq = record.at.key.1;
            match record.value {
                RecordValue::Task(lease) => running.push((lease.task, lease.at_unix_ms, seq)),
                RecordValue::FinishedLease { priority, level } => finished.push((seq, priority, level)),
                other => return Err(other.misplaced("a lease record").into()),
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
