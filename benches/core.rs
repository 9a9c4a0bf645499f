//! Benchmarks of the pure core: the pass arithmetic and the partition engine,
//! driven directly, with no store and no async runtime (see
//! `docs/benchmarks.md` for the figures, and `fairway-lab bench` for end to end).
//!
//! Each benchmark runs at several numbers of distinct fairness keys, on both
//! sides of `CounterConfig::exact_keys` (10,000 by default), past which keys
//! ahead of the ack level share a bounded sketch instead of an exact map.
//! Every iteration handles a batch of [`BATCH`] tasks, and the throughput is
//! reported in tasks. Where an iteration uses up its engine, each gets a
//! fresh one, built just before it and not timed (`BatchSize::PerIteration`:
//! engines built in bulk ahead of time measured noisier here).
//!
//! `cargo bench --bench core` measures; `cargo test --benches` runs each
//! benchmark once, as a test.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fairway::core::engine::{AppendPlan, EngineConfig, PartitionEngine, PlanInput, ReadRequest};
use fairway::core::fairness::{CounterConfig, KeyCounters, STRIDE_SCALE};
use fairway::model::{Priority, StoredTask, TaskSpec};
use fairway::store::PartitionMeta;

/// Distinct fairness keys: few; many; the exact limit; twice it (the exact
/// map is as large as at the limit, half the keys are in the sketch); ten
/// times it.
const KEYS: [usize; 5] = [10, 1_000, 10_000, 20_000, 100_000];

/// Tasks per iteration: the largest AddTasks batch, and the default buffer.
const BATCH: usize = 1_000;

/// The engine's clock, fixed: no lease expires and nothing becomes due.
const NOW: i64 = 1_000;

/// `n` task specs whose keys cycle over `keys` keys.
fn specs(keys: usize, n: usize) -> Vec<TaskSpec> {
    (0..n).map(|i| TaskSpec::new(format!("tenant-{}", i % keys), Priority::DEFAULT, vec![0; 64])).collect()
}

/// An engine that has just taken an empty partition, with the default config.
fn engine() -> PartitionEngine {
    let meta = PartitionMeta { range_id: 1, ..PartitionMeta::default() };
    PartitionEngine::load(&meta, EngineConfig::default(), NOW)
}

/// Plans an append of `specs`, taking a new id block when the current one
/// runs out (as the partition's writer does).
fn plan_append(engine: &mut PartitionEngine, specs: &[TaskSpec]) -> AppendPlan {
    match engine.prepare_append(specs, NOW) {
        Ok(plan) => plan,
        Err(exhausted) => {
            engine.renew_range(exhausted.range_id + 1);
            engine.prepare_append(specs, NOW).expect("a new id block has room")
        }
    }
}

/// What a read of the store returns for [`BATCH`] tasks over `keys` keys:
/// the tasks as an append planned them, in level order.
fn stored_tasks(keys: usize) -> Vec<StoredTask> {
    let mut source = engine();
    let plan = plan_append(&mut source, &specs(keys, BATCH));
    let mut tasks = plan.write.tasks.clone();
    source.write_failed(plan, false, NOW);
    tasks.sort_by_key(|task| task.level);
    tasks
}

/// A new engine with the first read of the default priority in flight, the
/// other levels read and found empty (so that none holds dispatch back).
fn engine_reading() -> (PartitionEngine, ReadRequest) {
    let mut engine = engine();
    let mut default_read = None;
    for request in engine.read_requests(NOW) {
        if request.priority == Priority::DEFAULT {
            default_read = Some(request);
        } else {
            assert!(engine.apply_read(request, Vec::new()));
        }
    }
    (engine, default_read.expect("a new engine reads every level"))
}

/// An engine whose buffer holds `tasks`, all ready.
fn full_engine(tasks: &[StoredTask]) -> PartitionEngine {
    let (mut engine, request) = engine_reading();
    assert!(engine.apply_read(request, tasks.to_vec()));
    engine
}

