//! GetTask at the partition's owner: a task by its id, from the engine's
//! memory first, then from the store where the engine says memory does not
//! reach, within a stated bound.
//!
//! Invariants: a lookup writes nothing; it reads at most
//! [`LookupBounds::rows`] rows and stops once the payloads read pass
//! [`LookupBounds::bytes`]; when it stops short it says so, never that the
//! task is gone.

use super::error::PartitionError;
use super::handle::Partition;
use super::stored::StoredPartition;
use crate::core::engine::lookup::{FoundTask, StoreSearch, StoredPlace};
use crate::core::engine::rows::{RecordRange, Section};
use crate::model::{Priority, StoredTask};

/// How much of the store one lookup may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LookupBounds {
    /// Rows read, every section together.
    pub rows: usize,
    /// Bytes of payloads and messages read.
    pub bytes: usize,
}

impl Default for LookupBounds {
    /// 10,000 rows, 64 MiB.
    fn default() -> Self {
        LookupBounds { rows: 10_000, bytes: 64 << 20 }
    }
}

/// What a lookup found.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup {
    /// The task, and where it stands.
    Found(Box<FoundTask>),
    /// No task of the partition has ever had the id.
    NeverAdded,
    /// Not pending, delayed, leased or dead: it completed, or was
    /// cancelled.
    Gone,
    /// Not among the rows read before the bound: it may wait further back.
    NotWithin {
        /// Rows read.
        rows: usize,
    },
}

/// Rows per store read.
const PAGE: usize = 64;

impl Partition {
    /// The task of this partition with id `task_id` (see the module docs).
    pub async fn find_task(&self, task_id: i64, bounds: LookupBounds) -> Result<Lookup, PartitionError> {
        let now = self.now_ms();
        let (found, search, unused) = self
            .with_engine(|e| (e.find_task(task_id, now), e.store_search(), e.id_unused(task_id)))
            .ok_or_else(|| PartitionError::Closed(self.id().to_string()))?;
        if let Some(found) = found {
            return Ok(Lookup::Found(Box::new(found)));
        }
        if unused {
            return Ok(Lookup::NeverAdded);
        }
        let stored = StoredPartition::new(self.shared.store.clone(), self.id().clone());
        let mut scan = Scan { task_id, bounds, rows: 0, bytes: 0 };
        let Some(outcome) = scan.search(&stored, &search).await? else {
            return Ok(Lookup::Gone);
        };
        let (task, place) = match outcome {
            ScanOutcome::Found(task, place) => (task, place),
            ScanOutcome::Bounded => return Ok(Lookup::NotWithin { rows: scan.rows }),
        };
        let now = self.now_ms();
        self.with_engine(|e| Lookup::Found(Box::new(e.found_in_store(*task, place, now))))
            .ok_or_else(|| PartitionError::Closed(self.id().to_string()))
    }
}

enum ScanOutcome {
    Found(Box<StoredTask>, StoredPlace),
    /// The bound was reached first.
    Bounded,
}

/// One lookup's reads of the store, and what they cost so far.
struct Scan {
    task_id: i64,
    bounds: LookupBounds,
    rows: usize,
    bytes: usize,
}

impl Scan {
    /// Looks where `search` says, cheapest first: dead letters, delayed and
    /// parked records, then the backlog by priority. `None`: not there.
    async fn search(
        &mut self,
        stored: &StoredPartition,
        search: &StoreSearch,
    ) -> Result<Option<ScanOutcome>, PartitionError> {
        let dead = RecordRange::above(Section::DeadLetters, search.dead_letters_above);
        let as_dead = |row, failed_at, message| StoredPlace::Dead { failed_at, message, row };
        if let Some(found) = self.records(stored, dead, as_dead).await? {
            return Ok(Some(found));
        }
        if let Some(after) = search.delayed_above {
            let delayed = RecordRange::above(Section::Delayed, after);
            let as_delayed = |_, ready_at, _| StoredPlace::Delayed { ready_at };
            if let Some(found) = self.records(stored, delayed, as_delayed).await? {
                return Ok(Some(found));
            }
        }
        for (slot, after) in &search.parked_above {
            let parked = RecordRange::bucket(Section::Parked, *slot, *after);
            if let Some(found) = self.records(stored, parked, |_, _, _| StoredPlace::Waiting).await? {
                return Ok(Some(found));
            }
        }
        for (priority, above) in &search.backlog_above {
            if let Some(found) = self.backlog(stored, *priority, *above).await? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The task's record in `range`, placed by `place` from the record's
    /// key, time and message.
    async fn records(
        &mut self,
        stored: &StoredPartition,
        mut range: RecordRange,
        place: impl Fn((i64, i64), i64, String) -> StoredPlace,
    ) -> Result<Option<ScanOutcome>, PartitionError> {
        loop {
            let Some(page) = self.page() else { return Ok(Some(ScanOutcome::Bounded)) };
            let records = stored.records(range, page).await?;
            let last = records.len() < page;
            for record in records {
                range.after = record.at.key;
                let at = record.at.key;
                let record = record.value.into_task("a task record")?;
                if self.counted(&record.task, record.message.len()) {
                    return Ok(Some(ScanOutcome::Found(
                        Box::new(record.task),
                        place(at, record.at_unix_ms, record.message),
                    )));
                }
            }
            if last {
                return Ok(None);
            }
        }
    }

    async fn backlog(
        &mut self,
        stored: &StoredPartition,
        priority: Priority,
        mut above: crate::model::FairLevel,
    ) -> Result<Option<ScanOutcome>, PartitionError> {
        loop {
            let Some(page) = self.page() else { return Ok(Some(ScanOutcome::Bounded)) };
            let tasks = stored.backlog(priority, above, page).await?;
            let last = tasks.len() < page;
            for task in tasks {
                above = task.level;
                if self.counted(&task, 0) {
                    return Ok(Some(ScanOutcome::Found(Box::new(task), StoredPlace::Waiting)));
                }
            }
            if last {
                return Ok(None);
            }
        }
    }

    /// How many rows the next read may ask for; `None` past a bound.
    fn page(&self) -> Option<usize> {
        let left = self.bounds.rows.saturating_sub(self.rows);
        (left > 0 && self.bytes < self.bounds.bytes).then(|| left.min(PAGE))
    }

    /// Counts a row read; whether it is the task looked for.
    fn counted(&mut self, task: &StoredTask, extra_bytes: usize) -> bool {
        self.rows += 1;
        self.bytes += task.payload.len() + extra_bytes;
        task.task_id == self.task_id
    }
}
