//! `ListQueues`: the queues of the catalog in name order, a page at a time,
//! each summed over its partitions as this node sees them: those it holds as
//! they are now, the others as their owners last wrote their metadata.
//!
//! Invariant: a page reads the catalog once and the stored metadata of at
//! most [`MAX_STORED_READS_PER_PAGE`] partitions, however large the
//! queues: a queue whose reads would pass that starts the next page (a
//! page holds one queue at least).

use std::sync::Arc;

use super::Queues;
use crate::clock::UnixMillis;
use crate::model::{PartitionId, QueueName};
use crate::partition::StoredPartition;
use crate::store::{QueueConfig, StoreError};

/// The most partitions whose stored metadata one page reads.
pub const MAX_STORED_READS_PER_PAGE: usize = 1024;

/// One queue of a page.
#[derive(Clone, Debug)]
pub struct QueueSummary {
    /// Its name.
    pub name: QueueName,
    /// Its catalog entry: partitions, home, stored settings.
    pub config: QueueConfig,
    /// Tasks written and not yet dispatched, over every partition
    /// (approximate: see `SubqueueSnapshot`; for a partition held
    /// elsewhere, as of its owner's last metadata write).
    pub backlog: u64,
    /// Tasks out with workers, in the partitions held here.
    pub leased: u64,
    /// When the oldest task waiting in the partitions held here was first
    /// added (a lower bound of the oldest's age where a reader is not at
    /// the end of its rows).
    pub oldest_added_at: Option<UnixMillis>,
    /// How many of its partitions this node holds.
    pub held_here: u32,
}

/// A page of queues, and the name to start the next one after (`None`:
/// the last page).
pub type QueuePage = (Vec<QueueSummary>, Option<String>);

impl Queues {
    /// Up to `limit` queues whose names start with `prefix` and come after
    /// `after`, that `visible` lets the caller see, in name order.
    pub async fn list_page(
        &self,
        prefix: &str,
        after: &str,
        limit: usize,
        visible: impl Fn(&QueueName) -> bool,
    ) -> Result<QueuePage, StoreError> {
        let mut queues = self.store().list_queues().await?;
        queues.retain(|(name, _)| name.as_str() > after && name.as_str().starts_with(prefix) && visible(name));
        queues.sort_by(|a, b| a.0.cmp(&b.0));
        let mut page: Vec<QueueSummary> = Vec::new();
        let mut reads = 0;
        for (name, config) in &queues {
            let held = self.held_summary(name);
            let stored_reads = config.partition_numbers().filter(|p| !held.held.contains(p)).count();
            let full = page.len() == limit || (!page.is_empty() && reads + stored_reads > MAX_STORED_READS_PER_PAGE);
            if full {
                let next = page.last().map(|s| s.name.to_string());
                return Ok((page, next));
            }
            reads += stored_reads;
            page.push(self.summary(name, config, held).await?);
        }
        Ok((page, None))
    }

    /// What this node holds of `name` now.
    fn held_summary(&self, name: &QueueName) -> Held {
        let mut held = Held::default();
        let Some(matcher) = self.opened_queue(name) else { return held };
        for report in matcher.describe(0) {
            let Some(snapshot) = report.snapshot else { continue };
            held.leased += snapshot.leased;
            for level in &snapshot.subqueues {
                held.backlog += level.approx_backlog;
                held.oldest = held.oldest.into_iter().chain(level.oldest_buffered_added_at).min();
            }
            held.held.push(report.partition);
        }
        held
    }

    async fn summary(&self, name: &QueueName, config: &QueueConfig, held: Held) -> Result<QueueSummary, StoreError> {
        let mut backlog = held.backlog;
        for partition in config.partition_numbers().filter(|p| !held.held.contains(p)) {
            let id = PartitionId { queue: name.clone(), partition };
            let meta = StoredPartition::new(Arc::clone(self.store()) as _, id).meta().await?;
            backlog += meta.iter().flat_map(|m| &m.subqueues).map(|s| s.approx_backlog.max(0) as u64).sum::<u64>();
        }
        Ok(QueueSummary {
            name: name.clone(),
            config: config.clone(),
            backlog,
            leased: held.leased,
            oldest_added_at: held.oldest,
            held_here: held.held.len() as u32,
        })
    }
}

/// The partitions of a queue held here, summed.
#[derive(Default)]
struct Held {
    held: Vec<u32>,
    backlog: u64,
    leased: u64,
    oldest: Option<UnixMillis>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::matcher::Settings;
    use crate::model::validate;
    use crate::store::Store;
    use crate::store::embedded::EmbeddedStore;

    fn name(text: &str) -> QueueName {
        validate::queue_name("queue", text).unwrap()
    }

    /// Queues created by other nodes (none held here): every partition's
    /// metadata is read, so a page stops before the reads pass the bound,
    /// and the next page goes on from there; every queue is listed once.
    #[tokio::test]
    async fn a_page_stops_before_its_partition_reads_pass_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        let names: Vec<String> = (0..6).map(|i| format!("big{i}")).chain(["small".to_owned()]).collect();
        for queue in &names {
            let partitions = if queue.starts_with("big") { 256 } else { 1 };
            store.create_queue(&name(queue), QueueConfig::new(partitions, "")).await.unwrap();
        }
        let queues = Queues::new(store, Arc::new(ManualClock::new(0)), Settings::default());
        let (first, next) = queues.list_page("", "", 100, |_| true).await.unwrap();
        let listed: Vec<String> = first.iter().map(|s| s.name.to_string()).collect();
        assert_eq!(listed, ["big0", "big1", "big2", "big3"], "4 × 256 partitions read, the bound");
        assert_eq!(next.as_deref(), Some("big3"));
        assert!(first.iter().all(|s| s.held_here == 0 && s.backlog == 0));
        let (second, next) = queues.list_page("", "big3", 100, |_| true).await.unwrap();
        let listed: Vec<String> = second.iter().map(|s| s.name.to_string()).collect();
        assert_eq!(listed, ["big4", "big5", "small"]);
        assert_eq!(next, None, "the last page");
        let (only, _) = queues.list_page("sm", "", 100, |_| true).await.unwrap();
        assert_eq!(only.len(), 1);
        let (hidden, next) = queues.list_page("", "", 2, |q| q.as_str() != "big0").await.unwrap();
        let listed: Vec<String> = hidden.iter().map(|s| s.name.to_string()).collect();
        assert_eq!((listed, next.as_deref()), (vec!["big1".to_owned(), "big2".to_owned()], Some("big2")));
    }
}
