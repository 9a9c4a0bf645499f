//! The scheduler's tables in the embedded store. Each [`VisitStore::apply`]
//! is one redb transaction, so a batch of origin writes commits whole.
//! Deletes are physical: an index read never skips dead rows.

use std::ops::Bound;

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};

use super::{EmbeddedStore, unavailable, uncertain};
use crate::clock::UnixMillis;
use crate::core::visits::{IndexEntry, ListerMetrics, OriginState, OriginWrite, Policy};
use crate::store::StoreResult;
use crate::store::visits::{ListerRecord, VisitStore, decode_state, encode_state};

/// (visit type, url) → the origin's state (JSON).
const ORIGINS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("visit_origins");
/// (visit type, policy, lister, key, url) → ().
const INDEXES: TableDefinition<(&str, &str, &str, i64, &str), ()> = TableDefinition::new("visit_indexes");
/// (visit type, at, url) → ().
const WAKES: TableDefinition<(&str, i64, &str), ()> = TableDefinition::new("visit_wakes");
/// lister → when its last listing finished (`i64::MIN`: never).
const LISTERS: TableDefinition<&str, i64> = TableDefinition::new("visit_listers");
/// (lister, visit type) → ().
const LISTER_TYPES: TableDefinition<(&str, &str), ()> = TableDefinition::new("visit_lister_types");
/// (lister, visit type) → (known, enabled, never visited, pending changes).
const METRICS: TableDefinition<(&str, &str), (i64, i64, i64, i64)> = TableDefinition::new("visit_metrics");
/// visit type → queue-position clock.
const POSITIONS: TableDefinition<&str, i64> = TableDefinition::new("visit_positions");

/// Creates the tables, so that reads find them.
pub(super) fn create_tables(txn: &WriteTransaction) -> Result<(), redb::TableError> {
    txn.open_table(ORIGINS)?;
    txn.open_table(INDEXES)?;
    txn.open_table(WAKES)?;
    txn.open_table(LISTERS)?;
    txn.open_table(LISTER_TYPES)?;
    txn.open_table(METRICS)?;
    txn.open_table(POSITIONS)?;
    Ok(())
}

fn metrics_tuple(m: ListerMetrics) -> (i64, i64, i64, i64) {
    (m.known, m.enabled, m.never_visited, m.pending_changes)
}

fn metrics_of((known, enabled, never_visited, pending_changes): (i64, i64, i64, i64)) -> ListerMetrics {
    ListerMetrics { known, enabled, never_visited, pending_changes, ..ListerMetrics::default() }
}

fn apply_one(txn: &WriteTransaction, write: &OriginWrite) -> StoreResult<()> {
    let (visit_type, url) = write.key();
    {
        let mut indexes = txn.open_table(INDEXES).map_err(unavailable)?;
        for e in &write.unindex {
            indexes
                .remove((visit_type, e.policy.name(), e.lister.as_str(), e.key, e.url.as_str()))
                .map_err(unavailable)?;
        }
        for e in &write.index {
            indexes
                .insert((visit_type, e.policy.name(), e.lister.as_str(), e.key, e.url.as_str()), ())
                .map_err(unavailable)?;
        }
    }
    {
        let mut wakes = txn.open_table(WAKES).map_err(unavailable)?;
        if let Some(at) = write.unwake {
            wakes.remove((visit_type, at, url)).map_err(unavailable)?;
        }
        if let Some(at) = write.wake {
            wakes.insert((visit_type, at, url), ()).map_err(unavailable)?;
        }
    }
    {
        let mut metrics = txn.open_table(METRICS).map_err(unavailable)?;
        for (lister, delta) in &write.metrics {
            let key = (lister.as_str(), visit_type);
            let mut current = metrics.get(key).map_err(unavailable)?.map(|v| metrics_of(v.value())).unwrap_or_default();
            current.add(*delta, 1);
            metrics.insert(key, metrics_tuple(current)).map_err(unavailable)?;
        }
    }
    let mut origins = txn.open_table(ORIGINS).map_err(unavailable)?;
    origins.insert((visit_type, url), encode_state(&write.state).as_slice()).map_err(unavailable)?;
    Ok(())
}

