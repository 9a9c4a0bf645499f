//! The scheduler's tables on Cassandra (`schema.cql`, `visit_*`).
//!
//! Each origin write is one logged batch (its state row, the index rows it
//! deletes and inserts, its wake-up rows), or, past
//! `cassandra.visit_batch_bytes`, the same rows in an order that never
//! leaves a state without the rows that place it ([`origin_write`]).
//! Logged batches across partitions apply whole eventually, so an index
//! never disagrees with its origin for long. The counts are counter
//! columns, changed by a separate counter batch after the rows.
//!
//! Index and wake-up partitions are split into [`SHARDS`] by a hash of the
//! URL; a read asks each shard for its first `limit` rows and merges them,
//! so the order is exact. The rows deleted at those heads are covered by
//! range deletes after each read ([`heads`]), so that reads do not cross
//! them.

mod heads;
mod origin_write;

pub(super) use self::heads::HeadPruner;

use async_trait::async_trait;
use futures::TryStreamExt;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{Counter, CqlValue};

use self::heads::Head;
use super::CassandraStore;
use super::error::{ConnectError, read_error, write_error};
use super::statements::prepare;
use crate::clock::UnixMillis;
use crate::core::visits::{IndexEntry, KeyRange, ListerMetrics, OriginState, OriginWrite, Policy};
use crate::hash::fnv1a;
use crate::store::visits::{ListerRecord, VisitStore, decode_state};
use crate::store::{StoreError, StoreResult};

/// Partitions per index and per visit type's wake-ups.
pub(super) const SHARDS: i32 = 8;

/// Origin reads or writes sent at once.
const CONCURRENT: usize = 32;

type BoxedStep<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = StoreResult<T>> + Send + 'a>>;

fn shard(url: &str) -> i32 {
    (fnv1a(url.bytes()) % SHARDS as u64) as i32
}

pub(super) struct VisitStatements {
    read_origin: PreparedStatement,
    write_origin: PreparedStatement,
    insert_index: PreparedStatement,
    delete_index: PreparedStatement,
    read_index: PreparedStatement,
    read_index_below: PreparedStatement,
    insert_wake: PreparedStatement,
    delete_wake: PreparedStatement,
    read_wakes: PreparedStatement,
    prune_index_below_row: PreparedStatement,
    prune_index_below_key: PreparedStatement,
    prune_index_from: PreparedStatement,
    prune_wakes_below_row: PreparedStatement,
    prune_wakes_through: PreparedStatement,
    add_lister: PreparedStatement,
    finish_listing: PreparedStatement,
    listers: PreparedStatement,
    count: PreparedStatement,
    metrics: PreparedStatement,
    position: PreparedStatement,
    set_position: PreparedStatement,
}

