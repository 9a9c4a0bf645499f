//! The cluster's secret on Cassandra: one row, created `IF NOT EXISTS` (the
//! first value wins), rotated by a lightweight transaction on the current
//! secret at `SERIAL`.

use async_trait::async_trait;
use scylla::statement::prepared::PreparedStatement;

use super::error::{read_error, write_error};
use crate::store::{
    ClusterSecrets, PreviousSecret, SECRET_BYTES, SecretStore, StoreError, StoreResult, check_rotation,
};

use super::{CassandraStore, conditional};

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

#[async_trait]
impl SecretStore for CassandraStore {
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
