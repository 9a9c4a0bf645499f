//! Several nodes on one store: who is alive, who should own which partition,
//! and when this node must stop handing out tasks.
//!
//! Each node writes a heartbeat to the store and reads everyone's; a node is
//! live while its heartbeat is fresher than `cluster.member_timeout`. Every
//! partition has one rightful owner among the live nodes (rendezvous
//! hashing, [`assignment`]); that node takes it with the range-id
//! compare-and-set, and a node that is no longer the rightful owner hands it
//! over. Invariant kept by [`DispatchGate`]: a node whose own heartbeat may
//! have gone stale (it paused, or lost the store) hands out nothing until it
//! has written a fresh one, so that it does not dispatch from partitions that
//! others may have taken meanwhile.
//!
//! On the embedded store there is one node, which owns everything.

pub mod assignment;
mod membership;
mod peers;

use std::sync::RwLock;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use membership::{Heartbeat, Membership};
pub use peers::{FORWARDED, FORWARDED_PARTITION, Peers};

use crate::clock::UnixMillis;
use crate::model::{QueueName, ValidationError};

/// Section `[cluster]` of the config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// The address other nodes reach this one at; its name in the cluster.
    /// Empty: the address the server listens on.
    pub advertise: String,
    /// How often this node writes its heartbeat and reads the others'.
    #[serde(with = "crate::config::duration_serde")]
    pub heartbeat_interval: Duration,
    /// A node whose heartbeat is older than this is dead to the others.
    #[serde(with = "crate::config::duration_serde")]
    pub member_timeout: Duration,
    /// How often a node takes and hands over partitions to match the live set.
    #[serde(with = "crate::config::duration_serde")]
    pub rebalance_interval: Duration,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            advertise: String::new(),
            heartbeat_interval: Duration::from_secs(1),
            member_timeout: Duration::from_secs(6),
            rebalance_interval: Duration::from_secs(1),
        }
    }
}

impl ClusterConfig {
    /// Checks section `[cluster]`; the error names the key.
    pub fn validate(&self) -> Result<(), ValidationError> {
        for (key, d) in [
            ("cluster.heartbeat_interval", self.heartbeat_interval),
            ("cluster.rebalance_interval", self.rebalance_interval),
        ] {
            if d.is_zero() {
                return Err(ValidationError::new(key, "must be longer than 0s"));
            }
        }
        if self.member_timeout < self.heartbeat_interval * 3 {
            return Err(ValidationError::new(
                "cluster.member_timeout",
                "must be at least three cluster.heartbeat_interval, so that one late heartbeat does not evict a node",
            ));
        }
        let advertise_ok = self.advertise.is_empty()
            || self
                .advertise
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0));
        if !advertise_ok {
            return Err(ValidationError::new(
                "cluster.advertise",
                "must be HOST:PORT, e.g. 10.0.0.5:7070 or fairway-0.fairway:7070",
            ));
        }
        Ok(())
    }
}

/// This node's view of the cluster: its own name and the live nodes.
#[derive(Debug)]
pub struct ClusterView {
    node: String,
    /// False on a store only one node can use: that node owns everything.
    shared: bool,
    live: RwLock<Vec<String>>,
    /// A node whose heartbeat is older than this is dead.
    member_timeout_ms: i64,
}

impl ClusterView {
    /// The one node of an unshared store.
    pub fn single(node: String) -> ClusterView {
        ClusterView { live: RwLock::new(vec![node.clone()]), node, shared: false, member_timeout_ms: 0 }
    }

    /// A node of a cluster; it sees only itself until the first heartbeat.
    pub fn shared(node: String, member_timeout: Duration) -> ClusterView {
        let member_timeout_ms = crate::clock::millis(member_timeout);
        ClusterView { live: RwLock::new(vec![node.clone()]), node, shared: true, member_timeout_ms }
    }

    /// The nodes live now according to `members` as just read from the store.
    pub fn live_among(&self, members: &[crate::store::Member], now: UnixMillis) -> Vec<String> {
        assignment::live_nodes(members, now, self.member_timeout_ms)
    }

    /// This node's name: the address other nodes and clients reach it at.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Whether several nodes may share the store (false: this node owns every
    /// partition).
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The live nodes as last read, sorted, this node among them.
    pub fn live(&self) -> Vec<String> {
        self.live.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether `node` is among the live nodes as last read.
    pub fn is_live(&self, node: &str) -> bool {
        self.live.read().unwrap_or_else(|p| p.into_inner()).iter().any(|n| n == node)
    }

    /// Replaces the live set (ignored on an unshared store).
    pub fn set_live(&self, live: Vec<String>) {
        if self.shared {
            *self.live.write().unwrap_or_else(|p| p.into_inner()) = live;
        }
    }

    /// The rightful owner of each partition of a queue of `partitions`
    /// partitions (`None` if no node is live).
    pub fn owners(&self, queue: &QueueName, partitions: u32) -> Vec<Option<String>> {
        let live = self.live.read().unwrap_or_else(|p| p.into_inner());
        assignment::owners(queue, partitions, &live)
    }
}

/// Open while this node is surely still a live member in everyone's eyes.
#[derive(Debug)]
pub struct DispatchGate {
    open_until: AtomicI64,
}

impl DispatchGate {
    /// A gate that never closes (one node on an unshared store).
    pub fn always_open() -> DispatchGate {
        DispatchGate { open_until: AtomicI64::new(i64::MAX) }
    }

    /// A gate closed until the first heartbeat.
    pub fn closed() -> DispatchGate {
        DispatchGate { open_until: AtomicI64::new(i64::MIN) }
    }

    /// Keeps the gate open until `until` (ms since the Unix epoch), and closed
    /// from then on; `i64::MIN` closes it now.
    pub fn open_until(&self, until: UnixMillis) {
        self.open_until.store(until, Ordering::Release);
    }

    /// Whether this node may dispatch at `now`: strictly before the time the
    /// gate is open until.
    pub fn is_open(&self, now: UnixMillis) -> bool {
        now < self.open_until.load(Ordering::Acquire)
    }
}
