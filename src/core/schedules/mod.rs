//! The rules of recurring schedules, after the deadline-greedy design: when a
//! schedule may start its next run (`can_start_by`), when it must start for
//! the run to end before its constraint is broken (`should_start_by`), and
//! its health (OK, WARNING, ERROR, and when it turns ERROR if not run).
//!
//! Everything here is pure: the time comes in as an argument, and the only
//! randomness (an interval's jitter) is a hash of the schedule id and the
//! tick, so the same inputs always give the same answer on every node.
//!
//! The modules:
//! - [`calendar`]: cron ticks in the schedule's time zone (DST as `croner`
//!   resolves it), interval ticks with a hashed jitter, and daily blackout
//!   windows read on the local wall clock.
//! - [`times`]: [`start_times`] (`can_start_by`, `should_start_by` and the
//!   nominal tick of the next run) and [`decide`] (fire now or wait, with
//!   the overlap policy, the catch-up window, start and end times and the
//!   remaining runs).
//! - [`health`]: OK, WARNING or ERROR against the schedule's deadline, and
//!   that deadline.
//! - [`runs`]: how firing, starting and ending a run change the record.
//!
//! The caller's loop, per schedule: `decide`; on `Fire`, add the task to
//! the run queue with dedup id `schedule id @ nominal` and deadline
//! `should_start_by`, then record it with [`fired`] and [`skipped`]; report
//! attempts with [`started`] and ends with [`ended`].
//!
//! Invariants kept here:
//! 1. A schedule never has more runs pending or running than its overlap
//!    policy allows ([`Overlap::Skip`]: one; [`Overlap::BufferOne`]: one
//!    running and one waiting; [`Overlap::AllowAll`]: at most
//!    [`MAX_RUNS_IN_FLIGHT`]): [`decide`] fires nothing past it.
//! 2. Each run belongs to one nominal tick, and a tick is fired at most once
//!    ([`ScheduleStats::last_nominal`] only grows), so the dedup id
//!    `schedule id + nominal time` names one run whatever the number of nodes.
//! 3. After any outage, [`decide`] fires at most one run per schedule per
//!    call: missed ticks older than the catch-up window are skipped and
//!    counted, never replayed one by one.

pub mod calendar;
pub mod health;
pub mod runs;
#[cfg(test)]
mod tests;
pub mod times;

use serde::{Deserialize, Serialize};

use crate::clock::UnixMillis;

pub use calendar::{Calendar, CalendarError};
pub use health::{Health, HealthReport, health};
pub use runs::{RunEnd, ended, fired, skipped, started};
pub use times::{Decision, NEVER, StartTimes, decide, start_times};

/// The weight of the last good duration in the moving average: 75% of the
/// average's weight is on the last three runs (1 - (1 - 0.37)^3 ≈ 0.75).
pub const EWMA_ALPHA: f64 = 0.37;

/// The most runs of one schedule pending or running at once, whatever its
/// overlap policy.
pub const MAX_RUNS_IN_FLIGHT: usize = 16;

/// How long a schedule that never succeeded may live before it is in ERROR.
pub const NEVER_SUCCEEDED_GRACE_MS: i64 = 24 * 3_600_000;

/// When a schedule wants to run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cadence {
    /// The data may be at most `scheduling_period_ms` stale: in any window of
    /// that length a run must start and then succeed.
    Periodic {
        /// The staleness bound.
        scheduling_period_ms: i64,
        /// How long after the last good end the next run may start.
        cooldown_ms: i64,
    },
    /// A cron expression read in the schedule's time zone; each tick's run
    /// must have finished `max_schedule_duration_ms` after the tick.
    Cron {
        /// Five fields (minute hour day-of-month month day-of-week), or six
        /// with seconds first.
        expression: String,
        /// How long after its nominal start a run must have finished.
        max_schedule_duration_ms: i64,
    },
    /// Ticks at `phase_ms + k * every_ms` after the Unix epoch, each moved
    /// later by a jitter in `[0, jitter_ms)`; each tick's run must have
    /// finished `max_schedule_duration_ms` after the tick.
    Interval {
        /// The time between ticks.
        every_ms: i64,
        /// The offset of the ticks from the epoch, below `every_ms`.
        phase_ms: i64,
        /// The largest delay added to a tick (0: none).
        jitter_ms: i64,
        /// How long after its nominal start a run must have finished.
        max_schedule_duration_ms: i64,
    },
}

