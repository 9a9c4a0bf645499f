//! What workers do with the tasks they hold: finish, heartbeat; and the
//! dead letters, listed and put back.
//!
//! Invariants: finishes and heartbeats go to the partition named by the
//! token, held here and active, or are refused with nothing written; dead
//! letters are read through [`crate::partition::StoredPartition`] only.

use super::{MatchError, QueueMatcher};
use crate::clock::UnixMillis;
use crate::core::engine::lookup::TaskState;
use crate::core::engine::{DeadLetterFilter, Finish, Finished, Outcome, Purged};
use crate::matcher::LeaseToken;
use crate::partition::{Lookup, LookupBounds, PartitionError, RecordTask, Redriven};

impl QueueMatcher {
    /// Records a worker's report on the lease of `token`.
    pub async fn finish(&self, token: &LeaseToken, outcome: Outcome) -> Result<Finished, MatchError> {
        let partition = self.held_partition(token.partition)?;
        Ok(partition.finish(Finish { lease_id: token.lease_id, attempt: token.attempt, outcome }).await?)
    }

    /// Extends the lease of `token`; its new deadline.
    pub fn heartbeat(&self, token: &LeaseToken) -> Result<UnixMillis, MatchError> {
        Ok(self.held_partition(token.partition)?.heartbeat(token.lease_id, token.attempt)?)
    }

    /// Records that the lease of `token` went to the worker `worker_id`
    /// (shown by GetTask); nothing if the lease ended meanwhile.
    pub fn worker_took(&self, token: &LeaseToken, worker_id: &str) {
        if let Ok(partition) = self.held_partition(token.partition) {
            partition.worker_took(token.lease_id, token.attempt, worker_id);
        }
    }

    /// The dedup id of the task the lease of `token` is on, while the lease
    /// is held.
    pub fn leased_dedup_id(&self, token: &LeaseToken) -> Result<Option<String>, MatchError> {
        Ok(self.held_partition(token.partition)?.leased_dedup_id(token.lease_id, token.attempt)?)
    }

    /// The task of `partition` with id `task_id`, looked up by this node,
    /// its owner (see [`crate::partition::Partition::find_task`]).
    pub async fn find_task(&self, partition: u32, task_id: i64, bounds: LookupBounds) -> Result<Lookup, MatchError> {
        Ok(self.held_partition(partition)?.find_task(task_id, bounds).await?)
    }

    /// Cancels the task of `partition` with id `task_id`, looked up first
    /// (see [`Self::find_task`]); the lookup says what it was, and nothing
    /// is written when it found nothing.
    pub async fn cancel_task(&self, partition: u32, task_id: i64, bounds: LookupBounds) -> Result<Lookup, MatchError> {
        let held = self.held_partition(partition)?;
        let lookup = held.find_task(task_id, bounds).await?;
        if let Lookup::Found(found) = &lookup {
            let dead_letter = match &found.state {
                TaskState::Dead { row, .. } => Some(*row),
                _ => None,
            };
            held.cancel(task_id, dead_letter).await?;
        }
        Ok(lookup)
    }

    /// Purges `partition` (see `crate::core::engine::cancel`): what it held then.
    pub async fn purge(&self, partition: u32) -> Result<Purged, MatchError> {
        Ok(self.held_partition(partition)?.purge().await?)
    }

    /// Puts up to `limit` dead letters of `partition` that `filter` chooses
    /// back in the queue, reading at most `max_read` letters.
    pub async fn redrive(
        &self,
        partition: u32,
        limit: usize,
        filter: &DeadLetterFilter,
        max_read: usize,
    ) -> Result<Redriven, MatchError> {
        Ok(self.held_partition(partition)?.redrive(limit, filter, max_read).await?)
    }

    /// Up to `limit` dead letters of the queue that `filter` chooses, oldest
    /// failure first, with their partitions, within `max_bytes` of payloads
    /// and messages (the first always). Read from the store, so that any
    /// node can list them: per partition, above the floor of those put back
    /// (past their deleted rows), in pages, until its share of `max_bytes`
    /// is read or `max_read` letters are. With them, whether any were left
    /// unread or out: whether another call, or a narrower one, may find more.
    pub async fn dead_letters(
        &self,
        limit: usize,
        (max_bytes, max_read): (usize, usize),
        filter: &DeadLetterFilter,
    ) -> Result<(Vec<(u32, RecordTask)>, bool), MatchError> {
        const PAGE: usize = 64;
        let size = |d: &RecordTask| d.task.payload.len() + d.message.len();
        let share = (max_bytes / self.partition_count() as usize).max(1);
        let mut dead = Vec::new();
        let mut more = false;
        for partition in self.config().partition_numbers() {
            let stored = self.stored(partition);
            let meta = stored.meta().await.map_err(PartitionError::from)?;
            let mut after = meta.map_or((0, 0), |m| m.dead_letters_through);
            let (mut taken, mut bytes, mut read) = (0, 0, 0);
            let mut ended = false;
            while taken < limit && bytes < share && read < max_read {
                let page = if filter.is_everything() { limit - taken } else { max_read - read };
                let page = page.min(PAGE);
                let letters = stored.dead_letters(after, page).await.map_err(PartitionError::from)?;
                let last_page = letters.len() < page;
                for (at, letter) in letters {
                    after = at.key;
                    read += 1;
                    if filter.matches(&letter) {
                        (taken, bytes) = (taken + 1, bytes + size(&letter));
                        dead.push((partition, letter));
                    }
                }
                if last_page {
                    ended = true;
                    break;
                }
            }
            more |= !ended;
        }
        dead.sort_by_key(|(partition, d)| (d.at_unix_ms, *partition, d.task.task_id));
        let found = dead.len();
        let mut total = 0;
        let within: Vec<_> = dead
            .into_iter()
            .take(limit)
            .take_while(|(_, letter)| {
                let first = total == 0;
                total += size(letter).max(1);
                first || total <= max_bytes
            })
            .collect();
        more |= within.len() < found;
        Ok((within, more))
    }
}
