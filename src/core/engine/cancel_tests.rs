//! Cancelled tasks: a marked task is never handed out and ends completed
//! when it comes up; a held one's lease runs out at once, its heartbeats
//! are refused and a failure report completes it; marks are bounded, go
//! with their tasks, and are in the metadata a new owner loads.

use super::budget_tests::ready_engine;
use super::{
    Cancel, CancelRefused, EngineConfig, Finish, Finished, LeaseError, MAX_CANCELLED, Outcome, PartitionEngine,
    PlanInput, TaskPolicy,
};
use crate::core::engine::rows::PartitionMeta;
use crate::model::{Priority, StoredTask, TaskSpec};

const NOW: i64 = 1_000;

/// Adds a task of key `key`; its id.
fn add(engine: &mut PartitionEngine, key: &str) -> i64 {
    let spec = TaskSpec::new(key, Priority::DEFAULT, key.as_bytes().to_vec());
    let plan = engine.plan(PlanInput { specs: std::slice::from_ref(&spec), ..PlanInput::default() }, NOW, &mut || 0.5);
    let plan = plan.expect("ids left");
    let id = plan.added[0].task_id();
    engine.write_succeeded(plan, NOW);
    id
}

/// Lands one write with `cancels` and what is due at `now`; what the cancels got, and the metadata written.
fn write(
    engine: &mut PartitionEngine,
    cancels: &[Cancel],
    finishes: &[Finish],
    now: i64,
) -> (Vec<Result<(), CancelRefused>>, Option<PartitionMeta>) {
    let input = PlanInput { cancels, finishes, ..PlanInput::default() };
    let plan = engine.plan(input, now, &mut || 0.5).expect("ids left");
    let answers = (plan.cancels.clone(), plan.write.metadata.clone());
    engine.write_succeeded(plan, now);
    answers
}

fn cancel(task_id: i64) -> Cancel {
    Cancel { task_id, dead_letter: None }
}

/// Takes the next task and lands its lease.
fn take(engine: &mut PartitionEngine, now: i64) -> Option<StoredTask> {
    let candidate = engine.peek(now)?;
    let taken = engine.take(candidate, now).map(|(task, _)| task);
    write(engine, &[], &[], now);
    taken
}

#[test]
fn a_cancelled_task_is_never_handed_out_and_ends_completed_when_it_comes_up() {
    let mut engine = ready_engine(EngineConfig::default());
    let first = add(&mut engine, "a");
    let second = add(&mut engine, "a");
    let (answers, meta) = write(&mut engine, &[cancel(first)], &[], NOW);
    assert_eq!(answers, vec![Ok(())]);
    assert_eq!(meta.expect("the mark is written with the metadata").cancelled, vec![first]);
    assert!(engine.find_task(first, NOW).expect("still there").cancelled);
    assert!(!engine.find_task(second, NOW).expect("there").cancelled);

    // It comes up first: taken for no one, its lease written and ended.
    assert_eq!(take(&mut engine, NOW).map(|t| t.task_id), None, "a cancelled task reaches no worker");
    let (_, meta) = write(&mut engine, &[], &[], NOW);
    assert!(engine.find_task(first, NOW).is_none(), "it ended");
    assert!(meta.is_none_or(|meta| meta.cancelled.is_empty()));
    assert_eq!(engine.metadata().cancelled, Vec::<i64>::new(), "its mark went with it");
    assert_eq!(take(&mut engine, NOW).map(|t| t.task_id), Some(second));
    let counts = engine.counts();
    assert_eq!((counts.dispatched, counts.completed, counts.expired), (1, 1, 0), "{counts:?}");
}

#[test]
fn a_held_task_cancelled_loses_its_lease_at_once_and_its_failure_report_completes_it() {
    let tasks = TaskPolicy { max_attempts: 5, ..TaskPolicy::default() };
    let mut engine = ready_engine(EngineConfig { tasks, ..EngineConfig::default() });
    let id = add(&mut engine, "a");
    let task = take(&mut engine, NOW).expect("ready");
    assert!(engine.heartbeat(task.level.id, task.attempt, NOW).is_ok());
    write(&mut engine, &[cancel(id)], &[], NOW);
    assert_eq!(engine.heartbeat(task.level.id, task.attempt, NOW), Err(LeaseError::Cancelled));

    // The worker reports a retryable failure before the lease is ended: it completes.
    let fail = Finish {
        lease_id: task.level.id,
        attempt: task.attempt,
        outcome: Outcome::Fail { retryable: true, message: "late".into(), retry_after: None },
    };
    let input = PlanInput { finishes: std::slice::from_ref(&fail), ..PlanInput::default() };
    let plan = engine.plan(input, NOW, &mut || 0.5).expect("ids left");
    assert_eq!(plan.finished, vec![Ok(Finished::Completed)], "not retried");
    engine.write_succeeded(plan, NOW);
    assert!(engine.find_task(id, NOW).is_none());
    assert!(engine.metadata().cancelled.is_empty());
    assert_eq!(take(&mut engine, NOW + 3_600_000), None, "nothing comes back");
}

#[test]
fn a_held_task_cancelled_ends_with_the_next_write_without_a_report() {
    let mut engine = ready_engine(EngineConfig::default());
    let id = add(&mut engine, "a");
    let task = take(&mut engine, NOW).expect("ready");
    write(&mut engine, &[cancel(id)], &[], NOW);
    assert!(engine.write_due(NOW), "the lease ran out: the writer has work");
    // While the write that ends it is out, its worker is told it was
    // cancelled, not to try again.
    let plan = engine.plan(PlanInput::default(), NOW, &mut || 0.5).expect("ids left");
    assert_eq!(engine.heartbeat(task.level.id, task.attempt, NOW), Err(LeaseError::Cancelled));
    assert_eq!(engine.leased_dedup_id(task.level.id, task.attempt), Err(LeaseError::Cancelled));
    engine.write_succeeded(plan, NOW);
    assert!(engine.find_task(id, NOW).is_none(), "ended");
    let counts = engine.counts();
    assert_eq!((counts.completed, counts.expired, counts.failed), (1, 0, 0), "{counts:?}");
}

#[test]
fn marks_are_bounded_and_a_cancel_past_the_bound_writes_nothing() {
    let mut engine = ready_engine(EngineConfig::default());
    let cancels: Vec<Cancel> = (0..MAX_CANCELLED as i64).map(|n| cancel(1_000_000 + n)).collect();
    let (answers, _) = write(&mut engine, &cancels, &[], NOW);
    assert!(answers.iter().all(Result::is_ok));
    let (answers, meta) = write(&mut engine, &[cancel(5), cancel(1_000_000)], &[], NOW);
    assert_eq!(answers, vec![Err(CancelRefused::Full), Ok(())], "one more is refused; one already marked is not");
    assert!(meta.is_none_or(|meta| !meta.cancelled.contains(&5)));
    assert_eq!(engine.metadata().cancelled.len(), MAX_CANCELLED);
}

#[test]
fn a_new_owner_honours_the_marks_in_the_metadata() {
    let mut engine = ready_engine(EngineConfig::default());
    let first = add(&mut engine, "a");
    let (_, meta) = write(&mut engine, &[cancel(first)], &[], NOW);
    let meta = PartitionMeta { range_id: 2, ..meta.expect("written") };
    let next = PartitionEngine::load(&meta, EngineConfig::default(), NOW);
    assert!(next.is_cancelled(first));
    assert!(!next.is_cancelled(first + 1));
}
