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

mod error;
mod schema;
mod statements;
mod visits;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::deserialize::row::DeserializeRow;
use scylla::policies::load_balancing::DefaultPolicy;
use scylla::policies::speculative_execution::{SimpleSpeculativeExecutionPolicy, SpeculativeExecutionPolicy};
use scylla::response::PagingState;
use scylla::response::query_result::QueryResult;
use scylla::serialize::row::SerializeRow;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{CqlValue, Row};
use serde::{Deserialize, Serialize};
use tokio_rustls::rustls;

use crate::security::{KeyedFile, client_config};

pub use error::ConnectError;
pub use schema::{SchemaError, apply_schema};

use self::error::{read_error, write_error};
use self::statements::Statements;
use super::codec::{decode_meta, decode_record_at, decode_row, decode_task, encode_meta, encode_record, encode_task};
use super::{
    ClusterSecrets, MAX_GENERATION, Member, PartitionMeta, PartitionWrite, PreviousSecret, QueueConfig, Record,
    RecordKey, RecordRange, RowRef, SECRET_BYTES, Section, Store, StoreError, StoreResult, StoredRow,
    check_metadata_range, check_rotation, taken_meta,
};
use crate::model::{FairLevel, PartitionId, Priority, QueueName, StoredTask, ValidationError, validate};

/// Section `[cassandra]` of the config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CassandraConfig {
    /// Consistency of reads and writes: `QUORUM`, `LOCAL_QUORUM`, `ONE`, …
    pub consistency: String,
    /// Consistency of the range-id fence: `SERIAL`, or `LOCAL_SERIAL` when
    /// the driver keeps to one datacenter (`local_datacenter`) and every
    /// queue is owned in its home region only (`cluster.failover = "manual"`).
    pub serial_consistency: String,
    /// The datacenter the driver sends every request to (its coordinators);
    /// empty: `cluster.region`, and with that empty too, any node. When no
    /// node of it is up, requests fail (`UNAVAILABLE`) rather than go to
    /// another datacenter, unless the levels are `QUORUM` and `SERIAL`, whose
    /// meaning does not depend on the coordinator's datacenter.
    pub local_datacenter: String,
    /// Client-side limit for one request.
    #[serde(with = "crate::config::duration_serde")]
    pub request_timeout: Duration,
    /// A read or heartbeat without an answer after this long is sent again
    /// to the next node (at most twice), so that a coordinator waiting on a
    /// replica that just died does not hold it up to `request_timeout`.
    /// Writes other than heartbeats are never sent twice. `0s`: never.
    #[serde(with = "crate::config::duration_serde")]
    pub speculative_retry_after: Duration,
    /// How long to keep trying to reach Cassandra at startup.
    #[serde(with = "crate::config::duration_serde")]
    pub connect_patience: Duration,
    /// The replication clause of the keyspace `fairway schema apply` creates.
    pub replication: String,
    /// Page size of task reads.
    pub read_page_size: i32,
    /// How long before a scheduler read of an index or wake-up head the
    /// range delete under that head is timestamped: longer than a write can
    /// be held up in Cassandra, plus clock skew (see `visits/heads.rs`).
    #[serde(with = "crate::config::duration_serde")]
    pub visit_prune_margin: Duration,
    /// The most bytes of one logged batch of an origin's write, as
    /// `visits/origin_write.rs` counts them (above Cassandra's count). Keep
    /// it below the nodes' `batch_size_fail_threshold` (50 KiB by default):
    /// a larger write goes in steps instead (see that module).
    pub visit_batch_bytes: usize,
    /// The role to log in as (Cassandra's `PasswordAuthenticator`); empty:
    /// no credentials.
    pub username: String,
    /// A file holding the role's password (its first line); the password
    /// itself is never in the config or the environment.
    pub password_file: String,
    /// The CA (PEM) that signs the nodes' certificates: set, the driver
    /// speaks TLS to every node and checks its certificate names its IP.
    pub tls_ca: String,
    /// This node's client certificate (PEM), for Cassandra's
    /// `require_client_auth`.
    pub tls_cert: String,
    /// The private key of `tls_cert` (PEM).
    pub tls_key: String,
}

