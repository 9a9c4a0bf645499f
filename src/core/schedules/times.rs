//! `can_start_by` and `should_start_by`, and the firing decision built on them.
//!
//! Rules: see [`start_times`] and [`decide`]. Failure backoff after the
//! last end: 5 minutes after one failure, 1 hour after two, 4 hours after
//! three or more.
//!
//! Invariants:
//! - Both functions read the record and `now` only, so racing nodes derive
//!   the same nominal, hence the same dedup id `schedule id @ nominal`.
//! - A fired nominal is always after the record's `last_nominal` and at or
//!   before `now`: nominals fired for one schedule strictly increase, and
//!   no tick is fired twice.
//! - One [`decide`] call fires at most one run, and never past the overlap
//!   policy's bound on runs in flight.

use super::{Cadence, Calendar, MAX_RUNS_IN_FLIGHT, Overlap, ScheduleSpec, ScheduleStats};
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

/// The start time of a schedule that will never start again (its cron
/// expression has no tick left): `can_start_by`, `should_start_by` and
/// `nominal` are all this.
pub const NEVER: UnixMillis = UnixMillis::MAX;

/// The most passed-over ticks one [`decide`] call counts (a schedule back
/// after a very long outage counts at most this many as missed).
pub const MAX_COUNTED_TICKS: u64 = 10_000;

/// Failure backoff: how long after the last end a schedule with `failures`
/// consecutive failures may start again.
pub fn failure_backoff_ms(failures: u32) -> i64 {
    match failures {
        0 => 0,
        1 => 5 * 60_000,
        2 => 3_600_000,
        _ => 4 * 3_600_000,
    }
}

/// The tick whose run must end well by the tick plus the maximum schedule
/// duration (cron and interval cadences): the first tick after the last
/// good start, or, never succeeded, the first tick at or after creation;
/// in both cases no earlier than `start_at`.
pub(super) fn owed_tick(
    calendar: &Calendar,
    id: &str,
    spec: &ScheduleSpec,
    stats: &ScheduleStats,
) -> Option<UnixMillis> {
    let tick = match stats.last_good_start {
        Some(start) => calendar.next_tick(&spec.cadence, id, start)?,
        None => calendar.next_tick(&spec.cadence, id, stats.created_at.saturating_sub(1))?,
    };
    match spec.start_at {
        Some(start_at) if tick < start_at => calendar.next_tick(&spec.cadence, id, start_at.saturating_sub(1)),
        _ => Some(tick),
    }
}

/// The next tick that may be fired (cron and interval cadences): the owed
/// tick, or, when that one was already fired, the first tick after the last
/// fired one (a tick is fired once).
fn fire_tick(calendar: &Calendar, id: &str, spec: &ScheduleSpec, stats: &ScheduleStats) -> Option<UnixMillis> {
    let tick = owed_tick(calendar, id, spec, stats)?;
    match stats.last_nominal {
        Some(last) if tick <= last => calendar.next_tick(&spec.cadence, id, last),
        _ => Some(tick),
    }
}

/// The seed's `get_schedule_start_times` at `now`.
///
/// - Periodic, never succeeded: `can = should = created_at`. Otherwise
///   `can = last_good_end + cooldown`,
///   `should = last_good_start + period - average good duration`. In both
///   cases `can` is at least 1 ms after the last fired nominal.
/// - Cron and interval: `tick` = the first tick after the last good start
///   (never succeeded: the first at or after creation), no earlier than
///   `start_at` (no tick exists before it); `can = tick`,
///   `should = tick + max_schedule_duration - average good duration`. When
///   that tick was already fired (its run is in flight or failed), `can`
///   moves to the first tick after the last fired one; `should` stays (the
///   constraint is still owed).
/// - `should = max(should, last_good_end)`.
/// - Failures: `can = max(can, last_end + 5 min | 1 h | 4 h)` for 1, 2, 3 or
///   more consecutive failures.
/// - A trigger at `t`: `can = min(can, t)`.
/// - `can = max(can, start_at)`.
/// - `can` inside a blackout moves to the blackout's end (`should` does not).
/// - `nominal`: periodic, `can`; cron and interval, the tick (or the trigger
///   time when triggered), or `can` when backoff, `start_at` or a blackout
///   pushed `can` past it. It is always after the last fired nominal, so
///   every node derives the same dedup id and no tick is fired twice.
///
/// The result depends on the record only (`now` is not read): every node
/// computes the same times.
pub fn start_times(
    calendar: &Calendar,
    id: &str,
    spec: &ScheduleSpec,
    stats: &ScheduleStats,
    _now: UnixMillis,
) -> StartTimes {
    let avg = stats.average_good_duration_ms.unwrap_or(0);
    let after_last = stats.last_nominal.map_or(UnixMillis::MIN, |n| n.saturating_add(1));
    let (mut can, should, mut base) = match &spec.cadence {
        Cadence::Periodic { scheduling_period_ms, cooldown_ms } => match stats.last_good_start {
            None => {
                let can = stats.created_at.max(after_last);
                (can, stats.created_at, can)
            }
            Some(good_start) => {
                let good_end = stats.last_good_end.unwrap_or(good_start);
                let can = good_end.saturating_add(*cooldown_ms).max(after_last);
                let should = good_start.saturating_add(*scheduling_period_ms).saturating_sub(avg);
                (can, should, can)
            }
        },
        Cadence::Cron { max_schedule_duration_ms, .. } | Cadence::Interval { max_schedule_duration_ms, .. } => {
            let (Some(owed), Some(tick)) = (owed_tick(calendar, id, spec, stats), fire_tick(calendar, id, spec, stats))
            else {
                return StartTimes { can_start_by: NEVER, should_start_by: NEVER, nominal: NEVER };
            };
            let should = owed.saturating_add(*max_schedule_duration_ms).saturating_sub(avg);
            (tick, should, tick)
        }
    };
    let should = match stats.last_good_end {
        Some(good_end) => should.max(good_end),
        None => should,
    };
    if stats.failures >= 1
        && let Some(last_end) = stats.last_end
    {
        can = can.max(last_end.saturating_add(failure_backoff_ms(stats.failures)));
    }
    if let Some(triggered_at) = stats.triggered_at {
        base = triggered_at.max(after_last);
        can = can.min(base);
    }
    if let Some(start_at) = spec.start_at {
        can = can.max(start_at);
    }
    if let Some(end) = calendar.blackout_end(&spec.blackouts, can) {
        can = end;
    }
    let nominal = match spec.cadence {
        Cadence::Periodic { .. } => can,
        _ => base.max(can),
    };
    StartTimes { can_start_by: can, should_start_by: should, nominal }
}

