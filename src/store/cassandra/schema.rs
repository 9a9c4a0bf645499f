//! The keyspace's schema (`schema.cql`), applied idempotently (`IF NOT
//! EXISTS`) with a replication the operator names; the keyspace name and
//! replication are checked before any statement is sent.
//!
//! Invariant: no statement of the schema is sent while the reachable nodes
//! disagree on the schema (a node just restarted may still be pulling it),
//! and none after a statement until they agree again: a table created on a
//! node that had not yet seen a drop or a create of the same name gets an id
//! of its own, and the cluster then disagrees until an operator resets it.

use std::time::Duration;

use scylla::client::session::Session;
use scylla::errors::ExecutionError;
use tokio::time::Instant;

/// How long the schema waits for the nodes to agree, before its first
/// statement and after each: longer than the driver's own minute, since a
/// restarted node on a busy machine can take that long to pull the schema.
pub const SCHEMA_AGREEMENT_TIMEOUT: Duration = Duration::from_secs(180);

/// Bound on one check of every node's version: a paused node never answers.
const ONE_CHECK: Duration = Duration::from_secs(10);

/// The pause before a failed statement of the schema is sent again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// The schema, with `{keyspace}` and `{replication}` to fill in.
pub(super) const SCHEMA_CQL: &str = include_str!("../../../schema.cql");

/// Why the schema could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The keyspace name is not 1 to 48 ASCII letters, digits or `_`.
    #[error("keyspace {0:?} must be 1 to 48 ASCII letters, digits or '_'")]
    BadKeyspace(String),
    /// The replication is not a CQL map (`{...}` without `;`).
    #[error("replication {0:?} must be a CQL map such as {{'class': 'SimpleStrategy', 'replication_factor': 1}}")]
    BadReplication(String),
    /// The reachable nodes did not agree on one schema version in time.
    #[error(
        "the Cassandra nodes did not agree on one schema version within {}s ({versions}); \
         a node that stays apart needs `nodetool resetlocalschema` on it",
        waited.as_secs()
    )]
    Disagreement {
        /// How long it waited.
        waited: Duration,
        /// Each node's schema version as the last coordinator asked saw it.
        versions: String,
    },
    /// Cassandra refused a statement of the schema.
    #[error("applying `{statement}`: {message}")]
    Statement {
        /// The statement's CQL, for the keyspace.
        statement: String,
        /// Cassandra's error.
        message: String,
    },
}

/// The statements of `schema.cql` for one keyspace.
pub(super) fn schema_statements(keyspace: &str, replication: &str) -> Result<Vec<String>, SchemaError> {
    let keyspace_ok = !keyspace.is_empty()
        && keyspace.len() <= 48
        && keyspace.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !keyspace_ok {
        return Err(SchemaError::BadKeyspace(keyspace.to_owned()));
    }
    let replication = replication.trim();
    if !(replication.starts_with('{') && replication.ends_with('}')) || replication.contains(';') {
        return Err(SchemaError::BadReplication(replication.to_owned()));
    }
    let without_comments: String =
        SCHEMA_CQL.lines().filter(|line| !line.trim_start().starts_with("--")).collect::<Vec<_>>().join("\n");
    Ok(without_comments
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.replace("{keyspace}", keyspace).replace("{replication}", replication))
        .collect())
}

/// Creates the keyspace and tables if they do not exist. Idempotent. Waits
/// up to [`SCHEMA_AGREEMENT_TIMEOUT`] for the nodes to agree before the first
/// statement and after each.
pub async fn apply_schema(session: &Session, keyspace: &str, replication: &str) -> Result<(), SchemaError> {
    let statements = schema_statements(keyspace, replication)?;
    await_schema_agreement(session, SCHEMA_AGREEMENT_TIMEOUT).await?;
    for statement in statements {
        apply_statement(session, statement).await?;
    }
    Ok(())
}

