use super::orders::{Charge, FairwayOrder, KeyBy, Order, RankerOrder};
use super::ranker::{Ranker, unbounded_log};
use super::sim;
use super::workload::{Chunk, Shape, Workload};

fn shape() -> Shape {
    Shape {
        tenants: 5,
        zipf: 1.0,
        jobs: 40,
        chunk_records: 1_000,
        records_per_second: 1_000.0,
        workers: 4,
        load: 1.2,
        seed: 3,
    }
}

/// The worked values of research/seed-systems.md §B, from the formulas.
#[test]
fn the_ranker_scores_as_its_defaults_do() {
    let size = |records: f64| unbounded_log(records, 40.0, -40.0, 100_000.0);
    for (records, expected) in [(100.0, 7.9), (1_000.0, -8.0), (10_000.0, -24.0), (100_000.0, -40.0), (1e6, -56.0)] {
        assert!((size(records) - expected).abs() < 0.1, "{records} records score {}", size(records));
    }
    let ranker = Ranker { extreme_after_minutes: 480.0 };
    let chunk = |minutes: i64| Chunk {
        id: 0,
        job: 0,
        tenant: 0,
        part: 1,
        records: 100,
        job_records: 100,
        arrived_ms: -minutes * 60_000,
    };
    let age = |minutes| ranker.score(&chunk(minutes), 0, 0, 0) - ranker.score(&chunk(0), 0, 0, 0);
    assert!((age(60) - 33.3).abs() < 0.1 && (age(479) - 50.0).abs() < 0.1, "{} {}", age(60), age(479));
    assert!(age(480) > 9_000.0, "past the threshold a chunk goes before everything");
    let usage = |mine, all| ranker.score(&chunk(0), 0, mine, all) - ranker.score(&chunk(0), 0, 0, 0);
    assert!((usage(1, 2) + 150.0).abs() < 1e-9 && (usage(2, 2) + 300.0).abs() < 1e-9);
}

/// Every order starts every chunk exactly once, never more at a time than
/// there are workers, and each tenant's chunks in order under Fairway
/// (FIFO within a key).
#[test]
fn every_order_runs_every_chunk_once() {
    let shape = shape();
    let workload = Workload::generate(&shape);
    let orders: Vec<Box<dyn Order>> = vec![
        Box::new(RankerOrder::new(60.0)),
        Box::new(FairwayOrder::new(KeyBy::Tenant, Charge::Tasks, 1_000, None)),
        Box::new(FairwayOrder::new(KeyBy::Tenant, Charge::ChunkRecords, 1_000, None)),
        Box::new(FairwayOrder::new(KeyBy::Tenant, Charge::JobSizeLog, 1_000, None)),
        Box::new(FairwayOrder::new(KeyBy::Tenant, Charge::JobSizeLog, 1_000, Some((MAX_WAIT, 0)))),
    ];
    for (arm, mut order) in orders.into_iter().enumerate() {
        let run = sim::run(order.as_mut(), &workload, &shape, 60_000);
        assert!(run.started_ms.iter().zip(&run.ended_ms).all(|(s, e)| *s >= 0 && e >= s), "arm {arm}");
        let mut events: Vec<(i64, i32)> =
            run.started_ms.iter().map(|&s| (s, 1)).chain(run.ended_ms.iter().map(|&e| (e, -1))).collect();
        events.sort();
        let mut busy = 0;
        for (_, step) in events {
            busy += step;
            assert!(busy <= shape.workers as i32, "arm {arm}: {busy} chunks at once");
        }
        if arm > 0 {
            for tenant in 0..shape.tenants {
                let starts: Vec<i64> =
                    workload.chunks.iter().filter(|c| c.tenant == tenant).map(|c| run.started_ms[c.id]).collect();
                assert!(starts.is_sorted(), "arm {arm}: tenant {tenant}'s chunks out of order");
            }
        }
        let figures = sim::figures(&run, &workload, &shape);
        assert!(figures.small_jobs > 0 && figures.longest_wait_min >= figures.wait_p99_min);
    }
}

