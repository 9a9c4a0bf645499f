//! Every CQL statement of the Cassandra store, prepared once per session
//! with its consistency: reads and the idempotent heartbeat may be
//! speculated; the fence's compare-and-sets run at the serial consistency.

use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};

use super::CassandraConfig;
use super::error::ConnectError;

/// Every statement of the store, prepared once per session.
pub(super) struct Statements {
    pub load_meta: PreparedStatement,
    /// The same read at serial consistency: linearizable with the fence.
    pub load_meta_serial: PreparedStatement,
    pub create_meta: PreparedStatement,
    /// `SET range_id = ? … IF range_id = ?` with the same value: the fence of an append.
    pub set_range: PreparedStatement,
    pub write_meta: PreparedStatement,
    /// The steal: `write_meta`, also conditional on the metadata read.
    pub take_meta: PreparedStatement,
    /// A task row, or a record row (kind = its section's code).
    pub insert_task: PreparedStatement,
    pub delete_record: PreparedStatement,
    /// One row at serial consistency: linearizable with the fence.
    pub read_row_serial: PreparedStatement,
    pub read_tasks: PreparedStatement,
    /// The rows of several `pass` values (buckets) of one kind: `pass IN ?`.
    pub read_buckets: PreparedStatement,
    pub delete_through: PreparedStatement,
    pub create_queue: PreparedStatement,
    /// `SET home = ? … IF partitions > 0 AND home = ?` (a queue that exists,
    /// and a null home for none), at `SERIAL` whatever the configured level.
    pub set_home: PreparedStatement,
    /// `SET home = ?, generation = ?, previous_home = ? … IF generation = ?
    /// AND home = ?` (null for generation 0 and for no home): a forced
    /// failover, at `SERIAL` (a majority of every region's replicas), and the
    /// same at `LOCAL_SERIAL`, for when `SERIAL` cannot be had.
    pub force_home: (PreparedStatement, PreparedStatement),
    /// `SET settings = ?, settings_version = ? … IF partitions > 0 AND
    /// settings_version = ?` (null for version 0), at `SERIAL`.
    pub set_settings: PreparedStatement,
    pub queue: PreparedStatement,
    pub list_queues: PreparedStatement,
    /// `queue` and `list_queues` at `QUORUM` (a majority of every region's
    /// replicas), when the configured level is a region's own: tried first,
    /// so that a node of a region that returns reads a forced failover made
    /// while it was gone before it serves anything.
    pub queue_everywhere: Option<(PreparedStatement, PreparedStatement)>,
    pub heartbeat: PreparedStatement,
    pub members: PreparedStatement,
    pub leave: PreparedStatement,
    /// `leave` at a given write timestamp (µs).
    pub forget: PreparedStatement,
    /// Insert-if-absent of the cluster's secret: the stored one if present.
    /// At `SERIAL` whatever the configured level: one secret for every region.
    pub create_secret: PreparedStatement,
    /// The cluster's secrets (current and previous), if stored.
    pub read_secret: PreparedStatement,
    /// The same at `SERIAL`: what a rotation that lost its compare-and-set found.
    pub read_secret_serial: PreparedStatement,
    /// A rotation: compare-and-set on the current secret, at `SERIAL`.
    pub rotate_secret: PreparedStatement,
    /// Every row of one partition, every column, at `EACH_QUORUM`: read to
    /// repair the replicas of this region after a move from another.
    pub catch_up: PreparedStatement,
}

/// Prepares one statement; the error names it. A read is marked idempotent
/// (see [`is_read`]).
pub(super) async fn prepare(session: &Session, cql: String) -> Result<PreparedStatement, ConnectError> {
    let mut statement = session
        .prepare(cql.clone())
        .await
        .map_err(|e| ConnectError::Prepare { statement: cql.clone(), message: e.to_string() })?;
    statement.set_is_idempotent(is_read(&cql));
    Ok(statement)
}

/// Whether a statement only reads. A read applies nothing, so the driver may
/// send it again to the next node after a broken connection or a timeout:
/// a Cassandra node killed under a read costs a retry, not the read.
/// (Serial reads are never retried by the driver's policy.)
fn is_read(cql: &str) -> bool {
    cql.trim_start().get(..6).is_some_and(|verb| verb.eq_ignore_ascii_case("SELECT"))
}

