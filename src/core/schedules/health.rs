//! A schedule's health, as the deadline-greedy design defines it.
//!
//! A schedule's constraint is about starts that ended well: a periodic
//! schedule must have a run that started less than its period ago and
//! ended well; a cron or interval schedule must have, by each tick plus its
//! maximum schedule duration, a run that started at or after the tick and
//! ended well; a new schedule must have one within 24 hours. [`health`]
//! reports ERROR once the constraint is broken, WARNING when it is likely
//! to break (by the average good duration) or the last run failed, OK
//! otherwise, and always the instant it turns ERROR if no run ends well.
//!
//! Invariant: `error_at` is a function of the record alone (not of `now`),
//! and the health is ERROR exactly when `now > error_at`.

use serde::{Deserialize, Serialize};

use super::times::{NEVER, owed_tick, start_times};
use super::{Cadence, Calendar, NEVER_SUCCEEDED_GRACE_MS, ScheduleSpec, ScheduleStats};
use crate::clock::UnixMillis;

/// How a schedule is doing against its constraint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// Everything is fine.
    Ok,
    /// Something went wrong, the constraint still holds.
    Warning,
    /// The constraint is broken: the data may be stale.
    Error,
}

/// A schedule's health and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthReport {
    /// The health.
    pub health: Health,
    /// Why, in words for an operator (e.g. "last run failed").
    pub reason: String,
    /// When it turns (or turned) ERROR if no run ends well before.
    pub error_at: Option<UnixMillis>,
}

/// The health of a schedule at `now`.
///
/// The deadline (`error_at`):
/// - periodic: `last_good_start + scheduling_period`; never succeeded,
///   `created_at + 24 h` ([`NEVER_SUCCEEDED_GRACE_MS`]);
/// - cron and interval: the first tick after the last good start plus the
///   maximum schedule duration; never succeeded, the earlier of the first
///   tick at or after creation plus that duration, and `created_at + 24 h`.
///
/// Creation counts from `start_at` when that is later (a schedule is not
/// late before it may run). A schedule that will fire nothing more (no runs
/// left, no tick left, or its next `can_start_by` after `end_at`: what
/// [`super::decide`] waits forever on) and has no run in flight has no
/// deadline.
///
/// - ERROR when `now` is past the deadline (the reason names the
///   constraint and by how much it is broken).
/// - WARNING, for each of: a run is running and, by the average good
///   duration, will end after the deadline, or has already run longer than
///   that average; nothing is running and a run started now would end
///   after the deadline; the last run failed. The reason lists each one.
/// - OK otherwise.
pub fn health(
    calendar: &Calendar,
    id: &str,
    spec: &ScheduleSpec,
    stats: &ScheduleStats,
    now: UnixMillis,
) -> HealthReport {
    let avg = stats.average_good_duration_ms;
    let created = spec.start_at.map_or(stats.created_at, |s| s.max(stats.created_at));
    let grace_end = created.saturating_add(NEVER_SUCCEEDED_GRACE_MS);
    // The deadline and what it stands for.
    let deadline: Option<(UnixMillis, String)> = match (&spec.cadence, stats.last_good_start) {
        (Cadence::Periodic { scheduling_period_ms, .. }, Some(good_start)) => Some((
            good_start.saturating_add(*scheduling_period_ms),
            format!("no run started in the last {} ended well", span(*scheduling_period_ms)),
        )),
        (Cadence::Periodic { .. }, None) => Some((grace_end, never_succeeded())),
        (
            Cadence::Cron { max_schedule_duration_ms, .. } | Cadence::Interval { max_schedule_duration_ms, .. },
            good_start,
        ) => {
            let owed = owed_tick(calendar, id, spec, stats);
            let by_tick = owed.map(|tick| {
                (
                    tick.saturating_add(*max_schedule_duration_ms),
                    format!(
                        "the run of the tick at {} did not end well within {} of it",
                        instant(tick),
                        span(*max_schedule_duration_ms)
                    ),
                )
            });
            match (good_start, by_tick) {
                (Some(_), by_tick) => by_tick,
                (None, Some(by_tick)) if by_tick.0 <= grace_end => Some(by_tick),
                (None, _) => Some((grace_end, never_succeeded())),
            }
        }
    };
    let next_can = start_times(calendar, id, spec, stats, now).can_start_by;
    let finished = stats.runs.is_empty()
        && (spec.remaining_runs == Some(0) || next_can == NEVER || spec.end_at.is_some_and(|end| next_can > end));
    let deadline = if finished { None } else { deadline };
    let failed = stats.failures >= 1;

    let Some((deadline, constraint)) = deadline else {
        return if failed {
            report(Health::Warning, last_failed(stats), None)
        } else {
            report(Health::Ok, "nothing more to run".to_string(), None)
        };
    };
    if now > deadline {
        let reason = format!("{constraint}: {} past its deadline of {}", span(now - deadline), instant(deadline));
        return report(Health::Error, reason, Some(deadline));
    }
    let mut reasons = Vec::new();
    let running = stats.runs.iter().filter_map(|r| r.started_at).min();
    match (running, avg) {
        (Some(started), Some(avg)) => {
            let expected_end = started.saturating_add(avg);
            if expected_end > deadline {
                reasons.push(format!(
                    "the running run is expected to end at {}, {} after its deadline",
                    instant(expected_end),
                    span(expected_end - deadline)
                ));
            } else if now > expected_end {
                reasons.push(format!(
                    "the running run has run {}, longer than its average of {}",
                    span(now - started),
                    span(avg)
                ));
            }
        }
        (None, Some(avg)) => {
            let expected_end = now.saturating_add(avg);
            if expected_end > deadline {
                reasons.push(format!(
                    "a run started now is expected to end {} after its deadline of {}",
                    span(expected_end - deadline),
                    instant(deadline)
                ));
            }
        }
        (_, None) => {}
    }
    if failed {
        reasons.push(last_failed(stats));
    }
    if reasons.is_empty() {
        report(Health::Ok, format!("on time (deadline {})", instant(deadline)), Some(deadline))
    } else {
        report(Health::Warning, reasons.join("; "), Some(deadline))
    }
}

fn report(health: Health, reason: String, error_at: Option<UnixMillis>) -> HealthReport {
    HealthReport { health, reason, error_at }
}

fn never_succeeded() -> String {
    format!("no run ended well in the {} after creation", span(NEVER_SUCCEEDED_GRACE_MS))
}

fn last_failed(stats: &ScheduleStats) -> String {
    if stats.failures == 1 {
        "last run failed".to_string()
    } else {
        format!("last run failed ({} failures in a row)", stats.failures)
    }
}

/// A duration for an operator: "2h 5m 3s", "250ms".
pub(super) fn span(ms: i64) -> String {
    if ms.abs() < 1000 {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    let (d, h, m, s) = (s / 86_400, (s / 3600) % 24, (s / 60) % 60, s % 60);
    let mut out = Vec::new();
    if d != 0 {
        out.push(format!("{d}d"));
    }
    if h != 0 {
        out.push(format!("{h}h"));
    }
    if m != 0 {
        out.push(format!("{m}m"));
    }
    if s != 0 {
        out.push(format!("{s}s"));
    }
    out.join(" ")
}

/// An instant for an operator, in UTC.
fn instant(at: UnixMillis) -> String {
    chrono::DateTime::from_timestamp_millis(at)
        .map_or_else(|| format!("{at} ms"), |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
}