impl Default for CassandraConfig {
    fn default() -> Self {
        CassandraConfig {
            consistency: "QUORUM".into(),
            serial_consistency: "SERIAL".into(),
            local_datacenter: String::new(),
            request_timeout: Duration::from_secs(12),
            speculative_retry_after: Duration::from_millis(500),
            connect_patience: Duration::from_secs(120),
            replication: "{'class': 'SimpleStrategy', 'replication_factor': 1}".into(),
            read_page_size: 256,
            visit_prune_margin: Duration::from_secs(10),
            visit_batch_bytes: 40 * 1024,
            username: String::new(),
            password_file: String::new(),
            tls_ca: String::new(),
            tls_cert: String::new(),
            tls_key: String::new(),
        }
    }
}

impl CassandraConfig {
    /// Checks section `[cassandra]`; the error names the key.
    pub fn validate(&self) -> Result<(), ValidationError> {
        // LOCAL_QUORUM and LOCAL_SERIAL need a local datacenter, which
        // `cluster.region` may give: `config::validate` checks that across
        // the sections.
        let in_some_region = self.in_region("-");
        in_some_region.consistency().map_err(|m| ValidationError::new("cassandra.consistency", m))?;
        in_some_region.serial_consistency().map_err(|m| ValidationError::new("cassandra.serial_consistency", m))?;
        if !self.local_datacenter.is_empty() {
            validate::region("cassandra.local_datacenter", &self.local_datacenter)?;
        }
        if self.request_timeout.is_zero() {
            return Err(ValidationError::new("cassandra.request_timeout", "must be longer than 0s"));
        }
        if self.speculative_retry_after >= self.request_timeout {
            return Err(ValidationError::new(
                "cassandra.speculative_retry_after",
                "must be shorter than cassandra.request_timeout (0s: never send a statement again)",
            ));
        }
        if !(1..=10_000).contains(&self.read_page_size) {
            return Err(ValidationError::new("cassandra.read_page_size", "must be in [1, 10000]"));
        }
        if self.visit_prune_margin > Duration::from_secs(3600) {
            return Err(ValidationError::new("cassandra.visit_prune_margin", "must be at most 1h"));
        }
        if !(1024..=16 * 1024 * 1024).contains(&self.visit_batch_bytes) {
            return Err(ValidationError::new(
                "cassandra.visit_batch_bytes",
                "must be 1024 to 16777216, below the nodes' batch_size_fail_threshold",
            ));
        }
        if self.username.is_empty() != self.password_file.is_empty() {
            return Err(ValidationError::new(
                if self.username.is_empty() { "cassandra.username" } else { "cassandra.password_file" },
                "is empty; cassandra.username and cassandra.password_file go together",
            ));
        }
        if self.tls_cert.is_empty() != self.tls_key.is_empty() {
            return Err(ValidationError::new(
                if self.tls_cert.is_empty() { "cassandra.tls_cert" } else { "cassandra.tls_key" },
                "is empty; cassandra.tls_cert and cassandra.tls_key go together",
            ));
        }
        if self.tls_ca.is_empty() && !self.tls_cert.is_empty() {
            return Err(ValidationError::new("cassandra.tls_cert", "is set without cassandra.tls_ca: TLS is off"));
        }
        Ok(())
    }

