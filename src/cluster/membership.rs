//! A node's membership of the cluster: its heartbeats, the live set it
//! reads back, and its name.
//!
//! Invariant: a node does not join (write its first heartbeat) while it
//! sees another process beating under its name: two of one name would each
//! count the other's partitions as their own.

use std::sync::Arc;

use super::assignment::silent_members;
use super::peers::refuses_connections;
use super::{ClusterConfig, ClusterView, DispatchGate};
use crate::clock::{SharedClock, UnixMillis, millis};
use crate::store::{Member, MemberStore, StoreError};

/// How many heartbeat intervals a joining node watches the heartbeat of a
/// live member of its name for (a live process beats every interval).
const NAMESAKE_WATCH_INTERVALS: u32 = 2;

/// After how many heartbeat intervals without a heartbeat a live member's
/// address is asked whether anything still listens there.
const SILENT_INTERVALS: u32 = 2;

/// A member dead this long (or ten member timeouts, if longer) is removed
/// from the store's members, so that they hold the live nodes and the
/// recently dead only, however many names came and went.
const FORGET_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// The most members one heartbeat forgets (the next ones forget the rest).
const MAX_FORGOTTEN_PER_BEAT: usize = 16;

/// How long that question waits for an answer (a refusal is immediate).
const PROBE_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Another process is live under this node's name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "another node is live under this node's name {node:?} (it started at {started_unix_ms} Unix ms and its \
     heartbeat still advances): every node needs a name of its own; set cluster.node_id (e.g. the pod name), or \
     cluster.advertise to the HOST:PORT the other nodes reach this one at"
)]
pub struct NameTaken {
    /// The name.
    pub node: String,
    /// When the other process started, by its clock.
    pub started_unix_ms: UnixMillis,
}

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
    store: Arc<dyn MemberStore>,
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
        store: Arc<dyn MemberStore>,
        clock: SharedClock,
        config: ClusterConfig,
    ) -> Membership {
        let now = clock.now_ms();
        let me = Member {
            node: view.node().to_owned(),
            address: view.address().to_owned(),
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

    /// Before the first heartbeat: refuses to join while another process
    /// is live under this node's name. A member of this name with another
    /// start time and a fresh heartbeat is read again for
    /// `NAMESAKE_WATCH_INTERVALS` heartbeat intervals: if its heartbeat
    /// advances meanwhile, another process beats under the name (refused);
    /// if not, it is a previous run of this node that ended without leaving
    /// (a crash), which the range-id fence makes safe to take over from at
    /// once. A namesake at another address that refuses connections is such
    /// a previous run too, known without the watch (a node restarted under
    /// its `cluster.node_id` at another address). A store that cannot be
    /// read is left to the heartbeats.
    pub async fn check_name(&self) -> Result<(), NameTaken> {
        let Some(first) = self.namesake().await else { return Ok(()) };
        if first.reached_at() != self.me.reached_at() && refuses_connections(first.reached_at(), PROBE_WAIT).await {
            return Ok(());
        }
        for _ in 0..NAMESAKE_WATCH_INTERVALS {
            tokio::time::sleep(self.config.heartbeat_interval).await;
            match self.namesake().await {
                Some(current)
                    if current.started_unix_ms == first.started_unix_ms
                        && current.heartbeat_unix_ms > first.heartbeat_unix_ms =>
                {
                    return Err(NameTaken { node: current.node, started_unix_ms: current.started_unix_ms });
                }
                Some(_) => {}
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// The member of this node's name with another start time and a fresh
    /// heartbeat, if the store has one (and can be read).
    async fn namesake(&self) -> Option<Member> {
        let members = match self.store.members().await {
            Ok(members) => members,
            Err(error) => {
                tracing::warn!(%error, "could not check that no other node is live under this node's name");
                return None;
            }
        };
        let now = self.clock.now_ms();
        let timeout = millis(self.config.member_timeout);
        members.into_iter().find(|member| {
            member.node == self.me.node
                && member.started_unix_ms != self.me.started_unix_ms
                && now - member.heartbeat_unix_ms < timeout
        })
    }

    /// Writes this node's heartbeat and reads the live set. A member whose
    /// heartbeat is fresh but has not been written for `SILENT_INTERVALS`
    /// intervals, and whose address refuses connections, is dead without
    /// waiting out the member timeout (a killed process; one restarted
    /// under another address). The gate opens
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
        let silent_ms = millis(self.config.heartbeat_interval * SILENT_INTERVALS);
        let silent = silent_members(&members, &self.me.node, now, silent_ms, timeout);
        let probes = silent.iter().map(|m| async move { (*m, refuses_connections(m.reached_at(), PROBE_WAIT).await) });
        let refused = futures::future::join_all(probes).await.into_iter().filter(|(_, refused)| *refused);
        self.view.count_refused(refused.map(|(member, _)| (member.node.clone(), member.heartbeat_unix_ms)));
        self.view.set_live_nodes(self.view.live_members_among(&members, now), now);
        let previous = self.last_written.lock().unwrap_or_else(|p| p.into_inner()).replace(started);
        self.gate.open_until(started + timeout - millis(self.config.heartbeat_interval));
        let lapsed = previous.is_some_and(|previous| started - previous >= timeout);
        if tokio::time::timeout(bound, self.forget_long_dead(&members, now)).await.is_err() {
            tracing::debug!("forgetting members long dead got no answer in time; the next heartbeat tries again");
        }
        Ok(if lapsed { Heartbeat::AfterLapse } else { Heartbeat::Fresh })
    }

    /// Removes from the store the members dead for `FORGET_AFTER` (or ten
    /// member timeouts), a few at a time.
    async fn forget_long_dead(&self, members: &[Member], now: UnixMillis) {
        let after = FORGET_AFTER.max(self.config.member_timeout * 10);
        let before = now - millis(after);
        let long_dead = members.iter().filter(|m| m.heartbeat_unix_ms < before && m.node != self.me.node);
        for member in long_dead.take(MAX_FORGOTTEN_PER_BEAT) {
            match self.store.forget(&member.node, before).await {
                Ok(()) => tracing::info!(node = member.node, dead_for = ?after, "forgot a member long dead"),
                Err(error) => tracing::debug!(%error, node = member.node, "could not forget a member long dead"),
            }
        }
    }

    /// Removes this node from the members, so that others take its
    /// partitions at once rather than after the timeout.
    pub async fn leave(&self) -> Result<(), StoreError> {
        self.gate.open_until(i64::MIN);
        self.store.leave(&self.me.node).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::clock::{Clock, SystemClock};
    use crate::store::Store;
    use crate::store::embedded::EmbeddedStore;

    /// A heartbeat of `node`, started at `started`, written now.
    async fn beat_once(store: &dyn Store, node: &str, started: UnixMillis) {
        let heartbeat_unix_ms = SystemClock.now_ms();
        let member = Member {
            node: node.into(),
            address: String::new(),
            region: String::new(),
            started_unix_ms: started,
            heartbeat_unix_ms,
        };
        store.heartbeat(&member).await.expect("a heartbeat");
    }

    /// Heartbeats of `node`, started at `started`, every `interval` until
    /// `stop`: another process under that name.
    async fn beat_as(
        store: Arc<dyn Store>,
        node: &str,
        started: UnixMillis,
        interval: Duration,
        stop: CancellationToken,
    ) {
        let mut ticks = tokio::time::interval(interval);
        loop {
            tokio::select! {
                _ = ticks.tick() => beat_once(store.as_ref(), node, started).await,
                () = stop.cancelled() => return,
            }
        }
    }

    #[tokio::test]
    async fn a_node_does_not_join_under_the_name_of_a_live_node() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        let config = ClusterConfig {
            heartbeat_interval: Duration::from_millis(200),
            member_timeout: Duration::from_secs(60),
            ..ClusterConfig::default()
        };
        let joining = |node: &str| {
            let view = Arc::new(ClusterView::shared(node.into(), config.member_timeout));
            Membership::new(
                view,
                Arc::new(DispatchGate::closed()),
                store.clone(),
                Arc::new(SystemClock),
                config.clone(),
            )
        };
        let name = "10.0.0.5:7070";
        joining(name).check_name().await.expect("no one has the name");

        beat_once(store.as_ref(), name, 1).await;
        let stop = CancellationToken::new();
        // It beats more often than the interval: its heartbeat advances
        // within the watch, however late its task runs.
        let other = tokio::spawn(beat_as(store.clone(), name, 1, Duration::from_millis(20), stop.clone()));
        let refused = joining(name).check_name().await.expect_err("another process beats under the name");
        assert_eq!(refused, NameTaken { node: name.into(), started_unix_ms: 1 });
        assert!(refused.to_string().contains("set cluster.node_id"), "{refused}");
        joining("10.0.0.6:7070").check_name().await.expect("another name");

        // The other process stops without leaving, as a crashed run of this
        // node would: its heartbeat, still fresh, no longer advances.
        stop.cancel();
        other.await.unwrap();
        joining(name).check_name().await.expect("a name whose heartbeat no longer advances");

        let first = joining(name);
        first.beat().await.unwrap();
        first.leave().await.unwrap();
        joining(name).check_name().await.expect("a name whose node left");
    }

    /// A member silent for two heartbeat intervals whose address refuses
    /// connections is dead at once; one whose address still accepts them
    /// (paused, say) stays live until the member timeout.
    #[tokio::test]
    async fn a_silent_member_whose_address_refuses_connections_is_dead_before_its_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        let config = ClusterConfig {
            heartbeat_interval: Duration::from_millis(500),
            member_timeout: Duration::from_secs(60),
            ..ClusterConfig::default()
        };
        let listening = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let refusing = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (listening_at, refusing_at) =
            (listening.local_addr().unwrap().to_string(), refusing.local_addr().unwrap().to_string());
        drop(refusing);
        let silent_since = SystemClock.now_ms() - 5_000;
        for (node, address) in [("paused", &listening_at), ("killed", &refusing_at)] {
            let member = Member {
                node: node.into(),
                address: address.clone(),
                region: String::new(),
                started_unix_ms: 1,
                heartbeat_unix_ms: silent_since,
            };
            store.heartbeat(&member).await.unwrap();
        }
        let view = Arc::new(ClusterView::shared("me".into(), config.member_timeout).reached_at("127.0.0.1:1"));
        let gate = Arc::new(DispatchGate::closed());
        let membership = Membership::new(view.clone(), gate, store.clone(), Arc::new(SystemClock), config);
        membership.beat().await.unwrap();
        assert_eq!(view.live(), ["me", "paused"]);
        assert_eq!(view.address_of("paused"), listening_at);
        let members = store.members().await.unwrap();
        let now = SystemClock.now_ms();
        assert_eq!(view.live_among(&members, now), ["me", "paused"], "a fresh read of the members agrees");
        let back = Member { heartbeat_unix_ms: now, ..members.iter().find(|m| m.node == "killed").unwrap().clone() };
        store.heartbeat(&back).await.unwrap();
        let members = store.members().await.unwrap();
        assert_eq!(view.live_among(&members, now), ["killed", "me", "paused"], "live again once it beats");
    }

    /// The store's members stay bounded: one dead for longer than
    /// `FORGET_AFTER` is removed by the next heartbeat of any node.
    #[tokio::test]
    async fn a_member_dead_for_an_hour_is_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        let config = ClusterConfig { member_timeout: Duration::from_secs(6), ..ClusterConfig::default() };
        let now = SystemClock.now_ms();
        beat_once(store.as_ref(), "recently-dead", 1).await;
        for n in 0..(MAX_FORGOTTEN_PER_BEAT + 4) {
            let member = Member {
                node: format!("gone-{n}"),
                address: String::new(),
                region: String::new(),
                started_unix_ms: 1,
                heartbeat_unix_ms: now - millis(FORGET_AFTER) - 1_000,
            };
            store.heartbeat(&member).await.unwrap();
        }
        let view = Arc::new(ClusterView::shared("me".into(), config.member_timeout));
        let membership =
            Membership::new(view, Arc::new(DispatchGate::closed()), store.clone(), Arc::new(SystemClock), config);
        let names = |members: Vec<Member>| members.into_iter().map(|m| m.node).collect::<Vec<_>>();
        membership.beat().await.unwrap();
        assert_eq!(store.members().await.unwrap().len(), 2 + 4, "at most {MAX_FORGOTTEN_PER_BEAT} a beat");
        membership.beat().await.unwrap();
        assert_eq!(names(store.members().await.unwrap()), ["me", "recently-dead"]);
    }
}
