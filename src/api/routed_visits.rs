//! The visit scheduler's port to its queues ([`VisitQueue`], which the
//! scheduler defines in its own words) plugged into this node's router:
//! each visit is added as a client's `AddTask` is, so a dedup id reaches the
//! owner of its partition wherever that is. What the router answers in
//! gRPC terms becomes a [`VisitQueueError`] in one place
//! ([`status::to_visit_queue`]); the scheduler sees no status codes.

use std::sync::Arc;

use futures::future::join_all;

use super::routing::{Origin, Router};
use super::status;
use crate::matcher::MatchError;
use crate::model::{Priority, QueueName, TaskSpec, validate};
use crate::visits::{Backlog, Visit, VisitQueue, VisitQueueError, queue_name};

/// The fairness keys per partition and priority level whose backlog a
/// round reads.
const BACKLOG_KEYS: usize = 1000;

/// The `visits.*` queues as this node's router sees them.
#[derive(Debug)]
pub struct RoutedVisits {
    /// The router each visit is added through, as a client's `AddTask` is.
    pub router: Arc<Router>,
}

impl RoutedVisits {
    /// The queue of `visit_type`, created (with the default partition count)
    /// if it is new: the scheduler creates its queues on purpose, whatever
    /// `matcher.create_on_add` lets clients create.
    pub(super) async fn queue(&self, visit_type: &str) -> Result<QueueName, MatchError> {
        let queue = validate::queue_name("visit_type", &queue_name(visit_type))
            .map_err(|e| MatchError::UnknownQueue(e.to_string()))?;
        let queues = self.router.queues();
        queues.create(&queue, queues.settings().matcher.partitions_per_queue, None).await?;
        Ok(queue)
    }
}

#[tonic::async_trait]
impl VisitQueue for RoutedVisits {
    /// The held partitions' backlog as this node counts it; the others' as
    /// their owners last wrote it in their metadata (on a cluster, the
    /// rounds' node need not hold the queue's partitions). Per fairness
    /// key: the tasks in the held partitions' buffers (on one node, every
    /// partition's; a buffer holds the head of a partition's backlog).
    async fn backlog(&self, visit_type: &str) -> Result<Backlog, VisitQueueError> {
        let unavailable = |e: &dyn std::fmt::Display| VisitQueueError::Unavailable(e.to_string());
        let queue = validate::queue_name("visit_type", &queue_name(visit_type)).map_err(|e| unavailable(&e))?;
        let matcher = match self.router.queues().get(&queue).await {
            Ok(matcher) => matcher,
            Err(MatchError::UnknownQueue(_)) => return Ok(Backlog::default()),
            Err(e) => return Err(unavailable(&e)),
        };
        let total = matcher.backlog().await.map_err(|e| unavailable(&e))?;
        let mut by_key = std::collections::HashMap::new();
        for report in matcher.describe(BACKLOG_KEYS) {
            for subqueue in report.snapshot.iter().flat_map(|s| &s.subqueues) {
                for key in &subqueue.top_keys {
                    *by_key.entry(key.fairness_key.clone()).or_default() += key.buffered;
                }
            }
        }
        Ok(Backlog { total, by_key })
    }

    async fn enqueue(&self, visit_type: &str, visits: &[Visit]) -> Result<Vec<bool>, VisitQueueError> {
        let queue = self.queue(visit_type).await.map_err(|e| VisitQueueError::Unavailable(e.to_string()))?;
        let added = join_all(visits.iter().map(|visit| {
            let queue = queue.clone();
            async move {
                let priority = Priority::new(visit.priority).unwrap_or(Priority::DEFAULT);
                let mut spec = TaskSpec::new(visit.fairness_key.clone(), priority, visit.payload.clone());
                spec.dedup_id = Some(visit.dedup_id.clone());
                // The scheduler's queue exists: created above, for no principal.
                self.router.add(&queue, spec, Origin::Client, None).await
            }
        }))
        .await;
        let mut failures = added.iter().filter_map(|r| r.as_ref().err());
        if let Some(first) = failures.next() {
            tracing::warn!(visit_type, error = %first.message(), failed = 1 + failures.count(), "queueing visits");
        }
        if !visits.is_empty() && added.iter().all(Result::is_err) {
            let first = added.into_iter().find_map(Result::err).expect("every add failed");
            return Err(status::to_visit_queue(&first));
        }
        Ok(added.iter().map(Result::is_ok).collect())
    }
}
