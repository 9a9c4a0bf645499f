use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use super::{MatchError, MatcherConfig, QueueMatcher, QueueStats};
use crate::clock::SharedClock;
use crate::cluster::{ClusterView, DispatchGate};
use crate::core::engine::{EngineConfig, TaskPolicy};
use crate::model::PartitionId;
use crate::model::QueueName;
use crate::partition::WriterConfig;
use crate::store::{QueueConfig, Store, StoreError};

/// What every queue of a node is opened with.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// How this node names itself to others (its listening address).
    pub node: String,
    /// How each partition buffers, persists and collects; its task policy is
    /// set per queue (see [`Settings::engine_for`]).
    pub engine: EngineConfig,
    /// Group commit of each partition's writes.
    pub writer: WriterConfig,
    /// Polls, sync match and the partition count of new queues.
    pub matcher: MatcherConfig,
    /// The default task policy, and the queues that override it.
    pub tasks: TaskPolicy,
    /// The task policies of the queues that override `tasks`, by queue name.
    pub queues: BTreeMap<String, TaskPolicy>,
    /// Defaults of the queues named by a prefix and at least one more
    /// character (say, the visit scheduler's `visits.`), ahead of `tasks`;
    /// the first prefix that matches wins.
    pub prefixed: Vec<(String, TaskPolicy)>,
    /// Where dispatch latencies also go when metrics are pushed over OTLP.
    pub dispatch_latency_otlp: Option<opentelemetry::metrics::Histogram<f64>>,
}

impl Settings {
    /// The engine config of `queue`'s partitions: the node's, with the
    /// queue's task policy (its own section, else the default of its
    /// prefix, else `[tasks]`).
    pub fn engine_for(&self, queue: &QueueName) -> EngineConfig {
        let name = queue.as_str();
        let by_prefix = self
            .prefixed
            .iter()
            .find(|(prefix, _)| name.strip_prefix(prefix.as_str()).is_some_and(|rest| !rest.is_empty()))
            .map(|(_, policy)| policy);
        let tasks = self.queues.get(name).or(by_prefix).unwrap_or(&self.tasks).clone();
        EngineConfig { tasks, ..self.engine.clone() }
    }
}

type Slot = Arc<OnceCell<Arc<QueueMatcher>>>;

/// The queues of a node, opened on first use or when the cluster gives this
/// node some of their partitions. A queue whose opening failed is tried
/// again on the next request.
#[derive(Debug)]
pub struct Queues {
    store: Arc<dyn Store>,
    clock: SharedClock,
    settings: Arc<Settings>,
    view: Arc<ClusterView>,
    gate: Arc<DispatchGate>,
    queues: Mutex<HashMap<QueueName, Slot>>,
    closing: AtomicBool,
}

impl Queues {
    /// The queues of the one node of an unshared store: it owns everything.
    pub fn new(store: Arc<dyn Store>, clock: SharedClock, settings: Settings) -> Self {
        let view = Arc::new(ClusterView::single(settings.node.clone()));
        Queues::in_cluster(store, clock, settings, view, Arc::new(DispatchGate::always_open()))
    }

    /// The queues of a node that shares its store with others.
    pub fn in_cluster(
        store: Arc<dyn Store>,
        clock: SharedClock,
        settings: Settings,
        view: Arc<ClusterView>,
        gate: Arc<DispatchGate>,
    ) -> Self {
        Queues {
            store,
            clock,
            settings: Arc::new(settings),
            view,
            gate,
            queues: Mutex::new(HashMap::new()),
            closing: AtomicBool::new(false),
        }
    }

    /// What every queue of this node is opened with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// This node's view of the cluster: who is live, and so who owns which
    /// partition.
    pub fn view(&self) -> &Arc<ClusterView> {
        &self.view
    }

    /// The store every queue's partitions live in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The queue, created in the store with the default partition count if
    /// it is new; on first use, this node takes the partitions it should own.
    pub async fn get(&self, name: &QueueName) -> Result<Arc<QueueMatcher>, MatchError> {
        self.get_with(name, self.settings.matcher.partitions_per_queue).await
    }

    /// [`Self::get`], creating a new queue with `partitions` partitions.
    pub async fn get_with(&self, name: &QueueName, partitions: u32) -> Result<Arc<QueueMatcher>, MatchError> {
        if self.closing.load(Ordering::Acquire) {
            return Err(MatchError::ShuttingDown);
        }
        let slot = self.queues.lock().unwrap_or_else(|p| p.into_inner()).entry(name.clone()).or_default().clone();
        let matcher = slot
            .get_or_try_init(|| async {
                let config = self
                    .store
                    .create_queue(name, QueueConfig { partitions })
                    .await
                    .map_err(|e| MatchError::Partition(e.into()))?;
                let matcher = QueueMatcher::new(
                    name.clone(),
                    config,
                    self.store.clone(),
                    self.clock.clone(),
                    self.settings.clone(),
                    self.gate.clone(),
                );
                // Before anyone else sees the queue: take what this node should own.
                self.claim(&matcher).await;
                Ok::<_, MatchError>(matcher)
            })
            .await?
            .clone();
        Ok(matcher)
    }

