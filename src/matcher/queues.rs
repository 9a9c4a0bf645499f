//! The queues of this node ([`Queues`]): one [`QueueMatcher`] per queue
//! opened here, opened on first use or when the cluster gives this node
//! some of its partitions; and the queue-level operations that span
//! partitions: create, move home, forced failover, declaring a previous
//! generation lost, and handing a previous generation over.
//!
//! Invariants: at most one matcher per queue name is ever opened on this
//! node (its slot is a once-cell; a failed opening leaves no slot behind);
//! a move or forced failover is refused, with nothing written, unless the
//! previous one is settled (every partition taken in its home, every
//! partition of the previous generation drained); it reads and writes the
//! queue catalog of the store, and reaches a partition's rows only through
//! [`crate::partition`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use super::{MatchError, QueueMatcher, QueueStats, Settings};
use crate::clock::SharedClock;
use crate::cluster::{ClusterView, DispatchGate};
use crate::model::PartitionId;
use crate::model::QueueName;
use crate::partition::{StoredPartition, abandon_previous, hand_over_previous};
use crate::store::{QueueConfig, Store, StoreError};

type Slot = Arc<OnceCell<Arc<QueueMatcher>>>;

/// How a queue not yet opened on this node is found in the store.
#[derive(Clone, Debug)]
enum Opening {
    /// It must exist.
    Existing,
    /// It was just listed, with this config.
    Listed(QueueConfig),
    /// Created with this config if it does not exist.
    Create(QueueConfig),
}

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
    /// Queues of another home whose previous generation has nothing left
    /// for this node to hand over (see [`hand_over_previous`]), by generation.
    handed_over: Mutex<HashMap<QueueName, u32>>,
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
            handed_over: Mutex::default(),
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

    /// The clock of this node's queues.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// The store every queue's partitions live in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The queue, opened here on first use; `UnknownQueue` if it was never
    /// created (nothing is created: a read or a lease of a mistyped name
    /// leaves no queue behind).
    pub async fn get(&self, name: &QueueName) -> Result<Arc<QueueMatcher>, MatchError> {
        self.open(name, Opening::Existing).await
    }

    /// The queue for an add: created with the default partition count if
    /// it is new and `matcher.create_on_add` names it, else as [`Self::get`].
    /// A creation by a principal (`creator`) is recorded with the queue and
    /// bounded by `matcher.max_queues_per_principal` as well.
    pub async fn get_for_add(&self, name: &QueueName, creator: Option<&str>) -> Result<Arc<QueueMatcher>, MatchError> {
        let matcher = &self.settings.matcher;
        if matcher.creates_on_add(name) {
            let config = QueueConfig::new(matcher.partitions_per_queue, &self.settings.default_home)
                .created_by(creator.unwrap_or_default());
            self.open(name, Opening::Create(config)).await
        } else {
            self.get(name).await
        }
    }

    /// The queue, created with `partitions` partitions and homed in `home`
    /// (`None`: the default home) if it is new, within `matcher.max_queues`
    /// and `matcher.max_partitions`; an existing queue keeps its config.
    pub async fn create(
        &self,
        name: &QueueName,
        partitions: u32,
        home: Option<&str>,
    ) -> Result<Arc<QueueMatcher>, MatchError> {
        let home = home.unwrap_or(&self.settings.default_home);
        self.open(name, Opening::Create(QueueConfig::new(partitions, home))).await
    }

    /// Moves the queue's home to `home`: this node's ownership passes hand
    /// its partitions over to that region's nodes (see [`Self::rebalance`]),
    /// as every other node's do once they read the move. `UnknownQueue` if
    /// it was never created; `MoveInProgress` (nothing written) while a
    /// partition of an earlier move is not yet taken in its new home, or
    /// when another move changed the home meanwhile: a partition handed to
    /// a region is taken only by that region's nodes, so a second move
    /// before they took it would leave it to nobody.
    pub async fn move_home(&self, name: &QueueName, home: &str) -> Result<QueueConfig, MatchError> {
        let store_error = |e: StoreError| MatchError::Partition(e.into());
        let current = self.store.queue(name).await.map_err(store_error)?;
        let current = current.ok_or_else(|| MatchError::UnknownQueue(name.to_string()))?;
        if current.home == home {
            return Ok(current);
        }
        self.check_previous_drained(name, &current).await?;
        for partition in current.partition_numbers() {
            let id = PartitionId { queue: name.clone(), partition };
            // Read in this region: a lagging replica shows an earlier state
            // of the move, never a later one, so this refuses, never admits, wrongly.
            let Some(meta) = self.stored(id).meta().await.map_err(store_error)? else { continue };
            let settled = (meta.region.is_empty() || meta.region == current.home) && meta.moved_from.is_empty();
            if !settled {
                return Err(MatchError::MoveInProgress {
                    queue: name.to_string(),
                    detail: format!(
                        "partition {partition} is handed to region {:?} and not yet taken there",
                        meta.region
                    ),
                });
            }
        }
        let stored = self.store.set_queue_home(name, &current.home, home).await.map_err(store_error)?;
        let config = stored.ok_or_else(|| MatchError::UnknownQueue(name.to_string()))?;
        if config.home != home {
            return Err(MatchError::MoveInProgress {
                queue: name.to_string(),
                detail: format!("another move changed its home to {:?} meanwhile", config.home),
            });
        }
        if let Some(matcher) = self.opened_queue(name) {
            matcher.update_config(&config);
        }
        Ok(config)
    }

    /// Forced failover of the queue to `home`, for a home with no live node
    /// (`live_regions` are the regions that have one): starts the next
    /// generation there (`QueueCatalog::force_queue_home`); its partitions drain
    /// the previous generation's. `MoveInProgress` (nothing written) while
    /// the home has a live node (a graceful move loses nothing), while the
    /// previous forced failover's partitions are not all drained (their
    /// region has not returned), or when another forced failover won.
    pub async fn force_home(
        &self,
        name: &QueueName,
        home: &str,
        live_regions: &[String],
    ) -> Result<QueueConfig, MatchError> {
        let store_error = |e: StoreError| MatchError::Partition(e.into());
        let in_progress = |detail: String| MatchError::MoveInProgress { queue: name.to_string(), detail };
        let current = self.store.queue(name).await.map_err(store_error)?;
        let current = current.ok_or_else(|| MatchError::UnknownQueue(name.to_string()))?;
        if current.home == home {
            return Ok(current);
        }
        if live_regions.contains(&current.home) {
            return Err(in_progress(format!(
                "its home, region {:?}, has a live node: move it without force (nothing is lost)",
                current.home
            )));
        }
        self.check_previous_drained(name, &current).await?;
        let stored = self.store.force_queue_home(name, current.generation, home).await.map_err(store_error)?;
        let config = stored.ok_or_else(|| MatchError::UnknownQueue(name.to_string()))?;
        if config.generation != current.generation + 1 || config.home != home {
            return Err(in_progress(format!(
                "another forced failover made generation {} meanwhile",
                config.generation
            )));
        }
        if let Some(matcher) = self.opened_queue(name) {
            matcher.update_config(&config);
        }
        Ok(config)
    }

    /// Declares the previous generation of the queue lost, for an old home
    /// that will not return (see [`abandon_previous`]): the number of its
    /// partitions declared lost, after which a later move is possible once
    /// the current partitions' drains close them. `MoveInProgress` (nothing
    /// written) when the queue had no forced failover, or while the old home
    /// has a live node (it hands the generation over itself, losing nothing).
    pub async fn abandon_previous(&self, name: &QueueName, live_regions: &[String]) -> Result<u32, MatchError> {
        let store_error = |e: StoreError| MatchError::Partition(e.into());
        let in_progress = |detail: String| MatchError::MoveInProgress { queue: name.to_string(), detail };
        let current = self.store.queue(name).await.map_err(store_error)?;
        let current = current.ok_or_else(|| MatchError::UnknownQueue(name.to_string()))?;
        if current.generation == 0 {
            return Err(in_progress("it had no forced failover: there is no previous generation".into()));
        }
        if live_regions.contains(&current.previous_home) {
            return Err(in_progress(format!(
                "its previous home, region {:?}, has a live node: it hands its partitions over itself (nothing is lost)",
                current.previous_home
            )));
        }
        let (node, region) = (self.view.node(), self.settings.fence_region.as_str());
        abandon_previous(self.store.as_ref(), name, &current, node, region).await.map_err(store_error)
    }

    /// `MoveInProgress` unless every partition of the generation before
    /// `current` (if any) is drained: their drain needs the home to stay.
    async fn check_previous_drained(&self, name: &QueueName, current: &QueueConfig) -> Result<(), MatchError> {
        let Some(first) = current.previous_of(current.partition_number(0)) else { return Ok(()) };
        for partition in first..first + current.partitions {
            let id = PartitionId { queue: name.clone(), partition };
            let meta = self.stored(id).meta().await.map_err(|e| MatchError::Partition(e.into()))?;
            if !meta.is_some_and(|m| m.drained) {
                return Err(MatchError::MoveInProgress {
                    queue: name.to_string(),
                    detail: format!(
                        "partition {partition} of the previous forced failover is not drained: region {:?} must return \
                         first, or be declared lost (MoveQueue with abandon_previous)",
                        current.previous_home
                    ),
                });
            }
        }
        Ok(())
    }

    /// Partition `id` as the store has it.
    fn stored(&self, id: PartitionId) -> StoredPartition {
        StoredPartition::new(self.store.clone(), id)
    }

    async fn open(&self, name: &QueueName, opening: Opening) -> Result<Arc<QueueMatcher>, MatchError> {
        if self.closing.load(Ordering::Acquire) {
            return Err(MatchError::ShuttingDown);
        }
        let slot = {
            let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
            // The name is copied only for a queue not seen yet.
            match queues.get(name) {
                Some(slot) => slot.clone(),
                None => queues.entry(name.clone()).or_default().clone(),
            }
        };
        if let Some(opened) = slot.get() {
            return Ok(opened.clone());
        }
        // Boxed: the first opening reads and claims (a large future), and
        // every add and poll of an open queue would carry its room.
        Box::pin(self.open_slot(name, opening, slot)).await
    }

    /// Opens the queue of `slot`, not open yet (see [`Self::open`]).
    async fn open_slot(&self, name: &QueueName, opening: Opening, slot: Slot) -> Result<Arc<QueueMatcher>, MatchError> {
        let opened = slot
            .get_or_try_init(|| async {
                let config = self.stored_config(name, opening.clone()).await?;
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
            .await
            .cloned();
        if opened.is_err() {
            // No slot stays behind for a name that did not open: a client
            // naming queues that do not exist grows nothing.
            let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
            if queues.get(name).is_some_and(|s| Arc::ptr_eq(s, &slot) && !s.initialized()) {
                queues.remove(name);
            }
        }
        opened
    }

    /// The config of queue `name` in the store, created first if `opening` says so.
    async fn stored_config(&self, name: &QueueName, opening: Opening) -> Result<QueueConfig, MatchError> {
        let store_error = |e: StoreError| MatchError::Partition(e.into());
        let created = match opening {
            Opening::Listed(config) => return Ok(config),
            Opening::Existing | Opening::Create(_) => match self.store.queue(name).await.map_err(store_error)? {
                Some(config) => return Ok(config),
                None => match opening {
                    Opening::Create(config) => config,
                    _ => return Err(MatchError::UnknownQueue(name.to_string())),
                },
            },
        };
        let existing = self.store.list_queues().await.map_err(store_error)?;
        let limits = &self.settings.matcher;
        if existing.len() >= limits.max_queues {
            return Err(MatchError::QueueLimit { key: "matcher.max_queues", limit: limits.max_queues as u64 });
        }
        // The queues listed are at most `max_queues`: counting them by
        // creator costs what the global bound's count already does.
        if !created.created_by.is_empty() {
            let theirs = existing.iter().filter(|(_, c)| c.created_by == created.created_by).count();
            if theirs >= limits.max_queues_per_principal {
                return Err(MatchError::QueueLimit {
                    key: "matcher.max_queues_per_principal",
                    limit: limits.max_queues_per_principal as u64,
                });
            }
        }
        let total: u64 =
            existing.iter().map(|(_, c)| u64::from(c.partitions)).sum::<u64>() + u64::from(created.partitions);
        if total > u64::from(limits.max_partitions) {
            return Err(MatchError::QueueLimit { key: "matcher.max_partitions", limit: limits.max_partitions.into() });
        }
        self.store.create_queue(name, created).await.map_err(store_error)
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
        let config = matcher.config();
        let owners = self.view.owners(matcher.name(), &config);
        for partition in matcher.held().into_iter().map(|(p, _)| p).filter(|p| !config.partition_numbers().contains(p))
        {
            // Of an earlier generation: handed over (to the home, through
            // this region's Paxos) for the next generation's drain.
            matcher.release(partition).await;
        }
        for (partition, owner) in config.partition_numbers().zip(owners) {
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
        matcher.start_drains();
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
        let mut live_now: Option<Option<Vec<String>>> = None;
        for (name, config) in queues {
            if self.closing.load(Ordering::Acquire) {
                return Ok(());
            }
            if self.has_previous_to_hand_over(&name, &config) {
                if live_now.is_none() {
                    live_now = Some(self.live_now().await);
                }
                if let Some(Some(live)) = &live_now {
                    self.hand_over_previous(&name, &config, live).await;
                }
            }
            if let Some(opened) = self.opened_queue(&name) {
                // Its next ownership pass hands it over if it moved away.
                opened.update_config(&config);
                continue;
            }
            let node = self.view.node();
            let ours = self.view.owners(&name, &config).iter().any(|o| o.as_deref() == Some(node));
            if !ours {
                continue;
            }
            if let Err(error) = self.open(&name, Opening::Listed(config)).await {
                tracing::warn!(queue = %name, %error, "could not open the queue");
            }
        }
        Ok(())
    }

    /// Whether `config` is of a forced failover away from this node's region
    /// whose previous generation this node has not yet seen handed over.
    fn has_previous_to_hand_over(&self, name: &QueueName, config: &QueueConfig) -> bool {
        let region = &self.settings.fence_region;
        let done = self.handed_over.lock().unwrap_or_else(|p| p.into_inner()).get(name) == Some(&config.generation);
        config.generation > 0 && !region.is_empty() && *region != config.home && !done
    }

    /// Hands the partitions of the previous generation of `name` that name
    /// this node's region over to its home (see [`hand_over_previous`]).
    async fn hand_over_previous(&self, name: &QueueName, config: &QueueConfig, live: &[String]) {
        let (node, region) = (self.view.node(), &self.settings.fence_region);
        let held: Vec<u32> =
            self.opened_queue(name).map(|q| q.held().iter().map(|(p, _)| *p).collect()).unwrap_or_default();
        match hand_over_previous(self.store.as_ref(), name, config, node, region, live, &held).await {
            Ok(true) => {
                self.handed_over.lock().unwrap_or_else(|p| p.into_inner()).insert(name.clone(), config.generation);
            }
            Ok(false) => {}
            Err(error) => tracing::warn!(queue = %name, %error, "handing the previous generation over; trying again"),
        }
    }

    /// Drops every partition without writing (see [`QueueMatcher::abandon_all`]).
    pub async fn abandon_all(&self) {
        for queue in self.opened() {
            queue.abandon_all().await;
        }
    }

    pub(super) fn opened_queue(&self, name: &QueueName) -> Option<Arc<QueueMatcher>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::model::validate;
    use crate::store::embedded::EmbeddedStore;
    use crate::store::{PartitionStore, QueueCatalog};

    /// Names of queues that do not exist leave nothing behind, however many
    /// a client sends.
    #[tokio::test]
    async fn unknown_queues_leave_no_slot_behind() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        let queues = Queues::new(store, Arc::new(SystemClock), Settings::default());
        for n in 0..1_000 {
            let name = validate::queue_name("queue", &format!("missing-{n}")).unwrap();
            assert!(matches!(queues.get(&name).await, Err(MatchError::UnknownQueue(_))));
        }
        assert!(queues.queues.lock().unwrap().is_empty(), "a slot per unknown name");
        let name = validate::queue_name("queue", "real").unwrap();
        queues.create(&name, 1, None).await.unwrap();
        assert_eq!(queues.queues.lock().unwrap().len(), 1);
        queues.close().await;
    }

    /// A move starts only once every partition of the previous one is taken
    /// in its new home; a move to the home it has changes nothing.
    #[tokio::test]
    async fn a_move_waits_for_the_previous_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        let queues = Queues::new(store.clone(), Arc::new(SystemClock), Settings::default());
        let name = validate::queue_name("queue", "moving").unwrap();
        store.create_queue(&name, QueueConfig::new(2, "a")).await.unwrap();
        let id = PartitionId { queue: name.clone(), partition: 1 };
        let taken = store.take_ownership(&id, 0, "a-node", "a").await.unwrap();
        assert_eq!(queues.move_home(&name, "a").await.unwrap(), QueueConfig::new(2, "a"));
        assert_eq!(queues.move_home(&name, "b").await.unwrap(), QueueConfig::new(2, "b"));
        // Handed to b, not yet taken there: a move to c now would strand it.
        let handed = crate::partition::PartitionMeta {
            owner: String::new(),
            region: "b".into(),
            moved_from: "a".into(),
            ..taken
        };
        store.update_metadata(&id, &handed).await.unwrap();
        let refused = queues.move_home(&name, "c").await.unwrap_err();
        assert!(
            matches!(&refused, MatchError::MoveInProgress { detail, .. } if detail.contains("partition 1")),
            "{refused}"
        );
        assert_eq!(store.queue(&name).await.unwrap(), Some(QueueConfig::new(2, "b")), "nothing written");
        store.take_ownership(&id, 1, "b-node", "b").await.unwrap();
        assert_eq!(queues.move_home(&name, "c").await.unwrap(), QueueConfig::new(2, "c"));
        queues.close().await;
    }

    /// A forced failover is refused while the home has a live node; once
    /// forced, no move of either kind starts until the old generation is
    /// drained.
    #[tokio::test]
    async fn a_forced_failover_needs_a_dead_home_and_the_previous_one_drained() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        let queues = Queues::new(store.clone(), Arc::new(SystemClock), Settings::default());
        let name = validate::queue_name("queue", "forced").unwrap();
        store.create_queue(&name, QueueConfig::new(2, "a")).await.unwrap();
        let refused = queues.force_home(&name, "b", &["a".into(), "b".into()]).await.unwrap_err();
        assert!(matches!(&refused, MatchError::MoveInProgress { detail, .. } if detail.contains("live node")));
        let forced = queues.force_home(&name, "b", &["b".into()]).await.unwrap();
        assert_eq!((forced.home.as_str(), forced.generation, forced.previous_home.as_str()), ("b", 1, "a"));
        for refused in [queues.force_home(&name, "c", &["c".into()]).await, queues.move_home(&name, "c").await] {
            let refused = refused.unwrap_err();
            assert!(matches!(&refused, MatchError::MoveInProgress { detail, .. } if detail.contains("not drained")));
        }
        for partition in 0..2 {
            let id = PartitionId { queue: name.clone(), partition };
            let taken = store.take_ownership(&id, 0, "b-node", "b").await.unwrap();
            let drained = crate::partition::PartitionMeta { drained: true, ..taken };
            store.update_metadata(&id, &drained).await.unwrap();
        }
        assert_eq!(queues.move_home(&name, "c").await.unwrap().home, "c");
        queues.close().await;
    }
}
