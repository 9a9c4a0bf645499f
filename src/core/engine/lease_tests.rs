//! Property test of leases against a model store: tasks are dispatched,
//! completed, failed and expired while writes succeed, fail, or end
//! uncertain (landed or not), keepers collect, and owners crash (workers keep
//! their tokens). It checks that a task reaches a second worker only after
//! the first one's lease ran out, that a completed task never comes back,
//! and that every acknowledged task is completed in the end. The first two
//! are not checked for a task whose lease was ended by a write of unknown
//! outcome: the lease is then held again, and may expire and be retried a
//! second time (a known gap, written down in docs/operations.md).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use proptest::prelude::*;

use super::model_store::ModelStore;
use super::{
    Cancel, EngineConfig, Finish, Finished, LeaseError, Outcome, PartitionEngine, PlanInput, TaskCounts, TaskPolicy,
};
use crate::core::engine::rows::{RecordValue, Section, StoredRow};
use crate::model::{Priority, StoredTask, TaskSpec};

const LEASE_MS: i64 = 1_000;

/// What a new owner of `store`'s partition loads.
fn take_over(store: &mut ModelStore, config: &EngineConfig, now: i64) -> PartitionEngine {
    store.meta.range_id += 1;
    let (mut running, mut finished) = (Vec::new(), Vec::new());
    for (key, value) in store.section(Section::Leases, (i64::MIN, i64::MIN)) {
        match value {
            RecordValue::Task(lease) => running.push((lease.task, lease.at_unix_ms, key.1)),
            RecordValue::FinishedLease { priority, level } => finished.push((key.1, priority, level)),
            other => panic!("{other:?} in the lease section"),
        }
    }
    PartitionEngine::load_with_leases(&store.meta, running, finished, config.clone(), now)
}

/// A worker's hold on a task: the token's parts, and until when it is sure
/// nobody else gets the task.
#[derive(Clone, Debug)]
struct Hold {
    task_id: i64,
    lease_id: i64,
    attempt: u32,
    deadline: i64,
}

#[derive(Clone, Debug)]
enum Op {
    Add(u8),
    Poll,
    /// Report on the n-th hold: complete, or fail (retryable).
    Complete(usize),
    Fail(usize),
    /// Write what is due: 0 ok, 1 certainly failed, 2 uncertain and landed, 3 uncertain and lost.
    Write(u8),
    Tick(u16),
    Keep,
    Crash,
    /// Cancel the n-th task acknowledged and not ended.
    Cancel(usize),
    /// Purge the partition with the next write.
    Purge,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u8..4).prop_map(Op::Add),
        5 => Just(Op::Poll),
        3 => (0usize..8).prop_map(Op::Complete),
        1 => (0usize..8).prop_map(Op::Fail),
        6 => prop_oneof![8 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8)].prop_map(Op::Write),
        2 => (0u16..1500).prop_map(Op::Tick),
        1 => Just(Op::Keep),
        1 => Just(Op::Crash),
        1 => (0usize..16).prop_map(Op::Cancel),
        1 => Just(Op::Purge),
    ]
}

struct World {
    config: EngineConfig,
    store: ModelStore,
    engine: PartitionEngine,
    now: i64,
    specs: Vec<TaskSpec>,
    /// Tasks taken for a poll, waiting for their lease to be written.
    polled: HashSet<i64>,
    finishes: Vec<Finish>,
    holds: Vec<Hold>,
    acknowledged: HashSet<i64>,
    completed: HashSet<i64>,
    task_of_lease: HashMap<i64, i64>,
    /// Tasks a report of which went out in a write of unknown outcome.
    in_doubt: HashSet<i64>,
    redelivered: u32,
    cancels: Vec<Cancel>,
    /// Tasks whose cancel a durable write acknowledged...
    cancelled: HashSet<i64>,
    /// ...or a write of unknown outcome carried: they may end uncompleted.
    maybe_cancelled: HashSet<i64>,
    /// Whether the next write purges the partition.
    purge: bool,
}

impl World {
    fn new() -> World {
        World::with_config(World::config())
    }

    /// One task per key at a time, and keys that hold the ack level back
    /// parked after two dispatches above it, two keys at most.
    fn with_held_keys() -> World {
        World::parking(1, 2)
    }

