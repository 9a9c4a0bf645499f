//! The driver session of a node: its consistency levels, load balancing
//! (token aware, preferring the local datacenter), speculative retries of
//! idempotent statements, credentials and TLS. A local datacenter the
//! cluster does not have fails the connection (the driver would have
//! nowhere to send anything).

use std::sync::Arc;
use std::time::Duration;

use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::policies::load_balancing::DefaultPolicy;
use scylla::policies::speculative_execution::{SimpleSpeculativeExecutionPolicy, SpeculativeExecutionPolicy};

use super::{CassandraConfig, ConnectError};

/// How many times at most an idempotent statement is sent again to another
/// node while the first is unanswered: with three replicas, once to each.
const SPECULATIVE_RETRIES: usize = 2;

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
