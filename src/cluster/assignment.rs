//! Who should own which partition: rendezvous hashing over the live nodes.
//! Pure: every node that sees the same live set computes the same owners,
//! and a change of membership moves only the partitions of the nodes that
//! came or went.

use crate::clock::UnixMillis;
use crate::model::PartitionId;
use crate::store::Member;

/// The nodes whose last heartbeat is younger than `timeout_ms`, sorted.
pub fn live_nodes(members: &[Member], now: UnixMillis, timeout_ms: i64) -> Vec<String> {
    let mut live: Vec<String> =
        members.iter().filter(|m| now - m.heartbeat_unix_ms < timeout_ms).map(|m| m.node.clone()).collect();
    live.sort();
    live.dedup();
    live
}

/// The live node with the highest score for the partition.
pub fn owner<'a>(partition: &PartitionId, live: &'a [String]) -> Option<&'a str> {
    live.iter().max_by_key(|node| (score(node, partition), node.as_str())).map(String::as_str)
}

fn score(node: &str, partition: &PartitionId) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in node.bytes().chain([0]).chain(partition.queue.as_str().bytes()).chain([0]) {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= u64::from(partition.partition);
    // splitmix64 finaliser: spreads nearby inputs.
    h = h.wrapping_add(0x9E37_79B9_7F4A_7C15);
    h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::validate;

    fn partitions(n: u32) -> Vec<PartitionId> {
        let queue = validate::queue_name("queue", "visits.git").unwrap();
        (0..n).map(|partition| PartitionId { queue: queue.clone(), partition }).collect()
    }

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

    #[test]
    fn every_node_agrees_and_the_load_spreads() {
        let live = nodes(&["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]);
        let mut shuffled = live.clone();
        shuffled.reverse();
        let mut counts = std::collections::HashMap::new();
        for partition in partitions(300) {
            let chosen = owner(&partition, &live).unwrap();
            assert_eq!(Some(chosen), owner(&partition, &shuffled), "the order of the list does not matter");
            *counts.entry(chosen.to_owned()).or_insert(0) += 1;
        }
        assert_eq!(counts.len(), 3);
        assert!(counts.values().all(|&c| (70..=130).contains(&c)), "{counts:?}");
    }

    #[test]
    fn a_departure_moves_only_the_departed_nodes_partitions() {
        let three = nodes(&["a", "b", "c"]);
        let two = nodes(&["a", "c"]);
        for partition in partitions(200) {
            let before = owner(&partition, &three).unwrap();
            let after = owner(&partition, &two).unwrap();
            if before != "b" {
                assert_eq!(before, after);
            }
        }
        assert_eq!(owner(&partitions(1)[0], &[]), None);
    }
}
