//! The schedules on Cassandra (`schema.cql`, `schedules`): one row per
//! schedule, partitioned by its shard and clustered by its id, holding its
//! version and its record (JSON). Every write is a lightweight transaction
//! at the configured serial consistency: a creation `IF NOT EXISTS`, a
//! replacement or a deletion `IF version = ?`. A read of one record is at
//! that serial consistency too, so that it sees every compare-and-set that
//! came before it; a list is at the configured consistency.
//!
//! A replacement's condition also says `record != 0x` (always true of a
//! stored record, whose JSON is never empty): Cassandra returns the current
//! values of the columns of a condition that did not hold, so the conflict
//! carries the whole record as it was when the compare-and-set failed.

use async_trait::async_trait;
use scylla::client::session::Session;
use scylla::statement::Consistency;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::CqlValue;

use super::error::{ConnectError, read_error, write_error};
use super::statements::{prepare, serial_read};
use super::{CassandraConfig, CassandraStore, column, conditional};
use crate::store::schedules::{
    Replaced, ScheduleRecord, ScheduleStore, check_list, decode_record, encode_write, shard_of,
};
use crate::store::{StoreError, StoreResult};

/// The statements of the schedules, prepared once per session.
pub(super) struct ScheduleStatements {
    create: PreparedStatement,
    /// One record at the serial consistency: linearizable with the
    /// compare-and-sets.
    read_serial: PreparedStatement,
    replace: PreparedStatement,
    delete: PreparedStatement,
    list: PreparedStatement,
    list_after: PreparedStatement,
}

impl ScheduleStatements {
    pub(super) async fn prepare(session: &Session, ks: &str, config: &CassandraConfig) -> Result<Self, ConnectError> {
        let prepare = |cql: String| prepare(session, cql);
        let serial: Consistency = serial_read(config)?;
        let mut read_serial =
            prepare(format!("SELECT version, record FROM {ks}.schedules WHERE shard = ? AND id = ?")).await?;
        read_serial.set_consistency(serial);
        let mut list =
            prepare(format!("SELECT id, version, record FROM {ks}.schedules WHERE shard = ? LIMIT ?")).await?;
        list.set_page_size(config.read_page_size);
        let mut list_after =
            prepare(format!("SELECT id, version, record FROM {ks}.schedules WHERE shard = ? AND id > ? LIMIT ?"))
                .await?;
        list_after.set_page_size(config.read_page_size);
        Ok(ScheduleStatements {
            create: prepare(format!(
                "INSERT INTO {ks}.schedules (shard, id, version, record) VALUES (?, ?, ?, ?) IF NOT EXISTS"
            ))
            .await?,
            read_serial,
            replace: prepare(format!(
                "UPDATE {ks}.schedules SET version = ?, record = ? WHERE shard = ? AND id = ? \
                 IF version = ? AND record != 0x"
            ))
            .await?,
            delete: prepare(format!("DELETE FROM {ks}.schedules WHERE shard = ? AND id = ? IF version = ?")).await?,
            list,
            list_after,
        })
    }
}

/// The shard of `id` as Cassandra stores it.
fn shard_column(id: &str) -> i32 {
    shard_of(id) as i32
}

/// A version as Cassandra stores it (a bigint); `Invalid` past `i64::MAX`.
fn version_column(version: u64) -> StoreResult<i64> {
    i64::try_from(version).map_err(|_| StoreError::Invalid(format!("schedule version {version} is over {}", i64::MAX)))
}

/// A version as Cassandra stored it.
fn stored_version(id: &str, version: i64) -> StoreResult<u64> {
    u64::try_from(version).map_err(|_| StoreError::Corrupt(format!("schedule {id} is at version {version}")))
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

impl CassandraStore {
    /// The record of `id` at the serial consistency, `None` if absent.
    async fn read_schedule_serial(&self, id: &str) -> StoreResult<Option<ScheduleRecord>> {
        let statement = &self.schedule_statements.read_serial;
        let result = self.session.execute_unpaged(statement, (shard_column(id), id)).await.map_err(read_error)?;
        let rows = result.into_rows_result().map_err(corrupt)?;
        let Some((version, record)) = rows.maybe_first_row::<(i64, Vec<u8>)>().map_err(corrupt)? else {
            return Ok(None);
        };
        decode_record(id, stored_version(id, version)?, &record).map(Some)
    }
}

#[async_trait]
impl ScheduleStore for CassandraStore {
    async fn create_schedule(&self, record: &ScheduleRecord) -> StoreResult<bool> {
        let bytes = encode_write(record, None)?;
        let id = record.id.as_str();
        let values = (shard_column(id), id, version_column(record.version)?, bytes);
        let statement = &self.schedule_statements.create;
        let result = self.session.execute_unpaged(statement, values).await.map_err(write_error)?;
        Ok(conditional(result)?.is_none())
    }

    async fn schedule(&self, id: &str) -> StoreResult<Option<ScheduleRecord>> {
        self.read_schedule_serial(id).await
    }

    async fn replace_schedule(&self, record: &ScheduleRecord, expected: u64) -> StoreResult<Replaced> {
        let bytes = encode_write(record, Some(expected))?;
        let id = record.id.as_str();
        let values = (version_column(record.version)?, bytes, shard_column(id), id, version_column(expected)?);
        let statement = &self.schedule_statements.replace;
        let result = self.session.execute_unpaged(statement, values).await.map_err(write_error)?;
        let Some(found) = conditional(result)? else { return Ok(Replaced::Written) };
        // The columns of the condition as they were: none when the row is gone.
        let version = column(&found, "version").and_then(CqlValue::as_bigint);
        let stored = column(&found, "record").and_then(CqlValue::as_blob);
        match (version, stored) {
            (None, _) => Ok(Replaced::Conflict(None)),
            (Some(version), Some(stored)) => {
                Ok(Replaced::Conflict(Some(decode_record(id, stored_version(id, version)?, stored)?)))
            }
            (Some(_), None) => {
                // A row with a version and no record is not one this store
                // writes; read what is there at the serial consistency.
                Ok(Replaced::Conflict(self.read_schedule_serial(id).await?))
            }
        }
    }

    async fn delete_schedule(&self, id: &str, expected: u64) -> StoreResult<bool> {
        let values = (shard_column(id), id, version_column(expected)?);
        let statement = &self.schedule_statements.delete;
        let result = self.session.execute_unpaged(statement, values).await.map_err(write_error)?;
        Ok(conditional(result)?.is_none())
    }

    async fn list_schedules(&self, shard: u32, after: Option<&str>, limit: usize) -> StoreResult<Vec<ScheduleRecord>> {
        check_list(shard, limit)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let statements = &self.schedule_statements;
        let (shard_value, limit_value) = (shard as i32, i32::try_from(limit).unwrap_or(i32::MAX));
        let what = format!("schedules of shard {shard}");
        let rows: Vec<(String, i64, Vec<u8>)> = match after {
            Some(after) => {
                self.read_pages(&statements.list_after, &(shard_value, after, limit_value), limit, &what).await?
            }
            None => self.read_pages(&statements.list, &(shard_value, limit_value), limit, &what).await?,
        };
        rows.into_iter()
            .map(|(id, version, record)| decode_record(&id, stored_version(&id, version)?, &record))
            .collect()
    }
}
