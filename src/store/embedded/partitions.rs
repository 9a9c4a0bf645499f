//! Queue partitions in redb: the metadata table and the tasks table (tasks
//! and records, keyed by partition, kind and key). Each write is one
//! transaction that checks the range id and commits tasks, records and
//! metadata together.

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable};

use crate::model::{FairLevel, PartitionId, Priority, StoredTask};
use crate::store::codec::{
    decode_meta, decode_record_at, decode_row, decode_task, encode_meta, encode_record, encode_task,
};
use crate::store::{
    PartitionMeta, PartitionStore, PartitionWrite, Record, RecordKey, RecordRange, RowRef, Section, StoreError,
    StoreResult, StoredRow, check_metadata_range, taken_meta,
};

use super::{EmbeddedStore, META, TASKS, unavailable, uncertain};

fn stored_range_id(
    meta: &redb::Table<(&str, u32), &[u8]>,
    partition: &PartitionId,
) -> StoreResult<Option<PartitionMeta>> {
    meta.get((partition.queue.as_str(), partition.partition))
        .map_err(unavailable)?
        .map(|row| decode_meta(row.value()))
        .transpose()
}

fn check_range(current: Option<&PartitionMeta>, range_id: i64) -> StoreResult<()> {
    let current_range_id = current.map_or(0, |m| m.range_id);
    if current_range_id != range_id {
        return Err(StoreError::Fenced { current_range_id });
    }
    Ok(())
}

fn priority_byte(priority: Priority) -> u8 {
    priority.get() as u8
}

/// The kind and `(pass, id)` key of a row.
fn row_key(row: RowRef) -> (u8, (i64, i64)) {
    match row {
        RowRef::Task(priority, level) => (priority_byte(priority), (level.pass, level.id)),
        RowRef::Record(at) => (at.section.code(), at.key),
    }
}

