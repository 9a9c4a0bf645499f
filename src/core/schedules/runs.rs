//! How a run's life changes a schedule's statistics.
//!
//! Rules:
//! - [`fired`] adds the run (oldest first), raises `last_nominal` to its
//!   tick, takes one of the remaining runs, counts it and clears the trigger.
//! - [`started`] records a worker taking an attempt; the first attempt
//!   after `should_start_by` counts as started late. An attempt above the
//!   last one seen while that one was still running means the earlier
//!   attempt lost its lease: it ends as a failure (failure count, last
//!   start and end, failed count).
//! - [`ended`] records an end: the run's start is its attempt's start (or,
//!   never started, when it was added); a success sets the good times,
//!   resets the failure count and feeds the moving average
//!   (`avg = α·d + (1 − α)·avg`, α = [`EWMA_ALPHA`], the first duration as
//!   is, rounded to the millisecond); a failure adds one to the failure
//!   count. A run longer than `max_expected_duration_ms` is counted. A final
//!   end removes the run; otherwise it stays in flight, waiting for its
//!   task's next attempt.
//!
//! Invariants: `last_nominal`, `last_good_start` and `last_good_end` never
//! move back (runs may end out of order when several are in flight); every
//! run in `runs` has a distinct task id as long as callers fire each task
//! once; `failures` is 0 right after a success.

use super::{EWMA_ALPHA, Run, ScheduleSpec, ScheduleStats};
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
///
/// The ticks a [`super::Decision::Fire`] passed over (`missed`,
/// `overlap_skipped`) are added by [`skipped`].
pub fn fired(
    spec: &mut ScheduleSpec,
    stats: &mut ScheduleStats,
    nominal: UnixMillis,
    should_start_by: UnixMillis,
    task_id: i64,
    now: UnixMillis,
) {
    stats.runs.push(Run { nominal, task_id, added_at: now, started_at: None, attempt: 0, should_start_by });
    stats.last_nominal = Some(stats.last_nominal.map_or(nominal, |last| last.max(nominal)));
    if let Some(left) = spec.remaining_runs.as_mut() {
        *left = left.saturating_sub(1);
    }
    stats.counts.fired += 1;
    stats.triggered_at = None;
}

/// Adds the ticks a fire passed over to the counts (the `missed` and
/// `overlap_skipped` of a [`super::Decision::Fire`]).
pub fn skipped(stats: &mut ScheduleStats, missed: u64, overlap_skipped: u64) {
    stats.counts.missed_catchup_window += missed;
    stats.counts.overlap_skipped += overlap_skipped;
}

/// Records that a worker took attempt `attempt` of the run of task
/// `task_id`. An attempt above the last one seen, with no end between, ends
/// the earlier attempt as failed (its lease was lost). Returns false when no
/// run in flight has that task.
///
/// An attempt below the last one seen is a stale report and changes
/// nothing (it still returns true).
pub fn started(stats: &mut ScheduleStats, task_id: i64, attempt: u32, now: UnixMillis) -> bool {
    let Some(i) = stats.runs.iter().position(|r| r.task_id == task_id) else {
        return false;
    };
    let run = stats.runs[i].clone();
    if attempt < run.attempt {
        return true;
    }
    if let Some(previous_start) = run.started_at
        && run.attempt >= 1
        && attempt > run.attempt
    {
        stats.failures = stats.failures.saturating_add(1);
        stats.counts.failed += 1;
        stats.last_start = Some(previous_start);
        stats.last_end = Some(now);
    }
    if run.attempt == 0 && now > run.should_start_by {
        stats.counts.started_late += 1;
    }
    let run = &mut stats.runs[i];
    run.started_at = Some(now);
    run.attempt = attempt;
    true
}

/// Records the end of the run of task `task_id`. `final_end`: the run leaves
/// the schedule (completed, dead-lettered, given up); otherwise its task
/// will be tried again and the run stays in flight. Updates the good and
/// last times, the failure count, the moving average and the counts.
/// Returns false when no run in flight has that task.
pub fn ended(
    spec: &ScheduleSpec,
    stats: &mut ScheduleStats,
    task_id: i64,
    end: RunEnd,
    final_end: bool,
    now: UnixMillis,
) -> bool {
    let Some(i) = stats.runs.iter().position(|r| r.task_id == task_id) else {
        return false;
    };
    let run = &stats.runs[i];
    let start = run.started_at.unwrap_or(run.added_at);
    let duration = now.saturating_sub(start).max(0);
    stats.last_start = Some(start);
    stats.last_end = Some(now);
    match end {
        RunEnd::Succeeded => {
            stats.last_good_start = Some(stats.last_good_start.map_or(start, |s| s.max(start)));
            stats.last_good_end = Some(stats.last_good_end.map_or(now, |e| e.max(now)));
            stats.failures = 0;
            stats.average_good_duration_ms = Some(match stats.average_good_duration_ms {
                None => duration,
                Some(avg) => ewma(avg, duration),
            });
            stats.counts.succeeded += 1;
        }
        RunEnd::Failed => {
            stats.failures = stats.failures.saturating_add(1);
            stats.counts.failed += 1;
        }
    }
    if spec.max_expected_duration_ms.is_some_and(|max| duration > max) {
        stats.counts.over_expected_duration += 1;
    }
    if final_end {
        stats.runs.remove(i);
    } else {
        stats.runs[i].started_at = None;
    }
    true
}

/// One step of the moving average of good durations, rounded to the
/// millisecond.
pub fn ewma(average_ms: i64, duration_ms: i64) -> i64 {
    (EWMA_ALPHA * duration_ms as f64 + (1.0 - EWMA_ALPHA) * average_ms as f64).round() as i64
}