/// The consistency of a read that must see every compare-and-set before it:
/// the configured serial consistency.
pub(super) fn serial_read(config: &CassandraConfig) -> Result<Consistency, ConnectError> {
    Ok(match config.serial_consistency().map_err(ConnectError::Config)? {
        SerialConsistency::Serial => Consistency::Serial,
        SerialConsistency::LocalSerial => Consistency::LocalSerial,
    })
}

/// The one cluster of a keyspace, as the partition key of `members`.
const CLUSTER: &str = "'default'";

impl Statements {
    pub(super) async fn prepare(
        session: &Session,
        keyspace: &str,
        config: &CassandraConfig,
    ) -> Result<Self, ConnectError> {
        let prepare = |cql: String| prepare(session, cql);
        let meta_key = "queue = ? AND partition = ? AND kind = 0 AND pass = 0 AND id = 0";
        let load = format!("SELECT range_id, meta FROM {keyspace}.tasks WHERE {meta_key}");
        let load_meta = prepare(load.clone()).await?;
        let mut load_meta_serial = prepare(load).await?;
        let serial = serial_read(config)?;
        load_meta_serial.set_consistency(serial);
        let mut catch_up = prepare(format!("SELECT * FROM {keyspace}.tasks WHERE queue = ? AND partition = ?")).await?;
        catch_up.set_consistency(Consistency::EachQuorum);
        catch_up.set_page_size(config.read_page_size);
        let queue = prepare(format!(
            "SELECT partitions, home, generation, previous_home, created_by, settings, settings_version \
             FROM {keyspace}.queues WHERE queue = ?"
        ))
        .await?;
        let list_queues = prepare(format!(
            "SELECT queue, partitions, home, generation, previous_home, created_by, settings, settings_version \
             FROM {keyspace}.queues"
        ))
        .await?;
        let local = matches!(config.consistency().map_err(ConnectError::Config)?, Consistency::LocalQuorum);
        let queue_everywhere = local.then(|| {
            let (mut one, mut all) = (queue.clone(), list_queues.clone());
            one.set_consistency(Consistency::Quorum);
            all.set_consistency(Consistency::Quorum);
            (one, all)
        });
        let mut read_tasks = prepare(format!(
            "SELECT pass, id, task FROM {keyspace}.tasks WHERE queue = ? AND partition = ? \
             AND (kind, pass, id) > (?, ?, ?) AND (kind, pass, id) <= (?, ?, ?) LIMIT ?"
        ))
        .await?;
        read_tasks.set_page_size(config.read_page_size);
        let mut read_buckets = prepare(format!(
            "SELECT pass, id, task FROM {keyspace}.tasks WHERE queue = ? AND partition = ? AND kind = ? \
             AND pass IN ? LIMIT ?"
        ))
        .await?;
        read_buckets.set_page_size(config.read_page_size);
        let mut read_row_serial = prepare(format!(
            "SELECT task FROM {keyspace}.tasks WHERE queue = ? AND partition = ? AND kind = ? AND pass = ? AND id = ?"
        ))
        .await?;
        read_row_serial.set_consistency(serial);
        let read_secret = format!(
            "SELECT secret, previous, previous_signs_until_ms, previous_accepted_until_ms \
             FROM {keyspace}.cluster_secrets WHERE cluster = {CLUSTER}"
        );
        Ok(Statements {
            load_meta,
            load_meta_serial,
            create_meta: prepare(format!(
                "INSERT INTO {keyspace}.tasks (queue, partition, kind, pass, id, range_id, meta) \
                 VALUES (?, ?, 0, 0, 0, ?, ?) IF NOT EXISTS"
            ))
            .await?,
            set_range: prepare(format!("UPDATE {keyspace}.tasks SET range_id = ? WHERE {meta_key} IF range_id = ?"))
                .await?,
            take_meta: prepare(format!(
                "UPDATE {keyspace}.tasks SET range_id = ?, meta = ? WHERE {meta_key} IF range_id = ? AND meta = ?"
            ))
            .await?,
            write_meta: prepare(format!(
                "UPDATE {keyspace}.tasks SET range_id = ?, meta = ? WHERE {meta_key} IF range_id = ?"
            ))
            .await?,
            insert_task: prepare(format!(
                "INSERT INTO {keyspace}.tasks (queue, partition, kind, pass, id, task) VALUES (?, ?, ?, ?, ?, ?)"
            ))
            .await?,
            read_row_serial,
            delete_record: prepare(format!(
                "DELETE FROM {keyspace}.tasks WHERE queue = ? AND partition = ? AND kind = ? AND pass = ? AND id = ?"
            ))
            .await?,
            read_tasks,
            read_buckets,
            delete_through: prepare(format!(
                "DELETE FROM {keyspace}.tasks WHERE queue = ? AND partition = ? \
                 AND (kind, pass, id) >= (?, ?, ?) AND (kind, pass, id) <= (?, ?, ?)"
            ))
            .await?,
            // The queues' rows are fenced by every region's replicas: two
            // regions cannot each create a queue, or move it, on their own.
            create_queue: {
                let mut create = prepare(format!(
                    "INSERT INTO {keyspace}.queues (queue, partitions, home, created_by) VALUES (?, ?, ?, ?) IF NOT EXISTS"
                ))
                .await?;
                create.set_serial_consistency(Some(SerialConsistency::Serial));
                create
            },
            set_home: {
                let mut set_home = prepare(format!(
                    "UPDATE {keyspace}.queues SET home = ? WHERE queue = ? IF partitions > 0 AND home = ?"
                ))
                .await?;
                set_home.set_serial_consistency(Some(SerialConsistency::Serial));
                set_home
            },
            force_home: {
                let mut everywhere = prepare(format!(
                    "UPDATE {keyspace}.queues SET home = ?, generation = ?, previous_home = ? WHERE queue = ? \
                     IF generation = ? AND home = ?"
                ))
                .await?;
                let mut here = everywhere.clone();
                everywhere.set_serial_consistency(Some(SerialConsistency::Serial));
                here.set_serial_consistency(Some(SerialConsistency::LocalSerial));
                (everywhere, here)
            },
            set_settings: {
                let mut set_settings = prepare(format!(
                    "UPDATE {keyspace}.queues SET settings = ?, settings_version = ? WHERE queue = ? \
                     IF partitions > 0 AND settings_version = ?"
                ))
                .await?;
                set_settings.set_serial_consistency(Some(SerialConsistency::Serial));
                set_settings
            },
            queue,
            list_queues,
            queue_everywhere,
            heartbeat: {
                let mut heartbeat = prepare(format!(
                    "INSERT INTO {keyspace}.members (cluster, node, region, address, started_ms, heartbeat_ms) \
                     VALUES ({CLUSTER}, ?, ?, ?, ?, ?)"
                ))
                .await?;
                // The same values again: writing them twice is writing them once.
                heartbeat.set_is_idempotent(true);
                heartbeat
            },
            members: prepare(format!(
                "SELECT node, region, address, started_ms, heartbeat_ms FROM {keyspace}.members \
                 WHERE cluster = {CLUSTER}"
            ))
            .await?,
            leave: prepare(format!("DELETE FROM {keyspace}.members WHERE cluster = {CLUSTER} AND node = ?")).await?,
            forget: prepare(format!(
                "DELETE FROM {keyspace}.members USING TIMESTAMP ? WHERE cluster = {CLUSTER} AND node = ?"
            ))
            .await?,
            create_secret: {
                let mut create = prepare(format!(
                    "INSERT INTO {keyspace}.cluster_secrets (cluster, secret) VALUES ({CLUSTER}, ?) IF NOT EXISTS"
                ))
                .await?;
                create.set_serial_consistency(Some(SerialConsistency::Serial));
                create
            },
            read_secret: prepare(read_secret.clone()).await?,
            read_secret_serial: {
                let mut read = prepare(read_secret).await?;
                read.set_consistency(Consistency::Serial);
                read
            },
            rotate_secret: {
                let mut rotate = prepare(format!(
                    "UPDATE {keyspace}.cluster_secrets SET secret = ?, previous = ?, previous_signs_until_ms = ?, \
                     previous_accepted_until_ms = ? WHERE cluster = {CLUSTER} IF secret = ?"
                ))
                .await?;
                rotate.set_serial_consistency(Some(SerialConsistency::Serial));
                rotate
            },
            catch_up,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::is_read;

    #[test]
    fn only_reads_are_retried_on_another_node() {
        assert!(is_read("SELECT range_id, meta FROM ks.tasks WHERE queue = ?"));
        assert!(is_read("  select node FROM ks.members"));
        assert!(!is_read("INSERT INTO ks.tasks (queue) VALUES (?)"));
        assert!(!is_read("UPDATE ks.tasks SET range_id = ? WHERE queue = ? IF range_id = ?"));
        assert!(!is_read("DELETE FROM ks.members WHERE cluster = 'default' AND node = ?"));
        assert!(!is_read("SELEC"));
    }
}
