//! A queue partition on Cassandra: one Cassandra partition holding the
//! metadata row and every task and record. Ownership is a lightweight
//! transaction on the range id; every write is one conditional batch on it,
//! so tasks, records and the fence commit together or not at all.

use async_trait::async_trait;
use scylla::statement::batch::{Batch, BatchType};
use scylla::value::CqlValue;

use super::error::{read_error, write_error};
use crate::model::{FairLevel, PartitionId, Priority, StoredTask};
use crate::store::codec::{decode_record_at, decode_row, decode_task, encode_meta, encode_record, encode_task};
use crate::store::{
    MAX_BUCKETS_PER_READ, PartitionMeta, PartitionStore, PartitionWrite, Record, RecordKey, RecordRange, RowRef,
    Section, StoreError, StoreResult, StoredRow, check_metadata_range, taken_meta,
};

use super::{CassandraStore, column, conditional, fenced, kind, partition_number};

/// Reads and compare-and-sets in one `take_ownership`, at most.
const TAKE_ATTEMPTS: usize = 8;

#[async_trait]
impl PartitionStore for CassandraStore {
    async fn load_partition(&self, partition: &PartitionId) -> StoreResult<Option<PartitionMeta>> {
        Ok(self.read_meta(partition, false).await?.map(|(_, meta)| meta))
    }

    async fn take_ownership(
        &self,
        partition: &PartitionId,
        expected: i64,
        owner: &str,
        region: &str,
    ) -> StoreResult<PartitionMeta> {
        let (queue, number) = (partition.queue.as_str(), partition_number(partition));
        if expected == 0 {
            let created = taken_meta(PartitionMeta::default(), 0, owner, region)?;
            let result = self
                .session
                .execute_unpaged(&self.statements.create_meta, (queue, number, 1i64, encode_meta(&created)))
                .await
                .map_err(write_error)?;
            return fenced(result).map(|()| created);
        }
        // The metadata as it stands, then the steal: conditional on the range
        // id read, so that no earlier owner can write after it, and on the
        // metadata read, so that a write the owner at `expected` made between
        // the read and the steal is not overwritten by the older metadata
        // (its ack level would go back, below what that owner deletes).
        for _ in 0..TAKE_ATTEMPTS {
            let (stored, bytes) = match self.read_meta_bytes(partition, true).await? {
                Some((range_id, meta, bytes)) if range_id == expected => (meta, bytes),
                Some((current_range_id, _, _)) => return Err(StoreError::Fenced { current_range_id }),
                None => return Err(StoreError::Fenced { current_range_id: 0 }),
            };
            if stored.region != region || !stored.moved_from.is_empty() {
                // Written in another region's Paxos and replicas (or in none
                // named): made visible here before this region takes it.
                taken_meta(stored.clone(), expected, owner, region)?;
                self.catch_up(partition).await?;
            }
            let taken = taken_meta(stored, expected, owner, region)?;
            let values = (taken.range_id, encode_meta(&taken), queue, number, expected, bytes);
            let result = self.session.execute_unpaged(&self.statements.take_meta, values).await.map_err(write_error)?;
            match conditional(result)? {
                None => return Ok(taken),
                Some(found) => {
                    let current_range_id = column(&found, "range_id").and_then(CqlValue::as_bigint).unwrap_or(0);
                    if current_range_id != expected {
                        return Err(StoreError::Fenced { current_range_id });
                    }
                    // The owner at `expected` wrote in between: read again.
                }
            }
        }
        Err(StoreError::Unavailable(format!(
            "partition {partition}: its owner kept writing while it was taken ({TAKE_ATTEMPTS} tries)"
        )))
    }

    async fn write(&self, partition: &PartitionId, range_id: i64, write: &PartitionWrite) -> StoreResult<()> {
        check_metadata_range(range_id, write.metadata.as_ref())?;
        let queue = CqlValue::Text(partition.queue.as_str().to_owned());
        let number = CqlValue::Int(partition_number(partition));
        let mut batch = Batch::new(BatchType::Logged);
        let rows = write.tasks.len() + write.put.len() + write.delete.len() + write.delete_tasks.len() + 1;
        let mut values: Vec<Vec<CqlValue>> = Vec::with_capacity(rows);
        let mut insert = |kind: i32, key: (i64, i64), bytes: Vec<u8>| {
            batch.append_statement(self.statements.insert_task.clone());
            values.push(vec![
                queue.clone(),
                number.clone(),
                CqlValue::Int(kind),
                CqlValue::BigInt(key.0),
                CqlValue::BigInt(key.1),
                CqlValue::Blob(bytes),
            ]);
        };
        for task in &write.tasks {
            insert(kind(task.priority), (task.level.pass, task.level.id), encode_task(task));
        }
        for record in &write.put {
            insert(i32::from(record.at.section.code()), record.at.key, encode_record(&record.value));
        }
        let record_rows = write.delete.iter().map(|at| (i32::from(at.section.code()), at.key));
        let task_rows = write.delete_tasks.iter().map(|(priority, level)| (kind(*priority), (level.pass, level.id)));
        for (kind, key) in record_rows.chain(task_rows) {
            batch.append_statement(self.statements.delete_record.clone());
            values.push(vec![
                queue.clone(),
                number.clone(),
                CqlValue::Int(kind),
                CqlValue::BigInt(key.0),
                CqlValue::BigInt(key.1),
            ]);
        }
        match &write.metadata {
            Some(meta) => {
                batch.append_statement(self.statements.write_meta.clone());
                values.push(vec![
                    CqlValue::BigInt(range_id),
                    CqlValue::Blob(encode_meta(meta)),
                    queue,
                    number,
                    CqlValue::BigInt(range_id),
                ]);
            }
            None => {
                batch.append_statement(self.statements.set_range.clone());
                values.push(vec![CqlValue::BigInt(range_id), queue, number, CqlValue::BigInt(range_id)]);
            }
        }
        let result = self.session.batch(&batch, values).await.map_err(write_error)?;
        fenced(result)
    }

