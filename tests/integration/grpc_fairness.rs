//! Weighted fairness end to end, over real gRPC.

use std::collections::HashMap;
use std::time::Duration;

use fairway::core::engine::TaskPolicy;
use fairway::core::fairness::{CostCurve, effective_weight};

use fairway::config::Config;

use fairway::core::engine::dedup::bucket_of;
use fairway::proto::v1 as pb;

use crate::support::{Backend, TestServer, add_all, create, poll, spec};

const WAIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn three_keys_get_their_weighted_shares() {
    three_keys_get_their_weighted_shares_on(Backend::Embedded).await;
}

/// Keys of weights 5/3/2 with deep backlogs: over 1,000 dispatches, every
/// pair stays within |D_i/w_i − D_j/w_j| ≤ 1/w_i + 1/w_j at every instant.
pub(crate) async fn three_keys_get_their_weighted_shares_on(backend: Backend) {
    let server = TestServer::start_on(backend, Config::default()).await;
    let mut client = server.client.clone();
    let weights = [("five", 5.0), ("three", 3.0), ("two", 2.0)];
    let mut specs = Vec::new();
    for round in 0..1000 {
        for (key, weight) in weights {
            specs.push(spec(key, weight, 0, format!("{key}-{round}").as_bytes()));
        }
    }
    add_all(&mut client, "fair", specs).await;

    let mut counts: HashMap<String, f64> = HashMap::new();
    let mut worst = 0.0f64;
    for _ in 0..1000 {
        let task = poll(&mut client, "fair", WAIT).await.expect("a backlogged queue has a task");
        *counts.entry(task.fairness_key).or_default() += 1.0;
        for (i, (ki, wi)) in weights.iter().enumerate() {
            for (kj, wj) in &weights[i + 1..] {
                let (wi, wj) = (effective_weight(*wi), effective_weight(*wj));
                let gap =
                    (counts.get(*ki).copied().unwrap_or(0.0) / wi - counts.get(*kj).copied().unwrap_or(0.0) / wj).abs();
                worst = worst.max(gap - (1.0 / wi + 1.0 / wj));
            }
        }
    }
    assert!(worst <= 1e-9, "the bound was exceeded by {worst}; counts {counts:?}");
    assert_eq!(counts["five"] + counts["three"] + counts["two"], 1000.0);
    assert!((counts["five"] - 500.0).abs() <= 2.0, "{counts:?}");
    server.stop().await;
}

/// A key that appears mid-run is dispatched within the next (number of
/// active keys) dispatches, not after the others' backlogs.
#[tokio::test]
async fn a_key_that_appears_mid_run_is_served_at_once() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    let mut specs = Vec::new();
    for round in 0..400 {
        for key in ["a", "b", "c"] {
            specs.push(spec(key, 0.0, 0, format!("{round}").as_bytes()));
        }
    }
    add_all(&mut client, "late", specs).await;
    for _ in 0..500 {
        poll(&mut client, "late", WAIT).await.expect("backlog");
    }
    add_all(&mut client, "late", vec![spec("newcomer", 0.0, 0, b"hi")]).await;
    let active_keys = 4;
    let mut position = None;
    for n in 1..=active_keys {
        if poll(&mut client, "late", WAIT).await.expect("backlog").fairness_key == "newcomer" {
            position = Some(n);
            break;
        }
    }
    assert!(position.is_some(), "the new key waited more than {active_keys} dispatches");
    server.stop().await;
}

