//! Keys held at their concurrency limit for as long as it takes other keys
//! to be dispatched 20,000 times: their waiting tasks are parked, so the
//! ack level moves on, and the dispatched marks, the metadata and the lease
//! records stay bounded, with more held keys than the directory holds as
//! well; when a key may start again, its tasks come back one at a time, in
//! their order, and none is lost or started twice. Without parking
//! (`max_parked_keys = 0`), the same run grows the marks with every dispatch.
//! A key the operator paused is held the same way, with no lease of its own
//! running.

use std::time::Duration;

use super::model_store::ModelStore;
use super::{EngineConfig, Finish, Outcome, PartitionEngine, Pauses, PlanInput, TaskPolicy};
use crate::core::engine::rows::{PartitionMeta, RecordKey, Section};
use crate::model::{Priority, StoredTask, TaskSpec};

const PARK_AFTER: usize = 64;

struct Run {
    store: ModelStore,
    engine: PartitionEngine,
    now: i64,
}

impl Run {
    fn new(max_parked_keys: usize) -> Run {
        Run::with(TaskPolicy { key_concurrency: 1, ..TaskPolicy::default() }, max_parked_keys)
    }

    fn with(tasks: TaskPolicy, max_parked_keys: usize) -> Run {
        let config = EngineConfig {
            buffer_tasks: 256,
            reload_at: 32,
            gc_min_acks: 64,
            park_after: PARK_AFTER,
            max_parked_keys,
            tasks: TaskPolicy { lease_timeout: Duration::from_secs(3600), ..tasks },
            ..EngineConfig::default()
        };
        let store =
            ModelStore { meta: PartitionMeta { range_id: 1, ..PartitionMeta::default() }, ..ModelStore::default() };
        let engine = PartitionEngine::load(&store.meta, config, 0);
        Run { store, engine, now: 0 }
    }

    /// Answers the reads the engine asks for.
    fn read(&mut self) {
        for request in self.engine.read_requests(self.now) {
            let tasks = self.store.read(&request);
            self.engine.apply_read(request, tasks);
        }
        if let Some((after, limit)) = self.engine.delayed_read() {
            self.engine.apply_delayed_read(after, Vec::new(), limit);
        }
        for read in self.engine.parked_reads(16) {
            let after = RecordKey { section: Section::Parked, key: (read.slot, read.after) };
            let found = self
                .store
                .records
                .range(after..)
                .find(|(at, _)| **at > after)
                .filter(|(at, _)| at.section == Section::Parked && at.key.0 == read.slot)
                .map(|(at, value)| (at.key.1, value.clone().into_task("a parked record").unwrap().task));
            self.engine.apply_parked_read(&read, found);
        }
    }

    /// One write of `specs` and `finishes` and whatever is due, landed.
    fn write(&mut self, specs: &[TaskSpec], finishes: &[Finish]) {
        self.read();
        let input = PlanInput { specs, finishes, ..PlanInput::default() };
        let plan = self.engine.plan(input, self.now, &mut || 0.5).expect("ids left");
        self.store.land(&plan.write);
        self.engine.write_succeeded(plan, self.now);
    }

    /// What the keeper does: deletes of acknowledged tasks and old records.
    fn keep(&mut self) {
        let deletes = self.engine.gc_requests(self.now);
        self.store.collect_garbage(&deletes, &self.engine.record_deletes());
    }

    /// Takes every task that may start now, and writes their leases.
    fn dispatch(&mut self) -> Vec<StoredTask> {
        self.read();
        let mut taken = Vec::new();
        while let Some(candidate) = self.engine.peek(self.now) {
            let (task, _) = self.engine.take(candidate, self.now).expect("a candidate can be taken");
            taken.push(task);
        }
        self.write(&[], &[]);
        taken
    }

    fn complete(&mut self, tasks: &[StoredTask]) {
        let finishes: Vec<Finish> = tasks
            .iter()
            .map(|task| Finish { lease_id: task.level.id, attempt: task.attempt, outcome: Outcome::Complete })
            .collect();
        self.write(&[], &finishes);
    }

