//! Who should own which partition: rendezvous hashing with bounded load
//! over the live nodes. Every (partition, node) pair has a score; pairs are
//! taken from the highest score down, and a node takes at most
//! ⌈partitions / nodes⌉ partitions of a queue. Pure: every node that sees
//! the same live set computes the same owners; the load is as even as it can
//! be; and a change of membership moves few partitions besides those of the
//! nodes that came or went.

use crate::clock::UnixMillis;
use crate::hash::{fnv1a, splitmix64};
use crate::model::{PartitionId, QueueName};
use crate::store::Member;

/// The nodes whose last heartbeat is younger than `timeout_ms`, sorted.
pub fn live_nodes(members: &[Member], now: UnixMillis, timeout_ms: i64) -> Vec<String> {
    let mut live: Vec<String> =
        members.iter().filter(|m| now - m.heartbeat_unix_ms < timeout_ms).map(|m| m.node.clone()).collect();
    live.sort();
    live.dedup();
    live
}

/// The owner of each partition `0..partitions` of `queue` (`None` when no
/// node is live).
pub fn owners(queue: &QueueName, partitions: u32, live: &[String]) -> Vec<Option<String>> {
    let mut owners: Vec<Option<String>> = vec![None; partitions as usize];
    if live.is_empty() {
        return owners;
    }
    let cap = (partitions as usize).div_ceil(live.len());
    let mut pairs: Vec<(u64, u32, usize)> = (0..partitions)
        .flat_map(|partition| {
            let id = PartitionId { queue: queue.clone(), partition };
            live.iter().enumerate().map(move |(node, name)| (score(name, &id), partition, node))
        })
        .collect();
    pairs.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| live[a.2].cmp(&live[b.2])).then(a.1.cmp(&b.1)));
    let mut load = vec![0usize; live.len()];
    for (_, partition, node) in pairs {
        let slot = &mut owners[partition as usize];
        if slot.is_none() && load[node] < cap {
            *slot = Some(live[node].clone());
            load[node] += 1;
        }
    }
    owners
}

fn score(node: &str, partition: &PartitionId) -> u64 {
    let key = node.bytes().chain([0]).chain(partition.queue.as_str().bytes()).chain([0]);
    splitmix64(fnv1a(key) ^ u64::from(partition.partition))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::validate;

    fn nodes(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn liveness_follows_the_heartbeat() {
        let member =
            |node: &str, heartbeat| Member { node: node.into(), started_unix_ms: 0, heartbeat_unix_ms: heartbeat };
        let members = [member("b", 9_000), member("a", 5_000), member("c", 9_500)];
        assert_eq!(live_nodes(&members, 10_000, 2_000), nodes(&["b", "c"]));
        assert_eq!(live_nodes(&members, 10_000, 6_000), nodes(&["a", "b", "c"]));
    }

    fn queue() -> QueueName {
        validate::queue_name("queue", "visits.git").unwrap()
    }

    #[test]
    fn every_node_agrees_and_the_load_is_even() {
        let live = nodes(&["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]);
        let mut shuffled = live.clone();
        shuffled.reverse();
        for partitions in [1, 2, 8, 9, 300] {
            let chosen = owners(&queue(), partitions, &live);
            assert_eq!(chosen, owners(&queue(), partitions, &shuffled), "the order of the list does not matter");
            let mut counts = std::collections::HashMap::new();
            for owner in &chosen {
                *counts.entry(owner.clone().unwrap()).or_insert(0u32) += 1;
            }
            let cap = partitions.div_ceil(3);
            assert!(counts.values().all(|&c| c <= cap), "{partitions}: {counts:?}");
            if partitions >= 3 {
                assert_eq!(counts.len(), 3, "{partitions}: every node gets some: {counts:?}");
            }
        }
    }

    #[test]
    fn a_departure_moves_few_other_partitions() {
        let three = owners(&queue(), 200, &nodes(&["a", "b", "c"]));
        let two = owners(&queue(), 200, &nodes(&["a", "c"]));
        let kept =
            three.iter().zip(&two).filter(|(before, after)| before.as_deref() != Some("b") && before == after).count();
        let others = three.iter().filter(|o| o.as_deref() != Some("b")).count();
        assert!(kept * 10 >= others * 8, "only {kept} of {others} partitions stayed where they were");
        assert_eq!(owners(&queue(), 2, &[]), vec![None, None]);
    }
}
