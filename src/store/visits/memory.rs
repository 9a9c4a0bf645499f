//! A [`VisitStore`] in memory: the same contract as the durable backends,
//! for simulations (`fairway-lab simulate`) and tests. Nothing survives the
//! process.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use async_trait::async_trait;

use super::{ListerRecord, VisitStore};
use crate::clock::UnixMillis;
use crate::core::visits::{IndexEntry, KeyRange, ListerMetrics, OriginState, OriginWrite, Policy};
use crate::store::StoreResult;

/// A [`VisitStore`] kept in memory, behind one lock; nothing survives the process.
#[derive(Debug, Default)]
pub struct MemoryVisitStore {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// (visit type, url) → state.
    origins: BTreeMap<(String, String), OriginState>,
    /// (visit type, policy, lister) → {(key, url)}.
    indexes: BTreeMap<(String, Policy, String), BTreeSet<(i64, String)>>,
    /// visit type → {(at, url)}.
    wakes: BTreeMap<String, BTreeSet<(UnixMillis, String)>>,
    listers: BTreeMap<String, ListerRecord>,
    metrics: BTreeMap<(String, String), ListerMetrics>,
    positions: BTreeMap<String, i64>,
}

impl MemoryVisitStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryVisitStore::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl VisitStore for MemoryVisitStore {
    async fn read_origins(&self, visit_type: &str, urls: &[String]) -> StoreResult<Vec<Option<OriginState>>> {
        let inner = self.lock();
        Ok(urls.iter().map(|url| inner.origins.get(&(visit_type.to_owned(), url.clone())).cloned()).collect())
    }

    async fn apply(&self, writes: &[OriginWrite]) -> StoreResult<()> {
        let mut inner = self.lock();
        for write in writes {
            let (visit_type, url) = write.key();
            for e in &write.unindex {
                let index = (visit_type.to_owned(), e.policy, e.lister.clone());
                if let Some(rows) = inner.indexes.get_mut(&index) {
                    rows.remove(&(e.key, e.url.clone()));
                }
            }
            for e in &write.index {
                let index = (visit_type.to_owned(), e.policy, e.lister.clone());
                inner.indexes.entry(index).or_default().insert((e.key, e.url.clone()));
            }
            let wakes = inner.wakes.entry(visit_type.to_owned()).or_default();
            if let Some(at) = write.unwake {
                wakes.remove(&(at, url.to_owned()));
            }
            if let Some(at) = write.wake {
                wakes.insert((at, url.to_owned()));
            }
            for (lister, delta) in &write.metrics {
                inner.metrics.entry((lister.clone(), visit_type.to_owned())).or_default().add(*delta, 1);
            }
            inner.origins.insert((visit_type.to_owned(), url.to_owned()), write.state.clone());
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
        let inner = self.lock();
        let Some(rows) = inner.indexes.get(&(visit_type.to_owned(), policy, lister.to_owned())) else {
            return Ok(Vec::new());
        };
        Ok(rows
            .range((keys.from.unwrap_or(i64::MIN), String::new())..)
            .take_while(|(key, _)| keys.contains(*key))
            .take(limit)
            .map(|(key, url)| IndexEntry { policy, lister: lister.to_owned(), key: *key, url: url.clone() })
            .collect())
    }

    async fn read_wakes(
        &self,
        visit_type: &str,
        through: UnixMillis,
        limit: usize,
    ) -> StoreResult<Vec<(UnixMillis, String)>> {
        let inner = self.lock();
        let Some(rows) = inner.wakes.get(visit_type) else {
            return Ok(Vec::new());
        };
        Ok(rows.iter().take_while(|(at, _)| *at <= through).take(limit).cloned().collect())
    }

    async fn add_lister(&self, lister: &str, visit_types: &[String]) -> StoreResult<()> {
        let mut inner = self.lock();
        let record = inner
            .listers
            .entry(lister.to_owned())
            .or_insert_with(|| ListerRecord { name: lister.to_owned(), ..ListerRecord::default() });
        record.visit_types.extend(visit_types.iter().cloned());
        Ok(())
    }

    async fn finish_listing(&self, lister: &str, at: UnixMillis) -> StoreResult<()> {
        let mut inner = self.lock();
        let record = inner
            .listers
            .entry(lister.to_owned())
            .or_insert_with(|| ListerRecord { name: lister.to_owned(), ..ListerRecord::default() });
        record.listing_finished = Some(at);
        Ok(())
    }

    async fn listers(&self) -> StoreResult<Vec<ListerRecord>> {
        Ok(self.lock().listers.values().cloned().collect())
    }

    async fn metrics(&self, lister: &str) -> StoreResult<Vec<(String, ListerMetrics)>> {
        let inner = self.lock();
        Ok(inner
            .metrics
            .iter()
            .filter(|((l, _), _)| l == lister)
            .map(|((_, visit_type), m)| (visit_type.clone(), *m))
            .collect())
    }

    async fn queue_position(&self, visit_type: &str) -> StoreResult<i64> {
        Ok(self.lock().positions.get(visit_type).copied().unwrap_or(0))
    }

    async fn set_queue_position(&self, visit_type: &str, position: i64) -> StoreResult<()> {
        self.lock().positions.insert(visit_type.to_owned(), position);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::MemoryVisitStore;
    use crate::store::conformance::TestStore;

    async fn memory_store() -> TestStore<MemoryVisitStore> {
        TestStore::of(Arc::new(MemoryVisitStore::new()), ())
    }

    crate::visit_store_conformance_suite!(memory_store);
}