    /// The username and password to log in with, if any: the password is
    /// read from `password_file`.
    fn credentials(&self) -> Result<Option<(String, String)>, ConnectError> {
        if self.username.is_empty() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&self.password_file).map_err(|e| {
            ConnectError::Config(format!("password_file = {}: cannot read it: {e}", self.password_file))
        })?;
        let password = text.lines().next().unwrap_or("").to_owned();
        if password.is_empty() {
            return Err(ConnectError::Config(format!(
                "password_file = {}: its first line is empty",
                self.password_file
            )));
        }
        Ok(Some((self.username.clone(), password)))
    }

    /// The TLS configuration of the driver, if TLS is on.
    fn tls(&self) -> Result<Option<Arc<rustls::ClientConfig>>, ConnectError> {
        if self.tls_ca.is_empty() {
            return Ok(None);
        }
        let identity = (!self.tls_cert.is_empty()).then(|| {
            (
                KeyedFile { key: "cassandra.tls_cert", path: self.tls_cert.as_ref() },
                KeyedFile { key: "cassandra.tls_key", path: self.tls_key.as_ref() },
            )
        });
        let config = client_config(KeyedFile { key: "cassandra.tls_ca", path: self.tls_ca.as_ref() }, identity)
            .map_err(|e| ConnectError::Config(e.to_string()))?;
        Ok(Some(Arc::new(config)))
    }

    /// The consistency of reads and plain writes. Levels below a quorum are
    /// refused: a read at one of them can miss a task whose write was
    /// acknowledged, and the reader then moves past it for good. So is
    /// `LOCAL_QUORUM` without a local datacenter: it is a quorum of the
    /// coordinator's datacenter, and the driver would pick coordinators in
    /// any.
    pub fn consistency(&self) -> Result<scylla::statement::Consistency, String> {
        use scylla::statement::Consistency::*;
        Ok(match self.consistency.to_ascii_uppercase().as_str() {
            "QUORUM" => Quorum,
            "ALL" => All,
            "LOCAL_QUORUM" if self.local_datacenter.is_empty() => {
                return Err("LOCAL_QUORUM needs cassandra.local_datacenter (or cluster.region): it is a quorum of \
                            the coordinator's datacenter, and with none named the driver picks coordinators in \
                            any, so once the keyspace has a second datacenter a read there can miss a task whose \
                            write was acknowledged here, and the reader moves past it, losing it; name the \
                            datacenter, or use QUORUM"
                    .into());
            }
            "LOCAL_QUORUM" => LocalQuorum,
            "EACH_QUORUM" => EachQuorum,
            weak @ ("ONE" | "TWO" | "THREE" | "LOCAL_ONE" | "ANY") => {
                return Err(format!(
                    "{weak} is refused: a read at {weak} can miss a task whose write was acknowledged, and the \
                     reader moves past it, losing it; use QUORUM (or LOCAL_QUORUM with cassandra.local_datacenter)"
                ));
            }
            other => return Err(format!("{other:?} is not a consistency level; use QUORUM or LOCAL_QUORUM")),
        })
    }

    /// The serial consistency of the range-id fence: `SERIAL`, or
    /// `LOCAL_SERIAL` with a local datacenter; the error says why another is
    /// refused. (`config::validate` checks the rest of the `LOCAL_SERIAL`
    /// conditions, which span sections.)
    pub fn serial_consistency(&self) -> Result<scylla::statement::SerialConsistency, String> {
        use scylla::statement::SerialConsistency::*;
        Ok(match self.serial_consistency.to_ascii_uppercase().as_str() {
            "SERIAL" => Serial,
            "LOCAL_SERIAL" if self.local_datacenter.is_empty() => {
                return Err("LOCAL_SERIAL needs cassandra.local_datacenter (or cluster.region): Paxos state is kept \
                            per datacenter, so two nodes whose coordinators are in different datacenters could \
                            both win the same range id (two owners of one partition); use SERIAL"
                    .into());
            }
            "LOCAL_SERIAL" => LocalSerial,
            other => return Err(format!("{other:?} is not a serial consistency; use SERIAL or LOCAL_SERIAL")),
        })
    }

    /// Whether every level is global (`QUORUM`/`EACH_QUORUM`/`ALL` and
    /// `SERIAL`): then a request may be coordinated from any datacenter.
    fn levels_are_global(&self) -> bool {
        use scylla::statement::{Consistency, SerialConsistency};
        !matches!(self.consistency(), Ok(Consistency::LocalQuorum))
            && matches!(self.serial_consistency(), Ok(SerialConsistency::Serial))
    }

    /// This config with `local_datacenter` defaulted to `region` (a node's
    /// `cluster.region`).
    pub fn in_region(&self, region: &str) -> CassandraConfig {
        let mut config = self.clone();
        if config.local_datacenter.is_empty() {
            config.local_datacenter = region.to_owned();
        }
        config
    }
}

