//! Who should own which partition: rendezvous hashing with bounded load
//! over the live nodes. Every (partition, node) pair has a score; pairs are
//! taken from the highest score down, and a node takes at most
//! ⌈partitions / nodes⌉ partitions of a queue. Pure: every node that sees
//! the same live set computes the same owners; the load is as even as it can
//! be; and a change of membership moves few partitions besides those of the
//! nodes that came or went.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::clock::UnixMillis;
use crate::hash::{fnv1a, splitmix64};
use crate::model::{PartitionId, QueueName};
use crate::store::Member;

/// A node counted live, its region and its address.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LiveNode {
    /// Its name (`cluster.node_id`, else the address it is reached at).
    pub name: String,
    /// Its region (`cluster.region`; empty: none named).
    pub region: String,
    /// The address it is reached at (empty: its name is the address).
    address: String,
}

impl LiveNode {
    /// A node of `region` whose name is its address.
    pub fn named(name: impl Into<String>, region: impl Into<String>) -> LiveNode {
        LiveNode { name: name.into(), region: region.into(), address: String::new() }
    }

    /// This node reached at `address` (its name, when empty).
    pub fn reached_at(mut self, address: impl Into<String>) -> LiveNode {
        self.address = address.into();
        self
    }

    /// The `HOST:PORT` other nodes reach it at.
    pub fn address(&self) -> &str {
        if self.address.is_empty() { &self.name } else { &self.address }
    }
}

/// How the partitions of a queue homed in one region are owned when that
/// region has no live node (section `[cluster]`, key `failover`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Failover {
    /// Only nodes of the home region own its partitions: the fence is that
    /// region's Paxos (`LOCAL_SERIAL` may be used), and moving the home is
    /// an operator's act (a graceful move, or a forced failover).
    #[default]
    Manual,
    /// The home region's nodes own its partitions while any is live, the
    /// other regions' nodes when none is: the fence must be global
    /// (`SERIAL`, writes at `QUORUM`), so that no region cut off from the
    /// others can fence or acknowledge on its own.
    Automatic,
}

/// The members whose last heartbeat is younger than `timeout_ms`, sorted by name.
pub fn live_members(members: &[Member], now: UnixMillis, timeout_ms: i64) -> Vec<LiveNode> {
    let mut live: Vec<LiveNode> = members
        .iter()
        .filter(|m| now - m.heartbeat_unix_ms < timeout_ms)
        .map(|m| LiveNode { name: m.node.clone(), region: m.region.clone(), address: m.address.clone() })
        .collect();
    live.sort();
    live.dedup_by(|a, b| a.name == b.name);
    live
}

/// The members other than `me` counted live whose heartbeat has not been
/// written for `silent_ms` or more (a live node writes one every heartbeat
/// interval): those whose address is worth asking whether a process still
/// listens there.
pub fn silent_members<'a>(
    members: &'a [Member],
    me: &str,
    now: UnixMillis,
    silent_ms: i64,
    timeout_ms: i64,
) -> Vec<&'a Member> {
    members.iter().filter(|m| m.node != me && (silent_ms..timeout_ms).contains(&(now - m.heartbeat_unix_ms))).collect()
}

/// The names of the nodes whose last heartbeat is younger than `timeout_ms`, sorted.
pub fn live_nodes(members: &[Member], now: UnixMillis, timeout_ms: i64) -> Vec<String> {
    live_members(members, now, timeout_ms).into_iter().map(|node| node.name).collect()
}

/// The live nodes that may own the partitions of a queue homed in `home`:
/// those of `home`; under [`Failover::Automatic`], every live node when
/// `home` has none. Under automatic failover the nodes in `settling` (back
/// after they were counted dead, for less than `cluster.failback_after`)
/// own nothing while a steady node is live: the others keep what they took
/// until the returning nodes' links have held for a while (a region whose
/// heartbeats land again can still fail its first fences for seconds).
pub fn eligible(live: &[LiveNode], home: &str, failover: Failover, settling: &[String]) -> Vec<String> {
    let names = |nodes: Vec<&LiveNode>| nodes.into_iter().map(|n| n.name.clone()).collect::<Vec<String>>();
    if failover == Failover::Manual {
        return names(live.iter().filter(|n| n.region == home).collect());
    }
    let mut steady: Vec<&LiveNode> = live.iter().filter(|n| !settling.contains(&n.name)).collect();
    if steady.is_empty() {
        // Every live node is settling: none is steadier than another.
        steady = live.iter().collect();
    }
    let at_home: Vec<&LiveNode> = steady.iter().copied().filter(|n| n.region == home).collect();
    names(if at_home.is_empty() { steady } else { at_home })
}