    fn lease_records(&self) -> usize {
        self.store.records.keys().filter(|at| at.section == Section::Leases).count()
    }
}

fn task(key: &str, n: usize) -> TaskSpec {
    TaskSpec::new(key, Priority::DEFAULT, format!("{key} {n}").into_bytes())
}

/// Runs 20,000 dispatches of 100 other keys beside `held` keys, each held
/// at its limit by its first task, with `waiting` more tasks behind it;
/// returns the run, the held tasks and the most dispatched marks above the
/// ack level seen.
fn held_keys_beside(max_parked_keys: usize, held: usize, waiting: usize) -> (Run, Vec<StoredTask>, u64) {
    let mut run = Run::new(max_parked_keys);
    let slow: Vec<TaskSpec> =
        (0..held).flat_map(|k| (0..=waiting).map(move |n| task(&format!("slow{k}"), n))).collect();
    run.write(&slow, &[]);
    let started = run.dispatch();
    assert_eq!(started.len(), held, "one task of each held key starts, the others wait for it");
    let most_marks = others_dispatched(&mut run);
    (run, started, most_marks)
}

/// 200 rounds of a task for each of 100 other keys, every one of them
/// started, completed and collected; the most dispatched marks above the
/// ack level seen.
fn others_dispatched(run: &mut Run) -> u64 {
    let mut most_marks = 0;
    for round in 0..200 {
        let others: Vec<TaskSpec> = (0..100).map(|k| task(&format!("k{k}"), round)).collect();
        run.write(&others, &[]);
        let done = run.dispatch();
        assert_eq!(done.len(), 100, "every other key starts its task at once");
        assert!(done.iter().all(|t| t.fairness_key.starts_with('k')), "only the other keys start");
        run.complete(&done);
        run.now += 100;
        run.keep();
        let marks = run.engine.snapshot(0, 0).subqueues[Priority::DEFAULT.index()].dispatched_above_ack;
        most_marks = most_marks.max(marks);
    }
    most_marks
}

#[test]
fn a_key_held_at_its_limit_does_not_hold_the_ack_level_back() {
    let (mut run, held, most_marks) = held_keys_beside(1000, 1, 50);
    let subqueue = &run.engine.snapshot(0, 0).subqueues[Priority::DEFAULT.index()];
    assert!(
        most_marks <= (PARK_AFTER + 200) as u64,
        "{most_marks} tasks dispatched above the ack level at most, over park_after {PARK_AFTER} plus a round"
    );
    assert_eq!((subqueue.parked_keys, subqueue.parked_tasks), (1, 50), "the held key's 50 waiting tasks are parked");
    let meta = run.engine.metadata().stored_bytes();
    assert!(meta < 16 * 1024, "the metadata is {meta} bytes after 20,000 dispatches");
    // The held lease's record is written again above newer ones (1,024),
    // and finished leases wait for the persisted ack level (1 s: 10 rounds).
    let leases = run.lease_records();
    assert!(leases <= 1024 + 1000 + 100, "{leases} lease records kept after 20,000 dispatches");

    // The held task completes: the key's tasks come back one at a time, in order.
    run.complete(&held);
    let mut order = Vec::new();
    for _ in 0..50 {
        let started = run.dispatch();
        assert_eq!(started.len(), 1, "one task of the key at a time");
        order.push(String::from_utf8(started[0].payload.clone()).unwrap());
        run.complete(&started);
    }
    let expected: Vec<String> = (1..51).map(|n| format!("slow0 {n}")).collect();
    assert_eq!(order, expected, "the key's tasks in the order they were added");
    let subqueue = &run.engine.snapshot(0, 0).subqueues[Priority::DEFAULT.index()];
    assert_eq!((subqueue.parked_keys, subqueue.parked_tasks), (0, 0), "the key left the directory");
    let parked = run.store.records.keys().filter(|at| at.section == Section::Parked).count();
    assert_eq!(parked, 0, "every parked record was deleted when its task started");
}

