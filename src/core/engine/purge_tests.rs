//! Purges: every task in the partition when the purge lands ends, never
//! delivered (waiting ones swept without a poll, a held one's lease run
//! out, a delayed one when due); tasks added after it, and dead letters put
//! back after it, are dispatched; a new owner honours it.

use std::time::Duration;

use super::budget_tests::ready_engine;
use super::{EngineConfig, LeaseError, MAX_MAINTENANCE_PER_WRITE, PartitionEngine, PlanInput, Purged, TaskPolicy};
use crate::core::engine::rows::{PartitionMeta, RecordKey, Section};
use crate::model::{Priority, StoredTask, TaskSpec};

const NOW: i64 = 1_000;

fn spec(key: &str) -> TaskSpec {
    TaskSpec::new(key, Priority::DEFAULT, key.as_bytes().to_vec())
}

/// Adds `specs` in one write; their ids.
fn add(engine: &mut PartitionEngine, specs: &[TaskSpec]) -> Vec<i64> {
    let plan = engine.plan(PlanInput { specs, ..PlanInput::default() }, NOW, &mut || 0.5).expect("ids left");
    let ids = plan.added.iter().map(|added| added.task_id()).collect();
    engine.write_succeeded(plan, NOW);
    ids
}

/// Lands one write, a purge if `purge`, and what is due at `now`; the
/// metadata it wrote.
fn write(engine: &mut PartitionEngine, purge: bool, now: i64) -> Option<PartitionMeta> {
    let plan = engine.plan(PlanInput { purge, ..PlanInput::default() }, now, &mut || 0.5).expect("ids left");
    let meta = plan.write.metadata.clone();
    engine.write_succeeded(plan, now);
    meta
}

/// Takes the next task and lands its lease.
fn take(engine: &mut PartitionEngine, now: i64) -> Option<StoredTask> {
    let candidate = engine.peek(now)?;
    let taken = engine.take(candidate, now).map(|(task, _)| task);
    write(engine, false, now);
    taken
}

/// Lands writes of what is due until the writer has none left (at most 100).
fn settle(engine: &mut PartitionEngine, now: i64) -> usize {
    let mut writes = 0;
    while engine.write_due(now) && writes < 100 {
        write(engine, false, now);
        writes += 1;
    }
    writes
}

#[test]
fn a_purge_ends_every_task_it_found_without_a_poll_and_keeps_those_added_after_it() {
    let config = EngineConfig { buffer_tasks: 2_000, ..EngineConfig::default() };
    let mut engine = ready_engine(config);
    let count = 3 * MAX_MAINTENANCE_PER_WRITE + 7;
    let specs: Vec<TaskSpec> = (0..count).map(|n| spec(&format!("k{}", n % 5))).collect();
    let before = add(&mut engine, &specs);
    let held = take(&mut engine, NOW).expect("ready");
    let delayed = add(&mut engine, &[TaskSpec { delay: Duration::from_secs(60), ..spec("later") }])[0];

    let meta = write(&mut engine, true, NOW).expect("a purge writes the metadata");
    assert!(meta.purged_below > delayed, "every id handed out is below it");
    assert_eq!(engine.heartbeat(held.level.id, held.attempt, NOW), Err(LeaseError::Cancelled));
    let after = add(&mut engine, &[spec("k0"), spec("new")]);
    assert!(after.iter().all(|id| *id >= meta.purged_below), "{after:?}");
    for id in before.iter().chain([&delayed]) {
        assert!(engine.find_task(*id, NOW).is_none_or(|found| found.cancelled), "task {id} not cancelled");
    }

    // No worker polls: the writer sweeps the buffer a few hundred a write
    // (the add above made one).
    let writes = settle(&mut engine, NOW);
    assert!(writes >= 3, "{count} tasks went in {} writes of at most {MAX_MAINTENANCE_PER_WRITE}", writes + 1);
    let left: Vec<_> = before.iter().filter_map(|id| engine.find_task(*id, NOW)).collect();
    assert!(left.is_empty(), "every waiting task ended; {} left, first {:?}", left.len(), left.first());
    let counts = engine.counts();
    assert_eq!((counts.completed, counts.dispatched), (count as u64, 1), "{counts:?}");
    let snapshot = engine.snapshot(0, NOW);
    assert_eq!(snapshot.subqueues.iter().map(|s| s.buffered).sum::<u64>(), 2, "the two added after");

    // Workers get the tasks added after it, then nothing.
    let got: Vec<i64> =
        [take(&mut engine, NOW), take(&mut engine, NOW)].into_iter().flatten().map(|t| t.task_id).collect();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|id| after.contains(id)), "{got:?} not of {after:?}");
    // The delayed task ends when it is due, never delivered.
    let due = NOW + 61_000;
    settle(&mut engine, due);
    assert_eq!(take(&mut engine, due), None);
    assert!(engine.find_task(delayed, due).is_none());
}

#[test]
fn a_purge_counts_what_it_cancels() {
    let mut engine = ready_engine(EngineConfig::default());
    add(&mut engine, &[spec("a"), spec("a"), spec("b")]);
    add(&mut engine, &[TaskSpec { delay: Duration::from_secs(60), ..spec("later") }]);
    take(&mut engine, NOW).expect("ready");
    write(&mut engine, true, NOW);
    assert_eq!(engine.purge_counts(), Purged { waiting: 2, delayed: 1, running: 1 });
}

#[test]
fn a_dead_letter_put_back_after_a_purge_gets_a_new_id_and_is_dispatched() {
    let tasks = TaskPolicy { max_attempts: 1, ..TaskPolicy::default() };
    let mut engine = ready_engine(EngineConfig { tasks, ..EngineConfig::default() });
    let id = add(&mut engine, &[spec("a")])[0];
    let task = take(&mut engine, NOW).expect("ready");
    write(&mut engine, true, NOW);
    settle(&mut engine, NOW);
    // As the store would hand the letter back: the task as it was.
    let letter = RecordKey { section: Section::DeadLetters, key: (NOW, 99) };
    let input = PlanInput { redrive: vec![(letter, task)], redrive_floor: Some(letter.key), ..PlanInput::default() };
    let plan = engine.plan(input, NOW, &mut || 0.5).expect("ids left");
    assert_eq!(plan.redriven, 1);
    let back = plan.write.tasks[0].task_id;
    assert!(back > id && !engine.is_cancelled(back), "put back as {back}, purged below {}", engine.purged_below());
    engine.write_succeeded(plan, NOW);
    assert_eq!(take(&mut engine, NOW).map(|t| t.task_id), Some(back));
}

#[test]
fn a_new_owner_honours_a_purge_in_the_metadata() {
    let mut engine = ready_engine(EngineConfig::default());
    let ids = add(&mut engine, &[spec("a"), spec("b")]);
    let meta = write(&mut engine, true, NOW).expect("written");
    let next = PartitionEngine::load(&PartitionMeta { range_id: 2, ..meta }, EngineConfig::default(), NOW);
    assert!(ids.iter().all(|id| next.is_cancelled(*id)));
    assert!(next.purge_sweeping(), "a new owner sweeps what it reads");
    assert!(next.metadata().cancelled.is_empty(), "a purge keeps no marks");
}
