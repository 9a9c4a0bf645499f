//! The schedules' ports plugged into this node: their runs are added
//! through the router as a client's `AddTask` is ([`RoutedRuns`]), and what
//! becomes of a run's task reaches its schedule through the task hooks
//! ([`ScheduleRuns`]).

use std::sync::Arc;

use tonic::Status;

use super::matching::TaskHook;
use super::routing::{Origin, Router};
use super::status;
use crate::clock::UnixMillis;
use crate::matcher::MatchError;
use crate::model::{Priority, QueueName, TaskSpec, validate};
use crate::schedules::lifecycle::TaskEnd;
use crate::schedules::{AddedRun, RUN_DEDUP_PREFIX, RunQueue, RunQueueError, Schedules};
use crate::store::schedules::RunTemplate;

/// The queues runs go to, as this node's router sees them.
#[derive(Debug)]
pub struct RoutedRuns {
    /// The router each run is added through.
    pub router: Arc<Router>,
}

#[tonic::async_trait]
impl RunQueue for RoutedRuns {
    async fn prepare(&self, queue: &str) -> Result<(), RunQueueError> {
        let queue = validate::queue_name("template.queue", queue).map_err(|e| RunQueueError::Refused(e.to_string()))?;
        let queues = self.router.queues();
        match queues.create(&queue, queues.settings().matcher.partitions_per_queue, None).await {
            Ok(_) => Ok(()),
            Err(e @ MatchError::QueueLimit { .. }) => Err(RunQueueError::Refused(e.to_string())),
            Err(e) => Err(RunQueueError::Unavailable(e.to_string())),
        }
    }

    async fn add_run(
        &self,
        template: &RunTemplate,
        dedup_id: &str,
        deadline: UnixMillis,
    ) -> Result<AddedRun, RunQueueError> {
        let refused = |e: &dyn std::fmt::Display| RunQueueError::Refused(e.to_string());
        self.prepare(&template.queue).await?;
        let queue = validate::queue_name("template.queue", &template.queue).map_err(|e| refused(&e))?;
        let priority = Priority::new(template.priority).unwrap_or(Priority::DEFAULT);
        let mut spec = TaskSpec::new(template.fairness_key.clone(), priority, template.payload.clone());
        spec.fairness_weight = template.fairness_weight;
        spec.dedup_id = Some(dedup_id.to_owned());
        spec.deadline = Some(deadline);
        match self.router.add(&queue, spec, Origin::Client, None).await {
            Ok(added) => Ok(AddedRun { task_id: added.task_id, duplicate: added.duplicate }),
            Err(status) if status.code() == tonic::Code::InvalidArgument => Err(refused(&status.message())),
            Err(status) => Err(RunQueueError::Unavailable(status.message().to_owned())),
        }
    }
}

/// The schedules, told what becomes of their runs' tasks.
#[derive(Debug)]
pub struct ScheduleRuns {
    /// The schedules runs are recorded in.
    pub schedules: Arc<Schedules>,
}

fn is_run(dedup_id: &str) -> bool {
    dedup_id.starts_with(RUN_DEDUP_PREFIX)
}

#[tonic::async_trait]
impl TaskHook for ScheduleRuns {
    fn sees_completion(&self, _queue: &QueueName, dedup_id: Option<&str>) -> bool {
        dedup_id.is_some_and(is_run)
    }

    async fn completing(&self, _queue: &QueueName, dedup_id: Option<&str>, _result: &[u8]) -> Result<(), Status> {
        let Some(dedup_id) = dedup_id.filter(|d| is_run(d)) else { return Ok(()) };
        self.schedules.run_ended(dedup_id, TaskEnd::Completed).await.map_err(status::from_schedule)
    }

    async fn failed(&self, _queue: &QueueName, dedup_id: &str, will_retry: bool) {
        if !is_run(dedup_id) {
            return;
        }
        if let Err(error) = self.schedules.run_ended(dedup_id, TaskEnd::Failed { will_retry }).await {
            tracing::warn!(dedup_id, %error, "recording a failed run (its next probe will find it)");
        }
    }

    async fn heartbeating(&self, _queue: &QueueName, dedup_id: &str) -> Option<String> {
        if !is_run(dedup_id) {
            return None;
        }
        match self.schedules.run_may_go_on(dedup_id).await {
            Ok(verdict) => verdict,
            Err(error) => {
                tracing::warn!(dedup_id, %error, "checking a run's heartbeat against its schedule: let through");
                None
            }
        }
    }

    fn dispatched(&self, _queue: &QueueName, dedup_id: &str, task_id: i64, attempt: u32) {
        if !is_run(dedup_id) {
            return;
        }
        let (schedules, dedup_id) = (self.schedules.clone(), dedup_id.to_owned());
        tokio::spawn(async move {
            if let Err(error) = schedules.run_started(&dedup_id, task_id, attempt).await {
                tracing::warn!(dedup_id, %error, "recording a run's start");
            }
        });
    }
}