    /// Two tasks per key at a time, and held keys parked past a directory
    /// of one: the rest go to the shared slot, whose keys stay dispatchable
    /// from the buffer.
    fn with_shared_slot() -> World {
        World::parking(2, 1)
    }

    /// `key_concurrency` tasks per key at a time, and keys that hold the ack
    /// level back parked after two dispatches above it, `max_parked_keys`
    /// in the directory.
    fn parking(key_concurrency: u32, max_parked_keys: usize) -> World {
        let config = World::config();
        World::with_config(EngineConfig {
            park_after: 2,
            max_parked_keys,
            tasks: TaskPolicy { key_concurrency, ..config.tasks.clone() },
            ..config
        })
    }

    fn config() -> EngineConfig {
        EngineConfig {
            buffer_tasks: 4,
            reload_at: 1,
            gc_min_acks: 2,
            move_lease_after: 4,
            tasks: TaskPolicy {
                lease_timeout: Duration::from_millis(LEASE_MS as u64),
                max_attempts: 1000,
                backoff_initial: Duration::from_millis(10),
                backoff_max: Duration::from_millis(100),
                backoff_jitter: 0.5,
                ..TaskPolicy::default()
            },
            ..EngineConfig::default()
        }
    }

    fn with_config(config: EngineConfig) -> World {
        let mut store = ModelStore::default();
        let engine = take_over(&mut store, &config, 0);
        World {
            config,
            store,
            engine,
            now: 0,
            specs: Vec::new(),
            polled: HashSet::new(),
            finishes: Vec::new(),
            holds: Vec::new(),
            acknowledged: HashSet::new(),
            completed: HashSet::new(),
            task_of_lease: HashMap::new(),
            in_doubt: HashSet::new(),
            redelivered: 0,
            cancels: Vec::new(),
            cancelled: HashSet::new(),
            maybe_cancelled: HashSet::new(),
            purge: false,
        }
    }

    /// Reads what the engine asks for, at once.
    fn read(&mut self) {
        for request in self.engine.read_requests(self.now) {
            let tasks = self.store.read(&request);
            self.engine.apply_read(request, tasks);
        }
        if let Some((after, limit)) = self.engine.delayed_read() {
            let records: Vec<_> = self
                .store
                .section(Section::Delayed, after)
                .into_iter()
                .take(limit)
                .map(|(key, value)| (key, value.into_task("a record").unwrap().task))
                .collect();
            self.engine.apply_delayed_read(after, records, limit);
        }
        for read in self.engine.parked_reads(16) {
            let found = self
                .store
                .section(Section::Parked, (read.slot, read.after))
                .into_iter()
                .find(|(key, _)| key.0 == read.slot)
                .map(|(key, value)| (key.1, value.into_task("a record").unwrap().task));
            self.engine.apply_parked_read(&read, found);
        }
    }

