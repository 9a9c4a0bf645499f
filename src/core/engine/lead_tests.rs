//! A group's lead (`group_lead`, docs/fairness.md §2a and §7e): a key of a
//! group with nothing waiting goes ahead of its group's order, and the group
//! stays within its lead of its share.

use std::collections::HashMap;

use proptest::prelude::*;

use super::tests::{Backlog, spec};
use super::{EngineConfig, TaskPolicy};
use crate::core::fairness::{Weights, effective_weight};
use crate::model::{Priority, TaskSpec};

fn config(groups: &[&str], weights: &[(&str, f64)], group_lead: u64) -> EngineConfig {
    EngineConfig {
        weights: Weights {
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            keys: weights.iter().map(|(k, w)| ((*k).to_owned(), *w)).collect(),
            ..Weights::default()
        },
        tasks: TaskPolicy { group_lead, ..TaskPolicy::default() },
        ..EngineConfig::default()
    }
}

fn costed(key: &str, cost: u32) -> TaskSpec {
    TaskSpec { cost, ..spec(key, Priority::DEFAULT) }
}

/// Where each task of `key` came in the dispatch order.
fn places(order: &[String], key: &str) -> Vec<usize> {
    order.iter().enumerate().filter(|(_, k)| *k == key).map(|(i, _)| i).collect()
}

/// Two tenants, each a group with a large job of 100 tasks waiting; then a
/// small job of tenant a. With a lead it goes within the next dispatches
/// (behind at most one task of each tenant); without, behind its tenant's
/// large job. Each job's tasks keep their order either way.
#[test]
fn a_new_key_of_a_group_goes_ahead_of_its_groups_backlog() {
    let run = |group_lead| {
        let mut backlog = Backlog::new(config(&["a/", "b/"], &[], group_lead));
        let large: Vec<TaskSpec> =
            (0..100).flat_map(|_| [spec("a/large", Priority::DEFAULT), spec("b/large", Priority::DEFAULT)]).collect();
        backlog.add(&large);
        for _ in 0..10 {
            backlog.dispatch().expect("a backlog");
        }
        backlog.add(&[spec("a/small", Priority::DEFAULT), spec("a/small", Priority::DEFAULT)]);
        let order: Vec<String> = std::iter::from_fn(|| backlog.dispatch().map(|t| t.fairness_key)).collect();
        assert_eq!(order.len(), 192);
        order
    };
    let with = run(10);
    let small = places(&with, "a/small");
    assert!(small[0] <= 2, "the small job's first task goes within the next dispatches: {small:?}");
    assert!(small[1] > 100, "its second waits in its group's order: {small:?}");
    let without = run(0);
    assert!(places(&without, "a/small")[0] > 100, "without a lead, behind the large job");
    // The tenants' large jobs still take turns.
    let large: Vec<&String> = with.iter().filter(|k| k.ends_with("large")).collect();
    assert!(large.windows(2).all(|w| w[0] != w[1]), "{large:?}");
}

