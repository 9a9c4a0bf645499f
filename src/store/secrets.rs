//! The cluster's secret, from which nodes derive the keys that sign lease
//! tokens and prove a request comes from a node: created once (the first
//! value wins), rotated only by compare-and-set on the current one.

use async_trait::async_trait;

use super::{StoreError, StoreResult};
pub use crate::security::{ClusterSecrets, PreviousSecret, SECRET_BYTES};

/// Checks the arguments of [`SecretStore::rotate_cluster_secret`] (`Invalid`, naming what is wrong).
pub(crate) fn check_rotation(
    from: &[u8; SECRET_BYTES],
    to: &[u8; SECRET_BYTES],
    signs_until_unix_ms: i64,
    accepted_until_unix_ms: i64,
) -> StoreResult<()> {
    if from == to {
        return Err(StoreError::Invalid("a rotation to the secret it rotates from".into()));
    }
    if accepted_until_unix_ms < signs_until_unix_ms {
        return Err(StoreError::Invalid(format!(
            "a rotation whose previous secret is accepted until {accepted_until_unix_ms} ms, before it stops \
             signing ({signs_until_unix_ms} ms)"
        )));
    }
    Ok(())
}

/// The cluster's secrets.
#[async_trait]
pub trait SecretStore: Send + Sync + std::fmt::Debug + 'static {
    /// The cluster's secrets: `candidate` is stored as the current secret if
    /// there is none yet, and the stored secrets are returned, the same to
    /// every caller on every node until a rotation. Nodes derive from them
    /// the keys that sign lease tokens and prove a request comes from a
    /// node. Idempotent: after an error, call again with any candidate. On
    /// Cassandra a read that finds the secrets reads at the configured
    /// consistency: after a rotation, a node may read the old ones until
    /// the new have reached its replicas (nodes read again every
    /// [`crate::security::SECRET_RELOAD_INTERVAL`]).
    async fn cluster_secrets(&self, candidate: &[u8; SECRET_BYTES]) -> StoreResult<ClusterSecrets>;

    /// Rotates the cluster's secret, if the current one is `from`: `to`
    /// becomes current, and `from` the previous secret, which nodes sign
    /// with until `signs_until_unix_ms` and accept until
    /// `accepted_until_unix_ms` (see [`PreviousSecret`]); the previous
    /// secret before (if any) is forgotten. Returns the secrets as stored
    /// after: the caller's rotation was written if their current one is
    /// `to` (another current one: nothing written, someone rotated first);
    /// `None` (nothing written) if there is no secret yet. A compare-and-set:
    /// of rotations racing from one secret, at most one is written (on
    /// Cassandra a lightweight transaction at `SERIAL`).
    ///
    /// Errors: `Invalid` if `to` is `from` or `accepted_until_unix_ms <
    /// signs_until_unix_ms` (nothing written); `Uncertain` (may have been
    /// written: read the secrets); `Unavailable`.
    async fn rotate_cluster_secret(
        &self,
        from: &[u8; SECRET_BYTES],
        to: &[u8; SECRET_BYTES],
        signs_until_unix_ms: i64,
        accepted_until_unix_ms: i64,
    ) -> StoreResult<Option<ClusterSecrets>>;
}