    fn write(&mut self, outcome: u8) -> Result<(), TestCaseError> {
        self.read();
        let specs = std::mem::take(&mut self.specs);
        let finishes = std::mem::take(&mut self.finishes);
        let cancels = std::mem::take(&mut self.cancels);
        let purge = std::mem::take(&mut self.purge);
        let input = PlanInput { specs: &specs, finishes: &finishes, cancels: &cancels, purge, ..PlanInput::default() };
        let mut unit = || 0.5;
        let plan = self.engine.plan(input, self.now, &mut unit).expect("ids are plenty");
        let delivered: Vec<(StoredTask, i64)> = plan
            .leases
            .iter()
            .filter(|(id, _, _)| self.polled.contains(id))
            .map(|(_, task, deadline)| (task.clone(), *deadline))
            .collect();
        let added: Vec<i64> = plan.added.iter().map(|a| a.task_id()).collect();
        let finished: Vec<_> = finishes.iter().zip(plan.finished.clone()).collect();
        let mut cancelled: Vec<i64> =
            cancels.iter().zip(&plan.cancels).filter(|(_, done)| done.is_ok()).map(|(c, _)| c.task_id).collect();
        if let Some(below) = plan.purging {
            // Every task added before the purge: the ended ones stay ended.
            cancelled.extend(self.acknowledged.iter().filter(|id| **id < below && !self.completed.contains(id)));
        }
        if outcome == 0 || outcome == 2 {
            self.store.land(&plan.write);
        }
        if outcome == 0 {
            self.engine.write_succeeded(plan, self.now);
            self.acknowledged.extend(added);
            for (finish, result) in finished {
                if let Ok(Finished::Completed) = result {
                    self.completed.insert(self.task_of_lease[&finish.lease_id]);
                }
                if matches!(result, Ok(_) | Err(LeaseError::Stale)) {
                    // Done, or refused as stale: the worker lets go.
                    self.holds.retain(|h| h.lease_id != finish.lease_id || h.attempt != finish.attempt);
                }
            }
            self.cancelled.extend(cancelled);
            for (task, deadline) in delivered {
                self.polled.remove(&task.level.id);
                // As the writer does: a task cancelled by this write reaches no worker.
                if !self.engine.is_cancelled(task.task_id) {
                    self.deliver(task, deadline)?;
                }
            }
        } else {
            if outcome != 1 {
                self.maybe_cancelled.extend(cancelled);
                // A lease ended (reported, or expired) in a write of unknown
                // outcome is held again; if it expires, the task runs once more.
                self.in_doubt.extend(plan.ended_tasks());
                // A task parked by such a write may be parked twice.
                self.in_doubt.extend(plan.parked_tasks());
            }
            if outcome == 2 {
                for (finish, result) in &finished {
                    if let Ok(Finished::Completed) = result {
                        self.completed.insert(self.task_of_lease[&finish.lease_id]);
                    }
                }
            }
            self.engine.write_failed(plan, outcome != 1, self.now);
            for (task, _) in delivered {
                self.polled.remove(&task.level.id);
            }
        }
        Ok(())
    }

    fn deliver(&mut self, task: StoredTask, deadline: i64) -> Result<(), TestCaseError> {
        // The known gap below holds for a cancelled task too: a write of
        // unknown outcome may leave a second copy of it (parked twice, or a
        // lease held again) that outlives the end of the first.
        prop_assert!(
            !self.cancelled.contains(&task.task_id) || self.in_doubt.contains(&task.task_id),
            "task {} delivered after it was cancelled",
            task.task_id
        );
        prop_assert!(
            !self.completed.contains(&task.task_id) || self.in_doubt.contains(&task.task_id),
            "task {} delivered after it was completed",
            task.task_id
        );
        // Known gap: a lease ended in a write of unknown outcome is held
        // again and may expire again, writing a second retry of the task
        // (see docs/operations.md, "Leases, retries and limits").
        let in_doubt = self.in_doubt.contains(&task.task_id);
        for other in self.holds.iter().filter(|h| h.task_id == task.task_id && !in_doubt) {
            prop_assert!(
                other.deadline <= self.now,
                "task {} delivered again at {} while attempt {} holds it until {}",
                task.task_id,
                self.now,
                other.attempt,
                other.deadline
            );
            self.redelivered += 1;
        }
        self.task_of_lease.insert(task.level.id, task.task_id);
        self.holds.push(Hold { task_id: task.task_id, lease_id: task.level.id, attempt: task.attempt, deadline });
        Ok(())
    }

