//! The keyspace's schema (`schema.cql`), applied idempotently (`IF NOT
//! EXISTS`) with a replication the operator names; the keyspace name and
//! replication are checked before any statement is sent.

use scylla::client::session::Session;

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

/// Creates the keyspace and tables if they do not exist. Idempotent.
pub async fn apply_schema(session: &Session, keyspace: &str, replication: &str) -> Result<(), SchemaError> {
    for statement in schema_statements(keyspace, replication)? {
        session
            .query_unpaged(statement.as_str(), ())
            .await
            .map_err(|e| SchemaError::Statement { statement: statement.clone(), message: e.to_string() })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_filled_in() {
        let statements = schema_statements("fw", "{'class': 'SimpleStrategy', 'replication_factor': 3}").unwrap();
        assert_eq!(
            statements.len(),
            26,
            "17 (the leases included), the 3 columns of a rotated secret, the creator of a queue, 5 counts of \
             visit_metrics"
        );
        assert!(statements[0].starts_with("CREATE KEYSPACE IF NOT EXISTS fw"));
        assert!(statements[0].contains("'replication_factor': 3"));
        assert!(statements[1].contains("fw.tasks"));
        assert!(schema_statements("bad-name", "{}").is_err());
        assert!(schema_statements("ok", "{}; DROP TABLE x").is_err());
    }
}
