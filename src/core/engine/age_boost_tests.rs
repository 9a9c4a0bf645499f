//! The age boost (`age_boost`, docs/fairness.md §7f): older tasks compete
//! ahead of their pass, within the boost's bound, each key's tasks in order.

use std::time::Duration;

use super::tests::{Backlog, spec};
use super::{DispatchOrder, EngineConfig, TaskPolicy};
use crate::model::{Priority, TaskSpec};

fn boosted(age_boost: u32, ordering: DispatchOrder) -> EngineConfig {
    let tasks = TaskPolicy { max_wait: Duration::from_secs(100), age_boost, ordering, ..TaskPolicy::default() };
    EngineConfig { tasks, ..EngineConfig::default() }
}

/// Two keys of equal weight, 40 tasks each: `old`'s added at 0 s, `new`'s
/// at 99.9 s, dispatched at 100 s, when `old`'s have waited `max_wait` and
/// `new`'s a tenth of a second. Returns the keys in dispatch order, each
/// key's payloads checked to come in the order they were added.
fn run(config: EngineConfig) -> Vec<String> {
    let mut backlog = Backlog::new(config);
    let numbered = |key: &str, i: u32| TaskSpec { payload: i.to_le_bytes().to_vec(), ..spec(key, Priority::DEFAULT) };
    backlog.add(&(0..40).map(|i| numbered("old", i)).collect::<Vec<_>>());
    backlog.now = 99_900;
    backlog.add(&(0..40).map(|i| numbered("new", i)).collect::<Vec<_>>());
    backlog.now = 100_000;
    let mut order = Vec::new();
    let mut next = std::collections::HashMap::new();
    while let Some(task) = backlog.dispatch() {
        let i = u32::from_le_bytes(task.payload[..4].try_into().unwrap());
        let expected = next.entry(task.fairness_key.clone()).or_insert(0u32);
        assert_eq!(i, *expected, "{}'s tasks out of order", task.fairness_key);
        *expected += 1;
        order.push(task.fairness_key);
    }
    assert_eq!(order.len(), 80);
    order
}

/// How far `old` is ahead of `new`, at most, over every prefix.
fn most_ahead(order: &[String]) -> i64 {
    let mut lead = 0i64;
    let mut most = 0;
    for key in order {
        lead += if key == "old" { 1 } else { -1 };
        most = most.max(lead);
    }
    most
}

#[test]
fn older_tasks_go_ahead_by_at_most_the_boost() {
    // Without a boost the keys alternate: one task ahead at most.
    assert_eq!(most_ahead(&run(boosted(0, DispatchOrder::Fair))), 1);
    // With a boost of 4 strides the old key's tasks compete 4 strides
    // ahead (the new key's, a tenth of a second old, a few hundredths of
    // a stride): the old key goes 4 tasks ahead, never more, and keeps
    // that lead while both wait.
    let order = run(boosted(4, DispatchOrder::Fair));
    assert_eq!(&order[..5], ["old", "old", "old", "old", "new"], "{order:?}");
    assert_eq!(most_ahead(&order), 4, "four strides ahead, never more: {order:?}");
    let tail: Vec<&String> = order[4..76].iter().collect();
    assert!(tail.windows(2).all(|w| w[0] != w[1]), "then the keys alternate, four apart: {order:?}");
    // FIFO ordering ignores it.
    let fifo = run(boosted(4, DispatchOrder::Fifo));
    assert!(fifo[..40].iter().all(|k| k == "old"), "order of arrival");
}