#[test]
fn without_parking_the_marks_above_the_ack_level_grow_with_every_dispatch() {
    let (_, _, most_marks) = held_keys_beside(0, 1, 50);
    assert!(most_marks >= 19_000, "{most_marks} marks: the held key's next task holds the ack level back");
}

/// Twelve keys held beside a directory of eight: the four past it are
/// parked in their level's shared slot, and the bounds hold as for one key.
#[test]
fn more_held_keys_than_the_directory_holds_do_not_hold_the_ack_level_back() {
    const DIRECTORY: usize = 8;
    let held_keys = DIRECTORY + 4;
    let (mut run, held, most_marks) = held_keys_beside(DIRECTORY, held_keys, 1);
    assert!(
        most_marks <= (PARK_AFTER + 200) as u64,
        "{most_marks} tasks dispatched above the ack level at most, over park_after {PARK_AFTER} plus a round"
    );
    let subqueue = &run.engine.snapshot(0, 0).subqueues[Priority::DEFAULT.index()];
    assert_eq!(subqueue.parked_keys, DIRECTORY as u64, "the directory is full");
    assert_eq!(subqueue.parked_tasks, held_keys as u64, "every held key's waiting task is parked");
    let slots = run.engine.metadata().subqueues[Priority::DEFAULT.index()].parked.len();
    assert_eq!(slots, DIRECTORY + 1, "the metadata names the directory's keys and the level's shared slot");
    let meta = run.engine.metadata().stored_bytes();
    assert!(meta < 16 * 1024, "the metadata is {meta} bytes after 20,000 dispatches");
    let leases = run.lease_records();
    assert!(leases <= 1024 + 1000 + 100, "{leases} lease records kept after 20,000 dispatches");

    // The held tasks complete: every waiting task starts, once.
    run.complete(&held);
    let mut started = Vec::new();
    for _ in 0..held_keys {
        let tasks = run.dispatch();
        started.extend(tasks.iter().map(|task| String::from_utf8(task.payload.clone()).unwrap()));
        run.complete(&tasks);
    }
    started.sort();
    let mut expected: Vec<String> = (0..held_keys).map(|k| format!("slow{k} 1")).collect();
    expected.sort();
    assert_eq!(started, expected, "each waiting task started once");
    let subqueue = &run.engine.snapshot(0, 0).subqueues[Priority::DEFAULT.index()];
    assert_eq!((subqueue.parked_keys, subqueue.parked_tasks), (0, 0), "nothing is parked any more");
    let parked = run.store.records.keys().filter(|at| at.section == Section::Parked).count();
    assert_eq!(parked, 0, "every parked record was deleted when its task started");
}

/// A paused key: not one of its tasks starts in 20,000 dispatches of the
/// other keys, its tasks are parked so that the ack level moves on, and on
/// resume every one of them starts, once, in the order they were added. A
/// pause of the whole queue starts nothing at all.
#[test]
fn a_paused_key_is_not_dispatched_while_the_others_are_and_comes_back_in_order_on_resume() {
    let mut run = Run::with(TaskPolicy::default(), 1000);
    let paused: Vec<TaskSpec> = (0..50).map(|n| task("", n)).collect();
    run.write(&paused, &[]);
    let config = run.engine.config().clone();
    run.engine.retune(&config, Pauses::new(false, [String::new()]));
    let most_marks = others_dispatched(&mut run);
    assert!(most_marks <= (PARK_AFTER + 200) as u64, "{most_marks} marks above the ack level at most");
    let subqueue = &run.engine.snapshot(0, 0).subqueues[Priority::DEFAULT.index()];
    assert_eq!((subqueue.parked_keys, subqueue.parked_tasks), (1, 50), "the paused key's tasks are parked");

    run.engine.retune(&config, Pauses::new(true, []));
    run.write(&[task("k0", 999)], &[]);
    assert!(run.dispatch().is_empty(), "with the whole queue paused nothing starts");

    run.engine.retune(&config, Pauses::default());
    let mut order = Vec::new();
    for _ in 0..60 {
        let started = run.dispatch();
        order.extend(started.iter().filter(|t| t.fairness_key.is_empty()).map(|t| t.payload.clone()));
        run.complete(&started);
        if order.len() == 50 {
            break;
        }
    }
    let expected: Vec<Vec<u8>> = (0..50).map(|n| format!(" {n}").into_bytes()).collect();
    assert_eq!(order, expected, "every task of the key, once, in the order it was added");
}

