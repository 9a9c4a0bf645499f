//! Dead letters stay where reads of them start: above the floor of those
//! put back, even when a letter is buried in the very write that raises the
//! floor, in the same millisecond.

use super::budget_tests::ready_engine;
use super::{EngineConfig, Finish, Outcome, PlanInput, TaskPolicy};
use crate::model::{Priority, TaskSpec};
use crate::store::{RecordKey, RecordValue, Section};

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
