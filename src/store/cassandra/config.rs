//! Section `[cassandra]` of the config: consistency levels, timeouts,
//! credentials and TLS of the driver. Every value is checked by
//! [`CassandraConfig::validate`], whose errors name the key.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_rustls::rustls;

use super::ConnectError;
use crate::model::{ValidationError, validate};
use crate::security::{KeyedFile, client_config};

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
    #[serde(with = "crate::clock::duration_serde")]
    pub request_timeout: Duration,
    /// A read or heartbeat without an answer after this long is sent again
    /// to the next node (at most twice), so that a coordinator waiting on a
    /// replica that just died does not hold it up to `request_timeout`.
    /// Writes other than heartbeats are never sent twice. `0s`: never.
    #[serde(with = "crate::clock::duration_serde")]
    pub speculative_retry_after: Duration,
    /// How long to keep trying to reach Cassandra at startup.
    #[serde(with = "crate::clock::duration_serde")]
    pub connect_patience: Duration,
    /// The replication clause of the keyspace `fairway schema apply` creates.
    pub replication: String,
    /// Page size of task reads.
    pub read_page_size: i32,
    /// How long before a scheduler read of an index or wake-up head the
    /// range delete under that head is timestamped: longer than a write can
    /// be held up in Cassandra, plus clock skew (see `visits/heads.rs`).
    #[serde(with = "crate::clock::duration_serde")]
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
    pub(super) fn credentials(&self) -> Result<Option<(String, String)>, ConnectError> {
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
    pub(super) fn tls(&self) -> Result<Option<Arc<rustls::ClientConfig>>, ConnectError> {
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
    pub(super) fn levels_are_global(&self) -> bool {
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