/// A connected Cassandra store on one keyspace.
pub struct CassandraStore {
    session: Session,
    statements: Statements,
    visit_statements: visits::VisitStatements,
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
    /// Every queue, read with `statement`.
    async fn list_queues_with(&self, statement: &PreparedStatement) -> StoreResult<Vec<(QueueName, QueueConfig)>> {
        use futures::TryStreamExt;
        let pager = self.session.execute_iter(statement.clone(), ()).await.map_err(read_error)?;
        let mut rows = pager
            .rows_stream::<(String, Option<i32>, Option<String>, Option<i32>, Option<String>, Option<String>)>()
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let mut queues = Vec::new();
        while let Some((name, partitions, home, generation, previous, creator)) =
            rows.try_next().await.map_err(read_error)?
        {
            let name = validate::queue_name("queue", &name)
                .map_err(|e| StoreError::Corrupt(format!("stored queue name: {e}")))?;
            queues.push((name, stored_queue((partitions, home, generation, previous, creator))));
        }
        Ok(queues)
    }

    /// One queue's config, read with `statement`.
    async fn queue_with(&self, statement: &PreparedStatement, queue: &QueueName) -> StoreResult<Option<QueueConfig>> {
        let result = self.session.execute_unpaged(statement, (queue.as_str(),)).await.map_err(read_error)?;
        let rows = result.into_rows_result().map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let row = rows.maybe_first_row::<QueueRow>().map_err(|e| StoreError::Corrupt(e.to_string()))?;
        Ok(row.map(stored_queue))
    }

