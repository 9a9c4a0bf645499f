//! Members on Cassandra: a row per node, overwritten by each heartbeat
//! (last write wins), deleted when the node leaves. No region or address:
//! null, not an empty string.

use async_trait::async_trait;

use super::error::{read_error, write_error};
use crate::store::{Member, MemberStore, StoreError, StoreResult};

use super::CassandraStore;

#[async_trait]
impl MemberStore for CassandraStore {
    async fn heartbeat(&self, member: &Member) -> StoreResult<()> {
        let (region, address) = (optional(&member.region), optional(&member.address));
        let values = (member.node.as_str(), region, address, member.started_unix_ms, member.heartbeat_unix_ms);
        self.session.execute_unpaged(&self.statements.heartbeat, values).await.map_err(write_error)?;
        Ok(())
    }

    async fn members(&self) -> StoreResult<Vec<Member>> {
        let result = self.session.execute_unpaged(&self.statements.members, ()).await.map_err(read_error)?;
        let rows = result.into_rows_result().map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let typed = rows
            .rows::<(String, Option<String>, Option<String>, Option<i64>, Option<i64>)>()
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        typed
            .map(|row| {
                let (node, region, address, started, heartbeat) =
                    row.map_err(|e| StoreError::Corrupt(e.to_string()))?;
                Ok(Member {
                    node,
                    address: address.unwrap_or_default(),
                    region: region.unwrap_or_default(),
                    started_unix_ms: started.unwrap_or(0),
                    heartbeat_unix_ms: heartbeat.unwrap_or(0),
                })
            })
            .collect()
    }

    async fn forget(&self, node: &str, written_before: i64) -> StoreResult<()> {
        // A delete at a timestamp shadows only the writes at earlier ones:
        // a heartbeat written since, by a node that came back, stays.
        let micros = written_before.saturating_mul(1000);
        self.session.execute_unpaged(&self.statements.forget, (micros, node)).await.map_err(write_error)?;
        Ok(())
    }

    async fn leave(&self, node: &str) -> StoreResult<()> {
        self.session.execute_unpaged(&self.statements.leave, (node,)).await.map_err(write_error)?;
        Ok(())
    }
}

/// `text`, or null for an empty one.
fn optional(text: &str) -> Option<&str> {
    (!text.is_empty()).then_some(text)
}
