//! The scheduler's tables in the embedded store. Each [`VisitStore::apply`]
//! is one redb transaction, so a batch of origin writes commits whole.
//! Deletes are physical: an index read never skips dead rows.

use std::ops::Bound;

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable, TableDefinition, TableHandle, WriteTransaction};

use super::{EmbeddedStore, unavailable, uncertain};
use crate::clock::UnixMillis;
use crate::core::visits::{Cooldowns, IndexEntry, KeyRange, ListerMetrics, OriginState, OriginWrite, Policy};
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
/// (lister, visit type) → (pending since, rated, rate, known rate, known
/// rate days): the counts [`ListerMetrics`] gained after `visit_metrics`.
///
/// A second table rather than a new version of `visit_metrics`: redb fixes a
/// table's value type under its name, and a table beside it leaves the rows
/// of a data file written before as they are (no migration moves them, none
/// can half-happen). The one step taken when this table is new in a file
/// that has origins is [`backfill_rate_metrics`], so that these counts agree
/// with the origins from the start.
const RATE_METRICS: TableDefinition<(&str, &str), Rates> = TableDefinition::new("visit_metrics_rates");

/// A row of `visit_metrics_rates`.
type Rates = (i64, i64, i64, i64, i64);
/// visit type → queue-position clock.
const POSITIONS: TableDefinition<&str, i64> = TableDefinition::new("visit_positions");

/// Creates the tables, so that reads find them (and fills
/// `visit_metrics_rates` the first time, see [`RATE_METRICS`]).
pub(super) fn create_tables(txn: &WriteTransaction) -> Result<(), String> {
    let had_rate_metrics = txn.list_tables().map_err(|e| e.to_string())?.any(|t| t.name() == RATE_METRICS.name());
    let create = |e: redb::TableError| e.to_string();
    txn.open_table(ORIGINS).map_err(create)?;
    txn.open_table(INDEXES).map_err(create)?;
    txn.open_table(WAKES).map_err(create)?;
    txn.open_table(LISTERS).map_err(create)?;
    txn.open_table(LISTER_TYPES).map_err(create)?;
    txn.open_table(METRICS).map_err(create)?;
    txn.open_table(RATE_METRICS).map_err(create)?;
    txn.open_table(POSITIONS).map_err(create)?;
    if !had_rate_metrics {
        backfill_rate_metrics(txn)?;
    }
    Ok(())
}