    fn apply(&mut self, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Add(n) => self.specs.extend((0..n).map(|i| TaskSpec::new(format!("k{i}"), Priority::DEFAULT, vec![]))),
            Op::Poll => {
                self.read();
                if let Some(candidate) = self.engine.peek(self.now)
                    && let Some((task, _)) = self.engine.take(candidate, self.now)
                {
                    self.polled.insert(task.level.id);
                }
            }
            Op::Complete(i) | Op::Fail(i) if !self.holds.is_empty() => {
                let hold = self.holds[i % self.holds.len()].clone();
                let outcome = match op {
                    Op::Complete(_) => Outcome::Complete,
                    _ => Outcome::Fail { retryable: true, message: "x".into(), retry_after: None },
                };
                if hold.deadline <= self.now {
                    // A report after the deadline: an expiry may have been
                    // written (perhaps with an unknown outcome), so the task
                    // may run again.
                    self.in_doubt.insert(hold.task_id);
                }
                if matches!(outcome, Outcome::Fail { .. }) {
                    // A failing worker lets go, whatever the write does.
                    self.holds.retain(|h| h.lease_id != hold.lease_id || h.attempt != hold.attempt);
                }
                self.finishes.push(Finish { lease_id: hold.lease_id, attempt: hold.attempt, outcome });
            }
            Op::Complete(_) | Op::Fail(_) => {}
            Op::Write(outcome) => self.write(outcome)?,
            Op::Tick(ms) => self.now += i64::from(ms),
            Op::Keep => {
                let deletes = self.engine.gc_requests(self.now);
                if let Some(meta) = self.engine.metadata_due(self.now) {
                    self.store.meta = meta.clone();
                    self.engine.metadata_persisted(&meta, self.now);
                }
                self.store.collect_garbage(&deletes, &self.engine.record_deletes());
            }
            Op::Cancel(i) => {
                // As CancelTask does after its lookup: a task that has not ended.
                let ended: HashSet<i64> =
                    self.completed.iter().chain(&self.cancelled).chain(&self.maybe_cancelled).copied().collect();
                let mut open: Vec<i64> = self.acknowledged.difference(&ended).copied().collect();
                open.sort_unstable();
                if !open.is_empty() {
                    self.cancels.push(Cancel { task_id: open[i % open.len()], dead_letter: None });
                }
            }
            Op::Purge => self.purge = true,
            Op::Crash => {
                self.purge = false;
                self.specs.clear();
                self.finishes.clear();
                self.cancels.clear();
                self.polled.clear();
                self.engine = take_over(&mut self.store, &self.config, self.now);
                // The new owner gives every lease it loads a full timeout.
                for hold in &mut self.holds {
                    if let Some(deadline) = self.engine.lease_deadline(hold.lease_id, hold.attempt) {
                        prop_assert!(deadline >= hold.deadline, "a takeover shortened a lease");
                        hold.deadline = deadline;
                    }
                }
            }
        }
        Ok(())
    }

    /// Tasks cancelled whose marks are still kept, but for those in doubt.
    fn marked(&self) -> impl Iterator<Item = &i64> {
        let marks = self.engine.metadata().cancelled;
        self.cancelled.iter().filter(move |id| marks.contains(*id) && !self.in_doubt.contains(*id))
    }

    /// Lets every write succeed and every worker complete until nothing is left.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..10_000 {
            self.write(0)?;
            for i in 0..self.holds.len() {
                self.apply(Op::Complete(i))?;
            }
            self.write(0)?;
            self.apply(Op::Poll)?;
            self.write(0)?;
            // Every task cancelled has come up and ended: its mark is gone
            // (but for the known gap: a mark of a task ended by a write of
            // unknown outcome may be written again, and outlive it).
            let ended: HashSet<i64> =
                self.completed.iter().chain(&self.cancelled).chain(&self.maybe_cancelled).copied().collect();
            let marked = self.marked().next().is_some();
            if self.acknowledged.is_subset(&ended) && self.holds.is_empty() && !marked {
                return Ok(());
            }
            self.now += 200;
        }
        let ended: HashSet<i64> =
            self.completed.iter().chain(&self.cancelled).chain(&self.maybe_cancelled).copied().collect();
        let missing: Vec<_> = self.acknowledged.difference(&ended).collect();
        let marked: Vec<_> = self.marked().collect();
        Err(TestCaseError::fail(format!("never completed: {missing:?}; cancelled and never reached: {marked:?}")))
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn leases_survive_failures_and_crashes(ops in prop::collection::vec(op(), 1..120)) {
        let mut world = World::new();
        for op in ops {
            world.apply(op)?;
        }
        world.drain()?;
    }

    #[test]
    fn held_keys_are_parked_without_loss_or_early_redelivery(ops in prop::collection::vec(op(), 1..120)) {
        let mut world = World::with_held_keys();
        for op in ops {
            world.apply(op)?;
        }
        world.drain()?;
    }

    #[test]
    fn keys_parked_in_the_shared_slot_are_leased_once(ops in prop::collection::vec(op(), 1..120)) {
        let mut world = World::with_shared_slot();
        for op in ops {
            world.apply(op)?;
        }
        world.drain()?;
    }
}