impl VisitStatements {
    pub(super) async fn prepare(session: &Session, ks: &str) -> Result<Self, ConnectError> {
        let prepare = |cql: String| prepare(session, cql);
        let index_key = "visit_type = ? AND policy = ? AND lister = ? AND shard = ?";
        let wake_key = "visit_type = ? AND shard = ?";
        Ok(VisitStatements {
            read_origin: prepare(format!("SELECT state FROM {ks}.visit_origins WHERE visit_type = ? AND url = ?")).await?,
            write_origin: prepare(format!("INSERT INTO {ks}.visit_origins (visit_type, url, state) VALUES (?, ?, ?)")).await?,
            insert_index: prepare(format!(
                "INSERT INTO {ks}.visit_indexes (visit_type, policy, lister, shard, key, url) VALUES (?, ?, ?, ?, ?, ?)"
            ))
            .await?,
            delete_index: prepare(format!("DELETE FROM {ks}.visit_indexes WHERE {index_key} AND key = ? AND url = ?")).await?,
            read_index: prepare(format!("SELECT key, url FROM {ks}.visit_indexes WHERE {index_key} AND key >= ? LIMIT ?"))
                .await?,
            read_index_below: prepare(format!(
                "SELECT key, url FROM {ks}.visit_indexes WHERE {index_key} AND key >= ? AND key < ? LIMIT ?"
            ))
            .await?,
            insert_wake: prepare(format!("INSERT INTO {ks}.visit_wakes (visit_type, shard, at, url) VALUES (?, ?, ?, ?)")).await?,
            delete_wake: prepare(format!(
                "DELETE FROM {ks}.visit_wakes WHERE {wake_key} AND at = ? AND url = ?"
            ))
            .await?,
            read_wakes: prepare(format!(
                "SELECT at, url FROM {ks}.visit_wakes WHERE {wake_key} AND at <= ? LIMIT ?"
            ))
            .await?,
            prune_index_below_row: prepare(format!(
                "DELETE FROM {ks}.visit_indexes USING TIMESTAMP ? WHERE {index_key} AND (key, url) >= (?, '') AND (key, url) < (?, ?)"
            ))
            .await?,
            prune_index_below_key: prepare(format!(
                "DELETE FROM {ks}.visit_indexes USING TIMESTAMP ? WHERE {index_key} AND key >= ? AND key < ?"
            ))
            .await?,
            prune_index_from: prepare(format!(
                "DELETE FROM {ks}.visit_indexes USING TIMESTAMP ? WHERE {index_key} AND key >= ?"
            ))
            .await?,
            prune_wakes_below_row: prepare(format!(
                "DELETE FROM {ks}.visit_wakes USING TIMESTAMP ? WHERE {wake_key} AND (at, url) < (?, ?)"
            ))
            .await?,
            prune_wakes_through: prepare(format!(
                "DELETE FROM {ks}.visit_wakes USING TIMESTAMP ? WHERE {wake_key} AND at <= ?"
            ))
            .await?,
            add_lister: prepare(format!("UPDATE {ks}.visit_listers SET visit_types = visit_types + ? WHERE lister = ?")).await?,
            finish_listing: prepare(format!("UPDATE {ks}.visit_listers SET listing_finished = ? WHERE lister = ?")).await?,
            listers: prepare(format!("SELECT lister, listing_finished, visit_types FROM {ks}.visit_listers")).await?,
            count: prepare(format!(
                "UPDATE {ks}.visit_metrics SET known = known + ?, enabled = enabled + ?, never_visited = never_visited + ?, \
                 pending_changes = pending_changes + ?, pending_since_s = pending_since_s + ?, rated = rated + ?, \
                 rate_micro = rate_micro + ?, known_rate_micro = known_rate_micro + ?, \
                 known_rate_days = known_rate_days + ? WHERE lister = ? AND visit_type = ?"
            ))
            .await?,
            metrics: prepare(format!(
                "SELECT visit_type, known, enabled, never_visited, pending_changes, pending_since_s, rated, rate_micro, \
                 known_rate_micro, known_rate_days FROM {ks}.visit_metrics WHERE lister = ?"
            ))
            .await?,
            position: prepare(format!("SELECT position FROM {ks}.visit_positions WHERE visit_type = ?")).await?,
            set_position: prepare(format!("INSERT INTO {ks}.visit_positions (visit_type, position) VALUES (?, ?)")).await?,
        })
    }
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

fn limit_value(limit: usize) -> i32 {
    i32::try_from(limit).unwrap_or(i32::MAX)
}

impl CassandraStore {
    fn visit_statements(&self) -> &VisitStatements {
        &self.visit_statements
    }

