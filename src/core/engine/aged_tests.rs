//! Tasks past `max_wait`: moved to the front of their subqueue whatever
//! their pass, oldest first, once each, across writes of unknown outcome
//! and a new owner.

use std::collections::BTreeSet;
use std::time::Duration;

use super::tests::{Backlog, read_before_planning, spec};
use super::{AppendPlan, DispatchOrder, EngineConfig, PartitionEngine, PlanInput, TaskPolicy};
use crate::core::engine::rows::Section;
use crate::model::{Priority, StoredTask, TaskSpec};

const MAX_WAIT_MS: i64 = 60_000;

fn config(buffer_tasks: usize, ordering: DispatchOrder) -> EngineConfig {
    EngineConfig {
        buffer_tasks,
        reload_at: buffer_tasks / 4,
        tasks: TaskPolicy { max_wait: Duration::from_millis(MAX_WAIT_MS as u64), ordering, ..TaskPolicy::default() },
        ..EngineConfig::default()
    }
}

/// A task of a key of weight 0.01: each of its tasks is a hundred heavy
/// tasks' passes behind the one before.
fn light() -> TaskSpec {
    TaskSpec { fairness_weight: Some(0.01), ..spec("light", Priority::DEFAULT) }
}

/// The shell's loop around the engine, with the reads of waiting records
/// and of the rows of due tasks that the partition's writer makes before
/// each plan.
struct Run {
    backlog: Backlog,
}

impl Run {
    fn new(config: EngineConfig) -> Self {
        Run { backlog: Backlog::new(config) }
    }

    /// Reads what planning needs, as the partition's writer does.
    fn prepare(&mut self) {
        read_before_planning(&mut self.backlog.engine, &self.backlog.store, self.backlog.now);
    }

    /// Plans the write of what is due, after the reads it needs.
    fn plan_due(&mut self) -> AppendPlan {
        self.prepare();
        let now = self.backlog.now;
        self.backlog.engine.plan(PlanInput::default(), now, &mut || 0.5).unwrap()
    }

    /// Writes what is due until nothing is: every move a write can hold.
    fn write_due(&mut self) {
        for _ in 0..100 {
            let plan = self.plan_due();
            let moved = !plan.moved.is_empty();
            self.backlog.store.land(&plan.write);
            self.backlog.engine.write_succeeded(plan, self.backlog.now);
            if !moved && !self.backlog.engine.write_due(self.backlog.now) {
                return;
            }
        }
        panic!("still due after 100 writes");
    }

    fn dispatch(&mut self) -> Option<StoredTask> {
        self.backlog.dispatch()
    }

    fn drain(&mut self) -> Vec<StoredTask> {
        std::iter::from_fn(|| self.dispatch()).collect()
    }

    /// The metadata written and made durable, as the keeper does.
    fn sync_metadata(&mut self) {
        let meta = self.backlog.engine.metadata();
        self.backlog.store.meta = meta.clone();
        self.backlog.engine.metadata_persisted(&meta, self.backlog.now);
        let deletes = self.backlog.engine.record_deletes();
        self.backlog.store.collect_garbage(&[], &deletes);
    }

    /// A new owner loads the partition from the store.
    fn new_owner(&mut self) {
        let config = self.backlog.engine.config().clone();
        let taken = self.backlog.store.take_ownership();
        self.backlog.engine = PartitionEngine::load(&taken, config, self.backlog.now);
    }
}

/// Five light tasks, then a backlog of 400 heavy tasks added after them:
/// the returned ids of the light ones in order of arrival.
fn light_behind_heavy(run: &mut Run) -> Vec<i64> {
    run.backlog.add(&vec![light(); 5]);
    let lights: Vec<i64> = run.backlog.store.tasks.values().map(|t| t.task_id).collect();
    for batch in 0..4 {
        run.backlog.now = 1 + batch;
        run.backlog.add(&vec![spec("heavy", Priority::DEFAULT); 100]);
    }
    lights
}

/// The light key's tasks past `max_wait` go before the heavy backlog added
/// after them, in their order of arrival; every task goes once. With a
/// small buffer their rows are above the read level and read by their
/// waiting records; with a large one they are in the buffer.
#[test]
fn tasks_past_max_wait_go_to_the_front_oldest_first() {
    for buffer_tasks in [16, 1_000] {
        let mut run = Run::new(config(buffer_tasks, DispatchOrder::Fair));
        let lights = light_behind_heavy(&mut run);
        let first = run.dispatch().unwrap();
        assert_eq!(first.task_id, lights[0], "the light key's first task is at the ack level's pass");
        let mut heavy = Vec::new();
        for n in 0..20 {
            heavy.push(run.dispatch().unwrap());
            assert_eq!(heavy[n].fairness_key, "heavy", "dispatch {n} before max_wait");
        }
        run.backlog.now = MAX_WAIT_MS;
        run.write_due();
        let next: Vec<i64> = (0..4).map(|_| run.dispatch().unwrap().task_id).collect();
        assert_eq!(next, lights[1..], "buffer of {buffer_tasks}: past max_wait, oldest first");
        let rest = run.drain();
        assert_eq!(rest.len(), 380, "buffer of {buffer_tasks}");
        assert!(rest.iter().all(|t| t.fairness_key == "heavy"));
        let ids: BTreeSet<i64> =
            rest.iter().chain(&heavy).map(|t| t.task_id).chain(next).chain([first.task_id]).collect();
        assert_eq!(ids.len(), 405, "each task once");
    }
}

