//! Which partitions held here drain the previous generation (see
//! [`Partition::start_drain`](crate::partition::Partition::start_drain)):
//! the matcher asks each held active partition whose index has a previous
//! partition to start its drain, once, and stops them all when its
//! partitions go away.
//!
//! Invariant: at most one drain runs per partition number; one that ended
//! with its previous partition drained is not started again.

use std::collections::BTreeMap;
use std::sync::Mutex;

use futures::FutureExt;
use tokio::task::JoinHandle;

use super::QueueMatcher;
use crate::partition::PartitionState;

/// Where the drain of each held partition of a later generation stands.
#[derive(Debug, Default)]
pub(super) struct Drains {
    by_partition: Mutex<BTreeMap<u32, DrainState>>,
}

#[derive(Debug)]
enum DrainState {
    /// The partition's drain task: true once the previous partition is drained.
    Running(JoinHandle<bool>),
    Done,
}

impl Drains {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, DrainState>> {
        self.by_partition.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl QueueMatcher {
    /// Starts draining the previous generation into each partition held
    /// here that has one and is not drained (or draining) yet.
    pub fn start_drains(&self) {
        let config = self.config();
        let mut drains = self.drains.lock();
        for state in drains.values_mut() {
            if let DrainState::Running(task) = state
                && task.is_finished()
                && let Some(Ok(true)) = task.now_or_never()
            {
                *state = DrainState::Done;
            }
        }
        drains.retain(|_, state| !matches!(state, DrainState::Running(task) if task.is_finished()));
        for partition in self.partitions() {
            let number = partition.id().partition;
            let Some(previous) = config.previous_of(number) else { continue };
            if partition.state() != PartitionState::Active || drains.contains_key(&number) {
                continue;
            }
            drains.insert(number, DrainState::Running(partition.start_drain(previous)));
        }
    }

    /// Stops the drains (the partitions they fill are going away).
    pub(super) fn stop_drains(&self) {
        for (_, state) in std::mem::take(&mut *self.drains.lock()) {
            if let DrainState::Running(task) = state {
                task.abort();
            }
        }
    }
}
