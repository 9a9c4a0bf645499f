//! The byte budget of a write: whatever is due (promotions of delayed tasks,
//! lease records, expiries), every write fits `max_bytes`, the rest waits
//! for the next write, and the commands of each write go through.

use std::time::Duration;

use super::{Outcome, PartitionEngine, PlanInput};
use crate::core::engine::{EngineConfig, Finish};
use crate::model::{Priority, TaskSpec};
use crate::store::PartitionMeta;

const MIB: usize = 1 << 20;
const BUDGET: usize = 4 * MIB;

fn ready_engine() -> PartitionEngine {
    let meta = PartitionMeta { range_id: 1, ..PartitionMeta::default() };
    let mut engine = PartitionEngine::load(&meta, EngineConfig::default(), 0);
    let (after, limit) = engine.delayed_read().expect("a new owner reads its delayed records");
    engine.apply_delayed_read(after, Vec::new(), limit);
    for request in engine.read_requests(0) {
        engine.apply_read(request, Vec::new());
    }
    engine
}

fn large(delay: Duration) -> TaskSpec {
    TaskSpec { delay, ..TaskSpec::new("large", Priority::DEFAULT, vec![7; MIB]) }
}

/// Plans and lands one write with `specs` and `finishes`; its bytes.
fn write(engine: &mut PartitionEngine, specs: &[TaskSpec], finishes: &[Finish], now: i64) -> usize {
    let input = PlanInput { specs, finishes, max_bytes: BUDGET, ..PlanInput::default() };
    let plan = engine.plan(input, now, &mut || 0.5).expect("ids left");
    let bytes = plan.write.bytes();
    assert!(bytes <= BUDGET, "a write of {bytes} bytes, over the budget of {BUDGET}");
    assert_eq!(plan.added.len(), specs.len(), "every add of the write was planned");
    assert_eq!(plan.finished.len(), finishes.len(), "every finish of the write was planned");
    engine.write_succeeded(plan, now);
    bytes
}

#[test]
fn large_tasks_due_together_are_promoted_and_leased_over_several_writes_beside_new_adds() {
    let mut engine = ready_engine();
    for _ in 0..40 {
        write(&mut engine, &[large(Duration::from_secs(3))], &[], 0);
    }
    let now = 3_000;
    let small = TaskSpec::new("small", Priority::DEFAULT, b"small".to_vec());
    let (mut writes, mut smalls, mut largest) = (0, 0, 0);
    while engine.write_due(now) || engine.peek(now).is_some() {
        while let Some(candidate) = engine.peek(now) {
            engine.take(candidate, now);
        }
        // A producer adds a task with every write while promotions go on.
        let adds = if engine.snapshot(0).delayed > 0 { vec![small.clone()] } else { Vec::new() };
        smalls += adds.len();
        largest = largest.max(write(&mut engine, &adds, &[], now));
        writes += 1;
        assert!(writes < 200, "the due work does not shrink");
    }
    let snapshot = engine.snapshot(0);
    assert_eq!(snapshot.delayed, 0, "every delayed task was promoted");
    assert_eq!(snapshot.leased as usize, 40 + smalls, "every task was leased");
    assert!(smalls >= 10, "promotions took {smalls} writes: they were split");
    assert!(writes >= 20, "40 MiB of promotions and as much of lease records fit in {writes} writes of 4 MiB?");
    assert!(largest > 2 * MIB, "writes were filled ({largest} bytes at most)");
}

#[test]
fn expiries_of_large_leases_and_retries_are_split_and_reports_go_through() {
    let mut engine = ready_engine();
    let mut held = Vec::new();
    for _ in 0..30 {
        write(&mut engine, &[large(Duration::ZERO)], &[], 0);
        let candidate = engine.peek(0).expect("the task is ready");
        let (task, _) = engine.take(candidate, 0).expect("taken");
        write(&mut engine, &[], &[], 0);
        held.push(task);
    }
    // Every lease runs out at once; one worker reports on its own lease in
    // each write while the expiries (each a 1 MiB retry record) are split.
    let expired_at = 1 + EngineConfig::default().tasks.lease_ms();
    let mut reports = held.split_off(25).into_iter();
    let mut writes = 0;
    while engine.write_due(expired_at) {
        let finishes: Vec<Finish> = reports
            .next()
            .map(|task| Finish { lease_id: task.level.id, attempt: task.attempt, outcome: Outcome::Complete })
            .into_iter()
            .collect();
        write(&mut engine, &[], &finishes, expired_at);
        writes += 1;
        assert!(writes < 100, "the expiries do not shrink");
    }
    assert!(writes >= 8, "25 MiB of retry records fit in {writes} writes of 4 MiB?");
    assert_eq!(engine.counts().completed, 5, "every report went through beside the expiries");
    assert_eq!(engine.counts().expired, 25);
}