/// The owner of each partition `numbers` of `queue`, by index from
/// `numbers.start` (`None` when no node is live).
pub fn owners(queue: &QueueName, numbers: Range<u32>, live: &[String]) -> Vec<Option<String>> {
    let first = numbers.start;
    let mut owners: Vec<Option<String>> = vec![None; numbers.len()];
    if live.is_empty() {
        return owners;
    }
    let cap = owners.len().div_ceil(live.len());
    let mut pairs: Vec<(u64, u32, usize)> = numbers
        .flat_map(|partition| {
            let id = PartitionId { queue: queue.clone(), partition };
            live.iter().enumerate().map(move |(node, name)| (score(name, &id), partition, node))
        })
        .collect();
    pairs.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| live[a.2].cmp(&live[b.2])).then(a.1.cmp(&b.1)));
    let mut load = vec![0usize; live.len()];
    for (_, partition, node) in pairs {
        let slot = &mut owners[(partition - first) as usize];
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
        let member = |node: &str, heartbeat| Member {
            node: node.into(),
            address: String::new(),
            region: String::new(),
            started_unix_ms: 0,
            heartbeat_unix_ms: heartbeat,
        };
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
            let chosen = owners(&queue(), 0..partitions, &live);
            assert_eq!(chosen, owners(&queue(), 0..partitions, &shuffled), "the order of the list does not matter");
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
        let three = owners(&queue(), 0..200, &nodes(&["a", "b", "c"]));
        let two = owners(&queue(), 0..200, &nodes(&["a", "c"]));
        let kept =
            three.iter().zip(&two).filter(|(before, after)| before.as_deref() != Some("b") && before == after).count();
        let others = three.iter().filter(|o| o.as_deref() != Some("b")).count();
        assert!(kept * 10 >= others * 8, "only {kept} of {others} partitions stayed where they were");
        assert_eq!(owners(&queue(), 0..2, &[]), vec![None, None]);
    }

    fn in_regions(nodes: &[(&str, &str)]) -> Vec<LiveNode> {
        nodes.iter().map(|(name, region)| LiveNode::named(*name, *region)).collect()
    }

    #[test]
    fn a_queue_is_owned_in_its_home_region_only() {
        let live = in_regions(&[("a1", "a"), ("a2", "a"), ("b1", "b"), ("c1", "c")]);
        for failover in [Failover::Manual, Failover::Automatic] {
            assert_eq!(eligible(&live, "a", failover, &[]), nodes(&["a1", "a2"]));
            assert_eq!(eligible(&live, "b", failover, &[]), nodes(&["b1"]));
        }
        let chosen = owners(&queue(), 0..64, &eligible(&live, "a", Failover::Manual, &[]));
        assert!(chosen.iter().all(|o| matches!(o.as_deref(), Some("a1" | "a2"))), "{chosen:?}");
        // Nobody at home: manual leaves the queue unowned, automatic gives it to the others.
        assert!(eligible(&live, "d", Failover::Manual, &[]).is_empty());
        assert_eq!(eligible(&live, "d", Failover::Automatic, &[]), nodes(&["a1", "a2", "b1", "c1"]));
        // No region named: the nodes that name none.
        assert!(eligible(&live, "", Failover::Manual, &[]).is_empty());
        assert_eq!(eligible(&in_regions(&[("x", ""), ("y", "")]), "", Failover::Manual, &[]), nodes(&["x", "y"]));
    }

    #[test]
    fn under_automatic_failover_a_returning_home_node_owns_nothing_until_it_has_settled() {
        let live = in_regions(&[("a1", "a"), ("b1", "b"), ("c1", "c")]);
        let back = nodes(&["a1"]);
        assert_eq!(eligible(&live, "a", Failover::Automatic, &back), nodes(&["b1", "c1"]), "b and c keep it");
        assert_eq!(eligible(&live, "a", Failover::Automatic, &[]), nodes(&["a1"]), "settled: home again");
        assert_eq!(eligible(&live, "a", Failover::Manual, &back), nodes(&["a1"]), "manual: nobody else may");
        let home_and_back = in_regions(&[("a1", "a"), ("a2", "a"), ("b1", "b")]);
        assert_eq!(eligible(&home_and_back, "a", Failover::Automatic, &back), nodes(&["a2"]), "a steady home node");
        assert_eq!(eligible(&live, "a", Failover::Automatic, &nodes(&["a1", "b1", "c1"])), nodes(&["a1"]));
    }

    #[test]
    fn silent_members_are_live_others_past_two_intervals() {
        let member = |node: &str, heartbeat| Member {
            node: node.into(),
            address: String::new(),
            region: String::new(),
            started_unix_ms: 0,
            heartbeat_unix_ms: heartbeat,
        };
        let members = [member("me", 1_000), member("fresh", 9_000), member("silent", 7_000), member("dead", 3_000)];
        let silent = silent_members(&members, "me", 10_000, 2_000, 6_000);
        assert_eq!(silent.iter().map(|m| m.node.as_str()).collect::<Vec<_>>(), ["silent"]);
    }

    #[test]
    fn the_live_set_keeps_each_node_s_region() {
        let member = |node: &str, region: &str, heartbeat| Member {
            node: node.into(),
            address: String::new(),
            region: region.into(),
            started_unix_ms: 0,
            heartbeat_unix_ms: heartbeat,
        };
        let members = [member("b1", "b", 9_000), member("a1", "a", 9_500), member("a2", "a", 1_000)];
        assert_eq!(live_members(&members, 10_000, 2_000), in_regions(&[("a1", "a"), ("b1", "b")]));
    }
}
