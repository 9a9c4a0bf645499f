//! The budget of a write. Bytes: whatever is due (promotions of delayed
//! tasks, lease records, expiries), every write fits `max_bytes`, the rest
//! waits for the next write, and the commands of each write go through.
//! Ids: a write with every kind of due work at its most finds the ids it
//! needs, or is refused before it takes any so that the block is renewed.

use std::time::Duration;

use super::{IdsExhausted, MAX_MAINTENANCE_PER_WRITE, Outcome, PartitionEngine, PlanInput, TaskPolicy};
use crate::core::engine::rows::PartitionMeta;
use crate::core::engine::{EngineConfig, Finish};
use crate::model::{Priority, TaskSpec};

const MIB: usize = 1 << 20;
const BUDGET: usize = 4 * MIB;

/// An engine of a new partition that has read its (empty) store.
pub(super) fn ready_engine(config: EngineConfig) -> PartitionEngine {
    let meta = PartitionMeta { range_id: 1, ..PartitionMeta::default() };
    let mut engine = PartitionEngine::load(&meta, config, 0);
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
    let mut engine = ready_engine(EngineConfig::default());
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
        let adds = if engine.snapshot(0, 0).delayed > 0 { vec![small.clone()] } else { Vec::new() };
        smalls += adds.len();
        largest = largest.max(write(&mut engine, &adds, &[], now));
        writes += 1;
        assert!(writes < 200, "the due work does not shrink");
    }
    let snapshot = engine.snapshot(0, 0);
    assert_eq!(snapshot.delayed, 0, "every delayed task was promoted");
    assert_eq!(snapshot.leased as usize, 40 + smalls, "every task was leased");
    assert!(smalls >= 10, "promotions took {smalls} writes: they were split");
    assert!(writes >= 20, "40 MiB of promotions and as much of lease records fit in {writes} writes of 4 MiB?");
    assert!(largest > 2 * MIB, "writes were filled ({largest} bytes at most)");
}

#[test]
fn expiries_of_large_leases_and_retries_are_split_and_reports_go_through() {
    let mut engine = ready_engine(EngineConfig::default());
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

/// Takes every task that may start now.
fn take_all(engine: &mut PartitionEngine, now: i64) -> Vec<crate::model::StoredTask> {
    let mut taken = Vec::new();
    while let Some(candidate) = engine.peek(now) {
        taken.push(engine.take(candidate, now).expect("a candidate can be taken").0);
    }
    taken
}

#[test]
fn a_write_with_every_kind_of_due_work_at_its_most_is_refused_when_its_ids_are_short() {
    let most = MAX_MAINTENANCE_PER_WRITE;
    let config = EngineConfig {
        buffer_tasks: 4 * most,
        park_after: 1,
        move_lease_after: 4,
        tasks: TaskPolicy { key_concurrency: 1, lease_timeout: Duration::from_secs(3600), ..TaskPolicy::default() },
        ..EngineConfig::default()
    };
    let mut engine = ready_engine(config);
    // Keys held by their first task, each with a second one waiting, and
    // a key "free" whose second task will start above those; delayed
    // tasks due at 10 s.
    let held_keys = most + 8;
    let mut specs: Vec<TaskSpec> = (0..held_keys)
        .chain([usize::MAX])
        .flat_map(|k| {
            let key = if k == usize::MAX { "free".to_owned() } else { format!("held{k}") };
            [0, 1].map(|n| TaskSpec::new(&key, Priority::DEFAULT, format!("{key} {n}").into_bytes()))
        })
        .collect();
    specs.extend((0..most).map(|n| TaskSpec {
        delay: Duration::from_secs(10),
        ..TaskSpec::new(format!("delayed{n}"), Priority::DEFAULT, Vec::new())
    }));
    write(&mut engine, &specs, &[], 0);
    let first = take_all(&mut engine, 0);
    assert_eq!(first.len(), held_keys + 1, "the first task of each key starts");
    write(&mut engine, &[], &[], 0);
    let free = first.iter().find(|task| task.fairness_key == "free").expect("free started");
    let done = Finish { lease_id: free.level.id, attempt: free.attempt, outcome: Outcome::Complete };
    write(&mut engine, &[], &[done], 0);

    // At 10 s one write has due: every delayed task (an id each), the lease
    // of free's second task (an id), the held leases below the newest
    // lease records (an id each) and the held keys' waiting tasks, parked
    // behind free's (a slot and a record each).
    let now = 10_000;
    let second = take_all(&mut engine, now);
    assert_eq!(second.len(), 1, "only free's second task may start");
    let takes = most + 1 + most + 2 * most;
    engine.use_ids_but(takes as i64 - 1);
    let short = engine.plan(PlanInput::default(), now, &mut || 0.5);
    assert_eq!(short.err(), Some(IdsExhausted { range_id: 1 }), "one id short: the write is refused");

    engine.renew_range(2);
    let plan = engine.plan(PlanInput::default(), now, &mut || 0.5).expect("a renewed block has room");
    assert_eq!(plan.promoted.len(), most, "every delayed task is promoted");
    assert_eq!(plan.leases.len(), 1, "free's lease is written");
    assert_eq!(plan.moved_leases.len(), most, "held leases are written again at their most");
    assert_eq!(plan.parked.len(), most, "waiting tasks are parked at their most");
    engine.write_succeeded(plan, now);
}
