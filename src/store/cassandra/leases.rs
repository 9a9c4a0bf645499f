//! Named leases on Cassandra (`schema.cql`, `leases`): one row per name,
//! `(holder, epoch, expires_at)`, the lease's token in `epoch` (`token` is a
//! reserved word of CQL). Every write is a lightweight transaction
//! at `SERIAL`, whatever the configured level (a lease is one for every
//! region, as the cluster's secret is): a first take `IF NOT EXISTS`, a
//! take or a renewal `IF epoch = ? AND expires_at = ?` (the values it was
//! decided from), a release `IF holder = ? AND epoch = ?`. Reads are at
//! `SERIAL` too, so that they see every compare-and-set before them and
//! finish any Paxos round left in flight.
//!
//! An acquire reads, decides with the contract's rule
//! (`leases::next_holding`) and writes; a write that lost its condition
//! (another node changed the row meanwhile) is decided again from a fresh
//! read, at most [`ATTEMPTS`] times. A write whose outcome is unknown (a
//! timeout: it may have applied) is settled by a read at `SERIAL`: the row
//! as written means it applied; anything else, it is decided again.

use std::time::Duration;

use async_trait::async_trait;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};

use super::error::{ConnectError, read_error, write_error};
use super::statements::prepare;
use super::{CassandraStore, conditional};
use crate::clock::UnixMillis;
use crate::store::leases::{Lease, LeaseStore, check_acquire, check_holder, check_name, check_token, next_holding};
use crate::store::{StoreError, StoreResult};

/// Compare-and-sets one acquire tries before it gives up (`Unavailable`).
const ATTEMPTS: usize = 4;

/// The statements of the leases, prepared once per session.
pub(super) struct LeaseStatements {
    read_serial: PreparedStatement,
    create: PreparedStatement,
    replace: PreparedStatement,
    release: PreparedStatement,
}

impl LeaseStatements {
    pub(super) async fn prepare(session: &Session, ks: &str) -> Result<Self, ConnectError> {
        let prepare = |cql: String| prepare(session, cql);
        let mut read_serial =
            prepare(format!("SELECT holder, epoch, expires_at FROM {ks}.leases WHERE name = ?")).await?;
        read_serial.set_consistency(Consistency::Serial);
        let mut create = prepare(format!(
            "INSERT INTO {ks}.leases (name, holder, epoch, expires_at) VALUES (?, ?, ?, ?) IF NOT EXISTS"
        ))
        .await?;
        let mut replace = prepare(format!(
            "UPDATE {ks}.leases SET holder = ?, epoch = ?, expires_at = ? WHERE name = ? \
             IF epoch = ? AND expires_at = ?"
        ))
        .await?;
        let mut release =
            prepare(format!("UPDATE {ks}.leases SET expires_at = 0 WHERE name = ? IF holder = ? AND epoch = ?"))
                .await?;
        for statement in [&mut create, &mut replace, &mut release] {
            statement.set_serial_consistency(Some(SerialConsistency::Serial));
        }
        Ok(LeaseStatements { read_serial, create, replace, release })
    }
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

impl CassandraStore {
    /// Lease `name` at `SERIAL`, `None` if absent.
    async fn read_lease_serial(&self, name: &str) -> StoreResult<Option<Lease>> {
        let statement = &self.lease_statements.read_serial;
        let result = self.session.execute_unpaged(statement, (name,)).await.map_err(read_error)?;
        let rows = result.into_rows_result().map_err(corrupt)?;
        let Some((holder, token, expires_at_ms)) =
            rows.maybe_first_row::<(Option<String>, Option<i64>, Option<i64>)>().map_err(corrupt)?
        else {
            return Ok(None);
        };
        let (Some(holder), Some(token), Some(expires_at_ms)) = (holder, token, expires_at_ms) else {
            return Err(StoreError::Corrupt(format!("lease {name}: a row without holder, token or expiry")));
        };
        let token = u64::try_from(token).map_err(|_| StoreError::Corrupt(format!("lease {name}: token {token}")))?;
        Ok(Some(Lease { name: name.to_owned(), holder, token, expires_at_ms }))
    }
}

#[async_trait]
impl LeaseStore for CassandraStore {
    async fn acquire(&self, name: &str, holder: &str, now: UnixMillis, ttl: Duration) -> StoreResult<Option<Lease>> {
        let expires_at_ms = check_acquire(name, holder, now, ttl)?;
        let statements = &self.lease_statements;
        for _ in 0..ATTEMPTS {
            let current = self.read_lease_serial(name).await?;
            let Some(next) = next_holding(current.as_ref(), name, holder, now, expires_at_ms)? else {
                return Ok(None);
            };
            if current.as_ref() == Some(&next) {
                return Ok(Some(next));
            }
            let token = check_token(next.token)?;
            let written = match &current {
                None => {
                    let values = (name, holder, token, next.expires_at_ms);
                    self.session.execute_unpaged(&statements.create, values).await
                }
                Some(current) => {
                    let values =
                        (holder, token, next.expires_at_ms, name, check_token(current.token)?, current.expires_at_ms);
                    self.session.execute_unpaged(&statements.replace, values).await
                }
            };
            match written.map_err(write_error) {
                Ok(result) => {
                    if conditional(result)?.is_none() {
                        return Ok(Some(next));
                    }
                    // Another node changed the row since the read: decide again.
                }
                Err(error @ StoreError::Uncertain(_)) => {
                    // It may have applied: the serial read settles it.
                    match self.read_lease_serial(name).await {
                        Ok(Some(found)) if found == next => return Ok(Some(next)),
                        Ok(_) => {}
                        Err(_) => return Err(error),
                    }
                }
                Err(error) => return Err(error),
            }
        }
        Err(StoreError::Unavailable(format!(
            "lease {name}: the row changed under {ATTEMPTS} compare-and-sets in a row; nothing written, try again"
        )))
    }

    async fn release(&self, name: &str, holder: &str, token: u64) -> StoreResult<bool> {
        check_name(name)?;
        check_holder(holder)?;
        let token_value = check_token(token)?;
        let statement = &self.lease_statements.release;
        match self.session.execute_unpaged(statement, (name, holder, token_value)).await.map_err(write_error) {
            Ok(result) => Ok(conditional(result)?.is_none()),
            Err(error @ StoreError::Uncertain(_)) => match self.read_lease_serial(name).await {
                Ok(Some(found)) if found.holder == holder && found.token == token && found.expires_at_ms == 0 => {
                    Ok(true)
                }
                _ => Err(error),
            },
            Err(error) => Err(error),
        }
    }

    async fn read(&self, name: &str) -> StoreResult<Option<Lease>> {
        check_name(name)?;
        self.read_lease_serial(name).await
    }
}
