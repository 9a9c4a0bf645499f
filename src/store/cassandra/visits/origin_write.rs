//! One origin's write on Cassandra: its state row, the index rows it
//! deletes and inserts, its wake-up rows (the counts follow apart, in a
//! counter batch: Cassandra does not mix them).
//!
//! Cassandra refuses a batch of several partitions over its
//! `batch_size_fail_threshold` (50 KiB by default), and a state can be
//! megabytes: loader arguments up to 64 KiB and a last snapshot up to
//! `limits.max_payload_bytes`, JSON-encoded. So:
//!
//! - A write whose rows come to at most `cassandra.visit_batch_bytes`, as
//!   [`row_bytes`] counts them (every value, plus [`ROW_OVERHEAD`] a row:
//!   above what Cassandra counts), is one logged batch, which applies whole,
//!   eventually, as the store contract asks.
//! - A larger one goes in three steps, each after the one before succeeded:
//!   the rows it inserts (logged batches within the bound), the state row
//!   alone (one partition, not a batch: no threshold applies; Cassandra
//!   refuses only a mutation over half its commit-log segment, 16 MiB by
//!   default), the rows it deletes (logged batches within the bound).
//!
//! What stays whole in steps: never is an origin's state written without
//! the rows that place it, nor are the rows that placed its old state
//! deleted before the new state is written. Cut after the inserts, the
//! origin has its old state and old rows (found where it was); the new
//! rows, which its state does not hold, are skipped by the scheduler (it
//! checks each index entry against the state and deletes a wake-up row its
//! state does not name), and the contract's "re-read, then write again"
//! inserts them again. Cut after the state, the old rows are left: wake-up
//! rows are deleted when read, index entries are skipped, as after any
//! write of uncertain outcome. The scheduler reads states, never rows
//! alone, to decide.

use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{Counter, CqlValue};

use super::{VisitStatements, shard};
use crate::core::visits::{IndexEntry, OriginWrite};
use crate::store::StoreResult;
use crate::store::cassandra::CassandraStore;
use crate::store::cassandra::error::write_error;
use crate::store::visits::encode_state;

/// Bytes counted for a row beyond its values: Cassandra's per-row and
/// per-cell bookkeeping (timestamps, flags, clustering), generously.
const ROW_OVERHEAD: usize = 64;

/// One row to write or delete, with its values.
struct Row<'a> {
    statement: &'a PreparedStatement,
    values: Vec<CqlValue>,
}

/// The bytes a row is counted as (see the module docs).
fn row_bytes(row: &Row<'_>) -> usize {
    let value = |v: &CqlValue| match v {
        CqlValue::Text(text) => text.len(),
        CqlValue::Blob(bytes) => bytes.len(),
        _ => 8,
    };
    ROW_OVERHEAD + row.values.iter().map(value).sum::<usize>()
}

/// The rows of `write`: those it inserts, its state row, those it deletes.
fn rows<'a>(s: &'a VisitStatements, write: &OriginWrite) -> (Vec<Row<'a>>, Row<'a>, Vec<Row<'a>>) {
    let (visit_type, url) = write.key();
    let text = |v: &str| CqlValue::Text(v.to_owned());
    let index_row = |statement, e: &IndexEntry| Row {
        statement,
        values: vec![
            text(visit_type),
            text(e.policy.name()),
            text(&e.lister),
            CqlValue::Int(shard(&e.url)),
            CqlValue::BigInt(e.key),
            text(&e.url),
        ],
    };
    let wake_row = |statement, at: i64| Row {
        statement,
        values: vec![text(visit_type), CqlValue::Int(shard(url)), CqlValue::BigInt(at), text(url)],
    };
    let mut inserts: Vec<Row<'a>> = write.index.iter().map(|e| index_row(&s.insert_index, e)).collect();
    inserts.extend(write.wake.map(|at| wake_row(&s.insert_wake, at)));
    // A row both deleted and written stays written.
    let mut deletes: Vec<Row<'a>> =
        write.unindex.iter().filter(|e| !write.index.contains(e)).map(|e| index_row(&s.delete_index, e)).collect();
    deletes.extend(write.unwake.filter(|at| write.wake != Some(*at)).map(|at| wake_row(&s.delete_wake, at)));
    let state = Row {
        statement: &s.write_origin,
        values: vec![text(visit_type), text(url), CqlValue::Blob(encode_state(&write.state))],
    };
    (inserts, state, deletes)
}

