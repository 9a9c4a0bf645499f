//! Named leases in the embedded store: name → (holder, token, expiry). An
//! acquire or a release reads the row and writes it in one redb write
//! transaction, which redb's single writer makes a compare-and-set; the
//! rule of what to write is the contract's (`leases::next_holding`).

use std::time::Duration;

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};

use super::{EmbeddedStore, unavailable, uncertain};
use crate::clock::UnixMillis;
use crate::store::StoreResult;
use crate::store::leases::{Lease, LeaseStore, check_acquire, check_holder, check_name, check_token, next_holding};

/// name → (holder, token, expires_at_ms).
const LEASES: TableDefinition<&str, (&str, u64, i64)> = TableDefinition::new("leases");

/// Creates the table, so that reads find it.
pub(super) fn create_tables(txn: &WriteTransaction) -> Result<(), redb::TableError> {
    txn.open_table(LEASES)?;
    Ok(())
}

fn stored<T: ReadableTable<&'static str, (&'static str, u64, i64)>>(
    table: &T,
    name: &str,
) -> StoreResult<Option<Lease>> {
    let Some(row) = table.get(name).map_err(unavailable)? else { return Ok(None) };
    let (holder, token, expires_at_ms) = row.value();
    Ok(Some(Lease { name: name.to_owned(), holder: holder.to_owned(), token, expires_at_ms }))
}

#[async_trait]
impl LeaseStore for EmbeddedStore {
    async fn acquire(&self, name: &str, holder: &str, now: UnixMillis, ttl: Duration) -> StoreResult<Option<Lease>> {
        let expires_at_ms = check_acquire(name, holder, now, ttl)?;
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            let written = {
                let mut table = txn.open_table(LEASES).map_err(unavailable)?;
                let current = stored(&table, &name)?;
                let Some(next) = next_holding(current.as_ref(), &name, &holder, now, expires_at_ms)? else {
                    return Ok(None);
                };
                if current.as_ref() == Some(&next) {
                    return Ok(Some(next));
                }
                table
                    .insert(name.as_str(), (next.holder.as_str(), next.token, next.expires_at_ms))
                    .map_err(unavailable)?;
                next
            };
            txn.commit().map_err(uncertain)?;
            Ok(Some(written))
        })
        .await
    }

    async fn release(&self, name: &str, holder: &str, token: u64) -> StoreResult<bool> {
        check_name(name)?;
        check_holder(holder)?;
        check_token(token)?;
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            {
                let mut table = txn.open_table(LEASES).map_err(unavailable)?;
                match stored(&table, &name)? {
                    Some(lease) if lease.holder == holder && lease.token == token => {}
                    _ => return Ok(false),
                }
                table.insert(name.as_str(), (holder.as_str(), token, 0)).map_err(unavailable)?;
            }
            txn.commit().map_err(uncertain)?;
            Ok(true)
        })
        .await
    }

    async fn read(&self, name: &str) -> StoreResult<Option<Lease>> {
        check_name(name)?;
        let name = name.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(LEASES).map_err(unavailable)?;
            stored(&table, &name)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lease_and_its_token_survive_reopening_the_store() {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let ttl = Duration::from_secs(6);
        {
            let store = EmbeddedStore::open(dir.path()).expect("open");
            store.acquire("rounds/git", "a", 1_000, ttl).await.unwrap().expect("taken");
            assert!(store.release("rounds/git", "a", 1).await.unwrap());
        }
        let store = EmbeddedStore::open(dir.path()).expect("open again");
        assert_eq!(store.read("rounds/git").await.unwrap().map(|l| (l.token, l.expires_at_ms)), Some((1, 0)));
        let again = store.acquire("rounds/git", "a", 2_000, ttl).await.unwrap().expect("taken again");
        assert_eq!(again.token, 2, "the token grows across restarts");
    }
}