    async fn read_origin(&self, visit_type: &str, url: &str) -> StoreResult<Option<OriginState>> {
        let statement = &self.visit_statements().read_origin;
        let result = self.session().execute_unpaged(statement, (visit_type, url)).await.map_err(read_error)?;
        let rows = result.into_rows_result().map_err(corrupt)?;
        rows.maybe_first_row::<(Vec<u8>,)>().map_err(corrupt)?.map(|(state,)| decode_state(&state)).transpose()
    }
}

fn read_error_of(e: scylla::errors::NextRowError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

#[async_trait]
impl VisitStore for CassandraStore {
    async fn read_origins(&self, visit_type: &str, urls: &[String]) -> StoreResult<Vec<Option<OriginState>>> {
        let mut states = Vec::with_capacity(urls.len());
        for chunk in urls.chunks(CONCURRENT) {
            let reads: Vec<BoxedStep<'_, Option<OriginState>>> =
                chunk.iter().map(|url| Box::pin(self.read_origin(visit_type, url)) as BoxedStep<'_, _>).collect();
            states.extend(futures::future::try_join_all(reads).await?);
        }
        Ok(states)
    }

    async fn apply(&self, writes: &[OriginWrite]) -> StoreResult<()> {
        // Writes of one origin keep their order: only writes of different
        // origins run at once.
        let mut pending: Vec<&OriginWrite> = writes.iter().collect();
        while !pending.is_empty() {
            let mut seen = std::collections::HashSet::new();
            let (now, later): (Vec<&OriginWrite>, Vec<&OriginWrite>) =
                pending.into_iter().partition(|w| seen.insert(w.key()));
            for chunk in now.chunks(CONCURRENT) {
                let steps: Vec<BoxedStep<'_, ()>> =
                    chunk.iter().map(|w| Box::pin(self.apply_one(w)) as BoxedStep<'_, _>).collect();
                futures::future::try_join_all(steps).await?;
            }
            pending = later;
        }
        Ok(())
    }

    async fn read_index(
        &self,
        visit_type: &str,
        policy: Policy,
        lister: &str,
        keys: KeyRange,
        limit: usize,
    ) -> StoreResult<Vec<IndexEntry>> {
        let head = Head::Index { visit_type, policy: policy.name(), lister, keys };
        let rows = self.read_head(head, limit).await?;
        Ok(rows.into_iter().map(|(key, url)| IndexEntry { policy, lister: lister.to_owned(), key, url }).collect())
    }

    async fn read_wakes(
        &self,
        visit_type: &str,
        through: UnixMillis,
        limit: usize,
    ) -> StoreResult<Vec<(UnixMillis, String)>> {
        self.read_head(Head::Wakes { visit_type, through }, limit).await
    }

    async fn add_lister(&self, lister: &str, visit_types: &[String]) -> StoreResult<()> {
        let types: Vec<CqlValue> = visit_types.iter().map(|t| CqlValue::Text(t.clone())).collect();
        let values = vec![CqlValue::Set(types), CqlValue::Text(lister.to_owned())];
        self.session().execute_unpaged(&self.visit_statements().add_lister, values).await.map_err(write_error)?;
        Ok(())
    }

    async fn finish_listing(&self, lister: &str, at: UnixMillis) -> StoreResult<()> {
        self.session()
            .execute_unpaged(&self.visit_statements().finish_listing, (at, lister))
            .await
            .map_err(write_error)?;
        Ok(())
    }

    async fn listers(&self) -> StoreResult<Vec<ListerRecord>> {
        let pager =
            self.session().execute_iter(self.visit_statements().listers.clone(), ()).await.map_err(read_error)?;
        let rows: Vec<(String, Option<i64>, Option<Vec<String>>)> =
            pager.rows_stream().map_err(corrupt)?.try_collect().await.map_err(read_error_of)?;
        let mut listers: Vec<ListerRecord> = rows
            .into_iter()
            .map(|(name, listing_finished, types)| ListerRecord {
                name,
                visit_types: types.unwrap_or_default().into_iter().collect(),
                listing_finished,
            })
            .collect();
        listers.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(listers)
    }

    async fn metrics(&self, lister: &str) -> StoreResult<Vec<(String, ListerMetrics)>> {
        let result =
            self.session().execute_unpaged(&self.visit_statements().metrics, (lister,)).await.map_err(read_error)?;
        let rows = result.into_rows_result().map_err(corrupt)?;
        let mut all = Vec::new();
        type C = Option<Counter>;
        for row in rows.rows::<(String, C, C, C, C, C, C, C, C, C)>().map_err(corrupt)? {
            let (visit_type, known, enabled, never_visited, pending, since, rated, rate, known_rate, known_days) =
                row.map_err(corrupt)?;
            // A counter never incremented (a column added to an older
            // keyspace) reads as null: 0.
            let n = |c: C| c.map_or(0, |c| c.0);
            all.push((
                visit_type,
                ListerMetrics {
                    known: n(known),
                    enabled: n(enabled),
                    never_visited: n(never_visited),
                    pending_changes: n(pending),
                    pending_since_s: n(since),
                    rated: n(rated),
                    rate_micro: n(rate),
                    known_rate_micro: n(known_rate),
                    known_rate_days: n(known_days),
                },
            ));
        }
        Ok(all)
    }

    async fn queue_position(&self, visit_type: &str) -> StoreResult<i64> {
        let result = self
            .session()
            .execute_unpaged(&self.visit_statements().position, (visit_type,))
            .await
            .map_err(read_error)?;
        let rows = result.into_rows_result().map_err(corrupt)?;
        Ok(rows.maybe_first_row::<(Option<i64>,)>().map_err(corrupt)?.and_then(|(p,)| p).unwrap_or(0))
    }

    async fn set_queue_position(&self, visit_type: &str, position: i64) -> StoreResult<()> {
        self.session()
            .execute_unpaged(&self.visit_statements().set_position, (visit_type, position))
            .await
            .map_err(write_error)?;
        Ok(())
    }
}