/// With the job as key, a small job no longer waits behind its tenant's
/// large ones: its chunk enters at the front, as the ranker's size score
/// puts it.
#[test]
fn keyed_by_job_small_jobs_go_ahead_of_their_tenants_large_ones() {
    let shape = Shape { jobs: 120, tenants: 4, ..shape() };
    let workload = Workload::generate(&shape);
    let p99 = |key| {
        let mut order = FairwayOrder::new(key, Charge::JobSizeLog, 1_000, None);
        let run = sim::run(&mut order, &workload, &shape, 60_000);
        sim::figures(&run, &workload, &shape).small_p99_min
    };
    let (by_tenant, by_job) = (p99(KeyBy::Tenant), p99(KeyBy::Job));
    assert!(by_job < by_tenant / 2.0, "small jobs' p99: {by_job} min keyed by job, {by_tenant} min by tenant");
}

/// Keyed by job in a group per tenant with a lead, small jobs go ahead of
/// their tenant's large ones as keyed by job, and tenants keep their shares
/// as keyed by tenant (Jain's lowest window within 0.01 of it), where keyed
/// by job alone they lose them.
#[test]
fn in_tenant_groups_with_a_lead_small_jobs_go_first_and_tenants_keep_their_shares() {
    let shape = Shape { jobs: 120, tenants: 4, ..shape() };
    let workload = Workload::generate(&shape);
    let figures = |key| {
        let mut order = FairwayOrder::new(key, Charge::JobSizeLog, 1_000, None);
        let run = sim::run(&mut order, &workload, &shape, 60_000);
        sim::figures(&run, &workload, &shape)
    };
    let by_tenant = figures(KeyBy::Tenant);
    let by_job = figures(KeyBy::Job);
    let grouped = figures(KeyBy::JobInTenant { tenants: shape.tenants, lead: 100_000 });
    assert!(
        grouped.small_p99_min < by_tenant.small_p99_min / 2.0,
        "small jobs' p99: {} min in groups, {} min by tenant",
        grouped.small_p99_min,
        by_tenant.small_p99_min
    );
    assert!(
        grouped.jain_min >= by_tenant.jain_min - 0.01 && grouped.jain_min > by_job.jain_min,
        "Jain's lowest window: {} in groups, {} by tenant, {} by job",
        grouped.jain_min,
        by_tenant.jain_min,
        by_job.jain_min
    );
    let no_lead = figures(KeyBy::JobInTenant { tenants: shape.tenants, lead: 0 });
    assert_eq!(no_lead.small_p99_min, by_tenant.small_p99_min, "without a lead a group is first come, first served");
}

const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(20 * 60);

/// With a `max_wait`, chunks past it go oldest first, so the longest wait
/// of any chunk is shorter than in fair order alone, and no chunk that
/// waited past it is passed by one that waited less long (the moves go
/// oldest first).
#[test]
fn a_max_wait_shortens_the_longest_wait() {
    let shape = Shape { jobs: 150, tenants: 6, ..shape() };
    let workload = Workload::generate(&shape);
    let longest = |max_wait: Option<std::time::Duration>| {
        let mut order = FairwayOrder::new(KeyBy::Tenant, Charge::JobSizeLog, 1_000, max_wait.map(|m| (m, 0)));
        let run = sim::run(&mut order, &workload, &shape, 60_000);
        (sim::figures(&run, &workload, &shape).longest_wait_min, run)
    };
    let ((without, _), (with, run)) = (longest(None), longest(Some(MAX_WAIT)));
    assert!(with < without, "longest wait {with} min with max_wait, {without} min without");
    let max_wait_ms = MAX_WAIT.as_millis() as i64;
    let mut aged: Vec<(i64, i64)> = workload
        .chunks
        .iter()
        .map(|c| (run.started_ms[c.id], c.arrived_ms))
        .filter(|(started, arrived)| started - arrived > max_wait_ms + 60_000)
        .collect();
    aged.sort();
    assert!(!aged.is_empty(), "the workload keeps chunks waiting past max_wait");
    assert!(aged.windows(2).all(|w| w[0].1 <= w[1].1), "chunks well past max_wait start in the order they arrived");
}