#[async_trait]
impl PartitionStore for EmbeddedStore {
    async fn load_partition(&self, partition: &PartitionId) -> StoreResult<Option<PartitionMeta>> {
        let partition = partition.clone();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(META).map_err(unavailable)?;
            table
                .get((partition.queue.as_str(), partition.partition))
                .map_err(unavailable)?
                .map(|row| decode_meta(row.value()))
                .transpose()
        })
        .await
    }

    async fn take_ownership(
        &self,
        partition: &PartitionId,
        expected: i64,
        owner: &str,
        region: &str,
    ) -> StoreResult<PartitionMeta> {
        let partition = partition.clone();
        let (owner, region) = (owner.to_owned(), region.to_owned());
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            let taken = {
                let mut table = txn.open_table(META).map_err(unavailable)?;
                let current = stored_range_id(&table, &partition)?;
                check_range(current.as_ref(), expected)?;
                // One process: every write it acknowledged is already visible.
                let taken = taken_meta(current.unwrap_or_default(), expected, &owner, &region)?;
                table
                    .insert((partition.queue.as_str(), partition.partition), encode_meta(&taken).as_slice())
                    .map_err(unavailable)?;
                taken
            };
            txn.commit().map_err(uncertain)?;
            Ok(taken)
        })
        .await
    }

    async fn write(&self, partition: &PartitionId, range_id: i64, write: &PartitionWrite) -> StoreResult<()> {
        check_metadata_range(range_id, write.metadata.as_ref())?;
        let partition = partition.clone();
        let mut rows: Vec<(u8, (i64, i64), Vec<u8>)> = write
            .tasks
            .iter()
            .map(|t| (priority_byte(t.priority), (t.level.pass, t.level.id), encode_task(t)))
            .collect();
        rows.extend(write.put.iter().map(|r| (r.at.section.code(), r.at.key, encode_record(&r.value))));
        let mut deletes: Vec<(u8, (i64, i64))> = write.delete.iter().map(|at| (at.section.code(), at.key)).collect();
        deletes.extend(
            write.delete_tasks.iter().map(|(priority, level)| (priority_byte(*priority), (level.pass, level.id))),
        );
        let meta_row = write.metadata.as_ref().map(encode_meta);
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            {
                let mut meta_table = txn.open_table(META).map_err(unavailable)?;
                check_range(stored_range_id(&meta_table, &partition)?.as_ref(), range_id)?;
                let (queue, number) = (partition.queue.as_str(), partition.partition);
                let mut task_table = txn.open_table(TASKS).map_err(unavailable)?;
                for (kind, (pass, id), bytes) in &rows {
                    task_table.insert((queue, number, *kind, *pass, *id), bytes.as_slice()).map_err(unavailable)?;
                }
                for (kind, (pass, id)) in &deletes {
                    task_table.remove((queue, number, *kind, *pass, *id)).map_err(unavailable)?;
                }
                if let Some(meta_row) = &meta_row {
                    meta_table.insert((queue, number), meta_row.as_slice()).map_err(unavailable)?;
                }
            }
            txn.commit().map_err(uncertain)
        })
        .await
    }

    async fn read_row(&self, partition: &PartitionId, row: RowRef) -> StoreResult<Option<StoredRow>> {
        let (kind, key) = row_key(row);
        let partition = partition.clone();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(TASKS).map_err(unavailable)?;
            let found =
                table.get((partition.queue.as_str(), partition.partition, kind, key.0, key.1)).map_err(unavailable)?;
            found.map(|value| decode_row(row, value.value())).transpose()
        })
        .await
    }

    async fn read_records(
        &self,
        partition: &PartitionId,
        range: RecordRange,
        limit: usize,
    ) -> StoreResult<Vec<Record>> {
        let section = range.section;
        let rows = self.read_rows(partition, section.code(), range.after, range.through, limit).await?;
        rows.into_iter().map(|(key, bytes)| decode_record_at(RecordKey { section, key }, &bytes)).collect()
    }

    async fn read_buckets(
        &self,
        partition: &PartitionId,
        section: Section,
        buckets: &[i64],
        per_bucket: usize,
    ) -> StoreResult<Vec<Record>> {
        let (partition, mut buckets) = (partition.clone(), buckets.to_vec());
        buckets.sort_unstable();
        buckets.dedup();
        let kind = section.code();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(TASKS).map_err(unavailable)?;
            let (queue, number) = (partition.queue.as_str(), partition.partition);
            let mut records = Vec::new();
            for bucket in buckets {
                let rows = table
                    .range::<(&str, u32, u8, i64, i64)>(
                        (queue, number, kind, bucket, i64::MIN)..=(queue, number, kind, bucket, i64::MAX),
                    )
                    .map_err(unavailable)?;
                for row in rows.take(per_bucket) {
                    let (key, value) = row.map_err(unavailable)?;
                    let (_, _, _, bucket, slot) = key.value();
                    records.push(decode_record_at(RecordKey { section, key: (bucket, slot) }, value.value())?);
                }
            }
            Ok(records)
        })
        .await
    }

    async fn read(
        &self,
        partition: &PartitionId,
        priority: Priority,
        after: FairLevel,
        limit: usize,
    ) -> StoreResult<Vec<StoredTask>> {
        let rows = self
            .read_rows(partition, priority_byte(priority), (after.pass, after.id), (i64::MAX, i64::MAX), limit)
            .await?;
        rows.into_iter().map(|((pass, id), bytes)| decode_task(FairLevel::new(pass, id), priority, &bytes)).collect()
    }

    async fn delete_through(&self, partition: &PartitionId, priority: Priority, through: FairLevel) -> StoreResult<()> {
        self.delete_rows_through(partition, priority_byte(priority), (through.pass, through.id)).await
    }

    async fn delete_records_through(
        &self,
        partition: &PartitionId,
        section: Section,
        through: (i64, i64),
    ) -> StoreResult<()> {
        self.delete_rows_through(partition, section.code(), through).await
    }

    async fn update_metadata(&self, partition: &PartitionId, metadata: &PartitionMeta) -> StoreResult<()> {
        let write = PartitionWrite { metadata: Some(metadata.clone()), ..PartitionWrite::default() };
        self.write(partition, metadata.range_id, &write).await
    }
}
