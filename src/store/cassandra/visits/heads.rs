//! The heads of the visit indexes and wake-ups, kept clear of tombstones.
//!
//! A round takes origins from the head of each index shard and deletes
//! their entries there; waking deletes the due rows at the head of each
//! wake-up shard. Left alone, every later read of a head would cross every
//! row deleted there within `gc_grace_seconds` (three hours): at a steady
//! scheduling rate, past Cassandra's failure threshold of 100,000.
//!
//! So each head read is followed by one range delete of everything below
//! the first live row it returned, down to the start of the range it read
//! (of its whole range when it returned none), written with a timestamp [`HeadPruner::margin`] before the read
//! began. Cassandra drops the point tombstones under it when it reads, so
//! the next read crosses one range tombstone instead of them.
//!
//! Invariant: the range delete removes no row that was visible to the read
//! (it stops below the first one) and no row written after its timestamp
//! (a later timestamp wins). A head read therefore crosses at most the rows
//! deleted at that head since the previous read of it, plus those deleted
//! within the margin.
//!
//! The one row it can remove wrongly is an entry written more than the
//! margin before the read and still not visible to it (a write held up
//! past the margin in Cassandra, whose writer saw a timeout). Its origin's
//! state still names it, so the origin's next write puts it back; until
//! then that policy does not offer the origin.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use scylla::statement::prepared::PreparedStatement;
use scylla::value::CqlValue;

use super::{SHARDS, VisitStatements, limit_value};
use crate::clock::UnixMillis;
use crate::core::visits::KeyRange;
use crate::store::StoreResult;
use crate::store::cassandra::CassandraStore;

/// Heads whose last pruning is remembered; past this the memory is
/// cleared (the next read of each head prunes once more).
const REMEMBERED_HEADS: usize = 65_536;

/// One partition family whose head a scheduler read takes.
#[derive(Clone, Copy, Debug)]
pub(super) enum Head<'a> {
    /// One index, the keys in `keys`.
    Index { visit_type: &'a str, policy: &'a str, lister: &'a str, keys: KeyRange },
    /// One visit type's wake-ups, at or before `through`.
    Wakes { visit_type: &'a str, through: UnixMillis },
}

/// What a head read left below itself: all below its first live row, or
/// its whole range when it returned no row.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pruned {
    BelowRow(i64, String),
    WholeRead(Option<i64>),
}

/// Prunes head reads, remembering the last pruning of each head so that
/// an unchanged head is not pruned again once everything deleted below it
/// is covered.
#[derive(Debug)]
pub(in crate::store::cassandra) struct HeadPruner {
    /// How far before a read began its range delete is timestamped: longer
    /// than any write is held up in Cassandra, plus the clock skew between
    /// this node and Cassandra's coordinators.
    margin: Duration,
    remembered: Mutex<HashMap<String, Remembered>>,
}

/// The last pruning of one head.
#[derive(Clone, Debug)]
struct Remembered {
    pruned: Pruned,
    /// When a read first saw the head where it is now (microseconds): the
    /// rows deleted below it were deleted before then.
    first_seen: i64,
    /// The timestamp of the last range delete under it.
    covered: i64,
}

impl HeadPruner {
    pub(in crate::store::cassandra) fn new(margin: Duration) -> Self {
        HeadPruner { margin, remembered: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Remembered>> {
        self.remembered.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The range delete to write after a read of `head` that began at
    /// `read_began` and left `pruned` below itself, unless an earlier one
    /// already covers everything deleted there.
    fn plan(&self, head: &str, pruned: &Pruned, read_began: SystemTime) -> Option<Remembered> {
        let began = micros(read_began, Duration::ZERO);
        let covered = micros(read_began, self.margin);
        let first_seen = match self.lock().get(head) {
            Some(last) if last.pruned == *pruned && last.covered >= last.first_seen => return None,
            Some(last) if last.pruned == *pruned => last.first_seen,
            _ => began,
        };
        Some(Remembered { pruned: pruned.clone(), first_seen, covered })
    }

    fn remember(&self, head: String, pruning: Remembered) {
        let mut remembered = self.lock();
        if remembered.len() >= REMEMBERED_HEADS {
            remembered.clear();
        }
        remembered.insert(head, pruning);
    }
}

/// Microseconds since the epoch, `before` ahead of `at`.
fn micros(at: SystemTime, before: Duration) -> i64 {
    let since_epoch = at.duration_since(UNIX_EPOCH).unwrap_or_default().saturating_sub(before);
    i64::try_from(since_epoch.as_micros()).unwrap_or(i64::MAX)
}

impl Head<'_> {
    fn partition(&self, shard: i32) -> Vec<CqlValue> {
        let text = |v: &str| CqlValue::Text(v.to_owned());
        match *self {
            Head::Index { visit_type, policy, lister, .. } => {
                vec![text(visit_type), text(policy), text(lister), CqlValue::Int(shard)]
            }
            Head::Wakes { visit_type, .. } => vec![text(visit_type), CqlValue::Int(shard)],
        }
    }

    /// Where the read starts, if the head is a range of its partition
    /// (an index's rows below it are another head's).
    fn start(&self) -> Option<i64> {
        match *self {
            Head::Index { keys, .. } => Some(keys.from.unwrap_or(i64::MIN)),
            Head::Wakes { .. } => None,
        }
    }

    /// Where the read stops, besides its limit.
    fn end(&self) -> Option<i64> {
        match *self {
            Head::Index { keys, .. } => keys.below,
            Head::Wakes { through, .. } => Some(through),
        }
    }

    fn name(&self, shard: i32) -> String {
        match *self {
            Head::Index { visit_type, policy, lister, keys: KeyRange { from: None, .. } } => {
                format!("index/{visit_type}/{policy}/{lister}/{shard}")
            }
            Head::Index { visit_type, policy, lister, keys: KeyRange { from: Some(from), .. } } => {
                format!("index/{visit_type}/{policy}/{lister}/{shard}/{from}")
            }
            Head::Wakes { visit_type, .. } => format!("wakes/{visit_type}/{shard}"),
        }
    }

    fn read<'s>(&self, s: &'s VisitStatements) -> &'s PreparedStatement {
        match *self {
            Head::Index { keys: KeyRange { below: None, .. }, .. } => &s.read_index,
            Head::Index { keys: KeyRange { below: Some(_), .. }, .. } => &s.read_index_below,
            Head::Wakes { .. } => &s.read_wakes,
        }
    }