/// `rows` in order, in groups of at most `max_bytes` each as `size` counts
/// them (a row larger than that alone).
fn within<T>(rows: Vec<T>, max_bytes: usize, size: impl Fn(&T) -> usize) -> Vec<Vec<T>> {
    let mut groups: Vec<Vec<T>> = Vec::new();
    let mut bytes = 0;
    for row in rows {
        let size = size(&row);
        match groups.last_mut() {
            Some(group) if bytes + size <= max_bytes => group.push(row),
            _ => {
                groups.push(vec![row]);
                bytes = 0;
            }
        }
        bytes += size;
    }
    groups
}

impl CassandraStore {
    /// Writes one origin (see the module docs).
    pub(super) async fn apply_one(&self, write: &OriginWrite) -> StoreResult<()> {
        let s = self.visit_statements();
        let (inserts, state, deletes) = rows(s, write);
        let total: usize = inserts.iter().chain(&deletes).map(row_bytes).sum::<usize>() + row_bytes(&state);
        if total <= self.visit_batch_bytes {
            let mut all = deletes;
            all.extend(inserts);
            all.push(state);
            self.logged_batch(all).await?;
        } else {
            for group in within(inserts, self.visit_batch_bytes, row_bytes) {
                self.logged_batch(group).await?;
            }
            self.session().execute_unpaged(state.statement, state.values).await.map_err(write_error)?;
            for group in within(deletes, self.visit_batch_bytes, row_bytes) {
                self.logged_batch(group).await?;
            }
        }
        self.count(s, write).await
    }

    /// Writes `rows` in one logged batch.
    async fn logged_batch(&self, rows: Vec<Row<'_>>) -> StoreResult<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut batch = Batch::new(BatchType::Logged);
        let mut values = Vec::with_capacity(rows.len());
        for row in rows {
            batch.append_statement(row.statement.clone());
            values.push(row.values);
        }
        self.session().batch(&batch, values).await.map_err(write_error)?;
        Ok(())
    }

    /// The write's changes to the counts, best effort (see `store::visits`).
    async fn count(&self, s: &VisitStatements, write: &OriginWrite) -> StoreResult<()> {
        if write.metrics.is_empty() {
            return Ok(());
        }
        let (visit_type, _) = write.key();
        let mut counts = Batch::new(BatchType::Counter);
        let mut values: Vec<Vec<CqlValue>> = Vec::new();
        for (lister, m) in &write.metrics {
            counts.append_statement(s.count.clone());
            values.push(vec![
                CqlValue::Counter(Counter(m.known)),
                CqlValue::Counter(Counter(m.enabled)),
                CqlValue::Counter(Counter(m.never_visited)),
                CqlValue::Counter(Counter(m.pending_changes)),
                CqlValue::Counter(Counter(m.pending_since_s)),
                CqlValue::Counter(Counter(m.rated)),
                CqlValue::Counter(Counter(m.rate_micro)),
                CqlValue::Counter(Counter(m.known_rate_micro)),
                CqlValue::Counter(Counter(m.known_rate_days)),
                CqlValue::Text(lister.clone()),
                CqlValue::Text(visit_type.to_owned()),
            ]);
        }
        self.session().batch(&counts, values).await.map_err(write_error)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_stay_within_the_bound_and_keep_the_order() {
        let groups = within(vec![10, 20, 200, 30, 30, 5], 60, |n: &usize| *n);
        assert_eq!(groups, vec![vec![10, 20], vec![200], vec![30, 30], vec![5]], "a row over the bound goes alone");
        assert!(within(Vec::<usize>::new(), 60, |n| *n).is_empty());
    }
}
