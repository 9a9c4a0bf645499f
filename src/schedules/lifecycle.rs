//! What becomes of a run, told by the run's own task: a worker taking it
//! (started), completing it (a good end), failing it (a failure, final or
//! to be retried). The matching service calls these for every task whose
//! dedup id is a run's ([`super::parse_run_dedup_id`]); tasks of other
//! dedup ids cost one prefix check.
//!
//! A start is recorded after the worker has its task and a failure after
//! the task failed, best effort: a start or failure lost here is found by
//! the next probe of the run ([`super::firing`]). A good end is recorded
//! before the completion (invariant 3 of [`super`]): when it cannot be
//! written, the completion is refused and the worker tries again.

use crate::core::schedules::{RunEnd, ended, started};

use super::{ScheduleError, Schedules, parse_run_dedup_id};

/// A run's task was failed (`will_retry`: the queue will deliver it again)
/// or completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskEnd {
    /// Completed by its worker.
    Completed,
    /// Failed by its worker; the queue tries it again if `will_retry`.
    Failed {
        /// Whether the queue will deliver it again.
        will_retry: bool,
    },
}

impl Schedules {
    /// A worker took attempt `attempt` of task `task_id`, whose dedup id is
    /// `dedup_id`. Does nothing for a task that is not a run in flight.
    pub async fn run_started(&self, dedup_id: &str, task_id: i64, attempt: u32) -> Result<(), ScheduleError> {
        let Some((id, nominal)) = parse_run_dedup_id(dedup_id) else { return Ok(()) };
        self.modify_if_exists(id, |record, now| {
            let Some(run) = record.stats.runs.iter_mut().find(|r| r.nominal == nominal) else { return Ok(false) };
            if run.task_id == 0 {
                run.task_id = task_id;
            }
            if run.task_id != task_id || (run.attempt >= attempt && run.started_at.is_some()) {
                return Ok(false);
            }
            Ok(started(&mut record.stats, task_id, attempt, now))
        })
        .await
    }

    /// The task of dedup id `dedup_id` ended as `end`.
    pub async fn run_ended(&self, dedup_id: &str, end: TaskEnd) -> Result<(), ScheduleError> {
        let Some((id, nominal)) = parse_run_dedup_id(dedup_id) else { return Ok(()) };
        self.modify_if_exists(id, |record, now| {
            let Some(run) = record.stats.runs.iter().find(|r| r.nominal == nominal) else { return Ok(false) };
            let task_id = run.task_id;
            let (end, final_end) = match end {
                TaskEnd::Completed => (RunEnd::Succeeded, true),
                TaskEnd::Failed { will_retry } => (RunEnd::Failed, !will_retry),
            };
            if end == RunEnd::Succeeded
                && let Some(over) = run
                    .started_at
                    .map(|s| now - s)
                    .filter(|d| record.spec.max_expected_duration_ms.is_some_and(|limit| *d > limit))
            {
                tracing::warn!(schedule = id, nominal, duration_ms = over, "run outlived max_expected_duration");
            }
            Ok(ended(&record.spec, &mut record.stats, task_id, end, final_end, now))
        })
        .await
    }

    /// [`Schedules::modify`], quiet when the schedule was deleted.
    async fn modify_if_exists<F>(&self, id: &str, change: F) -> Result<(), ScheduleError>
    where
        F: FnMut(&mut crate::store::schedules::ScheduleRecord, crate::clock::UnixMillis) -> Result<bool, ScheduleError>,
    {
        match self.modify(id, change).await {
            Ok(_) | Err(ScheduleError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
