//! A previous generation's partitions, after a forced failover, seen from
//! a region other than the queue's current home: handed over to the home
//! by the region that held them, or declared lost by an operator, so that
//! the current generation's drains (see `drain`) close them.
//!
//! Invariants: a partition of the previous generation is handed over only
//! once no live node of its region holds it (its owner hands it over
//! itself), and only after this node took it in that region's Paxos, which
//! fences any owner there that wakes with a write in hand; one declared
//! lost is written as handed over, conditional on the range id the current
//! home's replicas have.

use crate::model::{PartitionId, QueueName};
use crate::store::{PartitionMeta, PartitionStore, QueueConfig, StoreError};

/// For a node of a region other than the queue's home, after a forced
/// failover: hands each partition of the previous generation that names
/// this region, and that no live node of it holds (`held`: those this node
/// holds, which its ownership pass hands over), over to the home,
/// through this region's Paxos (taking it first, which fences any owner
/// here that wakes with a write in hand). In the previous home, a partition
/// never created is created to be handed over. Whether none is left to hand
/// over.
pub async fn hand_over_previous(
    store: &dyn PartitionStore,
    queue: &QueueName,
    config: &QueueConfig,
    node: &str,
    region: &str,
    live: &[String],
    held: &[u32],
) -> Result<bool, StoreError> {
    let Some(first) = config.previous_of(config.partition_number(0)) else { return Ok(true) };
    let mut settled = true;
    for number in first..first + config.partitions {
        let id = PartitionId { queue: queue.clone(), partition: number };
        let meta = store.load_partition(&id).await?;
        let expected = match &meta {
            Some(meta) if meta.drained || meta.region != region => continue,
            Some(meta)
                if (meta.owner == node && held.contains(&number))
                    || (meta.owner != node && live.contains(&meta.owner)) =>
            {
                // Its owner hands it over once it reads the new generation.
                settled = false;
                continue;
            }
            Some(meta) => meta.range_id,
            // Never created in its home (whose quorum this read meets): one
            // with no rows, made to be handed over so that the drain ends.
            None if config.previous_home == region => 0,
            None => continue,
        };
        let taken = store.take_ownership(&id, expected, node, region).await?;
        store.update_metadata(&id, &taken.handed_over(&config.home)).await?;
        tracing::info!(partition = %id, to_region = %config.home, "handed a partition of the previous generation over");
    }
    Ok(settled)
}

/// Declares the previous generation of `queue` (in `config`) lost, for an
/// old home that will not return: writes each of its partitions not yet
/// drained as handed over to `config.home` on the old region's behalf (no
/// owner; conditional on the range id the current home's replicas have, in
/// this region's Paxos), without the catch-up from the old region a real
/// hand-over asks for, so that the current generation's drains take it,
/// pass over it a last time and close it. What the old home acknowledged and
/// never replicated here is lost. A partition the old home never created
/// here is created empty, handed over likewise. The number of partitions
/// declared lost.
pub async fn abandon_previous(
    store: &dyn PartitionStore,
    queue: &QueueName,
    config: &QueueConfig,
    node: &str,
    region: &str,
) -> Result<u32, StoreError> {
    let Some(first) = config.previous_of(config.partition_number(0)) else { return Ok(0) };
    let mut abandoned = 0;
    for number in first..first + config.partitions {
        let id = PartitionId { queue: queue.clone(), partition: number };
        let lost = |meta: PartitionMeta| PartitionMeta {
            owner: String::new(),
            region: config.home.clone(),
            moved_from: String::new(),
            ..meta
        };
        match store.load_partition(&id).await? {
            Some(meta) if meta.drained => continue,
            Some(meta) => store.update_metadata(&id, &lost(meta)).await?,
            None => {
                let taken = store.take_ownership(&id, 0, node, region).await?;
                store.update_metadata(&id, &lost(taken)).await?;
            }
        }
        tracing::warn!(partition = %id, old_home = %config.previous_home, "declared lost: what its old home acknowledged and never replicated here is gone");
        abandoned += 1;
    }
    Ok(abandoned)
}