    fn prune<'s>(&self, s: &'s VisitStatements, pruned: &Pruned) -> &'s PreparedStatement {
        match (self, pruned) {
            (Head::Index { .. }, Pruned::BelowRow(..)) => &s.prune_index_below_row,
            (Head::Index { .. }, Pruned::WholeRead(None)) => &s.prune_index_from,
            (Head::Index { .. }, Pruned::WholeRead(Some(_))) => &s.prune_index_below_key,
            (Head::Wakes { .. }, Pruned::BelowRow(..)) => &s.prune_wakes_below_row,
            (Head::Wakes { .. }, Pruned::WholeRead(_)) => &s.prune_wakes_through,
        }
    }
}

impl CassandraStore {
    /// The first `limit` rows of a head, every shard's first rows merged in
    /// order, each shard pruned after its read.
    pub(super) async fn read_head(&self, head: Head<'_>, limit: usize) -> StoreResult<Vec<(i64, String)>> {
        let reads = (0..SHARDS).map(|shard| self.read_head_shard(head, shard, limit));
        let mut rows: Vec<(i64, String)> = futures::future::try_join_all(reads).await?.into_iter().flatten().collect();
        rows.sort();
        rows.truncate(limit);
        Ok(rows)
    }

    async fn read_head_shard(&self, head: Head<'_>, shard: i32, limit: usize) -> StoreResult<Vec<(i64, String)>> {
        let began = SystemTime::now();
        let mut values = head.partition(shard);
        values.extend(head.start().into_iter().chain(head.end()).map(CqlValue::BigInt));
        values.push(CqlValue::Int(limit_value(limit)));
        let name = head.name(shard);
        let rows: Vec<(i64, String)> =
            self.read_pages(head.read(self.visit_statements()), &values, limit, &name).await?;
        let pruned = match rows.first() {
            Some((key, url)) => Pruned::BelowRow(*key, url.clone()),
            None => Pruned::WholeRead(head.end()),
        };
        self.prune_head(head, shard, name, pruned, began).await;
        Ok(rows)
    }

    /// Best effort: a failed pruning leaves the tombstones for the next one.
    async fn prune_head(&self, head: Head<'_>, shard: i32, name: String, pruned: Pruned, read_began: SystemTime) {
        let Some(pruning) = self.visit_heads.plan(&name, &pruned, read_began) else {
            return;
        };
        let mut values = vec![CqlValue::BigInt(pruning.covered)];
        values.extend(head.partition(shard));
        values.extend(head.start().map(CqlValue::BigInt));
        match &pruned {
            Pruned::BelowRow(key, url) => values.extend([CqlValue::BigInt(*key), CqlValue::Text(url.clone())]),
            Pruned::WholeRead(end) => values.extend(end.map(CqlValue::BigInt)),
        }
        let statement = head.prune(self.visit_statements(), &pruned);
        match self.session().execute_unpaged(statement, values).await {
            Ok(_) => self.visit_heads.remember(name, pruning),
            Err(error) => tracing::debug!(head = %name, %error, "pruning a head failed; the next read tries again"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_head_is_pruned_again_only_until_its_deletes_are_covered() {
        let pruner = HeadPruner::new(Duration::from_secs(10));
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let head = Pruned::BelowRow(5, "u".into());
        let first = pruner.plan("h", &head, t0).expect("a new head is pruned");
        assert_eq!(first.covered, micros(t0, Duration::from_secs(10)), "a margin before the read");
        pruner.remember("h".into(), first);
        // Within the margin the earlier delete covers less than was deleted
        // before the head was first seen: prune again, later.
        let again = pruner.plan("h", &head, t0 + Duration::from_secs(4)).expect("pruned again");
        assert_eq!(again.first_seen, micros(t0, Duration::ZERO));
        pruner.remember("h".into(), again);
        let covering = pruner.plan("h", &head, t0 + Duration::from_secs(11)).expect("pruned past the first read");
        assert!(covering.covered >= covering.first_seen);
        pruner.remember("h".into(), covering);
        assert!(pruner.plan("h", &head, t0 + Duration::from_secs(60)).is_none(), "nothing more to cover");
        let moved = Pruned::BelowRow(9, "v".into());
        assert!(pruner.plan("h", &moved, t0 + Duration::from_secs(61)).is_some(), "a head that moved is pruned");
    }
}