/// Whether to fire a run now, from the start times, the overlap policy, the
/// catch-up window, start/end times and the remaining runs. Paused
/// schedules are never passed in.
///
/// In order:
/// 1. No runs left, no tick left, or `can_start_by` past `end_at`: wait for
///    nothing (`until: None`).
/// 2. Runs in flight: [`Overlap::Skip`] waits while one is; [`Overlap::BufferOne`]
///    fires a due tick while one is (both runs are in the queue: they may
///    run at once unless the run queue's `key_concurrency` is 1, the
///    schedule id being the runs' default fairness key) and waits while two
///    are; [`Overlap::AllowAll`] waits at
///    [`MAX_RUNS_IN_FLIGHT`]. A periodic schedule has no ticks to buffer: it
///    waits while any of its runs is in flight (its cooldown counts from
///    the end of the last run). These waits have `until: None`: the end of
///    a run is what changes them.
/// 3. `now` inside a blackout: wait until its end.
/// 4. `can_start_by` (or the nominal, for a trigger stamped in the future)
///    after `now`: wait until it.
/// 5. Periodic or triggered: fire the start times' nominal.
/// 6. Cron and interval: fire the latest tick at or before `now` (and at or
///    before `end_at`) when it is at or after the start times' nominal,
///    else that nominal (pushed past its tick by backoff or a blackout).
///    Every tick from the start times' tick up to the fired nominal is
///    passed over and counted, except, for a pushed nominal, the last tick
///    before it (the run stands for it): as `missed` when older than
///    `now - catchup_window_ms`, else as `overlap_skipped` (a run was in
///    flight, or the schedule was held back). The count stops at
///    [`MAX_COUNTED_TICKS`]. However long the outage, one call fires at
///    most one run.
pub fn decide(calendar: &Calendar, id: &str, spec: &ScheduleSpec, stats: &ScheduleStats, now: UnixMillis) -> Decision {
    const NOTHING: Decision = Decision::Wait { until: None };
    let times = start_times(calendar, id, spec, stats, now);
    if spec.remaining_runs == Some(0) || times.can_start_by == NEVER {
        return NOTHING;
    }
    if spec.end_at.is_some_and(|end| times.can_start_by > end) {
        return NOTHING;
    }
    let periodic = matches!(spec.cadence, Cadence::Periodic { .. });
    let in_flight = stats.runs.len();
    let bound = match spec.overlap {
        Overlap::Skip => 1,
        Overlap::BufferOne => 2,
        Overlap::AllowAll => MAX_RUNS_IN_FLIGHT,
    };
    if in_flight >= bound || (periodic && in_flight > 0) {
        return NOTHING;
    }
    if let Some(end) = calendar.blackout_end(&spec.blackouts, now) {
        return Decision::Wait { until: Some(end) };
    }
    if times.can_start_by > now {
        return Decision::Wait { until: Some(times.can_start_by) };
    }
    if times.nominal > now {
        // A trigger stamped ahead of this node's clock: never fire a
        // nominal in the future.
        return Decision::Wait { until: Some(times.nominal) };
    }
    if periodic || stats.triggered_at.is_some() {
        return Decision::Fire {
            nominal: times.nominal,
            should_start_by: times.should_start_by,
            missed: 0,
            overlap_skipped: 0,
        };
    }
    let horizon = spec.end_at.map_or(now, |end| end.min(now));
    let (nominal, on_tick) = match calendar.last_tick_at_or_before(&spec.cadence, id, horizon) {
        Some(latest) if latest >= times.nominal => (latest, true),
        _ => (times.nominal, false),
    };
    let (mut missed, mut overlap_skipped) = (0, 0);
    let mut last_was_missed = None;
    let oldest_caught_up = now.saturating_sub(spec.catchup_window_ms);
    let mut tick = fire_tick(calendar, id, spec, stats);
    while let Some(t) = tick {
        if t >= nominal || missed + overlap_skipped >= MAX_COUNTED_TICKS {
            break;
        }
        let is_missed = t < oldest_caught_up;
        if is_missed {
            missed += 1;
        } else {
            overlap_skipped += 1;
        }
        last_was_missed = Some(is_missed);
        tick = calendar.next_tick(&spec.cadence, id, t);
    }
    // A run pushed past its tick (by backoff or a blackout) stands for the
    // last tick before it: that one is not passed over.
    match (on_tick, last_was_missed) {
        (false, Some(true)) => missed -= 1,
        (false, Some(false)) => overlap_skipped -= 1,
        _ => {}
    }
    Decision::Fire { nominal, should_start_by: times.should_start_by, missed, overlap_skipped }
}