/// Fills `visit_metrics_rates` from the origins' states: in a data file
/// written before the table existed, the origins counted in `visit_metrics`
/// had no such counts kept, and each one's next write takes its share
/// away. One pass over `visit_origins`, in the transaction that creates the
/// table (so it happens once, whole). A state that does not decode is
/// skipped (its counts stay out, as they would on any store).
fn backfill_rate_metrics(txn: &WriteTransaction) -> Result<(), String> {
    let origins = txn.open_table(ORIGINS).map_err(|e| e.to_string())?;
    let mut sums: std::collections::BTreeMap<(String, String), ListerMetrics> = std::collections::BTreeMap::new();
    for row in origins.iter().map_err(|e| e.to_string())? {
        let (key, value) = row.map_err(|e| e.to_string())?;
        let Ok(state) = decode_state(value.value()) else {
            let (visit_type, url) = key.value();
            tracing::warn!(visit_type, url, "visit_metrics_rates: an origin state that does not decode is not counted");
            continue;
        };
        // The counts an origin contributes are those of its first write.
        let first = OriginWrite::new(None, state.origin, state.stats, &Cooldowns::default(), 0);
        let visit_type = first.state.origin.visit_type.clone();
        for (lister, delta) in first.metrics {
            sums.entry((lister, visit_type.clone())).or_default().add(delta, 1);
        }
    }
    let mut table = txn.open_table(RATE_METRICS).map_err(|e| e.to_string())?;
    for ((lister, visit_type), m) in sums {
        let rates = rates_tuple(m);
        if rates != (0, 0, 0, 0, 0) {
            table.insert((lister.as_str(), visit_type.as_str()), rates).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

fn metrics_tuple(m: ListerMetrics) -> (i64, i64, i64, i64) {
    (m.known, m.enabled, m.never_visited, m.pending_changes)
}

fn rates_tuple(m: ListerMetrics) -> Rates {
    (m.pending_since_s, m.rated, m.rate_micro, m.known_rate_micro, m.known_rate_days)
}

/// The counts of a row of `visit_metrics` and its row of
/// `visit_metrics_rates` (none: 0).
fn metrics_of(
    (known, enabled, never_visited, pending_changes): (i64, i64, i64, i64),
    rates: Option<Rates>,
) -> ListerMetrics {
    let (pending_since_s, rated, rate_micro, known_rate_micro, known_rate_days) = rates.unwrap_or_default();
    ListerMetrics {
        known,
        enabled,
        never_visited,
        pending_changes,
        pending_since_s,
        rated,
        rate_micro,
        known_rate_micro,
        known_rate_days,
    }
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
        let mut rate_metrics = txn.open_table(RATE_METRICS).map_err(unavailable)?;
        for (lister, delta) in &write.metrics {
            let key = (lister.as_str(), visit_type);
            let counts = metrics.get(key).map_err(unavailable)?.map(|v| v.value()).unwrap_or_default();
            let rates = rate_metrics.get(key).map_err(unavailable)?.map(|v| v.value());
            let mut current = metrics_of(counts, rates);
            current.add(*delta, 1);
            metrics.insert(key, metrics_tuple(current)).map_err(unavailable)?;
            rate_metrics.insert(key, rates_tuple(current)).map_err(unavailable)?;
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
        keys: KeyRange,
        limit: usize,
    ) -> StoreResult<Vec<IndexEntry>> {
        let (visit_type, lister) = (visit_type.to_owned(), lister.to_owned());
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(INDEXES).map_err(unavailable)?;
            let (vt, name) = (visit_type.as_str(), policy.name());
            let lower = (vt, name, lister.as_str(), keys.from.unwrap_or(i64::MIN), "");
            let upper = match keys.below {
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
            let rate_table = txn.open_table(RATE_METRICS).map_err(unavailable)?;
            let mut all = Vec::new();
            for row in table.range::<(&str, &str)>((lister.as_str(), "")..).map_err(unavailable)? {
                let (key, value) = row.map_err(unavailable)?;
                let (row_lister, visit_type) = key.value();
                if row_lister != lister {
                    break;
                }
                let rates = rate_table.get((row_lister, visit_type)).map_err(unavailable)?.map(|v| v.value());
                all.push((visit_type.to_owned(), metrics_of(value.value(), rates)));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::visits::{DAY_MS, ListedOrigin, VisitStats, VisitStatus};

    const NOW: i64 = 20_000 * DAY_MS;

    fn write(url: &str, last_update: Option<i64>, stats: VisitStats) -> OriginWrite {
        let origin = ListedOrigin {
            url: url.into(),
            visit_type: "git".into(),
            lister: "l".into(),
            last_update,
            first_seen: NOW - DAY_MS,
            last_seen: NOW,
            is_fork: false,
            extra_loader_arguments: String::new(),
        };
        OriginWrite::new(None, origin, stats, &Cooldowns::default(), NOW)
    }

    /// A data file written before `visit_metrics_rates` existed opens with
    /// its counts as they were, and the new ones computed from its origins.
    #[tokio::test]
    async fn a_data_file_without_the_rate_counts_keeps_its_counts_and_gains_the_others() {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let visited = VisitStats {
            last_visit: Some(NOW - 10 * DAY_MS),
            last_successful: Some(NOW - 10 * DAY_MS),
            last_visit_status: Some(VisitStatus::Successful),
            last_snapshot: Some(b"s".to_vec()),
            rate: Some(0.25),
            ..VisitStats::default()
        };
        let writes = vec![
            write("a", Some(NOW - 2 * DAY_MS), visited.clone()),
            write("b", Some(NOW - 20 * DAY_MS), visited),
            write("c", None, VisitStats { rate: Some(1.0), ..VisitStats::default() }),
        ];
        let mut expected = ListerMetrics::default();
        for w in &writes {
            expected.add(w.metrics[0].1, 1);
        }
        assert!(expected.pending_since_s != 0 && expected.known_rate_days != 0 && expected.rated == 3);
        {
            let store = EmbeddedStore::open(dir.path()).expect("open");
            store.apply(&writes).await.unwrap();
            // As a file of the version before: the counts of visit_metrics only.
            store
                .blocking(|db| {
                    let txn = db.begin_write().map_err(unavailable)?;
                    assert!(txn.delete_table(RATE_METRICS).map_err(unavailable)?);
                    txn.commit().map_err(uncertain)
                })
                .await
                .unwrap();
            let counts = store
                .blocking(|db| {
                    let txn = db.begin_read().map_err(unavailable)?;
                    let table = txn.open_table(METRICS).map_err(unavailable)?;
                    Ok(table.get(("l", "git")).map_err(unavailable)?.map(|v| v.value()))
                })
                .await
                .unwrap();
            assert_eq!(counts, Some((3, 3, 1, 1)));
        }
        let store = EmbeddedStore::open(dir.path()).expect("open again");
        assert_eq!(store.metrics("l").await.unwrap(), vec![("git".into(), expected)]);
        drop(store);
        let store = EmbeddedStore::open(dir.path()).expect("a third time: nothing counted twice");
        assert_eq!(store.metrics("l").await.unwrap(), vec![("git".into(), expected)]);
    }
}