/// Settings changed on a running partition: a lease started after the
/// change runs for the new lease timeout, one started before keeps its
/// deadline; and the ordering the partition was opened with stays.
#[test]
fn a_retune_applies_to_what_starts_after_it() {
    let mut run = Run::with(TaskPolicy::default(), 1000);
    run.write(&[task("a", 0), task("a", 1)], &[]);
    run.read();
    let first = run.engine.peek(run.now).unwrap();
    let (_, before) = run.engine.take(first, run.now).unwrap();
    assert_eq!(before, 3_600_000);
    let mut config = run.engine.config().clone();
    config.tasks.lease_timeout = Duration::from_secs(5);
    config.tasks.ordering = crate::core::engine::DispatchOrder::Fifo;
    run.engine.retune(&config, Pauses::default());
    let second = run.engine.peek(run.now).unwrap();
    let (_, after) = run.engine.take(second, run.now).unwrap();
    assert_eq!(after, 5_000, "the new lease timeout");
    assert_eq!(run.engine.config().tasks.ordering, crate::core::engine::DispatchOrder::Fair, "ordering stays");
}

/// GetTask's view of a partition with a held key: the running task is
/// leased, each of the key's parked tasks (read back into memory or only in
/// its records) waits for the key's concurrency, a task of another key
/// that completed is found nowhere, and an id above every one handed out
/// is unused.
#[test]
fn each_task_is_found_where_it_stands_in_memory_or_in_the_places_the_engine_names() {
    use crate::core::engine::lookup::{TaskState, Waiting};
    let (run, held, _) = held_keys_beside(1000, 1, 50);
    let look_up = |task_id: i64| {
        run.engine.find_task(task_id, run.now).or_else(|| {
            let (task, place) = run.store.find(&run.engine.store_search(), task_id)?;
            Some(run.engine.found_in_store(task, place, run.now))
        })
    };
    let running = look_up(held[0].task_id).expect("the held task");
    assert!(matches!(running.state, TaskState::Leased { .. }), "{:?}", running.state);

    let parked: Vec<i64> = run
        .store
        .section(Section::Parked, (i64::MIN, i64::MIN))
        .into_iter()
        .map(|(_, value)| value.into_task("a parked record").unwrap().task.task_id)
        .collect();
    assert_eq!(parked.len(), 50, "the key's waiting tasks are parked");
    let in_memory = parked.iter().filter(|id| run.engine.find_task(**id, run.now).is_some()).count();
    assert!(in_memory > 0 && in_memory < 50, "{in_memory} of the parked tasks in memory: both paths are tried");
    for id in parked {
        let found = look_up(id).unwrap_or_else(|| panic!("parked task {id} not found"));
        assert_eq!(found.state, TaskState::Pending(Waiting::KeyConcurrency { running: 1, limit: 1 }), "task {id}");
        assert_eq!(found.task.fairness_key, "slow0");
    }

    let first_other = held[0].task_id + 51;
    assert!(look_up(first_other).is_none(), "a completed task is found nowhere");
    assert!(!run.engine.id_unused(first_other));
    let highest = run.store.tasks.values().map(|t| t.task_id).max().unwrap();
    assert!(run.engine.id_unused(highest + 1_000_000), "an id above every one handed out");
}