/// Pass assignment for a batch of new tasks whose keys cycle over all keys,
/// once every key has been seen (so past the exact limit the sketch holds
/// the others). The ack level stays where it is, as while a backlog builds.
/// - `counters`: `KeyCounters::next_pass` alone.
/// - `plan_append`: `PartitionEngine::prepare_append`, which also takes ids
///   and builds the task rows; the plan is then concluded as a write that
///   certainly failed, which only releases the ack level's pin.
fn pass_assignment(c: &mut Criterion) {
    let mut group = c.benchmark_group("pass_assignment");
    group.throughput(Throughput::Elements(BATCH as u64));
    for keys in KEYS {
        // Every key at least once, in whole batches.
        let all = specs(keys, keys.max(BATCH));

        let mut counters = KeyCounters::new(CounterConfig::default());
        for spec in &all {
            counters.next_pass(&spec.fairness_key, 0, STRIDE_SCALE);
        }
        let past_limit = keys > CounterConfig::default().exact_keys;
        assert_eq!(counters.sketch().is_some(), past_limit, "the sketch is in use past the exact limit");
        let mut batches = all.chunks(BATCH).cycle();
        group.bench_function(BenchmarkId::new("counters", keys), |b| {
            b.iter(|| {
                for spec in batches.next().expect("cycles") {
                    black_box(counters.next_pass(&spec.fairness_key, 0, STRIDE_SCALE));
                }
            })
        });

        let mut engine = engine();
        for batch in all.chunks(BATCH) {
            let plan = plan_append(&mut engine, batch);
            engine.write_failed(plan, false, NOW);
        }
        assert_eq!(engine.snapshot(0, 0).subqueues[Priority::DEFAULT.index()].approximate_keys, past_limit);
        let mut batches = all.chunks(BATCH).cycle();
        group.bench_function(BenchmarkId::new("plan_append", keys), |b| {
            b.iter(|| {
                let plan = plan_append(&mut engine, batches.next().expect("cycles"));
                engine.write_failed(black_box(plan), false, NOW);
            })
        });
    }
    group.finish();
}

/// The reader's merge: `PartitionEngine::apply_read` of a full read
/// ([`BATCH`] stored tasks) into an empty buffer of [`BATCH`] tasks. The
/// merge does not touch the key counters: the keys only shape which tasks
/// the read returns, and from [`BATCH`] keys on that is one task each of
/// the same [`BATCH`] keys, so those runs repeat one workload.
fn read_merge(c: &mut Criterion) {
    let mut group = c.benchmark_group("read_merge");
    group.throughput(Throughput::Elements(BATCH as u64));
    for keys in KEYS {
        let stored = stored_tasks(keys);
        group.bench_function(BenchmarkId::from_parameter(keys), |b| {
            b.iter_batched(
                || {
                    let (engine, request) = engine_reading();
                    (engine, request, stored.clone())
                },
                |(mut engine, request, tasks)| {
                    assert!(engine.apply_read(request, tasks));
                    engine
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

/// Picking the next task, from a full buffer ([`BATCH`] ready tasks) until
/// it is empty, one task at a time:
/// - `take_next`: `peek` + `take`, the lease taken as durable at once, then
///   the ack level moved over it (`settle`);
/// - `take_and_lease`: `peek` + `take`, then the write of its lease record
///   planned (`plan`, which encodes the record) and concluded as durable
///   (`write_succeeded`), as the partition's writer does, one lease per write.
///
/// As for [`read_merge`], the buffer is the same from [`BATCH`] keys on. The
/// leases taken stay held (no worker finishes one), so the lease table
/// grows to [`BATCH`] entries.
fn pick(c: &mut Criterion) {
    let mut group = c.benchmark_group("pick");
    group.throughput(Throughput::Elements(BATCH as u64));
    for keys in KEYS {
        let stored = stored_tasks(keys);
        group.bench_function(BenchmarkId::new("take_next", keys), |b| {
            b.iter_batched(
                || full_engine(&stored),
                |mut engine| {
                    for _ in 0..BATCH {
                        black_box(engine.take_next(NOW).expect("the buffer has a task"));
                        engine.settle();
                    }
                    engine
                },
                BatchSize::PerIteration,
            )
        });
        group.bench_function(BenchmarkId::new("take_and_lease", keys), |b| {
            b.iter_batched(
                || full_engine(&stored),
                |mut engine| {
                    for _ in 0..BATCH {
                        let candidate = engine.peek(NOW).expect("the buffer has a task");
                        black_box(engine.take(candidate, NOW).expect("the candidate is ready"));
                        let plan = engine.plan(PlanInput::default(), NOW, &mut || 0.5).expect("ids left");
                        engine.write_succeeded(black_box(plan), NOW);
                    }
                    engine
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

/// Shorter runs than Criterion's defaults: the whole suite takes about four
/// minutes on two cores.
fn config() -> Criterion {
    Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5)).sample_size(50)
}

criterion_group! {
    name = core;
    config = config();
    targets = pass_assignment, read_merge, pick
}
criterion_main!(core);
