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

pub use assignment::{Failover, LiveNode};
pub use membership::{Heartbeat, Membership};
pub use peers::{FORWARDED, FORWARDED_PARTITION, Peers};

use crate::clock::UnixMillis;
use crate::model::{QueueName, ValidationError, validate};
use crate::store::QueueConfig;

/// Section `[cluster]` of the config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// The address other nodes reach this one at; its name in the cluster.
    /// Empty: the address the server listens on.
    pub advertise: String,
    /// The region this node runs in: the name of the Cassandra datacenter
    /// it is next to (the driver sends its requests there). Empty: the
    /// deployment has one region and names none.
    pub region: String,
    /// The home of queues created without one (CreateQueue's `home`, or an
    /// AddTask that creates its queue). Empty: the creating node's region.
    pub default_home: String,
    /// Who owns a queue's partitions when its home region has no live node:
    /// nobody until an operator moves it (`manual`), or the other regions'
    /// nodes (`automatic`, which needs `SERIAL` fencing and `QUORUM`
    /// writes). See docs/operations.md, "Regions".
    pub failover: Failover,
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
            region: String::new(),
            default_home: String::new(),
            failover: Failover::Manual,
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
        validate::region("cluster.region", &self.region)?;
        validate::region("cluster.default_home", &self.default_home)?;
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

    /// The home of a queue created without one.
    pub fn home_of_new_queues(&self) -> &str {
        if self.default_home.is_empty() { &self.region } else { &self.default_home }
    }
}

/// This node's view of the cluster: its own name and region, and the live
/// nodes with theirs.
#[derive(Debug)]
pub struct ClusterView {
    me: LiveNode,
    failover: Failover,
    /// False on a store only one node can use: that node owns everything.
    shared: bool,
    live: RwLock<Vec<LiveNode>>,
    /// A node whose heartbeat is older than this is dead.
    member_timeout_ms: i64,
}

impl ClusterView {
    /// The one node of an unshared store.
    pub fn single(node: String) -> ClusterView {
        let me = LiveNode { name: node, region: String::new() };
        ClusterView {
            live: RwLock::new(vec![me.clone()]),
            me,
            failover: Failover::Manual,
            shared: false,
            member_timeout_ms: 0,
        }
    }

    /// A node of a cluster, in no named region; it sees only itself until
    /// the first heartbeat.
    pub fn shared(node: String, member_timeout: Duration) -> ClusterView {
        ClusterView {
            shared: true,
            member_timeout_ms: crate::clock::millis(member_timeout),
            ..ClusterView::single(node)
        }
    }

    /// This view for a node of `region`, whose queues fail over as `failover` says.
    pub fn in_region(mut self, region: &str, failover: Failover) -> ClusterView {
        self.me.region = region.to_owned();
        self.failover = failover;
        *self.live.get_mut().unwrap_or_else(|p| p.into_inner()) = vec![self.me.clone()];
        self
    }

    /// The nodes live now according to `members` as just read from the store.
    pub fn live_among(&self, members: &[crate::store::Member], now: UnixMillis) -> Vec<String> {
        assignment::live_nodes(members, now, self.member_timeout_ms)
    }

    /// This node's name: the address other nodes and clients reach it at.
    pub fn node(&self) -> &str {
        &self.me.name
    }

    /// This node's region (empty: none named).
    pub fn region(&self) -> &str {
        &self.me.region
    }

    /// Whether several nodes may share the store (false: this node owns every
    /// partition).
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    fn read_live(&self) -> std::sync::RwLockReadGuard<'_, Vec<LiveNode>> {
        self.live.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The live nodes as last read, sorted, this node among them.
    pub fn live(&self) -> Vec<String> {
        self.read_live().iter().map(|node| node.name.clone()).collect()
    }

    /// Whether `node` is among the live nodes as last read.
    pub fn is_live(&self, node: &str) -> bool {
        self.read_live().iter().any(|n| n.name == node)
    }

    /// The regions of the live nodes, sorted, each once.
    pub fn live_regions(&self) -> Vec<String> {
        let mut regions: Vec<String> = self.read_live().iter().map(|n| n.region.clone()).collect();
        regions.sort();
        regions.dedup();
        regions
    }

    /// Replaces the live set with nodes that name no region (ignored on an
    /// unshared store).
    pub fn set_live(&self, live: Vec<String>) {
        self.set_live_nodes(live.into_iter().map(|name| LiveNode { name, region: String::new() }).collect());
    }

    /// Replaces the live set (ignored on an unshared store); this node is
    /// always in it.
    pub fn set_live_nodes(&self, mut live: Vec<LiveNode>) {
        if !self.shared {
            return;
        }
        if !live.iter().any(|n| n.name == self.me.name) {
            live.push(self.me.clone());
            live.sort();
        }
        *self.live.write().unwrap_or_else(|p| p.into_inner()) = live;
    }

    /// The rightful owner of each partition of a queue of `config` (`None`
    /// where no node may own it: none is live in its home region). On an
    /// unshared store this node owns every partition, wherever the home.
    pub fn owners(&self, queue: &QueueName, config: &QueueConfig) -> Vec<Option<String>> {
        if !self.shared {
            return vec![Some(self.me.name.clone()); config.partitions as usize];
        }
        let eligible = assignment::eligible(&self.read_live(), &config.home, self.failover);
        assignment::owners(queue, config.partition_numbers(), &eligible)
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
