//! `can_start_by` and `should_start_by`, and the firing decision built on them.

use super::{Calendar, ScheduleSpec, ScheduleStats};
use crate::clock::UnixMillis;

/// When a schedule may and should start its next run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartTimes {
    /// The earliest time the next run may start (after cooldown, failure
    /// backoff and blackouts).
    pub can_start_by: UnixMillis,
    /// The latest start for the run to end before its constraint is broken,
    /// by its average good duration; never before the last good end.
    pub should_start_by: UnixMillis,
    /// The tick the next run belongs to (periodic: `can_start_by`).
    pub nominal: UnixMillis,
}

/// What to do with a schedule now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Add a run for tick `nominal`, queued with deadline `should_start_by`.
    Fire {
        /// The tick of the run.
        nominal: UnixMillis,
        /// Its deadline in the run queue.
        should_start_by: UnixMillis,
        /// Ticks passed over because they were older than the catch-up window.
        missed: u64,
        /// Ticks passed over because a run was in flight.
        overlap_skipped: u64,
    },
    /// Nothing before `until` (`None`: never again, e.g. past its end time or
    /// out of runs).
    Wait {
        /// When to look again.
        until: Option<UnixMillis>,
    },
}

/// The seed's `get_schedule_start_times` at `now`.
pub fn start_times(
    _calendar: &Calendar,
    _id: &str,
    _spec: &ScheduleSpec,
    _stats: &ScheduleStats,
    _now: UnixMillis,
) -> StartTimes {
    todo!("core::schedules::times")
}

/// Whether to fire a run now, from the start times, the overlap policy, the
/// catch-up window, start/end times and the remaining runs. Paused
/// schedules are never passed in.
pub fn decide(
    _calendar: &Calendar,
    _id: &str,
    _spec: &ScheduleSpec,
    _stats: &ScheduleStats,
    _now: UnixMillis,
) -> Decision {
    todo!("core::schedules::times")
}
