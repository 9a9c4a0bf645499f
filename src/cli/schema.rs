//! `fairway schema apply`: creates the Cassandra keyspace and tables of
//! `schema.cql` where they do not exist.
//!
//! Contract: idempotent; applying it again to a keyspace that has the
//! schema changes nothing.

use clap::Subcommand;

use fairway::store::cassandra::{CassandraConfig, apply_schema, connect_session};

#[derive(Subcommand, Debug)]
pub(super) enum SchemaCommand {
    /// Create the keyspace and tables of schema.cql if they do not exist (idempotent).
    Apply {
        /// A Cassandra node, HOST:PORT.
        #[arg(long, default_value = "127.0.0.1:9042")]
        cassandra: String,
        #[arg(long, default_value = "fairway")]
        keyspace: String,
        /// The keyspace's replication, as CQL.
        #[arg(long, default_value = "{'class': 'SimpleStrategy', 'replication_factor': 1}")]
        replication: String,
    },
}

pub(super) async fn run(command: SchemaCommand) -> anyhow::Result<()> {
    let SchemaCommand::Apply { cassandra, keyspace, replication } = command;
    let session = connect_session(&cassandra, &CassandraConfig::default()).await?;
    apply_schema(&session, &keyspace, &replication).await?;
    println!("schema applied to keyspace {keyspace} at {cassandra}");
    Ok(())
}