    /// Connects to `contact_point` and prepares the statements on `keyspace`,
    /// which must exist (see [`apply_schema`]). Fails at once if Cassandra
    /// cannot be reached; callers retry (see `server::open_store`).
    pub async fn connect(contact_point: &str, keyspace: &str, config: &CassandraConfig) -> Result<Self, ConnectError> {
        let session = connect_session(contact_point, config).await?;
        let statements = Statements::prepare(&session, keyspace, config).await?;
        let visit_statements = visits::VisitStatements::prepare(&session, keyspace).await?;
        Ok(CassandraStore {
            session,
            statements,
            visit_statements,
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

impl CassandraStore {
    /// The secrets as `statement` reads them, `None` if none was stored.
    async fn read_secrets(&self, statement: &PreparedStatement) -> StoreResult<Option<ClusterSecrets>> {
        type Columns = (Option<Vec<u8>>, Option<Vec<u8>>, Option<i64>, Option<i64>);
        let read = self.session.execute_unpaged(statement, ()).await.map_err(read_error)?;
        let rows = read.into_rows_result().map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let row = rows.maybe_first_row::<Columns>().map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let Some((Some(current), previous, signs_until, accepted_until)) = row else { return Ok(None) };
        let previous = match (previous, signs_until, accepted_until) {
            (Some(previous), Some(signs_until_unix_ms), Some(accepted_until_unix_ms)) => {
                Some(PreviousSecret { secret: secret(&previous)?, signs_until_unix_ms, accepted_until_unix_ms })
            }
            (None, _, _) => None,
            (Some(_), signs, accepted) => {
                return Err(StoreError::Corrupt(format!(
                    "a previous cluster secret without both its times: {signs:?}, {accepted:?}"
                )));
            }
        };
        Ok(Some(ClusterSecrets { current: secret(&current)?, previous }))
    }
}

/// The cluster's secret from its stored bytes.
fn secret(stored: &[u8]) -> StoreResult<[u8; SECRET_BYTES]> {
    stored.try_into().map_err(|_| StoreError::Corrupt(format!("a cluster secret of {} bytes", stored.len())))
}

/// A queue's row: partitions, home, generation, previous home, creator.
type QueueRow = (Option<i32>, Option<String>, Option<i32>, Option<String>, Option<String>);

/// A queue's config from its row.
fn stored_queue((partitions, home, generation, previous_home, created_by): QueueRow) -> QueueConfig {
    QueueConfig {
        partitions: partitions.unwrap_or(1).max(1) as u32,
        home: home.unwrap_or_default(),
        generation: generation.unwrap_or(0).max(0) as u32,
        previous_home: previous_home.unwrap_or_default(),
        created_by: created_by.unwrap_or_default(),
    }
}

/// Reads and compare-and-sets in one `take_ownership`, at most.
const TAKE_ATTEMPTS: usize = 8;

/// How many times at most an idempotent statement is sent again to another
/// node while the first is unanswered: with three replicas, once to each.
const SPECULATIVE_RETRIES: usize = 2;

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

/// A driver session with the configured consistency levels and timeout.
pub async fn connect_session(contact_point: &str, config: &CassandraConfig) -> Result<Session, ConnectError> {
    let consistency = config.consistency().map_err(ConnectError::Config)?;
    let serial = config.serial_consistency().map_err(ConnectError::Config)?;
    // The driver speculates only on statements marked idempotent: reads
    // and the membership heartbeat (`statements.rs`).
    let speculation = (!config.speculative_retry_after.is_zero()).then(|| {
        Arc::new(SimpleSpeculativeExecutionPolicy {
            max_retry_count: SPECULATIVE_RETRIES,
            retry_interval: config.speculative_retry_after,
        }) as Arc<dyn SpeculativeExecutionPolicy>
    });
    let mut policy = DefaultPolicy::builder().token_aware(true);
    if !config.local_datacenter.is_empty() {
        policy =
            policy.prefer_datacenter(config.local_datacenter.clone()).permit_dc_failover(config.levels_are_global());
    }
    let profile = ExecutionProfile::builder()
        .consistency(consistency)
        .serial_consistency(Some(serial))
        .request_timeout(Some(config.request_timeout))
        .speculative_execution_policy(speculation)
        .load_balancing_policy(policy.build())
        .build();
    let mut builder = SessionBuilder::new()
        .known_node(contact_point)
        .connection_timeout(Duration::from_secs(5))
        .default_execution_profile_handle(profile.into_handle());
    if let Some((username, password)) = config.credentials()? {
        builder = builder.user(username, password);
    }
    if let Some(tls) = config.tls()? {
        builder = builder.tls_context(Some(tls));
    }
    let session = builder.build().await.map_err(|e| {
        let message = e.to_string();
        if message.contains("Authentication") || message.contains("authenticat") {
            ConnectError::Refused { contact_point: contact_point.to_owned(), message }
        } else {
            ConnectError::Unreachable { contact_point: contact_point.to_owned(), message }
        }
    })?;
    check_datacenter(&session, &config.local_datacenter)?;
    Ok(session)
}

/// A local datacenter the cluster does not have is a configuration error:
/// the driver would find no node to send anything to.
fn check_datacenter(session: &Session, local: &str) -> Result<(), ConnectError> {
    if local.is_empty() {
        return Ok(());
    }
    let state = session.get_cluster_state();
    let mut known: Vec<String> = state.get_nodes_info().iter().filter_map(|node| node.datacenter.clone()).collect();
    known.sort();
    known.dedup();
    if known.iter().any(|dc| dc == local) {
        return Ok(());
    }
    Err(ConnectError::Config(format!(
        "cassandra.local_datacenter (or cluster.region) = {local:?}: the cluster has no such datacenter (it has {})",
        known.join(", ")
    )))
}

#[async_trait]
impl Store for CassandraStore {
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
        let rows = write.tasks.len() + write.put.len() + write.delete.len() + 1;
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
        for at in &write.delete {
            batch.append_statement(self.statements.delete_record.clone());
            values.push(vec![
                queue.clone(),
                number.clone(),
                CqlValue::Int(i32::from(at.section.code())),
                CqlValue::BigInt(at.key.0),
                CqlValue::BigInt(at.key.1),
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
        debug_assert!(buckets.len() <= super::MAX_BUCKETS_PER_READ, "{} buckets in one read", buckets.len());
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

    fn is_shared(&self) -> bool {
        true
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

    async fn create_queue(&self, queue: &QueueName, config: QueueConfig) -> StoreResult<QueueConfig> {
        let home = (!config.home.is_empty()).then_some(config.home.as_str());
        let creator = (!config.created_by.is_empty()).then_some(config.created_by.as_str());
        let values = (queue.as_str(), config.partitions as i32, home, creator);
        let result = self.session.execute_unpaged(&self.statements.create_queue, values).await.map_err(write_error)?;
        match conditional(result)? {
            None => Ok(config),
            Some(found) => match column(&found, "partitions").and_then(CqlValue::as_int) {
                Some(partitions) => {
                    let home = column(&found, "home").and_then(CqlValue::as_text).cloned();
                    let generation = column(&found, "generation").and_then(CqlValue::as_int);
                    let previous = column(&found, "previous_home").and_then(CqlValue::as_text).cloned();
                    let creator = column(&found, "created_by").and_then(CqlValue::as_text).cloned();
                    Ok(stored_queue((Some(partitions), home, generation, previous, creator)))
                }
                None => Err(StoreError::Corrupt(format!("queue {queue} has no partition count"))),
            },
        }
    }

    async fn queue(&self, queue: &QueueName) -> StoreResult<Option<QueueConfig>> {
        if let Some((everywhere, _)) = &self.statements.queue_everywhere {
            match self.queue_with(everywhere, queue).await {
                Ok(config) => return Ok(config),
                Err(error) => tracing::debug!(%error, "reading a queue in every region; reading it in this one"),
            }
        }
        self.queue_with(&self.statements.queue, queue).await
    }

    async fn set_queue_home(&self, queue: &QueueName, expected: &str, home: &str) -> StoreResult<Option<QueueConfig>> {
        // A queue with no home stores null: the condition compares with null.
        let stored = |home: &str| (!home.is_empty()).then(|| home.to_owned());
        let values = (stored(home), queue.as_str(), stored(expected));
        let result = self.session.execute_unpaged(&self.statements.set_home, values).await.map_err(write_error)?;
        let found = conditional(result)?;
        let Some(config) = self.queue(queue).await? else { return Ok(None) };
        Ok(Some(match found {
            None => QueueConfig { home: home.to_owned(), ..config },
            // Not applied: the queue does not exist (no columns came back),
            // or its home was not `expected` (the current one came back).
            Some(found) => QueueConfig {
                home: column(&found, "home").and_then(CqlValue::as_text).cloned().unwrap_or_default(),
                ..config
            },
        }))
    }

    async fn force_queue_home(
        &self,
        queue: &QueueName,
        generation: u32,
        home: &str,
    ) -> StoreResult<Option<QueueConfig>> {
        let Some(config) = self.queue(queue).await? else { return Ok(None) };
        if config.generation != generation {
            return Ok(Some(config));
        }
        if generation >= MAX_GENERATION {
            return Err(StoreError::Invalid(format!("queue {queue} had {MAX_GENERATION} forced failovers, the most")));
        }
        let next = generation + 1;
        let stored = |home: &str| (!home.is_empty()).then(|| home.to_owned());
        // Generation 0 and no home are stored as null: the condition compares with null.
        let expected = ((generation > 0).then_some(generation as i32), stored(&config.home));
        let values = (stored(home), next as i32, stored(&config.home), queue.as_str(), expected.0, expected.1);
        let (everywhere, here) = &self.statements.force_home;
        // A compare-and-set on the generation, so that of two forced
        // failovers from the same generation one wins. At SERIAL when a
        // majority of every region's replicas answers (with three regions,
        // one lost); else in this region's Paxos (two regions, one lost:
        // none other is left to race with).
        let result = match self.session.execute_unpaged(everywhere, &values).await.map_err(write_error) {
            Err(StoreError::Unavailable(why)) => {
                tracing::warn!(%queue, home, %why, "a forced failover cannot reach SERIAL; deciding it at LOCAL_SERIAL");
                self.session.execute_unpaged(here, &values).await.map_err(write_error)?
            }
            other => other?,
        };
        match conditional(result)? {
            None => {
                Ok(Some(QueueConfig { home: home.to_owned(), generation: next, previous_home: config.home, ..config }))
            }
            // Another change came first: what is stored now.
            Some(_) => self.queue(queue).await,
        }
    }

    async fn list_queues(&self) -> StoreResult<Vec<(QueueName, QueueConfig)>> {
        if let Some((_, everywhere)) = &self.statements.queue_everywhere {
            match self.list_queues_with(everywhere).await {
                Ok(queues) => return Ok(queues),
                Err(error) => tracing::debug!(%error, "listing the queues in every region; listing them in this one"),
            }
        }
        self.list_queues_with(&self.statements.list_queues).await
    }

    async fn heartbeat(&self, member: &Member) -> StoreResult<()> {
        let region = (!member.region.is_empty()).then_some(member.region.as_str());
        let values = (member.node.as_str(), region, member.started_unix_ms, member.heartbeat_unix_ms);
        self.session.execute_unpaged(&self.statements.heartbeat, values).await.map_err(write_error)?;
        Ok(())
    }

    async fn members(&self) -> StoreResult<Vec<Member>> {
        let result = self.session.execute_unpaged(&self.statements.members, ()).await.map_err(read_error)?;
        let rows = result.into_rows_result().map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let typed = rows
            .rows::<(String, Option<String>, Option<i64>, Option<i64>)>()
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        typed
            .map(|row| {
                let (node, region, started, heartbeat) = row.map_err(|e| StoreError::Corrupt(e.to_string()))?;
                Ok(Member {
                    node,
                    region: region.unwrap_or_default(),
                    started_unix_ms: started.unwrap_or(0),
                    heartbeat_unix_ms: heartbeat.unwrap_or(0),
                })
            })
            .collect()
    }

    async fn leave(&self, node: &str) -> StoreResult<()> {
        self.session.execute_unpaged(&self.statements.leave, (node,)).await.map_err(write_error)?;
        Ok(())
    }

    async fn cluster_secrets(&self, candidate: &[u8; SECRET_BYTES]) -> StoreResult<ClusterSecrets> {
        // Written first by a compare-and-set at SERIAL (over every region's
        // replicas: at LOCAL_SERIAL, two regions could each store their own,
        // and their nodes would refuse each other's proofs). A plain read that
        // finds it is trusted: it may lag a rotation until the rotation
        // reaches this node's replicas, which the overlap of a rotation
        // allows for; the compare-and-set is only for a cluster that has
        // none yet, and needs a majority of all the replicas.
        if let Some(stored) = self.read_secrets(&self.statements.read_secret).await? {
            return Ok(stored);
        }
        let result = self
            .session
            .execute_unpaged(&self.statements.create_secret, (candidate.as_slice(),))
            .await
            .map_err(write_error)?;
        match conditional(result)? {
            None => Ok(ClusterSecrets::first(*candidate)),
            Some(_) => self
                .read_secrets(&self.statements.read_secret_serial)
                .await?
                .ok_or_else(|| StoreError::Corrupt("a cluster secret that exists and cannot be read".into())),
        }
    }

    async fn rotate_cluster_secret(
        &self,
        from: &[u8; SECRET_BYTES],
        to: &[u8; SECRET_BYTES],
        signs_until_unix_ms: i64,
        accepted_until_unix_ms: i64,
    ) -> StoreResult<Option<ClusterSecrets>> {
        check_rotation(from, to, signs_until_unix_ms, accepted_until_unix_ms)?;
        let values = (to.as_slice(), from.as_slice(), signs_until_unix_ms, accepted_until_unix_ms, from.as_slice());
        let result = self.session.execute_unpaged(&self.statements.rotate_secret, values).await.map_err(write_error)?;
        match conditional(result)? {
            None => Ok(Some(ClusterSecrets {
                current: *to,
                previous: Some(PreviousSecret { secret: *from, signs_until_unix_ms, accepted_until_unix_ms }),
            })),
            // Not applied: another secret is current, or none is. Read at
            // SERIAL, so that the answer is at least as recent as the
            // rotation that won.
            Some(_) => self.read_secrets(&self.statements.read_secret_serial).await,
        }
    }
}
