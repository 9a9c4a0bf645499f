//! A partition's rows in memory, for the engine's tests: a write lands
//! whole and at once, reads and deletes do exactly what the engine asks.

use std::collections::BTreeMap;

use super::{GcRequest, ReadRequest};
use crate::core::engine::lookup::{StoreSearch, StoredPlace};
use crate::core::engine::rows::{
    PartitionMeta, PartitionWrite, RecordKey, RecordRange, RecordTask, RecordValue, Section,
};
use crate::model::{FairLevel, Priority, StoredTask};

#[derive(Default, Debug)]
pub(super) struct ModelStore {
    pub(super) tasks: BTreeMap<(Priority, FairLevel), StoredTask>,
    pub(super) records: BTreeMap<RecordKey, RecordValue>,
    pub(super) meta: PartitionMeta,
    /// Task rows a deposed owner deleted.
    pub(super) deleted_by_deposed: BTreeMap<(Priority, FairLevel), StoredTask>,
    /// Where the write whose metadata `meta` is stands in the order writes
    /// were planned (see [`Self::land_planned`]).
    pub(super) meta_planned: u64,
}

impl ModelStore {
    /// A new owner's compare-and-set: the range id moves on.
    pub(super) fn take_ownership(&mut self) -> PartitionMeta {
        self.meta.range_id += 1;
        self.meta.clone()
    }

    /// Lands every row of `write`.
    pub(super) fn land(&mut self, write: &PartitionWrite) {
        self.land_rows(write);
        if let Some(meta) = &write.metadata {
            self.meta = meta.clone();
        }
    }

    /// Lands the task rows and records of `write`, not its metadata.
    fn land_rows(&mut self, write: &PartitionWrite) {
        for task in &write.tasks {
            self.tasks.insert((task.priority, task.level), task.clone());
        }
        for record in &write.put {
            self.records.insert(record.at, record.value.clone());
        }
        for at in &write.delete {
            self.records.remove(at);
        }
        for row in &write.delete_tasks {
            self.tasks.remove(row);
        }
    }

    /// Lands `write`, the `planned`-th write planned (counted across owners),
    /// as if every write had landed in the order it was planned: its
    /// metadata only if no write planned after it has landed its own.
    ///
    /// That is the order the shell keeps: its writer makes one conditional
    /// write at a time, and settles one of unknown outcome with a fence
    /// before it plans the next (`partition::writer`), so no write of an
    /// owner lands after a later one, and the stored metadata never goes
    /// back to an older one's. A test that concludes appends in any order
    /// lands them through this, so that the store holds what some real
    /// order of landings leaves (task rows are rows of their own and land
    /// in any order alike).
    pub(super) fn land_planned(&mut self, write: &PartitionWrite, planned: u64) {
        self.land_rows(write);
        if let Some(meta) = &write.metadata {
            self.write_meta_planned(meta, planned);
        }
    }

    /// A metadata write alone (the keeper's), the `planned`-th write planned:
    /// as [`Self::land_planned`].
    pub(super) fn write_meta_planned(&mut self, meta: &PartitionMeta, planned: u64) {
        if planned > self.meta_planned {
            self.meta = meta.clone();
            self.meta_planned = planned;
        }
    }

    /// The tasks `request` reads: of its priority, above its level, at most its limit.
    pub(super) fn read(&self, request: &ReadRequest) -> Vec<StoredTask> {
        self.tasks
            .range((request.priority, request.after)..=(request.priority, FairLevel::MAX))
            .filter(|((_, level), _)| *level > request.after)
            .take(request.limit)
            .map(|(_, task)| task.clone())
            .collect()
    }

    /// The records of `section` above `after`, in key order.
    pub(super) fn section(&self, section: Section, after: (i64, i64)) -> Vec<((i64, i64), RecordValue)> {
        self.records
            .iter()
            .filter(|(at, _)| at.section == section && at.key > after)
            .map(|(at, value)| (at.key, value.clone()))
            .collect()
    }

    /// Task `task_id` in the places `search` names, as the partition's
    /// lookup reads them (with no bound): dead letters, delayed and parked
    /// records, then backlog rows above the read levels.
    pub(super) fn find(&self, search: &StoreSearch, task_id: i64) -> Option<(StoredTask, StoredPlace)> {
        let record = |range: RecordRange, place: &dyn Fn((i64, i64), &RecordTask) -> StoredPlace| {
            self.records.iter().find_map(|(at, value)| match value {
                RecordValue::Task(record)
                    if at.section == range.section
                        && (range.after..=range.through).contains(&at.key)
                        && at.key != range.after
                        && record.task.task_id == task_id =>
                {
                    Some((record.task.clone(), place(at.key, record)))
                }
                _ => None,
            })
        };
        let dead = |row, r: &RecordTask| StoredPlace::Dead { failed_at: r.at_unix_ms, message: r.message.clone(), row };
        let delayed = |_, r: &RecordTask| StoredPlace::Delayed { ready_at: r.at_unix_ms };
        record(RecordRange::above(Section::DeadLetters, search.dead_letters_above), &dead)
            .or_else(|| {
                search.delayed_above.and_then(|after| record(RecordRange::above(Section::Delayed, after), &delayed))
            })
            .or_else(|| {
                search.parked_above.iter().find_map(|(slot, seq)| {
                    record(RecordRange::bucket(Section::Parked, *slot, *seq), &|_, _| StoredPlace::Waiting)
                })
            })
            .or_else(|| {
                search.backlog_above.iter().find_map(|(priority, above)| {
                    self.tasks
                        .range((*priority, *above)..=(*priority, FairLevel::MAX))
                        .find(|((_, level), task)| level > above && task.task_id == task_id)
                        .map(|(_, task)| (task.clone(), StoredPlace::Waiting))
                })
            })
    }

    /// Deletes the tasks of `priority` at or below `through`.
    pub(super) fn delete_through(&mut self, priority: Priority, through: FairLevel) {
        self.tasks.retain(|(p, level), _| *p != priority || *level > through);
    }

    /// As `delete_through`, by a deposed owner: the rows it deletes may
    /// already be in the new owner's buffer, which may still hand them out.
    pub(super) fn delete_through_deposed(&mut self, priority: Priority, through: FairLevel) {
        let (gone, kept) = std::mem::take(&mut self.tasks)
            .into_iter()
            .partition(|((p, level), _)| *p == priority && *level <= through);
        self.tasks = kept;
        self.deleted_by_deposed.extend::<BTreeMap<_, _>>(gone);
    }

    /// What the keeper deletes: the tasks of `deletes`, and the records of
    /// each section through `record_deletes`.
    pub(super) fn collect_garbage(&mut self, deletes: &[GcRequest], record_deletes: &[RecordKey]) {
        for delete in deletes {
            self.delete_through(delete.priority, delete.through);
        }
        for through in record_deletes {
            self.records.retain(|at, _| at.section != through.section || at.key > through.key);
        }
    }
}
