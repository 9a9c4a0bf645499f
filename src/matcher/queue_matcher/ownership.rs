//! Which partitions of the queue this node holds: taking them, checking
//! them, handing them over, dropping them at a heartbeat lapse.
//!
//! Invariants: adoptions and releases run one at a time; a partition is
//! taken only from an owner that handed it over, is gone, or is this node;
//! an abandoned partition is freed only while the store still names this
//! node, fenced by its range id.

use super::{MatchError, QueueMatcher};
use crate::core::engine::TaskCounts;
use crate::matcher::Settings;
use crate::model::PartitionId;
use crate::partition::{Partition, PartitionError, PartitionSetup, PartitionState, StoredPartition};
use crate::store::StoreError;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

impl QueueMatcher {
    /// The partitions this node holds, and in which state.
    pub fn held(&self) -> Vec<(u32, PartitionState)> {
        self.look_at_partitions(|partitions| partitions.iter().map(|p| (p.id().partition, p.state())).collect())
    }

    /// Whether this node holds `partition` and may write to it.
    pub fn holds(&self, partition: u32) -> bool {
        self.look_at_partitions(|partitions| {
            partitions.iter().any(|p| p.id().partition == partition && p.state() == PartitionState::Active)
        })
    }

    /// Takes `partition` if this node does not hold it yet and `may_take`
    /// accepts its stored owner (a previous owner that is gone or has handed
    /// it over). Returns whether it took it.
    pub async fn adopt(&self, partition: u32, may_take: impl Fn(&str) -> bool) -> Result<bool, MatchError> {
        let _one_at_a_time = self.ownership.lock().await;
        if self.closing.load(Ordering::Acquire) {
            return Err(MatchError::ShuttingDown);
        }
        if self.holds(partition) {
            return Ok(false);
        }
        // Held but not active (fenced or closing): its counts are final.
        self.remove_partitions(|p| p.id().partition == partition);
        let id = PartitionId { queue: self.name.clone(), partition };
        let stored = self.stored(partition).meta().await.map_err(PartitionError::from)?;
        let not_handed_over =
            stored.as_ref().is_some_and(|meta| !meta.owner.is_empty() && meta.owner != self.settings.node);
        if let Some(meta) = &stored
            && not_handed_over
            && !may_take(&meta.owner)
        {
            return Ok(false);
        }
        let stored_settings = self.config().settings;
        let setup = PartitionSetup {
            node: self.settings.node.clone(),
            region: self.settings.fence_region.clone(),
            store: self.store.clone(),
            clock: self.clock.clone(),
            engine: self.settings.engine_for(&self.name, &stored_settings),
            pauses: Settings::pauses(&stored_settings),
            writer: self.settings.writer.clone(),
            on_ready: self.on_ready.clone(),
        };
        let opened = Partition::open(id, stored.map_or(0, |m| m.range_id), setup).await?;
        self.write_partitions().push(opened);
        // Settings stored while it opened were applied to the others only.
        if self.config().settings.version != stored_settings.version {
            self.apply_stored_settings();
        }
        self.abandoned().remove(&partition);
        if not_handed_over {
            self.takeovers.fetch_add(1, Ordering::Relaxed);
        }
        Ok(true)
    }

    /// Checks that every partition this node holds is still its own (see
    /// [`Partition::verify`]).
    pub async fn verify_held(&self) {
        for partition in self.partitions() {
            if partition.state() == PartitionState::Active
                && let Err(error) = partition.verify().await
            {
                tracing::debug!(partition = %partition.id(), %error, "could not verify ownership");
            }
        }
    }

    /// Hands `partition` over to a node of the queue's home region:
    /// finishes its writes and writes its ack levels with no owner (and that
    /// region, if it is another), so that the next owner takes it at once.
    /// One whose last write could not be made is counted abandoned, so that
    /// [`Self::hand_over_abandoned`] tries again: the rightful node, which
    /// sees this live node still named, would wait for it for ever.
    pub async fn release(&self, partition: u32) {
        let _one_at_a_time = self.ownership.lock().await;
        let home = self.config().home;
        for (partition, counted) in self.remove_partitions(|p| p.id().partition == partition) {
            tracing::info!(partition = %partition.id(), to_region = %home, "handing over");
            if !partition.release(&home).await {
                self.abandoned().insert(partition.id().partition);
            }
            self.retire(&partition, counted);
        }
        self.dispatch_waiting();
    }

