//! The schedules' table in the embedded store: (shard, id) → (version,
//! record). Every operation is one redb transaction; a compare-and-set reads
//! the version and writes inside one write transaction, which redb's single
//! writer makes atomic.

use std::ops::Bound;

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};

use super::{EmbeddedStore, unavailable, uncertain};
use crate::store::StoreResult;
use crate::store::schedules::{
    Replaced, ScheduleRecord, ScheduleStore, check_list, decode_record, encode_write, shard_of,
};

/// (shard, id) → (version, the record's JSON).
const SCHEDULES: TableDefinition<(u32, &str), (u64, &[u8])> = TableDefinition::new("schedules");

/// Creates the table, so that reads find it.
pub(super) fn create_tables(txn: &WriteTransaction) -> Result<(), redb::TableError> {
    txn.open_table(SCHEDULES)?;
    Ok(())
}

/// What a compare-and-set found: the stored version and record of an id.
fn stored<T: ReadableTable<(u32, &'static str), (u64, &'static [u8])>>(
    table: &T,
    id: &str,
) -> StoreResult<Option<ScheduleRecord>> {
    let Some(row) = table.get((shard_of(id), id)).map_err(unavailable)? else { return Ok(None) };
    let (version, bytes) = row.value();
    decode_record(id, version, bytes).map(Some)
}

#[async_trait]
impl ScheduleStore for EmbeddedStore {
    async fn create_schedule(&self, record: &ScheduleRecord) -> StoreResult<bool> {
        let bytes = encode_write(record, None)?;
        let (id, version) = (record.id.clone(), record.version);
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            {
                let mut table = txn.open_table(SCHEDULES).map_err(unavailable)?;
                let key = (shard_of(&id), id.as_str());
                if table.get(key).map_err(unavailable)?.is_some() {
                    return Ok(false);
                }
                table.insert(key, (version, bytes.as_slice())).map_err(unavailable)?;
            }
            txn.commit().map_err(uncertain)?;
            Ok(true)
        })
        .await
    }

    async fn schedule(&self, id: &str) -> StoreResult<Option<ScheduleRecord>> {
        let id = id.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(SCHEDULES).map_err(unavailable)?;
            stored(&table, &id)
        })
        .await
    }

    async fn replace_schedule(&self, record: &ScheduleRecord, expected: u64) -> StoreResult<Replaced> {
        let bytes = encode_write(record, Some(expected))?;
        let (id, version) = (record.id.clone(), record.version);
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            {
                let mut table = txn.open_table(SCHEDULES).map_err(unavailable)?;
                match stored(&table, &id)? {
                    Some(current) if current.version == expected => {}
                    other => return Ok(Replaced::Conflict(other)),
                }
                table.insert((shard_of(&id), id.as_str()), (version, bytes.as_slice())).map_err(unavailable)?;
            }
            txn.commit().map_err(uncertain)?;
            Ok(Replaced::Written)
        })
        .await
    }

    async fn delete_schedule(&self, id: &str, expected: u64) -> StoreResult<bool> {
        let id = id.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            {
                let mut table = txn.open_table(SCHEDULES).map_err(unavailable)?;
                let key = (shard_of(&id), id.as_str());
                let version = table.get(key).map_err(unavailable)?.map(|row| row.value().0);
                if version != Some(expected) {
                    return Ok(false);
                }
                table.remove(key).map_err(unavailable)?;
            }
            txn.commit().map_err(uncertain)?;
            Ok(true)
        })
        .await
    }

    async fn list_schedules(&self, shard: u32, after: Option<&str>, limit: usize) -> StoreResult<Vec<ScheduleRecord>> {
        check_list(shard, limit)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let after = after.map(str::to_owned);
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(SCHEDULES).map_err(unavailable)?;
            let lower = match &after {
                Some(after) => Bound::Excluded((shard, after.as_str())),
                None => Bound::Included((shard, "")),
            };
            let range = table.range::<(u32, &str)>((lower, Bound::Unbounded)).map_err(unavailable)?;
            let mut records = Vec::with_capacity(limit.min(1024));
            for row in range {
                let (key, value) = row.map_err(unavailable)?;
                let (row_shard, id) = key.value();
                if records.len() == limit || row_shard != shard {
                    break;
                }
                let (version, bytes) = value.value();
                records.push(decode_record(id, version, bytes)?);
            }
            Ok(records)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::schedules::conformance::record;

    #[tokio::test]
    async fn schedules_survive_reopening_the_store() {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let kept = record("kept");
        let deleted = record("deleted");
        {
            let store = EmbeddedStore::open(dir.path()).expect("open");
            assert!(store.create_schedule(&kept).await.unwrap());
            assert!(store.create_schedule(&deleted).await.unwrap());
            assert!(store.delete_schedule("deleted", 1).await.unwrap());
        }
        let store = EmbeddedStore::open(dir.path()).expect("open again");
        assert_eq!(store.schedule("kept").await.unwrap(), Some(kept.clone()));
        assert_eq!(store.schedule("deleted").await.unwrap(), None);
        assert_eq!(store.list_schedules(shard_of("kept"), None, 10).await.unwrap(), vec![kept]);
    }

    #[tokio::test]
    async fn a_record_that_does_not_decode_is_corrupt() {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let store = EmbeddedStore::open(dir.path()).expect("open");
        let id = "broken";
        store
            .blocking(move |db| {
                let txn = db.begin_write().map_err(unavailable)?;
                txn.open_table(SCHEDULES)
                    .map_err(unavailable)?
                    .insert((shard_of(id), id), (1, b"{not json".as_slice()))
                    .map_err(unavailable)?;
                txn.commit().map_err(uncertain)
            })
            .await
            .unwrap();
        assert!(matches!(store.schedule(id).await, Err(crate::store::StoreError::Corrupt(_))));
        let v2 = ScheduleRecord { version: 2, ..record(id) };
        assert!(matches!(store.replace_schedule(&v2, 1).await, Err(crate::store::StoreError::Corrupt(_))));
    }
}