/// A boost only reorders what is buffered; out of order, the dispatched
/// marks above the ack level stay within `park_after`.
#[test]
fn boosted_dispatch_keeps_the_marks_above_the_ack_level_bounded() {
    let config = EngineConfig { park_after: 3, buffer_tasks: 64, reload_at: 8, ..boosted(50, DispatchOrder::Fair) };
    let mut backlog = Backlog::new(config);
    backlog.add(&(0..30).map(|_| spec("old", Priority::DEFAULT)).collect::<Vec<_>>());
    backlog.now = 199_000;
    backlog.add(&(0..30).map(|_| spec("new", Priority::DEFAULT)).collect::<Vec<_>>());
    backlog.now = 200_000;
    let mut order = Vec::new();
    while let Some(task) = backlog.dispatch() {
        order.push(task.fairness_key);
        let snapshot = backlog.engine.snapshot(0, backlog.now);
        let above = snapshot.subqueues.iter().map(|s| s.dispatched_above_ack).max().unwrap_or(0);
        assert!(above <= 3, "{above} dispatched above the ack level after {order:?}");
    }
    assert_eq!(order.len(), 60);
    assert_eq!(&order[..5], ["old", "old", "old", "old", "new"], "out of order up to park_after, then in order");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// Keys of random weights and costs, each kept backlogged, their tasks
    /// added at random moments and dispatched as the clock moves on: at
    /// every step the work dispatched keeps §7b's bound widened by the
    /// boost (§7f), and every key's tasks go in order.
    #[test]
    fn keys_stay_within_the_boost_of_their_share(
        keys in proptest::collection::vec((0.5f64..4.0, 1u32..=20), 2..6),
        age_boost in 0u32..6,
        steps in proptest::collection::vec((0usize..6, 0i64..3_000), 100..400),
    ) {
        use crate::core::fairness::effective_weight;
        let names: Vec<String> = (0..keys.len()).map(|i| format!("k{i}")).collect();
        let mut config = boosted(age_boost, DispatchOrder::Fair);
        config.weights.keys = names.iter().cloned().zip(keys.iter().map(|k| k.0)).collect();
        let mut backlog = Backlog::new(config);
        let mut next_id = vec![0u32; keys.len()];
        let add = |backlog: &mut Backlog, key: usize, next_id: &mut [u32]| {
            let task = TaskSpec { payload: next_id[key].to_le_bytes().to_vec(), cost: keys[key].1, ..spec(&names[key], Priority::DEFAULT) };
            backlog.add(&[task]);
            next_id[key] += 1;
        };
        for key in 0..keys.len() {
            for _ in 0..3 {
                add(&mut backlog, key, &mut next_id);
            }
        }
        let w: Vec<f64> = keys.iter().map(|k| effective_weight(k.0)).collect();
        let mut work = vec![0.0f64; keys.len()];
        let (mut lo, mut hi) = (vec![vec![0.0f64; keys.len()]; keys.len()], vec![vec![0.0f64; keys.len()]; keys.len()]);
        let mut seen = vec![0u32; keys.len()];
        for (extra, advance_ms) in steps {
            backlog.now += advance_ms;
            if extra < keys.len() {
                add(&mut backlog, extra, &mut next_id);
            }
            let task = backlog.dispatch().expect("every key is kept backlogged");
            let key: usize = task.fairness_key[1..].parse().unwrap();
            let i = u32::from_le_bytes(task.payload[..4].try_into().unwrap());
            proptest::prop_assert_eq!(i, seen[key], "k{}'s tasks out of order", key);
            seen[key] += 1;
            work[key] += f64::from(task.cost);
            add(&mut backlog, key, &mut next_id);
            for a in 0..keys.len() {
                for b in 0..keys.len() {
                    let f = work[a] / w[a] - work[b] / w[b];
                    lo[a][b] = lo[a][b].min(f);
                    hi[a][b] = hi[a][b].max(f);
                }
            }
        }
        for a in 0..keys.len() {
            for b in a + 1..keys.len() {
                let bound = f64::from(keys[a].1) / w[a] + f64::from(keys[b].1) / w[b] + f64::from(age_boost);
                proptest::prop_assert!(hi[a][b] - lo[a][b] <= bound + 1e-9,
                    "k{a} and k{b}: spread {} over the bound {bound} (boost {age_boost})", hi[a][b] - lo[a][b]);
            }
        }
    }
}