/// Keys spread unevenly over partitions get equal shares, as in one
/// partition: one key alone in partition 0 against five in partition 1.
/// Taking turns between partitions gave the lone key half the dispatches.
#[tokio::test]
async fn keys_get_equal_shares_whichever_partition_holds_them() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    create(&mut client, "spread", 2).await;
    // A task with a dedup id goes to its id's partition.
    let in_partition = |target: i64, key: &str, n: usize| {
        (0..).map(|i| format!("{key}-{i}")).filter(|id| bucket_of(id) % 2 == target).take(n).collect::<Vec<_>>()
    };
    let keys: Vec<(&str, i64)> =
        std::iter::once(("alone", 0)).chain(["b", "c", "d", "e", "f"].map(|k| (k, 1))).collect();
    let mut specs = Vec::new();
    for (key, partition) in &keys {
        for dedup_id in in_partition(*partition, key, 100) {
            specs.push(pb::TaskSpec { dedup_id, ..spec(key, 0.0, 0, b"x") });
        }
    }
    add_all(&mut client, "spread", specs).await;
    let mut counts: HashMap<String, i64> = HashMap::new();
    for _ in 0..300 {
        let task = poll(&mut client, "spread", WAIT).await.expect("a backlogged queue has a task");
        let expected = if task.fairness_key == "alone" { 0 } else { 1 };
        assert_eq!(task.partition, expected, "{} came from partition {}", task.fairness_key, task.partition);
        *counts.entry(task.fairness_key).or_default() += 1;
        let request = pb::CompleteTaskRequest { lease_token: task.lease_token, result: vec![] };
        client.complete_task(request).await.expect("CompleteTask");
    }
    for (key, _) in &keys {
        let got = counts.get(*key).copied().unwrap_or(0);
        assert!((got - 50).abs() <= 3, "{key} got {got} of 300 dispatches over 6 keys: {counts:?}");
    }
    server.stop().await;
}

/// Keys of equal weight whose tasks cost 1 and 100 share the work, not the
/// tasks: about a hundred cheap tasks go for each dear one, within the
/// bound |W_i/w_i − W_j/w_j| ≤ c_i/w_i + c_j/w_j (docs/fairness.md §8).
#[tokio::test]
async fn keys_share_the_work_by_cost() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    let mut specs: Vec<pb::TaskSpec> = (0..1_100).map(|i| spec("cheap", 0.0, 0, format!("{i}").as_bytes())).collect();
    specs.extend((0..30).map(|i| pb::TaskSpec { cost: 100, ..spec("dear", 0.0, 0, format!("{i}").as_bytes()) }));
    add_all(&mut client, "costs", specs).await;
    let (mut cheap, mut dear) = (0i64, 0i64);
    for _ in 0..1_010 {
        let task = poll(&mut client, "costs", WAIT).await.expect("a backlogged queue has a task");
        match task.fairness_key.as_str() {
            "cheap" => cheap += 1,
            _ => dear += 1,
        }
        let gap = (cheap - 100 * dear).abs();
        assert!(gap <= 101, "after {cheap} cheap and {dear} dear tasks the work differs by {gap}, above 1 + 100");
    }
    assert!((9..=11).contains(&dear), "{dear} dear tasks of 1,010 (equal work is 10)");
    server.stop().await;
}

/// A queue on the log cost curve (reference 100,000 records) makes chunks'
/// sizes into costs: a 100-record job's chunks cost 401, a 100,000-record
/// job's 1,000, and the work dispatched stays within one chunk of each of
/// equal at every step (docs/fairness.md §7b).
#[tokio::test]
async fn sizes_become_costs_on_the_queue_curve() {
    let mut config = Config::default();
    let curve = TaskPolicy { cost_curve: CostCurve::Log, cost_reference_size: 100_000, ..TaskPolicy::default() };
    config.queues.insert("imports".into(), curve);
    let server = TestServer::start_with(config).await;
    let mut client = server.client.clone();
    let sized = |key: &str, size: u64, i: usize| pb::TaskSpec { size, ..spec(key, 0.0, 0, format!("{i}").as_bytes()) };
    let specs = (0..350).flat_map(|i| [sized("small", 100, i), sized("large", 100_000, i)]).collect();
    add_all(&mut client, "imports", specs).await;
    let (mut small, mut large) = (0i64, 0i64);
    for _ in 0..490 {
        let task = poll(&mut client, "imports", WAIT).await.expect("a backlogged queue has a task");
        match task.fairness_key.as_str() {
            "small" => small += 401,
            _ => large += 1000,
        }
        let gap = (small - large).abs();
        assert!(gap <= 1000 + 401, "work of the small job {small}, of the large one {large}");
    }
    assert!((345..=355).contains(&(small / 401)), "{} small chunks of 490", small / 401);
    server.stop().await;
}

