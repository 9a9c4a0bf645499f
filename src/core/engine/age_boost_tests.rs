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