/// The engine counts what durable writes did, and nothing else: tasks
/// taken are dispatched once their leases are written; a write that failed
/// counts nothing; a retry that becomes ready is not a new task.
#[test]
fn counts_follow_durable_writes() {
    let mut world = World::new();
    let counts = |world: &World| world.engine.counts();
    world.apply(Op::Add(3)).unwrap();
    world.apply(Op::Write(1)).unwrap();
    assert_eq!(counts(&world), TaskCounts::default(), "the write failed: nothing was added");
    world.apply(Op::Add(3)).unwrap();
    world.apply(Op::Write(0)).unwrap();
    for _ in 0..3 {
        world.apply(Op::Poll).unwrap();
    }
    assert_eq!(counts(&world), TaskCounts { added: 3, ..TaskCounts::default() }, "taken, not leased yet");
    world.apply(Op::Write(0)).unwrap();
    assert_eq!(counts(&world).dispatched, 3);
    world.apply(Op::Complete(0)).unwrap();
    world.apply(Op::Fail(1)).unwrap();
    world.apply(Op::Write(0)).unwrap();
    assert_eq!(
        counts(&world),
        TaskCounts { added: 3, dispatched: 3, completed: 1, failed: 1, expired: 0 },
        "one completed, one failed (retried after its backoff)"
    );
    world.apply(Op::Tick(1500)).unwrap();
    world.apply(Op::Write(0)).unwrap();
    assert_eq!(
        counts(&world),
        TaskCounts { added: 3, dispatched: 3, completed: 1, failed: 1, expired: 1 },
        "the last lease ran out; the failed task is ready again, not added again"
    );
}

/// A finish sent again after a write of unknown outcome rewrites the same
/// finished-lease record, value for value: the probe that tells whether the
/// second write landed must be a row of its own, or the first write's row
/// answers for it.
#[test]
fn a_finish_sent_again_is_probed_by_a_row_of_its_own() {
    let mut world = World::new();
    world.apply(Op::Add(1)).unwrap();
    world.apply(Op::Write(0)).unwrap();
    world.apply(Op::Poll).unwrap();
    world.apply(Op::Write(0)).unwrap();
    world.apply(Op::Complete(0)).unwrap();
    let finishes = std::mem::take(&mut world.finishes);
    let plan = |world: &mut World| {
        let input = PlanInput { finishes: &finishes, ..PlanInput::default() };
        world.engine.plan(input, world.now, &mut || 0.5).expect("ids are plenty")
    };
    let first = plan(&mut world);
    let (first_row, first_value) = first.probe().expect("a finish is probed");
    world.store.land(&first.write);
    world.engine.write_failed(first, true, world.now);
    let second = plan(&mut world);
    let (second_row, second_value) = second.probe().expect("a finish is probed");
    let crate::core::engine::rows::RowRef::Record(at) = second_row else { panic!("a record probe") };
    assert_ne!(
        world.store.records.get(&at).cloned().map(StoredRow::Record),
        Some(second_value),
        "the first write's row ({first_row:?}, {first_value:?}) answers for the second"
    );
}

/// A write of unknown outcome that parks a key's tasks and purges the
/// partition leaves a parked task twice in memory: ready in the buffer (the
/// write may have failed) and read back from its parked record (it landed).
/// A poll hands out the parked copy; the purge's sweep must then leave the
/// buffered copy alone rather than start a second lease of the same task,
/// and take it once that lease has ended: without a poll, no task the purge
/// cancelled stays in the buffer (a parked one goes when its key is
/// dispatched, see `crate::core::engine::cancel`).
#[test]
fn a_purge_sweep_passes_over_a_task_whose_parked_copy_is_being_leased() {
    use Op::*;
    let mut world = World::with_held_keys();
    let ops = [
        Add(3),
        Write(0),
        Poll,
        Add(1),
        Poll,
        Write(0),
        Add(3),
        Add(3),
        Tick(1000),
        Write(0),
        Purge,
        Write(0),
        Write(0),
        Add(2),
        Write(0),
        Tick(10),
        Write(0),
        Purge,
        Write(2),
        Poll,
        Add(1),
    ];
    for op in ops {
        world.apply(op).unwrap();
    }
    for _ in 0..5 {
        world.apply(Write(0)).unwrap();
        world.apply(Tick(10)).unwrap();
    }
    let below = world.engine.purged_below();
    let left: Vec<i64> = (1..below).filter(|id| world.engine.is_buffered(*id)).collect();
    assert!(left.is_empty(), "tasks the purge cancelled still in the buffer: {left:?}");
    world.drain().unwrap();
}