#[async_trait]
impl VisitStore for EmbeddedStore {
    async fn read_origins(&self, visit_type: &str, urls: &[String]) -> StoreResult<Vec<Option<OriginState>>> {
        let (visit_type, urls) = (visit_type.to_owned(), urls.to_vec());
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(ORIGINS).map_err(unavailable)?;
            urls.iter()
                .map(|url| {
                    table
                        .get((visit_type.as_str(), url.as_str()))
                        .map_err(unavailable)?
                        .map(|row| decode_state(row.value()))
                        .transpose()
                })
                .collect()
        })
        .await
    }

    async fn apply(&self, writes: &[OriginWrite]) -> StoreResult<()> {
        if writes.is_empty() {
            return Ok(());
        }
        let writes = writes.to_vec();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            for write in &writes {
                apply_one(&txn, write)?;
            }
            txn.commit().map_err(uncertain)
        })
        .await
    }

    async fn read_index(
        &self,
        visit_type: &str,
        policy: Policy,
        lister: &str,
        below: Option<i64>,
        limit: usize,
    ) -> StoreResult<Vec<IndexEntry>> {
        let (visit_type, lister) = (visit_type.to_owned(), lister.to_owned());
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(INDEXES).map_err(unavailable)?;
            let (vt, name) = (visit_type.as_str(), policy.name());
            let lower = (vt, name, lister.as_str(), i64::MIN, "");
            let upper = match below {
                Some(below) => Bound::Excluded((vt, name, lister.as_str(), below, "")),
                None => Bound::Unbounded,
            };
            let range =
                table.range::<(&str, &str, &str, i64, &str)>((Bound::Included(lower), upper)).map_err(unavailable)?;
            let mut entries = Vec::new();
            for row in range {
                let (key, _) = row.map_err(unavailable)?;
                let (row_type, row_policy, row_lister, key, url) = key.value();
                if entries.len() == limit || (row_type, row_policy, row_lister) != (vt, name, lister.as_str()) {
                    break;
                }
                entries.push(IndexEntry { policy, lister: lister.clone(), key, url: url.to_owned() });
            }
            Ok(entries)
        })
        .await
    }

    async fn read_wakes(
        &self,
        visit_type: &str,
        through: UnixMillis,
        limit: usize,
    ) -> StoreResult<Vec<(UnixMillis, String)>> {
        let visit_type = visit_type.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(WAKES).map_err(unavailable)?;
            let vt = visit_type.as_str();
            let range = table.range::<(&str, i64, &str)>((vt, i64::MIN, "")..).map_err(unavailable)?;
            let mut due = Vec::new();
            for row in range {
                let (key, _) = row.map_err(unavailable)?;
                let (row_type, at, url) = key.value();
                if due.len() == limit || row_type != vt || at > through {
                    break;
                }
                due.push((at, url.to_owned()));
            }
            Ok(due)
        })
        .await
    }

    async fn add_lister(&self, lister: &str, visit_types: &[String]) -> StoreResult<()> {
        let (lister, visit_types) = (lister.to_owned(), visit_types.to_vec());
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            {
                let mut listers = txn.open_table(LISTERS).map_err(unavailable)?;
                if listers.get(lister.as_str()).map_err(unavailable)?.is_none() {
                    listers.insert(lister.as_str(), i64::MIN).map_err(unavailable)?;
                }
                let mut types = txn.open_table(LISTER_TYPES).map_err(unavailable)?;
                for visit_type in &visit_types {
                    types.insert((lister.as_str(), visit_type.as_str()), ()).map_err(unavailable)?;
                }
            }
            txn.commit().map_err(uncertain)
        })
        .await
    }

    async fn finish_listing(&self, lister: &str, at: UnixMillis) -> StoreResult<()> {
        let lister = lister.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            txn.open_table(LISTERS).map_err(unavailable)?.insert(lister.as_str(), at).map_err(unavailable)?;
            txn.commit().map_err(uncertain)
        })
        .await
    }

    async fn listers(&self) -> StoreResult<Vec<ListerRecord>> {
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let listers = txn.open_table(LISTERS).map_err(unavailable)?;
            let types = txn.open_table(LISTER_TYPES).map_err(unavailable)?;
            let mut records = Vec::new();
            for row in listers.iter().map_err(unavailable)? {
                let (name, finished) = row.map_err(unavailable)?;
                let name = name.value().to_owned();
                let mut record = ListerRecord {
                    listing_finished: Some(finished.value()).filter(|&at| at != i64::MIN),
                    ..ListerRecord::default()
                };
                for row in types.range::<(&str, &str)>((name.as_str(), "")..).map_err(unavailable)? {
                    let (key, _) = row.map_err(unavailable)?;
                    let (row_lister, visit_type) = key.value();
                    if row_lister != name {
                        break;
                    }
                    record.visit_types.insert(visit_type.to_owned());
                }
                record.name = name;
                records.push(record);
            }
            Ok(records)
        })
        .await
    }

    async fn metrics(&self, lister: &str) -> StoreResult<Vec<(String, ListerMetrics)>> {
        let lister = lister.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(METRICS).map_err(unavailable)?;
            let mut all = Vec::new();
            for row in table.range::<(&str, &str)>((lister.as_str(), "")..).map_err(unavailable)? {
                let (key, value) = row.map_err(unavailable)?;
                let (row_lister, visit_type) = key.value();
                if row_lister != lister {
                    break;
                }
                all.push((visit_type.to_owned(), metrics_of(value.value())));
            }
            Ok(all)
        })
        .await
    }

    async fn queue_position(&self, visit_type: &str) -> StoreResult<i64> {
        let visit_type = visit_type.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(POSITIONS).map_err(unavailable)?;
            Ok(table.get(visit_type.as_str()).map_err(unavailable)?.map_or(0, |v| v.value()))
        })
        .await
    }

    async fn set_queue_position(&self, visit_type: &str, position: i64) -> StoreResult<()> {
        let visit_type = visit_type.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            txn.open_table(POSITIONS)
                .map_err(unavailable)?
                .insert(visit_type.as_str(), position)
                .map_err(unavailable)?;
            txn.commit().map_err(uncertain)
        })
        .await
    }
}