    /// The nodes live right now, read from the store rather than from the
    /// view, which can lag (a node that just started may not have seen a
    /// peer yet, and must not take that peer's partitions). On an unshared
    /// store: none but this node. `None` when the members cannot be read:
    /// then nobody is known dead, and nothing is taken from anyone.
    async fn live_now(&self) -> Option<Vec<String>> {
        if !self.view.is_shared() {
            return Some(Vec::new());
        }
        match self.store.members().await {
            Ok(members) => Some(self.view.live_among(&members, self.clock.now_ms())),
            Err(error) => {
                tracing::warn!(%error, "cannot read the members: taking no partition from another node");
                None
            }
        }
    }

    /// Takes the partitions of `matcher` that this node should own and does
    /// not hold, and hands over those it holds and should not.
    async fn claim(&self, matcher: &QueueMatcher) {
        if self.view.is_shared() {
            matcher.verify_held().await;
        }
        let mut live_now: Option<Option<Vec<String>>> = None;
        let owners = self.view.owners(matcher.name(), matcher.config().partitions);
        for (partition, owner) in (0..).zip(owners) {
            let id = PartitionId { queue: matcher.name().clone(), partition };
            let rightful = owner.as_deref() == Some(self.view.node());
            let held = matcher.holds(partition);
            if rightful && !held {
                if live_now.is_none() {
                    live_now = Some(self.live_now().await);
                }
                let live = live_now.as_ref().and_then(Option::as_deref);
                let may_take = |owner: &str| live.is_some_and(|live| !live.iter().any(|n| n == owner));
                match matcher.adopt(partition, may_take).await {
                    Ok(true) => tracing::info!(partition = %id, "took over"),
                    Ok(false) => tracing::debug!(partition = %id, "waiting for the previous owner to hand over"),
                    Err(error) => tracing::warn!(partition = %id, %error, "could not take the partition"),
                }
            } else if held && !rightful {
                matcher.release(partition).await;
            } else if !held && !rightful && matcher.was_abandoned(partition) {
                if let Err(error) = matcher.hand_over_abandoned(partition).await {
                    tracing::warn!(partition = %id, %error, "could not hand over an abandoned partition; trying again");
                }
            } else if !held && matcher.held().iter().any(|(p, _)| *p == partition) {
                // Held but lost (fenced): forget it; a later pass takes it again if it is ours.
                matcher.release(partition).await;
            }
        }
    }

    /// One pass of ownership: every queue in the store, every partition
    /// ([`Self::claim_opened`], then [`Self::open_listed`]).
    pub async fn rebalance(&self) -> Result<(), StoreError> {
        self.claim_opened().await;
        self.open_listed().await
    }

    /// Takes, releases and hands over the partitions of every queue opened
    /// here, as the view assigns them. It reads no listing of the queues,
    /// so that a listing that waits (a range read waits out the store's
    /// timeout when a Cassandra replica has just died) does not hold back
    /// the partitions this node dropped at a heartbeat lapse.
    pub async fn claim_opened(&self) {
        for matcher in self.opened() {
            if self.closing.load(Ordering::Acquire) {
                return;
            }
            self.claim(&matcher).await;
        }
    }

    /// Opens the queues of the store that are not opened here and have
    /// partitions for this node (opening takes them).
    pub async fn open_listed(&self) -> Result<(), StoreError> {
        let queues = self.store.list_queues().await?;
        for (name, config) in queues {
            if self.closing.load(Ordering::Acquire) {
                return Ok(());
            }
            if self.opened_queue(&name).is_some() {
                continue;
            }
            let node = self.view.node();
            let ours = self.view.owners(&name, config.partitions).iter().any(|o| o.as_deref() == Some(node));
            if !ours {
                continue;
            }
            if let Err(error) = self.get_with(&name, config.partitions).await {
                tracing::warn!(queue = %name, %error, "could not open the queue");
            }
        }
        Ok(())
    }

    /// Drops every partition without writing (see [`QueueMatcher::abandon_all`]).
    pub async fn abandon_all(&self) {
        for queue in self.opened() {
            queue.abandon_all().await;
        }
    }

    fn opened_queue(&self, name: &QueueName) -> Option<Arc<QueueMatcher>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner()).get(name).and_then(|slot| slot.get().cloned())
    }

    /// What this node counts and holds of every queue it has opened.
    pub fn stats(&self) -> Vec<(QueueName, QueueStats)> {
        let mut stats: Vec<(QueueName, QueueStats)> =
            self.opened().into_iter().map(|queue| (queue.name().clone(), queue.stats())).collect();
        stats.sort_by(|(a, _), (b, _)| a.cmp(b));
        stats
    }

    fn opened(&self) -> Vec<Arc<QueueMatcher>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner()).values().filter_map(|slot| slot.get().cloned()).collect()
    }

    /// Answers every parked poll with an empty response and refuses new
    /// requests: the first step of shutdown.
    pub fn stop_polls(&self) {
        self.closing.store(true, Ordering::Release);
        for queue in self.opened() {
            queue.stop_polls();
        }
    }

    /// Finishes queued writes, hands every partition over and closes every queue.
    pub async fn close(&self) {
        self.stop_polls();
        for queue in self.opened() {
            queue.close().await;
        }
    }
}