/// Sends one statement of the schema until it applies. Every statement is
/// idempotent (`IF NOT EXISTS`), so one that timed out or found no
/// connection (a node busy flushing its system tables, just restarted) is
/// sent again, after the nodes agree, for up to [`SCHEMA_AGREEMENT_TIMEOUT`];
/// one Cassandra refuses as invalid is not.
async fn apply_statement(session: &Session, statement: String) -> Result<(), SchemaError> {
    let deadline = Instant::now() + SCHEMA_AGREEMENT_TIMEOUT;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let error = match session.query_unpaged(statement.as_str(), ()).await {
            Ok(_) => return Ok(()),
            // Applied, but the driver's own wait for agreement ran out.
            Err(ExecutionError::SchemaAgreementError(_)) => {
                return await_schema_agreement(session, SCHEMA_AGREEMENT_TIMEOUT).await;
            }
            Err(error) => error,
        };
        let message = error.to_string();
        let refused = matches!(super::error::write_error(error), crate::store::StoreError::Invalid(_));
        if refused || Instant::now() >= deadline {
            let message = if attempts > 1 { format!("{message} (after {attempts} attempts)") } else { message };
            return Err(SchemaError::Statement { statement, message });
        }
        tracing::warn!(%statement, %message, attempts, "a schema statement failed; sending it again once the nodes agree");
        await_schema_agreement(session, deadline.saturating_duration_since(Instant::now())).await?;
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// Returns once every node the session reaches reports the same schema
/// version, or after `timeout` with each node's version: the step before a
/// schema change (a keyspace dropped or created) on a cluster whose nodes may
/// have just restarted.
pub async fn await_schema_agreement(session: &Session, timeout: Duration) -> Result<(), SchemaError> {
    let deadline = Instant::now() + timeout;
    loop {
        let check = tokio::time::timeout(ONE_CHECK, session.check_schema_agreement()).await;
        if let Ok(Ok(Some(_))) = check {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let versions = tokio::time::timeout(ONE_CHECK, schema_versions(session))
                .await
                .unwrap_or_else(|_| format!("no node told its version within {}s", ONE_CHECK.as_secs()));
            return Err(SchemaError::Disagreement { waited: timeout, versions });
        }
        tracing::debug!(?check, "the Cassandra nodes do not agree on the schema yet");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Each node's schema version, as one coordinator sees them (itself and its
/// peers through gossip): what `nodetool describecluster` shows.
async fn schema_versions(session: &Session) -> String {
    async fn rows(session: &Session, cql: &str) -> Result<Vec<(std::net::IpAddr, Option<String>)>, String> {
        let result = session.query_unpaged(cql, ()).await.map_err(|e| e.to_string())?;
        let rows = result.into_rows_result().map_err(|e| e.to_string())?;
        let rows = rows.rows::<(std::net::IpAddr, Option<String>)>().map_err(|e| e.to_string())?;
        rows.collect::<Result<_, _>>().map_err(|e| e.to_string())
    }
    let local = rows(session, "SELECT broadcast_address, CAST(schema_version AS text) FROM system.local").await;
    let peers = rows(session, "SELECT peer, CAST(schema_version AS text) FROM system.peers").await;
    match (local, peers) {
        (Ok(local), Ok(peers)) => local
            .iter()
            .chain(&peers)
            .map(|(node, version)| match version {
                Some(version) => format!("{node}: {version}"),
                None => format!("{node}: unknown"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        (Err(error), _) | (_, Err(error)) => format!("the versions could not be read: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_filled_in() {
        let statements = schema_statements("fw", "{'class': 'SimpleStrategy', 'replication_factor': 3}").unwrap();
        assert_eq!(
            statements.len(),
            29,
            "17 (the leases included), the 3 columns of a rotated secret, the creator of a queue, 5 counts of \
             visit_metrics, a member's address, the 2 columns of a queue's stored settings"
        );
        assert!(statements[0].starts_with("CREATE KEYSPACE IF NOT EXISTS fw"));
        assert!(statements[0].contains("'replication_factor': 3"));
        assert!(statements[1].contains("fw.tasks"));
        assert!(schema_statements("bad-name", "{}").is_err());
        assert!(schema_statements("ok", "{}; DROP TABLE x").is_err());
    }
}
