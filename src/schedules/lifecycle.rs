//! What becomes of a run, told by the run's own task: a worker taking it
//! (started), completing it (a good end), failing it (a failure, final or
//! to be retried). The matching service calls these for every task whose
//! dedup id is a run's ([`super::parse_run_dedup_id`]); tasks of other
//! dedup ids cost one prefix check.
//!
//! A start is recorded after the worker has its task and a failure after
//! the task failed, best effort: a failure lost here is found by the next
//! probe of the run ([`super::firing`]) once the task is gone; a start lost
//! here leaves the run counted as waiting (no `max_allowed_duration` or
//! blackout check until its next attempt starts). A good end is recorded
//! before the completion (invariant 3 of [`super`]): when it cannot be
//! written, the completion is refused and the worker tries again.
//!
//! Each heartbeat of a run asks [`Schedules::run_may_go_on`]: a run its
//! schedule failed (outlived `max_allowed_duration`, met a blackout) or
//! that outlived `max_allowed_duration` since its start is failed for good
//! there, so its lease cannot be extended past the limit and its task is
//! not delivered again.

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

    /// Whether the run of dedup id `dedup_id` may go on (`None`), or why not:
    /// its schedule no longer counts it in flight (failed for outliving
    /// `max_allowed_duration` or meeting a blackout), it outlived
    /// `max_allowed_duration`, or a blackout began while it runs. A run of a
    /// deleted schedule goes on.
    pub async fn run_may_go_on(&self, dedup_id: &str) -> Result<Option<String>, ScheduleError> {
        let Some((id, nominal)) = parse_run_dedup_id(dedup_id) else { return Ok(None) };
        let Some(record) = self.store().schedule(id).await? else { return Ok(None) };
        let Some(run) = record.stats.runs.iter().find(|r| r.nominal == nominal) else {
            return Ok(Some(format!(
                "schedule {id:?} no longer counts this run (it outlived max_allowed_duration or met a blackout)"
            )));
        };
        let now = self.now();
        if let (Some(start), Some(limit)) = (run.started_at, record.spec.max_allowed_duration_ms)
            && now - start > limit
        {
            return Ok(Some(format!("the run of schedule {id:?} outlived max_allowed_duration ({limit} ms)")));
        }
        let calendar = crate::core::schedules::Calendar::new(&record.spec.cadence, &record.spec.time_zone)
            .map_err(|e| ScheduleError::Invalid(crate::model::ValidationError::new("spec", e.to_string())))?;
        if run.started_at.is_some() && calendar.blackout_end(&record.spec.blackouts, now).is_some() {
            return Ok(Some(format!("a blackout of schedule {id:?} began while its run was running")));
        }
        Ok(None)
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
