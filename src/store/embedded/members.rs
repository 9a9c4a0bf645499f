//! Members in redb: one row per node, replaced by each heartbeat; a
//! member's region and address, where it has them, in tables of their own.
//! A record's write time is its heartbeat (one process writes them all).

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable, Table, TableDefinition, WriteTransaction};

use crate::store::{Member, MemberStore, StoreResult};

use super::{EmbeddedStore, MEMBER_ADDRESSES, MEMBER_REGIONS, MEMBERS, unavailable, uncertain};

/// The tables of a member's optional text fields.
const OPTIONAL_FIELDS: [TableDefinition<&str, &str>; 2] = [MEMBER_REGIONS, MEMBER_ADDRESSES];

/// Sets `node`'s row of `table` to `value`, or removes it when `value` is empty.
fn set_or_remove(table: &mut Table<&str, &str>, node: &str, value: &str) -> Result<(), redb::StorageError> {
    if value.is_empty() {
        table.remove(node)?;
    } else {
        table.insert(node, value)?;
    }
    Ok(())
}

fn remove_optional_fields(txn: &WriteTransaction, node: &str) -> StoreResult<()> {
    for definition in OPTIONAL_FIELDS {
        txn.open_table(definition).map_err(unavailable)?.remove(node).map_err(unavailable)?;
    }
    Ok(())
}

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
            for (definition, value) in [(MEMBER_REGIONS, &member.region), (MEMBER_ADDRESSES, &member.address)] {
                let mut table = txn.open_table(definition).map_err(unavailable)?;
                set_or_remove(&mut table, &member.node, value).map_err(unavailable)?;
            }
            txn.commit().map_err(uncertain)
        })
        .await
    }

    async fn members(&self) -> StoreResult<Vec<Member>> {
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(MEMBERS).map_err(unavailable)?;
            let regions = txn.open_table(MEMBER_REGIONS).map_err(unavailable)?;
            let addresses = txn.open_table(MEMBER_ADDRESSES).map_err(unavailable)?;
            let mut members = Vec::new();
            for row in table.iter().map_err(unavailable)? {
                let (node, times) = row.map_err(unavailable)?;
                let (started_unix_ms, heartbeat_unix_ms) = times.value();
                let region = regions.get(node.value()).map_err(unavailable)?.map(|r| r.value().to_owned());
                let address = addresses.get(node.value()).map_err(unavailable)?.map(|a| a.value().to_owned());
                members.push(Member {
                    node: node.value().to_owned(),
                    address: address.unwrap_or_default(),
                    region: region.unwrap_or_default(),
                    started_unix_ms,
                    heartbeat_unix_ms,
                });
            }
            Ok(members)
        })
        .await
    }

    async fn forget(&self, node: &str, written_before: i64) -> StoreResult<()> {
        let node = node.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            let mut table = txn.open_table(MEMBERS).map_err(unavailable)?;
            let heartbeat = table.get(node.as_str()).map_err(unavailable)?.map(|times| times.value().1);
            if heartbeat.is_some_and(|heartbeat| heartbeat < written_before) {
                table.remove(node.as_str()).map_err(unavailable)?;
                drop(table);
                remove_optional_fields(&txn, &node)?;
            } else {
                drop(table);
            }
            txn.commit().map_err(uncertain)
        })
        .await
    }

    async fn leave(&self, node: &str) -> StoreResult<()> {
        let node = node.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            txn.open_table(MEMBERS).map_err(unavailable)?.remove(node.as_str()).map_err(unavailable)?;
            remove_optional_fields(&txn, &node)?;
            txn.commit().map_err(uncertain)
        })
        .await
    }
}
