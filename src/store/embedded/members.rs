//! Members in redb: one row per node, replaced by each heartbeat.

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable};

use crate::store::{Member, MemberStore, StoreResult};

use super::{EmbeddedStore, MEMBER_REGIONS, MEMBERS, unavailable, uncertain};

#[async_trait]
impl MemberStore for EmbeddedStore {
    async fn heartbeat(&self, member: &Member) -> StoreResult<()> {
        let member = member.clone();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            txn.open_table(MEMBERS)
                .map_err(unavailable)?
                .insert(member.node.as_str(), (member.started_unix_ms, member.heartbeat_unix_ms))
                .map_err(unavailable)?;
            let mut regions = txn.open_table(MEMBER_REGIONS).map_err(unavailable)?;
            if member.region.is_empty() {
                regions.remove(member.node.as_str()).map_err(unavailable)?;
            } else {
                regions.insert(member.node.as_str(), member.region.as_str()).map_err(unavailable)?;
            }
            drop(regions);
            txn.commit().map_err(uncertain)
        })
        .await
    }

    async fn members(&self) -> StoreResult<Vec<Member>> {
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(MEMBERS).map_err(unavailable)?;
            let regions = txn.open_table(MEMBER_REGIONS).map_err(unavailable)?;
            let mut members = Vec::new();
            for row in table.iter().map_err(unavailable)? {
                let (node, times) = row.map_err(unavailable)?;
                let (started_unix_ms, heartbeat_unix_ms) = times.value();
                let region = regions.get(node.value()).map_err(unavailable)?.map(|r| r.value().to_owned());
                members.push(Member {
                    node: node.value().to_owned(),
                    region: region.unwrap_or_default(),
                    started_unix_ms,
                    heartbeat_unix_ms,
                });
            }
            Ok(members)
        })
        .await
    }

    async fn leave(&self, node: &str) -> StoreResult<()> {
        let node = node.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            txn.open_table(MEMBERS).map_err(unavailable)?.remove(node.as_str()).map_err(unavailable)?;
            txn.open_table(MEMBER_REGIONS).map_err(unavailable)?.remove(node.as_str()).map_err(unavailable)?;
            txn.commit().map_err(uncertain)
        })
        .await
    }
}
