//! The Cassandra store: queues shared by several nodes, fenced by
//! lightweight transactions on the range id.
//!
//! Layout (`schema.cql`): one table, one Cassandra partition per queue
//! partition, holding the metadata row (`kind = 0`) and the tasks (`kind` =
//! priority, then 6 to 9 for the record sections) clustered by `(kind, pass,
//! id)`. Every write is one conditional batch (`IF range_id = ?` on the
//! metadata row) in that partition, so tasks, records and the fence commit
//! together or not at all. Reads slice strictly above a
//! level; deletes are one range delete at or below the ack level; no row
//! carries a TTL. The `[applied]` column of a conditional result is read
//! generically: Cassandra adds the current values only when it did not apply.

mod catalog;
mod config;
mod error;
mod leases;
mod members;
mod partitions;
mod schedules;
mod schema;
mod secrets;
mod session;
mod statements;
mod visits;

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use scylla::client::session::Session;
use scylla::deserialize::row::DeserializeRow;
use scylla::response::PagingState;
use scylla::response::query_result::QueryResult;
use scylla::serialize::row::SerializeRow;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{CqlValue, Row};

pub use config::CassandraConfig;
pub use error::ConnectError;
pub use schema::{SCHEMA_AGREEMENT_TIMEOUT, SchemaError, apply_schema, await_schema_agreement};
pub use session::connect_session;

use self::error::{read_error, write_error};
use self::statements::Statements;
use super::codec::decode_meta;
use super::{PartitionMeta, Store, StoreError, StoreResult};
use crate::model::{PartitionId, Priority};

/// A connected Cassandra store on one keyspace.
pub struct CassandraStore {
    session: Session,
    statements: Statements,
    visit_statements: visits::VisitStatements,
    schedule_statements: schedules::ScheduleStatements,
    lease_statements: leases::LeaseStatements,
    visit_heads: visits::HeadPruner,
    visit_batch_bytes: usize,
    keyspace: String,
    read_warnings: AtomicU64,
}

impl std::fmt::Debug for CassandraStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CassandraStore").field("keyspace", &self.keyspace).finish()
    }
}

fn kind(priority: Priority) -> i32 {
    priority.get() as i32
}

fn partition_number(partition: &PartitionId) -> i32 {
    partition.partition as i32
}

impl CassandraStore {
    /// Connects to `contact_point` and prepares the statements on `keyspace`,
    /// which must exist (see [`apply_schema`]). Fails at once if Cassandra
    /// cannot be reached; callers retry (see `server::open_store`).
    pub async fn connect(contact_point: &str, keyspace: &str, config: &CassandraConfig) -> Result<Self, ConnectError> {
        let session = connect_session(contact_point, config).await?;
        let statements = Statements::prepare(&session, keyspace, config).await?;
        let visit_statements = visits::VisitStatements::prepare(&session, keyspace).await?;
        let schedule_statements = schedules::ScheduleStatements::prepare(&session, keyspace, config).await?;
        let lease_statements = leases::LeaseStatements::prepare(&session, keyspace).await?;
        Ok(CassandraStore {
            session,
            statements,
            visit_statements,
            schedule_statements,
            lease_statements,
            visit_heads: visits::HeadPruner::new(config.visit_prune_margin),
            visit_batch_bytes: config.visit_batch_bytes,
            keyspace: keyspace.to_owned(),
            read_warnings: AtomicU64::new(0),
        })
    }

    /// The driver's session, for statements of the store's own module and of
    /// benchmarks.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// One range delete of the rows of one kind with `(pass, id)` at or below `through`.
    async fn delete_rows_through(&self, partition: &PartitionId, kind: i32, through: (i64, i64)) -> StoreResult<()> {
        let values = (
            partition.queue.as_str(),
            partition_number(partition),
            kind,
            i64::MIN,
            i64::MIN,
            kind,
            through.0,
            through.1,
        );
        self.session.execute_unpaged(&self.statements.delete_through, values).await.map_err(write_error)?;
        Ok(())
    }

    /// Up to `limit` rows of one kind with `(pass, id)` in `(after, through]`:
    /// a slice bounded on both sides, so it crosses only that range's rows.
    async fn read_rows(
        &self,
        partition: &PartitionId,
        kind: i32,
        after: (i64, i64),
        through: (i64, i64),
        limit: usize,
    ) -> StoreResult<Vec<(i64, i64, Vec<u8>)>> {
        let values = (
            partition.queue.as_str(),
            partition_number(partition),
            kind,
            after.0,
            after.1,
            kind,
            through.0,
            through.1,
            i32::try_from(limit).unwrap_or(i32::MAX),
        );
        let what = format!("partition {partition}, kind {kind}");
        self.read_pages(&self.statements.read_tasks, &values, limit, &what).await
    }