/// Before `max_wait` nothing moves; a queue without one, or ordered FIFO,
/// writes no waiting record.
#[test]
fn nothing_moves_before_max_wait_nor_without_one() {
    let mut run = Run::new(config(16, DispatchOrder::Fair));
    light_behind_heavy(&mut run);
    run.backlog.now = MAX_WAIT_MS - 1;
    let plan = run.plan_due();
    assert!(plan.moved.is_empty() && plan.write.delete_tasks.is_empty(), "{:?}", plan.moved);
    run.backlog.engine.write_failed(plan, false, MAX_WAIT_MS - 1);
    let waiting = run.backlog.store.section(Section::Waiting, (i64::MIN, i64::MIN)).len();
    assert_eq!(waiting, 405, "a waiting record per task row");

    for config in [
        EngineConfig { tasks: TaskPolicy::default(), ..config(16, DispatchOrder::Fair) },
        config(16, DispatchOrder::Fifo),
        config(16, DispatchOrder::Deadline),
    ] {
        let mut run = Run::new(config);
        light_behind_heavy(&mut run);
        run.backlog.now = 10 * MAX_WAIT_MS;
        run.write_due();
        assert!(run.backlog.store.section(Section::Waiting, (i64::MIN, i64::MIN)).is_empty());
    }
}

/// More due tasks than one write moves: they go over several writes,
/// still oldest first. Nothing was dispatched, so the ack level's pass,
/// where they go, is that of the heavy key's first task, which stays
/// before them (a key has at most one task at a pass).
#[test]
fn many_due_tasks_move_over_several_writes_in_order() {
    let mut run = Run::new(config(16, DispatchOrder::Fair));
    run.backlog.add(&vec![light(); 150]);
    let lights: Vec<i64> = run.backlog.store.tasks.values().map(|t| t.task_id).collect();
    run.backlog.now = 1;
    run.backlog.add(&vec![spec("heavy", Priority::DEFAULT); 200]);
    run.backlog.now = MAX_WAIT_MS;
    let first = run.plan_due();
    assert_eq!(first.moved.len(), 16, "the rows of one round of reads");
    run.backlog.store.land(&first.write);
    run.backlog.engine.write_succeeded(first, MAX_WAIT_MS);
    run.write_due();
    let heavy_first = run.dispatch().unwrap();
    assert_eq!((heavy_first.fairness_key.as_str(), heavy_first.level.pass), ("heavy", 0));
    let order: Vec<i64> = (0..150).map(|_| run.dispatch().unwrap().task_id).collect();
    assert_eq!(order, lights, "the light key's tasks, in order, before any other heavy one");
}

/// Dispatches the first two tasks: the light key's and the heavy key's
/// first, both at the first pass (so that no task is left at the pass the
/// moves go to, where a key's task may go before them).
fn dispatch_the_first_pass(run: &mut Run, lights: &[i64]) -> Vec<i64> {
    let first: Vec<StoredTask> = (0..2).map(|_| run.dispatch().unwrap()).collect();
    assert_eq!(first[0].task_id, lights[0]);
    assert_eq!((first[1].fairness_key.as_str(), first[1].level.pass), ("heavy", 0));
    first.iter().map(|t| t.task_id).collect()
}

/// A move whose write's outcome is unknown, landed or not: each task still
/// goes once, and the light ones first.
#[test]
fn a_move_of_unknown_outcome_neither_loses_nor_repeats_a_task() {
    for landed in [true, false] {
        for buffer_tasks in [16, 1_000] {
            let mut run = Run::new(config(buffer_tasks, DispatchOrder::Fair));
            let lights = light_behind_heavy(&mut run);
            let first = dispatch_the_first_pass(&mut run, &lights);
            run.backlog.now = MAX_WAIT_MS;
            let plan = run.plan_due();
            assert!(!plan.moved.is_empty() || buffer_tasks == 16, "buffered tasks move at once");
            // With a small buffer the first plan reads the rows; the next moves them.
            let plan = if plan.moved.is_empty() {
                run.backlog.engine.write_succeeded(plan, MAX_WAIT_MS);
                run.plan_due()
            } else {
                plan
            };
            assert!(!plan.moved.is_empty(), "buffer of {buffer_tasks}");
            if landed {
                run.backlog.store.land(&plan.write);
            }
            run.backlog.engine.write_failed(plan, true, MAX_WAIT_MS);
            run.write_due();
            let all = run.drain();
            let ids: Vec<i64> = first.iter().copied().chain(all.iter().map(|t| t.task_id)).collect();
            assert_eq!(ids[2..6], lights[1..], "landed {landed}, buffer of {buffer_tasks}");
            assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), 405, "each once: landed {landed}");
            assert_eq!(ids.len(), 405);
        }
    }
}

/// After the moves a new owner dispatches the moved tasks first, does not
/// move them again, and reads no waiting record below the floor, whose
/// records are deleted.
#[test]
fn a_new_owner_keeps_the_moves_and_the_floor() {
    let mut run = Run::new(config(16, DispatchOrder::Fair));
    let lights = light_behind_heavy(&mut run);
    dispatch_the_first_pass(&mut run, &lights);
    run.backlog.now = MAX_WAIT_MS;
    run.write_due();
    run.sync_metadata();
    let floor = run.backlog.store.meta.waiting_through;
    assert!(floor >= (0, lights[4]), "the floor passed the light tasks' records: {floor:?}");
    let below = run.backlog.store.section(Section::Waiting, (i64::MIN, i64::MIN));
    assert!(below.iter().all(|(key, _)| *key > floor), "records at or below the floor are deleted");

    run.new_owner();
    run.write_due();
    let next: Vec<i64> = (0..4).map(|_| run.dispatch().unwrap().task_id).collect();
    assert_eq!(next, lights[1..], "the moved rows are at the front for the new owner too");
    let rest = run.drain();
    assert_eq!(rest.len(), 399, "no task twice, none lost");
}
