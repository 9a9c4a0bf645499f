use std::sync::Arc;

use super::assignment::live_members;
use super::{ClusterConfig, ClusterView, DispatchGate};
use crate::clock::{SharedClock, UnixMillis, millis};
use crate::store::{Member, Store, StoreError};

/// What a heartbeat found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Heartbeat {
    /// Written in time: the others still count this node live.
    Fresh,
    /// Written after a gap longer than the member timeout: the others may
    /// have declared this node dead and taken its partitions.
    AfterLapse,
}

/// This node's membership: it writes the heartbeats, reads the live set,
/// and keeps the dispatch gate open only while its own heartbeat is fresh.
#[derive(Debug)]
pub struct Membership {
    me: Member,
    store: Arc<dyn Store>,
    clock: SharedClock,
    config: ClusterConfig,
    view: Arc<ClusterView>,
    gate: Arc<DispatchGate>,
    last_written: std::sync::Mutex<Option<UnixMillis>>,
}

impl Membership {
    /// The membership of the node `view` names, writing its heartbeats to
    /// `store`; the gate stays as it is until the first [`Self::beat`].
    pub fn new(
        view: Arc<ClusterView>,
        gate: Arc<DispatchGate>,
        store: Arc<dyn Store>,
        clock: SharedClock,
        config: ClusterConfig,
    ) -> Membership {
        let now = clock.now_ms();
        let me = Member {
            node: view.node().to_owned(),
            region: view.region().to_owned(),
            started_unix_ms: now,
            heartbeat_unix_ms: now,
        };
        Membership { me, store, clock, config, view, gate, last_written: std::sync::Mutex::new(None) }
    }

    /// The view of the cluster that each beat updates.
    pub fn view(&self) -> &Arc<ClusterView> {
        &self.view
    }

    /// Writes this node's heartbeat and reads the live set. The gate opens
    /// until the heartbeat could go stale in the others' eyes, less a
    /// margin of one heartbeat interval.
    ///
    /// A beat gives up after a third of the member timeout ([`StoreError::Uncertain`]:
    /// the heartbeat may have been written), so that a request held up by
    /// the store (a coordinator waiting on a replica that just died) leaves
    /// time for two more beats before the others count this node dead.
    pub async fn beat(&self) -> Result<Heartbeat, StoreError> {
        let started = self.clock.now_ms();
        let member = Member { heartbeat_unix_ms: started, ..self.me.clone() };
        let bound = self.config.member_timeout / 3;
        let write_and_read = async {
            self.store.heartbeat(&member).await?;
            self.store.members().await
        };
        let members = tokio::time::timeout(bound, write_and_read).await.map_err(|_| {
            StoreError::Uncertain(format!("the heartbeat got no answer within {bound:?}; the next one tries again"))
        })??;
        let now = self.clock.now_ms();
        let timeout = millis(self.config.member_timeout);
        self.view.set_live_nodes(live_members(&members, now, timeout), now);
        let previous = self.last_written.lock().unwrap_or_else(|p| p.into_inner()).replace(started);
        self.gate.open_until(started + timeout - millis(self.config.heartbeat_interval));
        let lapsed = previous.is_some_and(|previous| started - previous >= timeout);
        Ok(if lapsed { Heartbeat::AfterLapse } else { Heartbeat::Fresh })
    }

    /// Removes this node from the members, so that others take its
    /// partitions at once rather than after the timeout.
    pub async fn leave(&self) -> Result<(), StoreError> {
        self.gate.open_until(i64::MIN);
        self.store.leave(&self.me.node).await
    }
}