/// What a schedule does when a run is due while another is pending or running.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Skips the tick (and counts it).
    #[default]
    Skip,
    /// Keeps one run waiting behind the running one; further ticks are skipped.
    BufferOne,
    /// Starts it anyway (up to [`MAX_RUNS_IN_FLIGHT`]).
    AllowAll,
}

/// A daily window, in the schedule's time zone, in which no run starts; a
/// run still running when one begins is failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blackout {
    /// Its start, in seconds after local midnight (0 to 86,399).
    pub start_s: u32,
    /// Its end, in seconds after local midnight; below `start_s` when the
    /// window spans midnight.
    pub end_s: u32,
}

/// A schedule's settings, as validated by the API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleSpec {
    /// When it wants to run.
    pub cadence: Cadence,
    /// The IANA time zone its cron expression and blackouts are read in.
    pub time_zone: String,
    /// Daily windows in which no run starts.
    pub blackouts: Vec<Blackout>,
    /// No tick before this time.
    pub start_at: Option<UnixMillis>,
    /// No tick after this time.
    pub end_at: Option<UnixMillis>,
    /// Runs it may still fire (`None`: no limit); each run fired takes one.
    pub remaining_runs: Option<u64>,
    /// After an outage one run is fired, for the latest tick due; the ticks
    /// before it are skipped and counted: as missed when older than this
    /// window, as overlap-skipped otherwise.
    pub catchup_window_ms: i64,
    /// What a tick does while another run is pending or running.
    pub overlap: Overlap,
    /// A run longer than this logs and counts a warning.
    pub max_expected_duration_ms: Option<i64>,
    /// A run longer than this is failed: the firing loop fails it in its
    /// schedule, and its next heartbeat fails its task for good (its lease
    /// cannot be extended past the limit by more than a heartbeat interval).
    pub max_allowed_duration_ms: Option<i64>,
}

/// One run fired and not yet ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// The tick it belongs to (for a periodic schedule, its `can_start_by`).
    pub nominal: UnixMillis,
    /// The id of its task in the run queue.
    pub task_id: i64,
    /// When its task was added.
    pub added_at: UnixMillis,
    /// When a worker took its current attempt, if one did.
    pub started_at: Option<UnixMillis>,
    /// The attempt a worker took last (0: none yet).
    pub attempt: u32,
    /// The deadline it was queued with.
    pub should_start_by: UnixMillis,
}

/// Counts kept for operators (never used to decide).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleCounts {
    /// Runs fired.
    pub fired: u64,
    /// Runs that ended well.
    pub succeeded: u64,
    /// Runs that failed (failed, dead-lettered, lease lost, over time, blacked out).
    pub failed: u64,
    /// Runs that started after their `should_start_by`.
    pub started_late: u64,
    /// Ticks skipped because they were older than the catch-up window.
    pub missed_catchup_window: u64,
    /// Ticks skipped because a run was pending or running.
    pub overlap_skipped: u64,
    /// Runs that outlived `max_expected_duration`.
    pub over_expected_duration: u64,
}

/// What a schedule has done: the seed's statistics, the runs in flight and
/// the counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleStats {
    /// When the schedule was created.
    pub created_at: UnixMillis,
    /// Start of the last run that ended well.
    pub last_good_start: Option<UnixMillis>,
    /// End of the last run that ended well.
    pub last_good_end: Option<UnixMillis>,
    /// Start of the last run that ended, well or not.
    pub last_start: Option<UnixMillis>,
    /// End of the last run that ended, well or not.
    pub last_end: Option<UnixMillis>,
    /// Consecutive failures (0 after a success).
    pub failures: u32,
    /// Moving average of good durations ([`EWMA_ALPHA`]).
    pub average_good_duration_ms: Option<i64>,
    /// The latest tick fired (invariant 2).
    pub last_nominal: Option<UnixMillis>,
    /// Runs fired and not ended, oldest first.
    pub runs: Vec<Run>,
    /// When a run was asked for by a trigger, whatever `can_start_by` says
    /// (the seed's `run_immediately`); cleared when a run is fired.
    pub triggered_at: Option<UnixMillis>,
    /// Counts for operators.
    pub counts: ScheduleCounts,
}