/// Tenants as groups, each job its own key, on a queue with a
/// `group_lead` (docs/fairness.md §7e): a tenant's new 100-record job goes
/// within the next dispatches, ahead of its own million-record job, and the
/// tenants' large jobs keep taking turns; on a queue without a lead the same
/// small job waits behind its tenant's large one.
#[tokio::test]
async fn a_tenants_new_job_goes_ahead_of_its_large_one_within_the_group_lead() {
    let mut config = Config::default();
    config.engine.weights.groups = vec!["acme/".into(), "tiny/".into()];
    let curve = TaskPolicy { cost_curve: CostCurve::Log, cost_reference_size: 1_000_000, ..TaskPolicy::default() };
    config.queues.insert("led".into(), TaskPolicy { group_lead: 10_000, ..curve.clone() });
    config.queues.insert("plain".into(), curve);
    let server = TestServer::start_with(config).await;
    let mut client = server.client.clone();
    let sized = |key: &str, size: u64, i: usize| pb::TaskSpec { size, ..spec(key, 0.0, 0, format!("{i}").as_bytes()) };
    for queue in ["led", "plain"] {
        let specs = (0..100).flat_map(|i| [sized("acme/big", 1_000_000, i), sized("tiny/big", 1_000_000, i)]).collect();
        add_all(&mut client, queue, specs).await;
        for _ in 0..10 {
            poll(&mut client, queue, WAIT).await.expect("a backlog");
        }
        add_all(&mut client, queue, vec![sized("acme/small", 100, 0)]).await;
        let mut order = Vec::new();
        while order.len() < 191 {
            let task = poll(&mut client, queue, WAIT).await.expect("a backlog");
            // Completed, so that no lease runs out and brings a task back
            // however slowly the test runs.
            let request = pb::CompleteTaskRequest { lease_token: task.lease_token, result: vec![] };
            client.complete_task(request).await.expect("CompleteTask");
            order.push(task.fairness_key);
        }
        let small = order.iter().position(|k| k == "acme/small").expect("the small job is dispatched");
        if queue == "led" {
            assert!(small <= 2, "with a lead the small job came {}th", small + 1);
        } else {
            assert!(small > 100, "without a lead the small job came {}th, before its tenant's large job", small + 1);
        }
        let big: Vec<&String> = order.iter().filter(|k| k.ends_with("/big")).collect();
        assert!(big.windows(2).all(|w| w[0] != w[1]), "{queue}: the tenants' large jobs take turns: {big:?}");
    }
    server.stop().await;
}

/// The tasks of one AddTasks call are added in the call's order, so a
/// key's tasks come back in it: a thousand tasks of one key in one call,
/// polled back in order. (Each item's add was sent to the partition's
/// writer by an awaited send; past the task's cooperative budget of 128 the
/// rest went out in another order, reversed, and got their ids so.)
#[tokio::test]
async fn the_tasks_of_one_add_call_keep_its_order() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    let specs = (0..1000).map(|i| spec("one", 0.0, 0, format!("{i}").as_bytes())).collect();
    let ids = add_all(&mut client, "batch", specs).await;
    assert!(ids.is_sorted(), "ids in the call's order");
    for i in 0..1000 {
        let task = poll(&mut client, "batch", WAIT).await.expect("a backlog");
        assert_eq!(String::from_utf8_lossy(&task.payload), i.to_string(), "the {i}th task polled");
        let request = pb::CompleteTaskRequest { lease_token: task.lease_token, result: vec![] };
        client.complete_task(request).await.expect("CompleteTask");
    }
    server.stop().await;
}

/// Strict priority over gRPC: everything of priority 1 before any of 5.
#[tokio::test]
async fn priorities_are_strict() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    let mut specs = Vec::new();
    for i in 0..50 {
        specs.push(spec(&format!("k{}", i % 4), 0.0, 5, b"low"));
        specs.push(spec(&format!("k{}", i % 4), 0.0, 1, b"high"));
    }
    add_all(&mut client, "prio", specs).await;
    let mut order = Vec::new();
    while let Some(task) = poll(&mut client, "prio", Duration::from_millis(200)).await {
        order.push(task.priority);
    }
    assert_eq!(order.len(), 100);
    assert!(order[..50].iter().all(|p| *p == 1) && order[50..].iter().all(|p| *p == 5), "{order:?}");
    server.stop().await;
}