    /// Drops every partition without writing: this node may have been
    /// declared dead, and others may own them now.
    pub async fn abandon_all(&self) {
        let _one_at_a_time = self.ownership.lock().await;
        self.stop_drains();
        for (partition, counted) in self.remove_partitions(|_| true) {
            tracing::warn!(partition = %partition.id(), "abandoning");
            partition.abandon().await;
            self.retire(&partition, counted);
            self.abandoned().insert(partition.id().partition);
        }
        self.dispatch_waiting();
    }

    /// Whether `partition` was abandoned and not handed over since.
    pub fn was_abandoned(&self, partition: u32) -> bool {
        self.abandoned().contains(&partition)
    }

    /// Hands over an abandoned partition that is not this node's to take
    /// again: if the store still names this node its owner, writes its
    /// metadata back with no owner, on the condition that its range id has
    /// not moved (a node that took it since fences this write). The ack
    /// levels written are the ones stored, never ahead of them.
    pub async fn hand_over_abandoned(&self, partition: u32) -> Result<(), MatchError> {
        let _one_at_a_time = self.ownership.lock().await;
        if self.holds(partition) || !self.was_abandoned(partition) {
            return Ok(());
        }
        let stored = self.stored(partition);
        let id = stored.id();
        if let Some(meta) =
            stored.meta().await.map_err(PartitionError::from)?.filter(|meta| meta.owner == self.settings.node)
        {
            let freed = meta.handed_over(&self.config().home);
            match stored.release(&freed).await {
                Ok(()) => tracing::info!(partition = %id, "handed over after abandoning it"),
                Err(StoreError::Fenced { .. }) => {}
                Err(error) => return Err(PartitionError::from(error).into()),
            }
        }
        self.abandoned().remove(&partition);
        Ok(())
    }

    /// Partition `partition` of the queue as the store has it, held here or not.
    pub(super) fn stored(&self, partition: u32) -> StoredPartition {
        StoredPartition::new(self.store.clone(), PartitionId { queue: self.name.clone(), partition })
    }

    fn abandoned(&self) -> MutexGuard<'_, BTreeSet<u32>> {
        self.abandoned.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn retired(&self) -> MutexGuard<'_, TaskCounts> {
        self.retired.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the partitions `which` selects off the list, and their counts so
    /// far into the retired counts in the same step; returns them with those
    /// counts.
    fn remove_partitions(&self, which: impl Fn(&Partition) -> bool) -> Vec<(Arc<Partition>, TaskCounts)> {
        let mut partitions = self.write_partitions();
        let (gone, kept): (Vec<_>, Vec<_>) = partitions.drain(..).partition(|p| which(p));
        *partitions = kept;
        let gone: Vec<(Arc<Partition>, TaskCounts)> = gone
            .into_iter()
            .map(|partition| {
                let counted = partition.counts();
                (partition, counted)
            })
            .collect();
        for (_, counted) in &gone {
            *self.retired() += *counted;
        }
        gone
    }

    /// Once a removed partition has stopped: what it counted after its removal.
    fn retire(&self, partition: &Partition, counted: TaskCounts) {
        let after_removal = partition.counts().since(counted);
        *self.retired() += after_removal;
    }

    /// Answers parked polls (empty), then hands every partition over in turn.
    pub async fn close(&self) {
        self.stop_polls();
        let _one_at_a_time = self.ownership.lock().await;
        self.stop_drains();
        // All at once: each may retry its last metadata write for a while.
        let partitions = self.remove_partitions(|_| true);
        let home = self.config().home;
        futures::future::join_all(partitions.iter().map(|(partition, _)| partition.release(&home))).await;
        for (partition, counted) in partitions {
            self.retire(&partition, counted);
        }
    }
}