    async fn read_row(&self, partition: &PartitionId, row: RowRef) -> StoreResult<Option<StoredRow>> {
        let (kind, (pass, id)) = match row {
            RowRef::Task(priority, level) => (kind(priority), (level.pass, level.id)),
            RowRef::Record(at) => (i32::from(at.section.code()), at.key),
        };
        let values = (partition.queue.as_str(), partition_number(partition), kind, pass, id);
        let result =
            self.session.execute_unpaged(&self.statements.read_row_serial, values).await.map_err(read_error)?;
        let rows = result.into_rows_result().map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let found = rows.maybe_first_row::<(Option<Vec<u8>>,)>().map_err(|e| StoreError::Corrupt(e.to_string()))?;
        found.and_then(|(bytes,)| bytes).map(|bytes| decode_row(row, &bytes)).transpose()
    }

    async fn read_records(
        &self,
        partition: &PartitionId,
        range: RecordRange,
        limit: usize,
    ) -> StoreResult<Vec<Record>> {
        let section = range.section;
        let code = i32::from(section.code());
        let rows = self.read_rows(partition, code, range.after, range.through, limit).await?;
        rows.into_iter().map(|(a, b, bytes)| decode_record_at(RecordKey { section, key: (a, b) }, &bytes)).collect()
    }

    async fn read_buckets(
        &self,
        partition: &PartitionId,
        section: Section,
        buckets: &[i64],
        per_bucket: usize,
    ) -> StoreResult<Vec<Record>> {
        debug_assert!(buckets.len() <= MAX_BUCKETS_PER_READ, "{} buckets in one read", buckets.len());
        if buckets.is_empty() {
            return Ok(Vec::new());
        }
        let mut buckets = buckets.to_vec();
        buckets.sort_unstable();
        buckets.dedup();
        let code = i32::from(section.code());
        let limit = buckets.len().saturating_mul(per_bucket);
        let values = (
            partition.queue.as_str(),
            partition_number(partition),
            code,
            &buckets,
            i32::try_from(limit).unwrap_or(i32::MAX),
        );
        let what = format!("partition {partition}, kind {code}, {} buckets", buckets.len());
        let rows: Vec<(i64, i64, Vec<u8>)> =
            self.read_pages(&self.statements.read_buckets, &values, limit, &what).await?;
        let mut records = Vec::with_capacity(rows.len());
        let mut in_bucket = (i64::MIN, 0);
        for (bucket, slot, value) in rows {
            in_bucket = if in_bucket.0 == bucket { (bucket, in_bucket.1 + 1) } else { (bucket, 1) };
            if in_bucket.1 <= per_bucket {
                records.push(decode_record_at(RecordKey { section, key: (bucket, slot) }, &value)?);
            }
        }
        Ok(records)
    }

    async fn read(
        &self,
        partition: &PartitionId,
        priority: Priority,
        after: FairLevel,
        limit: usize,
    ) -> StoreResult<Vec<StoredTask>> {
        let rows =
            self.read_rows(partition, kind(priority), (after.pass, after.id), (i64::MAX, i64::MAX), limit).await?;
        rows.into_iter().map(|(pass, id, bytes)| decode_task(FairLevel::new(pass, id), priority, &bytes)).collect()
    }

    async fn delete_through(&self, partition: &PartitionId, priority: Priority, through: FairLevel) -> StoreResult<()> {
        self.delete_rows_through(partition, kind(priority), (through.pass, through.id)).await
    }

    async fn delete_records_through(
        &self,
        partition: &PartitionId,
        section: Section,
        through: (i64, i64),
    ) -> StoreResult<()> {
        self.delete_rows_through(partition, i32::from(section.code()), through).await
    }

    async fn update_metadata(&self, partition: &PartitionId, metadata: &PartitionMeta) -> StoreResult<()> {
        let result = self
            .session
            .execute_unpaged(
                &self.statements.write_meta,
                (
                    metadata.range_id,
                    encode_meta(metadata),
                    partition.queue.as_str(),
                    partition_number(partition),
                    metadata.range_id,
                ),
            )
            .await
            .map_err(write_error)?;
        fenced(result)
    }
}
