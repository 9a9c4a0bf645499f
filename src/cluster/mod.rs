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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use assignment::{Failover, LiveNode};
pub use membership::{Heartbeat, Membership, NameTaken};
pub use peers::{CLIENT_MAX_MESSAGE_BYTES, FORWARDED, FORWARDED_PARTITION, PeerError, Peers, refuses_connections};

use crate::clock::UnixMillis;
use crate::model::{QueueName, ValidationError, validate};
use crate::store::QueueConfig;

/// The longest `cluster.node_id` (a DNS name's length).
const MAX_NODE_ID_BYTES: usize = 253;

/// The longest `cluster.forward_timeout`.
const MAX_FORWARD_TIMEOUT: Duration = Duration::from_secs(300);

/// Section `[cluster]` of the config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// This node's name in the cluster, which the partitions it owns record:
    /// one that stays the same when the node restarts under another address
    /// (a StatefulSet pod's name, `fairway-0`), so that it takes its own
    /// partitions back at once. Empty: its address (`advertise`).
    pub node_id: String,
    /// The address other nodes reach this one at. Empty: the address the
    /// server listens on.
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
    #[serde(with = "crate::clock::duration_serde")]
    pub heartbeat_interval: Duration,
    /// A node whose heartbeat is older than this is dead to the others.
    #[serde(with = "crate::clock::duration_serde")]
    pub member_timeout: Duration,
    /// How often a node takes and hands over partitions to match the live set.
    #[serde(with = "crate::clock::duration_serde")]
    pub rebalance_interval: Duration,
    /// Under automatic failover, how long a node that came back (counted
    /// dead, then live again) waits before it takes partitions from the
    /// nodes that took them meanwhile: its links can still fail its first
    /// fences for seconds after its heartbeats land again. 0: at once.
    #[serde(with = "crate::clock::duration_serde")]
    pub failback_after: Duration,
    /// How long a node waits for another node's answer to a request it
    /// forwarded there (beyond a poll's own wait) before it gives up: a
    /// paused or cut-off owner costs a client this, not a hang. An add or a
    /// completion given up on may have been applied. Longer than
    /// `cassandra.request_timeout` by default, so that the owner's own
    /// store error reaches the client first.
    #[serde(with = "crate::clock::duration_serde")]
    pub forward_timeout: Duration,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            node_id: String::new(),
            advertise: String::new(),
            region: String::new(),
            default_home: String::new(),
            failover: Failover::Manual,
            heartbeat_interval: Duration::from_secs(1),
            member_timeout: Duration::from_secs(6),
            rebalance_interval: Duration::from_secs(1),
            failback_after: Duration::from_secs(15),
            forward_timeout: Duration::from_secs(15),
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
        if self.forward_timeout.is_zero() || self.forward_timeout > MAX_FORWARD_TIMEOUT {
            return Err(ValidationError::new(
                "cluster.forward_timeout",
                format!("is {:?}; it must be in (0s, {MAX_FORWARD_TIMEOUT:?}]", self.forward_timeout),
            ));
        }
        if self.member_timeout < self.heartbeat_interval * 3 {
            return Err(ValidationError::new(
                "cluster.member_timeout",
                "must be at least three cluster.heartbeat_interval, so that one late heartbeat does not evict a node",
            ));
        }
        let node_id_ok = self.node_id.len() <= MAX_NODE_ID_BYTES
            && self.node_id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
        if !node_id_ok {
            return Err(ValidationError::new(
                "cluster.node_id",
                format!(
                    "is {:?}; it must be at most {MAX_NODE_ID_BYTES} ASCII letters, digits, '-', '_', '.' or ':' \
                     (e.g. the pod name fairway-0)",
                    self.node_id
                ),
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

    /// This node's name, when it is reached at `address`.
    pub fn node_name<'a>(&'a self, address: &'a str) -> &'a str {
        if self.node_id.is_empty() { address } else { &self.node_id }
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
    /// `cluster.failback_after`, in ms.
    failback_after_ms: i64,
    returns: Mutex<Returns>,
    /// Members counted dead before their timeout (silent, and their
    /// address refused connections), with the heartbeat they had then:
    /// dead for as long as it has not advanced.
    refused: Mutex<BTreeMap<String, UnixMillis>>,
}

/// The nodes that came back, as successive live sets show them.
#[derive(Debug, Default)]
struct Returns {
    /// Nodes seen live and then not (at most [`MAX_REMEMBERED_DEAD`]).
    dead: BTreeSet<String>,
    /// Nodes back from the dead, until when they settle (ms since the epoch).
    settling_until: BTreeMap<String, UnixMillis>,
    /// When the live set was last replaced.
    refreshed_at: UnixMillis,
}

/// The most dead nodes a view remembers (a cluster's nodes come and go,
/// under new addresses too); past it the oldest names are forgotten, and
/// such a node, if it comes back, counts as new (settled at once).
const MAX_REMEMBERED_DEAD: usize = 1024;

impl ClusterView {
    /// The one node of an unshared store.
    pub fn single(node: String) -> ClusterView {
        let me = LiveNode::named(node, "");
        ClusterView {
            live: RwLock::new(vec![me.clone()]),
            me,
            failover: Failover::Manual,
            shared: false,
            member_timeout_ms: 0,
            failback_after_ms: 0,
            returns: Mutex::default(),
            refused: Mutex::default(),
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

    /// This view for a node of `region`, whose queues fail over as `failover`
    /// says; under automatic failover a node that comes back owns nothing
    /// for `failback_after` while others are live.
    pub fn in_region(mut self, region: &str, failover: Failover, failback_after: Duration) -> ClusterView {
        self.me.region = region.to_owned();
        self.failover = failover;
        self.failback_after_ms = crate::clock::millis(failback_after);
        *self.live.get_mut().unwrap_or_else(|p| p.into_inner()) = vec![self.me.clone()];
        self
    }

    /// This view for a node reached at `address`, named apart from it
    /// (`cluster.node_id`).
    pub fn reached_at(mut self, address: &str) -> ClusterView {
        self.me = self.me.clone().reached_at(address);
        *self.live.get_mut().unwrap_or_else(|p| p.into_inner()) = vec![self.me.clone()];
        self
    }

    /// The nodes live now according to `members` as just read from the store.
    pub fn live_among(&self, members: &[crate::store::Member], now: UnixMillis) -> Vec<String> {
        self.live_members_among(members, now).into_iter().map(|node| node.name).collect()
    }

    /// The members live now according to `members` as just read from the
    /// store: heartbeat younger than the member timeout, and not counted
    /// dead since by [`Self::count_refused`] with the same heartbeat.
    pub fn live_members_among(&self, members: &[crate::store::Member], now: UnixMillis) -> Vec<LiveNode> {
        let refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        let not_refused: Vec<crate::store::Member> =
            members.iter().filter(|m| refused.get(&m.node) != Some(&m.heartbeat_unix_ms)).cloned().collect();
        assignment::live_members(&not_refused, now, self.member_timeout_ms)
    }

    /// Counts dead the members named, each for as long as its heartbeat is
    /// the one given (replacing the previous such list).
    pub fn count_refused(&self, refused: impl IntoIterator<Item = (String, UnixMillis)>) {
        *self.refused.lock().unwrap_or_else(|p| p.into_inner()) = refused.into_iter().collect();
    }

    /// This node's name: `cluster.node_id`, else the address other nodes
    /// and clients reach it at.
    pub fn node(&self) -> &str {
        &self.me.name
    }

    /// This node's address.
    pub fn address(&self) -> &str {
        self.me.address()
    }

    /// The address of the node named `node` as the live set last gave it;
    /// the name itself for a node not live or named after its address.
    pub fn address_of(&self, node: &str) -> String {
        let live = self.read_live();
        live.iter().find(|n| n.name == node).map_or(node, LiveNode::address).to_owned()
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
        self.set_live_nodes(live.into_iter().map(|name| LiveNode::named(name, "")).collect(), 0);
    }

    /// Replaces the live set as read at `now` (ignored on an unshared
    /// store); this node is always in it. A node in it that was counted
    /// dead before is settling until `failback_after` from `now`.
    pub fn set_live_nodes(&self, mut live: Vec<LiveNode>, now: UnixMillis) {
        if !self.shared {
            return;
        }
        if !live.iter().any(|n| n.name == self.me.name) {
            live.push(self.me.clone());
            live.sort();
        }
        let mut current = self.live.write().unwrap_or_else(|p| p.into_inner());
        let mut returns = self.returns.lock().unwrap_or_else(|p| p.into_inner());
        for gone in current.iter().filter(|old| !live.iter().any(|n| n.name == old.name)) {
            if returns.dead.len() >= MAX_REMEMBERED_DEAD {
                returns.dead.pop_first();
            }
            returns.dead.insert(gone.name.clone());
        }
        for node in &live {
            if returns.dead.remove(&node.name) {
                returns.settling_until.insert(node.name.clone(), now + self.failback_after_ms);
            }
        }
        returns.settling_until.retain(|_, until| *until > now);
        returns.refreshed_at = now;
        let names = |nodes: &[LiveNode]| nodes.iter().map(|n| n.name.clone()).collect::<BTreeSet<_>>();
        let (before, after) = (names(&current), names(&live));
        if before != after {
            let joined: Vec<&String> = after.difference(&before).collect();
            let left: Vec<&String> = before.difference(&after).collect();
            tracing::info!(?joined, ?left, live = ?after, "live nodes changed");
        }
        *current = live;
    }

    /// The live nodes that came back less than `failback_after` ago.
    fn settling(&self) -> Vec<String> {
        let returns = self.returns.lock().unwrap_or_else(|p| p.into_inner());
        returns
            .settling_until
            .iter()
            .filter(|(_, until)| **until > returns.refreshed_at)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The rightful owner of each partition of a queue of `config` (`None`
    /// where no node may own it: none is live in its home region). On an
    /// unshared store this node owns every partition, wherever the home.
    pub fn owners(&self, queue: &QueueName, config: &QueueConfig) -> Vec<Option<String>> {
        if !self.shared {
            return vec![Some(self.me.name.clone()); config.partitions as usize];
        }
        let eligible = assignment::eligible(&self.read_live(), &config.home, self.failover, &self.settling());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::validate;

    fn node(name: &str, region: &str) -> LiveNode {
        LiveNode::named(name, region)
    }

    #[test]
    fn a_node_id_is_checked_naming_the_key_and_the_limit() {
        let with_id = |node_id: String| ClusterConfig { node_id, ..ClusterConfig::default() };
        assert!(with_id("fairway-0".into()).validate().is_ok());
        assert!(with_id("a".repeat(MAX_NODE_ID_BYTES)).validate().is_ok());
        for bad in ["has space".to_owned(), "a/b".to_owned(), "a".repeat(MAX_NODE_ID_BYTES + 1)] {
            let error = with_id(bad.clone()).validate().expect_err(&bad).to_string();
            assert!(error.contains("cluster.node_id") && error.contains("at most 253"), "{error}");
        }
        let config = with_id("fairway-0".into());
        assert_eq!(config.node_name("10.0.0.1:7070"), "fairway-0");
        assert_eq!(ClusterConfig::default().node_name("10.0.0.1:7070"), "10.0.0.1:7070");
    }

    /// A node named apart from its address is forwarded to at the address its
    /// last heartbeat gave; a node named after its address, at its name.
    #[test]
    fn a_node_is_reached_at_the_address_of_its_last_heartbeat() {
        let view = ClusterView::shared("fairway-1".into(), Duration::from_secs(6)).reached_at("10.0.0.2:7070");
        assert_eq!((view.node(), view.address()), ("fairway-1", "10.0.0.2:7070"));
        let at = |address: &str| node("fairway-0", "").reached_at(address);
        view.set_live_nodes(vec![at("10.0.0.1:7070"), node("10.0.0.3:7070", "")], 1_000);
        assert_eq!(view.address_of("fairway-0"), "10.0.0.1:7070");
        assert_eq!(view.address_of("10.0.0.3:7070"), "10.0.0.3:7070");
        assert_eq!(view.address_of("fairway-1"), "10.0.0.2:7070", "itself");
        view.set_live_nodes(vec![at("10.0.0.9:7070")], 2_000);
        assert_eq!(view.address_of("fairway-0"), "10.0.0.9:7070", "restarted under another address");
        assert_eq!(view.live(), ["fairway-0", "fairway-1"], "the same name, not a new node");
    }

    /// Under automatic failover, a home node that was counted dead and came
    /// back owns nothing until `failback_after` has passed; one never counted
    /// dead owns its share at once.
    #[test]
    fn a_home_node_back_from_the_dead_settles_before_it_owns_again() {
        let view = ClusterView::shared("b1".into(), Duration::from_secs(6)).in_region(
            "b",
            Failover::Automatic,
            Duration::from_secs(15),
        );
        let queue = validate::queue_name("queue", "q").unwrap();
        let config = QueueConfig::new(4, "a");
        let owners = |view: &ClusterView| view.owners(&queue, &config).into_iter().flatten().collect::<Vec<_>>();
        view.set_live_nodes(vec![node("a1", "a"), node("b1", "b")], 1_000);
        assert!(owners(&view).iter().all(|o| o == "a1"), "a node first seen is home at once");
        view.set_live_nodes(vec![node("b1", "b")], 2_000);
        assert!(owners(&view).iter().all(|o| o == "b1"), "a1 dead: b1 takes over");
        view.set_live_nodes(vec![node("a1", "a"), node("b1", "b")], 3_000);
        assert!(owners(&view).iter().all(|o| o == "b1"), "a1 back: settling, b1 keeps it");
        view.set_live_nodes(vec![node("a1", "a"), node("b1", "b")], 17_999);
        assert!(owners(&view).iter().all(|o| o == "b1"), "still settling at 14.999 s");
        view.set_live_nodes(vec![node("a1", "a"), node("b1", "b")], 18_000);
        assert!(owners(&view).iter().all(|o| o == "a1"), "settled after 15 s: home again");
        let manual = ClusterView::shared("b1".into(), Duration::from_secs(6)).in_region(
            "b",
            Failover::Manual,
            Duration::from_secs(15),
        );
        manual.set_live_nodes(vec![node("a1", "a"), node("b1", "b")], 1_000);
        manual.set_live_nodes(vec![node("b1", "b")], 2_000);
        manual.set_live_nodes(vec![node("a1", "a"), node("b1", "b")], 3_000);
        assert!(owners(&manual).iter().all(|o| o == "a1"), "manual: the home owns it as soon as it is back");
    }
}
