//! The cluster's secret in redb: the current one and, after a rotation, the
//! previous one with its times, in one table; each change is one
//! transaction.

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable};

use crate::store::{
    ClusterSecrets, PreviousSecret, SECRET_BYTES, SecretStore, StoreError, StoreResult, check_rotation,
};

use super::{EmbeddedStore, PREVIOUS_SECRET, SECRETS, unavailable, uncertain};

#[async_trait]
impl SecretStore for EmbeddedStore {
    async fn cluster_secrets(&self, candidate: &[u8; SECRET_BYTES]) -> StoreResult<ClusterSecrets> {
        let candidate = *candidate;
        self.blocking(move |db| {
            // Nodes read the secrets every few seconds: a read transaction
            // when they exist, a write (and its sync) only to store the first.
            let read = db.begin_read().map_err(unavailable)?;
            if let Some(secrets) = stored_secrets(&read.open_table(SECRETS).map_err(unavailable)?)? {
                return Ok(secrets);
            }
            drop(read);
            let txn = db.begin_write().map_err(unavailable)?;
            let secrets = {
                let mut table = txn.open_table(SECRETS).map_err(unavailable)?;
                match stored_secrets(&table)? {
                    Some(secrets) => secrets,
                    None => {
                        table.insert("", candidate.as_slice()).map_err(unavailable)?;
                        ClusterSecrets::first(candidate)
                    }
                }
            };
            txn.commit().map_err(uncertain)?;
            Ok(secrets)
        })
        .await
    }

    async fn rotate_cluster_secret(
        &self,
        from: &[u8; SECRET_BYTES],
        to: &[u8; SECRET_BYTES],
        signs_until_unix_ms: i64,
        accepted_until_unix_ms: i64,
    ) -> StoreResult<Option<ClusterSecrets>> {
        check_rotation(from, to, signs_until_unix_ms, accepted_until_unix_ms)?;
        let (from, to) = (*from, *to);
        self.blocking(move |db| {
            // One write transaction: redb serializes them, so the compare and
            // the set cannot interleave with another rotation's.
            let txn = db.begin_write().map_err(unavailable)?;
            let after = {
                let mut table = txn.open_table(SECRETS).map_err(unavailable)?;
                match stored_secrets(&table)? {
                    Some(stored) if stored.current == from => {
                        let previous = PreviousSecret { secret: from, signs_until_unix_ms, accepted_until_unix_ms };
                        table.insert("", to.as_slice()).map_err(unavailable)?;
                        table.insert(PREVIOUS_SECRET, encode_previous(&previous).as_slice()).map_err(unavailable)?;
                        Some(ClusterSecrets { current: to, previous: Some(previous) })
                    }
                    other => other,
                }
            };
            txn.commit().map_err(uncertain)?;
            Ok(after)
        })
        .await
    }
}

/// The secrets `table` holds, `None` if no secret was stored yet.
fn stored_secrets(table: &impl ReadableTable<&'static str, &'static [u8]>) -> StoreResult<Option<ClusterSecrets>> {
    let Some(current) = table.get("").map_err(unavailable)?.map(|secret| secret.value().to_vec()) else {
        return Ok(None);
    };
    let current = current
        .try_into()
        .map_err(|s: Vec<u8>| StoreError::Corrupt(format!("a cluster secret of {} bytes", s.len())))?;
    let previous = table.get(PREVIOUS_SECRET).map_err(unavailable)?.map(|p| decode_previous(p.value())).transpose()?;
    Ok(Some(ClusterSecrets { current, previous }))
}

fn encode_previous(previous: &PreviousSecret) -> Vec<u8> {
    let mut bytes = previous.secret.to_vec();
    bytes.extend_from_slice(&previous.signs_until_unix_ms.to_be_bytes());
    bytes.extend_from_slice(&previous.accepted_until_unix_ms.to_be_bytes());
    bytes
}

fn decode_previous(bytes: &[u8]) -> StoreResult<PreviousSecret> {
    let corrupt = || StoreError::Corrupt(format!("a previous cluster secret of {} bytes", bytes.len()));
    if bytes.len() != SECRET_BYTES + 16 {
        return Err(corrupt());
    }
    let (secret, times) = bytes.split_at(SECRET_BYTES);
    let time = |at: usize| i64::from_be_bytes(times[at..at + 8].try_into().expect("8 bytes"));
    Ok(PreviousSecret {
        secret: secret.try_into().map_err(|_| corrupt())?,
        signs_until_unix_ms: time(0),
        accepted_until_unix_ms: time(8),
    })
}
