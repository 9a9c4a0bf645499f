//! The cluster's members as the store records them: each node's last
//! heartbeat, last write wins per node. Who is alive is decided from these
//! records by `crate::cluster`, not here.

use async_trait::async_trait;

use super::StoreResult;

/// A node of the cluster as the store records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its name in the cluster (`cluster.node_id`, else its address): the
    /// owner partitions record, kept across restarts.
    pub node: String,
    /// The `HOST:PORT` other nodes reach it at (empty: `node` is the address).
    pub address: String,
    /// The region the node runs in (`cluster.region`; empty: none named).
    pub region: String,
    /// When the node started, in ms since the Unix epoch.
    pub started_unix_ms: i64,
    /// When the node last wrote its heartbeat, in ms since the Unix epoch: once
    /// older than the member timeout, the node counts as dead.
    pub heartbeat_unix_ms: i64,
}

impl Member {
    /// The `HOST:PORT` other nodes reach it at.
    pub fn reached_at(&self) -> &str {
        if self.address.is_empty() { &self.node } else { &self.address }
    }
}

/// The members' heartbeats.
#[async_trait]
pub trait MemberStore: Send + Sync + std::fmt::Debug + 'static {
    /// Records that `member` is alive (replaces its previous record).
    async fn heartbeat(&self, member: &Member) -> StoreResult<()>;

    /// Every node's last record, live or not.
    async fn members(&self) -> StoreResult<Vec<Member>>;

    /// Forgets a node (on graceful shutdown).
    async fn leave(&self, node: &str) -> StoreResult<()>;

    /// Forgets `node` if its record was written before `written_before`
    /// (ms since the Unix epoch): a member long dead. A record written since
    /// (the node came back) stays. On Cassandra "written" is the write's
    /// timestamp, the coordinator's clock: `written_before` must lie in the
    /// past by more than the nodes' clock skew.
    async fn forget(&self, node: &str, written_before: i64) -> StoreResult<()>;
}