    /// Up to `limit` rows of `statement`, read page by page, so that
    /// Cassandra's warnings on each page (a read that crossed more than
    /// `tombstone_warn_threshold` tombstones, above all) are logged and
    /// counted (see [`CassandraStore::read_warnings`]).
    async fn read_pages<T>(
        &self,
        statement: &PreparedStatement,
        values: &(impl SerializeRow + ?Sized),
        limit: usize,
        what: &str,
    ) -> StoreResult<Vec<T>>
    where
        T: for<'frame, 'metadata> DeserializeRow<'frame, 'metadata>,
    {
        let corrupt = |e: &dyn std::fmt::Display| StoreError::Corrupt(e.to_string());
        let mut rows = Vec::with_capacity(limit.min(1024));
        let mut paging = PagingState::start();
        while rows.len() < limit {
            let (page, next) = self.session.execute_single_page(statement, values, paging).await.map_err(read_error)?;
            for warning in page.warnings() {
                self.read_warnings.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(read = what, warning, "Cassandra warned about a read");
            }
            let page = page.into_rows_result().map_err(|e| corrupt(&e))?;
            for row in page.rows::<T>().map_err(|e| corrupt(&e))? {
                rows.push(row.map_err(|e| corrupt(&e))?);
            }
            match next.into_paging_control_flow() {
                std::ops::ControlFlow::Continue(state) => paging = state,
                std::ops::ControlFlow::Break(()) => break,
            }
        }
        rows.truncate(limit);
        Ok(rows)
    }

    /// How many warnings Cassandra sent back on this store's reads of
    /// tasks, records, visit indexes and wake-ups (tombstones crossed past `tombstone_warn_threshold`,
    /// above all). Normal operation keeps it at zero.
    pub fn read_warnings(&self) -> u64 {
        self.read_warnings.load(Ordering::Relaxed)
    }

    /// Reads every row of the partition, every column, at `EACH_QUORUM`:
    /// Cassandra repairs the replicas it read that missed a row, so that
    /// every write acknowledged in any region is then seen by this region's
    /// `LOCAL_QUORUM` reads. Costs one read of the partition's live rows
    /// (its backlog and records); `Unavailable` when a region cannot answer.
    async fn catch_up(&self, partition: &PartitionId) -> StoreResult<()> {
        let values = (partition.queue.as_str(), partition_number(partition));
        let mut paging = PagingState::start();
        let mut rows = 0usize;
        loop {
            let (page, next) = self
                .session
                .execute_single_page(&self.statements.catch_up, values, paging)
                .await
                .map_err(read_error)?;
            rows += page.into_rows_result().map_or(0, |page| page.rows_num());
            match next.into_paging_control_flow() {
                std::ops::ControlFlow::Continue(state) => paging = state,
                std::ops::ControlFlow::Break(()) => break,
            }
        }
        tracing::info!(%partition, rows, "caught up with the region it was handed over from");
        Ok(())
    }

    async fn read_meta(&self, partition: &PartitionId, serial: bool) -> StoreResult<Option<(i64, PartitionMeta)>> {
        Ok(self.read_meta_bytes(partition, serial).await?.map(|(range_id, meta, _)| (range_id, meta)))
    }

    /// The metadata row: its range id, its metadata, and the metadata's
    /// bytes as stored (`None` when it has none).
    async fn read_meta_bytes(
        &self,
        partition: &PartitionId,
        serial: bool,
    ) -> StoreResult<Option<(i64, PartitionMeta, Option<Vec<u8>>)>> {
        let statement = if serial { &self.statements.load_meta_serial } else { &self.statements.load_meta };
        let result = self
            .session
            .execute_unpaged(statement, (partition.queue.as_str(), partition_number(partition)))
            .await
            .map_err(read_error)?;
        let rows = result.into_rows_result().map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let Some((range_id, bytes)) =
            rows.maybe_first_row::<(Option<i64>, Option<Vec<u8>>)>().map_err(|e| StoreError::Corrupt(e.to_string()))?
        else {
            return Ok(None);
        };
        let range_id = range_id.ok_or_else(|| StoreError::Corrupt(format!("partition {partition}: no range id")))?;
        let mut meta = match &bytes {
            Some(bytes) => decode_meta(bytes)?,
            None => PartitionMeta::default(),
        };
        meta.range_id = range_id;
        Ok(Some((range_id, meta, bytes)))
    }
}

/// Whether a conditional statement applied; if not, the values it found,
/// by column name. (Cassandra adds them only when it did not apply.)
fn conditional(result: QueryResult) -> StoreResult<Option<Vec<(String, CqlValue)>>> {
    let corrupt = |e: &dyn std::fmt::Display| StoreError::Corrupt(format!("conditional result: {e}"));
    let rows = result.into_rows_result().map_err(|e| corrupt(&e))?;
    let names: Vec<String> = rows.column_specs().iter().map(|c| c.name().to_owned()).collect();
    let row: Row = rows.first_row().map_err(|e| corrupt(&e))?;
    match row.columns.first() {
        Some(Some(CqlValue::Boolean(true))) => Ok(None),
        Some(Some(CqlValue::Boolean(false))) => {
            Ok(Some(names.into_iter().zip(row.columns).filter_map(|(name, value)| Some((name, value?))).collect()))
        }
        other => Err(corrupt(&format!("[applied] is {other:?}"))),
    }
}

fn column<'a>(found: &'a [(String, CqlValue)], name: &str) -> Option<&'a CqlValue> {
    found.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

/// A conditional write on the range id: applied, or fenced at the range id it found.
fn fenced(result: QueryResult) -> StoreResult<()> {
    match conditional(result)? {
        None => Ok(()),
        Some(found) => {
            let current_range_id = column(&found, "range_id").and_then(CqlValue::as_bigint).unwrap_or(0);
            Err(StoreError::Fenced { current_range_id })
        }
    }
}

#[async_trait]
impl Store for CassandraStore {
    fn is_shared(&self) -> bool {
        true
    }
}