/// A group that has spent its lead queues its new keys in its order until
/// the ack level passes the places the earlier ones were charged at.
#[test]
fn a_group_without_lead_left_queues_its_new_keys() {
    let mut backlog = Backlog::new(config(&["a/", "b/"], &[], 2));
    let large: Vec<TaskSpec> = (0..50).flat_map(|_| [costed("a/large", 1), costed("b/large", 1)]).collect();
    backlog.add(&large);
    backlog.add(&[costed("a/one", 1), costed("a/two", 1), costed("a/three", 1)]);
    let order: Vec<String> = std::iter::from_fn(|| backlog.dispatch().map(|t| t.fairness_key)).collect();
    assert!(places(&order, "a/one")[0] <= 2 && places(&order, "a/two")[0] <= 3, "{:?}", &order[..6]);
    assert!(places(&order, "a/three")[0] > 90, "the lead of 2 is spent: in a's order");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Groups `g/` and `h/` and a key of its own, `solo`, each kept
    /// backlogged by a large job; new small jobs of `g/` (one task each, of
    /// cost 1 to 100) arrive between dispatches. At every step the work
    /// dispatched keeps the bound of §7b, widened by `g/`'s lead for the
    /// pairs with `g/` (§7e), and every job's tasks go in order.
    #[test]
    fn a_group_stays_within_its_lead_of_its_share(
        weights in (0.5f64..4.0, 0.5f64..4.0, 0.5f64..4.0),
        lead in 0u64..400,
        arrivals in prop::collection::vec((0usize..4, 1u32..=100), 50..300),
        large_cost in 1u32..=100,
    ) {
        let (wg, wh, ws) = weights;
        let mut backlog = Backlog::new(config(&["g/", "h/"], &[("g/", wg), ("h/", wh), ("solo", ws)], lead));
        let large = ["g/large", "h/large", "solo"];
        let mut waiting: HashMap<&str, usize> = HashMap::new();
        let mut added: HashMap<String, Vec<usize>> = HashMap::new();
        let mut next_id = 0usize;
        let mut add = |backlog: &mut Backlog, key: &str, cost: u32, added: &mut HashMap<String, Vec<usize>>| {
            let task = TaskSpec { payload: next_id.to_le_bytes().to_vec(), ..costed(key, cost) };
            backlog.add(&[task]);
            added.entry(key.to_owned()).or_default().push(next_id);
            next_id += 1;
        };
        for key in large {
            for _ in 0..3 {
                add(&mut backlog, key, large_cost, &mut added);
            }
            waiting.insert(key, 3);
        }
        // Work per share, divided by its weight, after each dispatch.
        let share_of = |key: &str| if key.starts_with("g/") { 0 } else if key.starts_with("h/") { 1 } else { 2 };
        let w = [effective_weight(wg), effective_weight(wh), effective_weight(ws)];
        let mut work = [0.0f64; 3];
        let (mut lo, mut hi) = ([[0.0f64; 3]; 3], [[0.0f64; 3]; 3]);
        let mut dispatched: HashMap<String, Vec<usize>> = HashMap::new();
        let mut small_jobs = 0;
        for (gap, cost) in arrivals {
            if gap == 0 {
                add(&mut backlog, &format!("g/small-{small_jobs}"), cost, &mut added);
                small_jobs += 1;
            }
            let task = backlog.dispatch().expect("three large jobs are always waiting");
            let id = usize::from_le_bytes(task.payload[..8].try_into().unwrap());
            dispatched.entry(task.fairness_key.clone()).or_default().push(id);
            work[share_of(&task.fairness_key)] += f64::from(task.cost);
            if let Some(left) = waiting.get_mut(task.fairness_key.as_str()) {
                add(&mut backlog, &task.fairness_key, large_cost, &mut added);
                *left = 3;
            }
            for i in 0..3 {
                for j in 0..3 {
                    let f = work[i] / w[i] - work[j] / w[j];
                    lo[i][j] = lo[i][j].min(f);
                    hi[i][j] = hi[i][j].max(f);
                }
            }
        }
        let largest = [100.0f64, f64::from(large_cost), f64::from(large_cost)];
        for i in 0..3 {
            for j in i + 1..3 {
                let lead_term = if i == 0 { lead as f64 / w[0] } else { 0.0 };
                let bound = largest[i] / w[i] + largest[j] / w[j] + lead_term;
                prop_assert!(hi[i][j] - lo[i][j] <= bound + 1e-9,
                    "shares {i} and {j}: spread {} over the bound {bound} (lead {lead})", hi[i][j] - lo[i][j]);
            }
        }
        for (key, ids) in &dispatched {
            prop_assert!(ids.is_sorted(), "{key}'s tasks out of order: {ids:?}");
            prop_assert_eq!(&added[key][..ids.len()], &ids[..], "{}", key);
        }
    }
}
