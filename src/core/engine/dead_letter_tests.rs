//! Dead letters stay where reads of them start: above the floor of those
//! put back, even when a letter is buried in the very write that raises the
//! floor, in the same millisecond; and letters moved in from an old
//! generation land above it too.

use super::budget_tests::ready_engine;
use super::{EngineConfig, Finish, Outcome, PlanInput, TaskPolicy};
use crate::core::engine::rows::{RecordKey, RecordTask, RecordValue, Section};
use crate::model::{FairLevel, Priority, StoredTask, TaskSpec};

#[test]
fn a_letter_buried_beside_a_redrive_lands_above_the_raised_floor() {
    let tasks = TaskPolicy { max_attempts: 1, ..TaskPolicy::default() };
    let config = EngineConfig { tasks, ..EngineConfig::default() };
    let mut engine = ready_engine(config);
    let now = 1_000;
    let spec = TaskSpec::new("k", Priority::DEFAULT, b"x".to_vec());
    let input = PlanInput { specs: std::slice::from_ref(&spec), ..PlanInput::default() };
    let plan = engine.plan(input, now, &mut || 0.5).expect("ids left");
    engine.write_succeeded(plan, now);
    let candidate = engine.peek(now).expect("the task is ready");
    let (task, _) = engine.take(candidate, now).expect("taken");
    let plan = engine.plan(PlanInput::default(), now, &mut || 0.5).expect("ids left");
    engine.write_succeeded(plan, now);

    // A letter failed in this same millisecond, with a higher id, is put
    // back in the write that buries this task.
    let put_back = RecordKey { section: Section::DeadLetters, key: (now, task.level.id + 1_000) };
    let fail = Finish {
        lease_id: task.level.id,
        attempt: task.attempt,
        outcome: Outcome::Fail { retryable: true, message: "no".into(), retry_after: None },
    };
    let input = PlanInput {
        finishes: std::slice::from_ref(&fail),
        redrive: vec![(put_back, task.clone())],
        redrive_floor: Some(put_back.key),
        ..PlanInput::default()
    };
    let plan = engine.plan(input, now, &mut || 0.5).expect("ids left");
    let floor = plan.write.metadata.as_ref().expect("the floor is raised").dead_letters_through;
    let buried: Vec<_> = plan
        .write
        .put
        .iter()
        .filter(|r| r.at.section == Section::DeadLetters && matches!(r.value, RecordValue::Task(_)))
        .map(|r| r.at.key)
        .collect();
    assert_eq!(buried.len(), 1, "{buried:?}");
    assert!(buried[0] > floor, "the letter {:?} is at or below the floor {floor:?}: never listed", buried[0]);
}

#[test]
fn moved_dead_letters_land_above_the_floor() {
    let mut engine = ready_engine(EngineConfig::default());
    let now = 1_000;
    // A letter of an old generation, failed long ago, at its third attempt,
    // with an id of its own partition; moved in the write that puts back a
    // letter keyed ahead of this clock (an earlier owner's clock).
    let old = TaskSpec::new("k", Priority::DEFAULT, b"old".to_vec()).at_level(FairLevel::new(3, 77), 10);
    let letter = RecordTask { task: StoredTask { attempt: 3, ..old }, at_unix_ms: 500, message: "broken".into() };
    let ahead = RecordKey { section: Section::DeadLetters, key: (now + 5_000, 9) };
    let redriven = TaskSpec::new("k", Priority::DEFAULT, b"back".to_vec()).at_level(FairLevel::new(0, 9), 0);
    let input = PlanInput {
        redrive: vec![(ahead, redriven)],
        redrive_floor: Some(ahead.key),
        bury: std::slice::from_ref(&letter),
        ..PlanInput::default()
    };
    let plan = engine.plan(input, now, &mut || 0.5).expect("ids left");
    let floor = plan.write.metadata.as_ref().expect("the floor is raised").dead_letters_through;
    let moved: Vec<_> = plan
        .write
        .put
        .iter()
        .filter(|r| r.at.section == Section::DeadLetters)
        .map(|r| match &r.value {
            RecordValue::Task(moved) => (r.at.key, moved.clone()),
            other => panic!("a dead letter holds a task: {other:?}"),
        })
        .collect();
    assert_eq!(moved.len(), 1, "{moved:?}");
    let (key, moved) = &moved[0];
    assert!(*key > floor, "the moved letter {key:?} is at or below the floor {floor:?}: never listed");
    assert_eq!(plan.buried, vec![moved.task.task_id]);
    assert_ne!(moved.task.task_id, 77, "an id of this partition");
    assert_eq!(moved.task.level.id, moved.task.task_id);
    assert_eq!(
        (moved.task.attempt, moved.task.created_at_unix_ms, moved.task.payload.as_slice()),
        (3, 10, &b"old"[..])
    );
    assert_eq!((moved.at_unix_ms, moved.message.as_str()), (500, "broken"), "failed when and as it was");
}
