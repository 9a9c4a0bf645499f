//! How a run's life changes a schedule's statistics.

use super::{ScheduleSpec, ScheduleStats};
use crate::clock::UnixMillis;

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// Its task completed.
    Succeeded,
    /// Its task failed, was dead-lettered, lost its lease, outlived
    /// `max_allowed_duration` or met a blackout.
    Failed,
}

/// Records a run fired for tick `nominal` (task `task_id`, queued with
/// `should_start_by`): `last_nominal`, `remaining_runs`, the counts, and
/// clears `triggered_at`.
pub fn fired(
    _spec: &mut ScheduleSpec,
    _stats: &mut ScheduleStats,
    _nominal: UnixMillis,
    _should_start_by: UnixMillis,
    _task_id: i64,
    _now: UnixMillis,
) {
    todo!("core::schedules::runs")
}

/// Records that a worker took attempt `attempt` of the run of task
/// `task_id`. An attempt above the last one seen, with no end between, ends
/// the earlier attempt as failed (its lease was lost). Returns false when no
/// run in flight has that task.
pub fn started(_stats: &mut ScheduleStats, _task_id: i64, _attempt: u32, _now: UnixMillis) -> bool {
    todo!("core::schedules::runs")
}

/// Records the end of the run of task `task_id`. `final_end`: the run leaves
/// the schedule (completed, dead-lettered, given up); otherwise its task
/// will be tried again and the run stays in flight. Updates the good and
/// last times, the failure count, the moving average and the counts.
/// Returns false when no run in flight has that task.
pub fn ended(
    _spec: &ScheduleSpec,
    _stats: &mut ScheduleStats,
    _task_id: i64,
    _end: RunEnd,
    _final_end: bool,
    _now: UnixMillis,
) -> bool {
    todo!("core::schedules::runs")
}
