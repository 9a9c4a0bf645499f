use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;

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
    pub queue: PreparedStatement,
    pub list_queues: PreparedStatement,
    pub heartbeat: PreparedStatement,
    pub members: PreparedStatement,
    pub leave: PreparedStatement,
    /// Insert-if-absent of the cluster's secret: the stored one if present.
    pub create_secret: PreparedStatement,
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
        load_meta_serial.set_consistency(scylla::statement::Consistency::Serial);
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
        read_row_serial
            .set_consistency(load_meta_serial.get_consistency().unwrap_or(scylla::statement::Consistency::Serial));
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
            create_queue: prepare(format!(
                "INSERT INTO {keyspace}.queues (queue, partitions) VALUES (?, ?) IF NOT EXISTS"
            ))
            .await?,
            queue: prepare(format!("SELECT partitions FROM {keyspace}.queues WHERE queue = ?")).await?,
            list_queues: prepare(format!("SELECT queue, partitions FROM {keyspace}.queues")).await?,
            heartbeat: {
                let mut heartbeat = prepare(format!(
                    "INSERT INTO {keyspace}.members (cluster, node, started_ms, heartbeat_ms) VALUES ({CLUSTER}, ?, ?, ?)"
                ))
                .await?;
                // The same values again: writing them twice is writing them once.
                heartbeat.set_is_idempotent(true);
                heartbeat
            },
            members: prepare(format!(
                "SELECT node, started_ms, heartbeat_ms FROM {keyspace}.members WHERE cluster = {CLUSTER}"
            ))
            .await?,
            leave: prepare(format!("DELETE FROM {keyspace}.members WHERE cluster = {CLUSTER} AND node = ?")).await?,
            create_secret: prepare(format!(
                "INSERT INTO {keyspace}.cluster_secrets (cluster, secret) VALUES ({CLUSTER}, ?) IF NOT EXISTS"
            ))
            .await?,
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
