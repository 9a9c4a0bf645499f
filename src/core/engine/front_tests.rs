//! Tasks at the front of the fair order (`PartitionEngine::at_front`) and
//! tasks matched in their turn (`PlanInput::in_turn`): a quiet key beside a
//! backlog is at the front, a key with a task waiting or running is not, a
//! match in turn counts against the key's share, and a match judged before
//! a task of the same key went to the backlog goes to the backlog after it.

use super::tests::{Backlog, spec};
use super::{EngineConfig, Finish, Outcome, PlanInput};
use crate::model::{Priority, StoredTask};

/// A partition with 200 tasks of key `noisy`, 20 of them dispatched.
fn beside_a_backlog() -> Backlog {
    let mut backlog = Backlog::new(EngineConfig::default());
    backlog.add(&vec![spec("noisy", Priority::DEFAULT); 200]);
    for _ in 0..20 {
        backlog.dispatch().expect("a noisy task");
    }
    backlog
}

/// Plans `specs` with those at `in_turn` matched in their turn; returns
/// the tasks leased at once, the write landed.
fn plan_in_turn(backlog: &mut Backlog, specs: &[crate::model::TaskSpec], in_turn: &[usize]) -> Vec<StoredTask> {
    let input = PlanInput { specs, direct: in_turn, in_turn, ..PlanInput::default() };
    let plan = backlog.engine.plan(input, backlog.now, &mut || 0.5).expect("ids are plenty");
    let leased: Vec<StoredTask> =
        plan.leases.iter().filter(|(id, _, _)| plan.leased_directly(*id)).map(|(_, task, _)| task.clone()).collect();
    backlog.store.land(&plan.write);
    backlog.engine.write_succeeded(plan, backlog.now);
    leased
}

fn complete(backlog: &mut Backlog, task: &StoredTask) {
    let finishes = [Finish { lease_id: task.level.id, attempt: task.attempt, outcome: Outcome::Complete }];
    let input = PlanInput { finishes: &finishes, ..PlanInput::default() };
    let plan = backlog.engine.plan(input, backlog.now, &mut || 0.5).expect("ids are plenty");
    backlog.store.land(&plan.write);
    backlog.engine.write_succeeded(plan, backlog.now);
}

#[test]
fn a_quiet_key_is_at_the_front_beside_a_backlog_and_a_key_with_a_task_waiting_is_not() {
    let mut backlog = beside_a_backlog();
    let now = backlog.now;
    assert!(backlog.engine.at_front(&spec("quiet", Priority::DEFAULT), now), "a key never seen enters at A");
    assert!(!backlog.engine.at_front(&spec("noisy", Priority::DEFAULT), now), "noisy has 180 tasks waiting");
    backlog.add(&[spec("quiet", Priority::DEFAULT)]);
    assert!(!backlog.engine.at_front(&spec("quiet", Priority::DEFAULT), now), "quiet has a task waiting now");
    let mut delayed = spec("other", Priority::DEFAULT);
    delayed.delay = std::time::Duration::from_secs(1);
    assert!(!backlog.engine.at_front(&delayed, now), "a delayed task is not ready");
    let mut with_dedup = spec("other", Priority::DEFAULT);
    with_dedup.dedup_id = Some("d".into());
    assert!(!backlog.engine.at_front(&with_dedup, now), "a dedup id is checked through the backlog");
}

#[test]
fn a_match_in_turn_counts_against_its_keys_share_and_its_lease_keeps_the_key_off_the_front() {
    let mut backlog = beside_a_backlog();
    let quiet = spec("quiet", Priority::DEFAULT);
    let leased = plan_in_turn(&mut backlog, std::slice::from_ref(&quiet), &[0]);
    assert_eq!(leased.len(), 1, "leased at once");
    assert!(!backlog.engine.at_front(&quiet, backlog.now), "its lease runs");
    complete(&mut backlog, &leased[0]);
    // Its counter advanced one stride past A, as a task of the backlog
    // would have it: the key is at the front again only once A has moved
    // a stride (one noisy task of equal weight) on.
    assert!(!backlog.engine.at_front(&quiet, backlog.now), "the key's share is ahead of A");
    let mut dispatched = 0;
    while !backlog.engine.at_front(&quiet, backlog.now) {
        backlog.dispatch().expect("a noisy task");
        dispatched += 1;
        assert!(dispatched <= 2, "A moved two strides and the key is still not at the front");
    }
}

#[test]
fn a_match_in_turn_judged_before_a_task_of_its_key_went_to_the_backlog_goes_after_it() {
    let mut backlog = beside_a_backlog();
    let (first, second) = (spec("quiet", Priority::DEFAULT), spec("quiet", Priority::DEFAULT));
    // The first was judged not at the front (say, at its rate limit) and
    // went to the backlog; the second was judged at the front before the
    // first's write.
    backlog.add(std::slice::from_ref(&first));
    let leased = plan_in_turn(&mut backlog, std::slice::from_ref(&second), &[0]);
    assert!(leased.is_empty(), "the second was leased before the first: {leased:?}");
    let quiet: Vec<i64> = std::iter::from_fn(|| backlog.dispatch())
        .filter(|task| task.fairness_key == "quiet")
        .map(|task| task.task_id)
        .collect();
    assert_eq!(quiet.len(), 2);
    assert!(quiet[0] < quiet[1], "the key's tasks in the order they were added: {quiet:?}");
}

#[test]
fn two_matches_in_turn_of_one_key_in_one_write_lease_the_first_and_queue_the_second() {
    let mut backlog = beside_a_backlog();
    let specs = [spec("quiet", Priority::DEFAULT), spec("quiet", Priority::DEFAULT)];
    let leased = plan_in_turn(&mut backlog, &specs, &[0, 1]);
    assert_eq!(leased.len(), 1, "one lease of the key at a time this way");
    let next_quiet = std::iter::from_fn(|| backlog.dispatch()).find(|task| task.fairness_key == "quiet");
    assert!(next_quiet.is_some_and(|task| task.task_id > leased[0].task_id), "the second waits in the backlog");
}
