//! Ticks of cron and interval cadences in a time zone, and blackout windows.
//!
//! Rules:
//! - A cron expression has five fields (minute hour day-of-month month
//!   day-of-week), or six with seconds first; no year field. It is read in
//!   the schedule's IANA time zone. Ticks fall on whole seconds.
//! - DST, as `croner` resolves it (and as docs/schedules.md states): a fixed
//!   time that falls in a spring-forward gap fires once, at the first instant
//!   after the gap; a fixed time repeated by a fall-back overlap fires once,
//!   at its first occurrence. Patterns with a wildcard or a step in their
//!   second, minute or hour fields fire at each real instant that matches
//!   (none inside a gap, twice over a repeated hour).
//! - An interval cadence ticks at `phase + k * every` (k any integer), each
//!   tick moved later by a jitter in `[0, jitter)` that is a hash of the
//!   schedule id and k, so every node computes the same ticks. A jitter
//!   larger than `every` is taken as `every`, so ticks stay in order.
//! - A periodic cadence has no ticks.
//! - A blackout holds every instant whose local wall-clock time of day lies
//!   in `[start_s, end_s)` (or, when `end_s < start_s`, at or after `start_s`
//!   or before `end_s`: the window spans midnight; `end_s == start_s` is an
//!   empty window). Its end is the first later instant whose wall-clock time
//!   leaves the window. On DST days this means: a window end that falls in a
//!   spring-forward gap ends the window at the end of the gap; a window over
//!   a fall-back overlap holds during both passes of the repeated hour, and
//!   an end inside the overlap is the next occurrence of that wall time
//!   after the instant asked about. Windows that touch or overlap are
//!   merged: the end returned is never itself inside a blackout (up to
//!   [`MAX_CHAINED_BLACKOUTS`] windows in a row).
//!
//! Invariant: ticks are strictly increasing in real time, and
//! `next_tick(t)` is the smallest tick `> t` while `last_tick_at_or_before(t)`
//! is the largest tick `<= t`, for the same cadence, id and zone.

use chrono::{DateTime, LocalResult, NaiveDate, NaiveDateTime, Offset, TimeZone, Timelike};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use super::{Blackout, Cadence};
use crate::clock::UnixMillis;
use crate::hash::{fnv1a, splitmix64};

/// How many touching or overlapping blackout windows [`Calendar::blackout_end`]
/// follows before it gives up and returns the end of the last one.
pub const MAX_CHAINED_BLACKOUTS: usize = 64;

/// Why a cadence or a time zone cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CalendarError {
    /// The cron expression does not parse.
    #[error("is not a cron expression: {0}")]
    Cron(String),
    /// The time zone is not an IANA name.
    #[error("{0:?} is not an IANA time zone (e.g. Europe/Paris, UTC)")]
    TimeZone(String),
}

/// A cadence's ticks and a time zone's blackouts, parsed once.
#[derive(Clone, Debug)]
pub struct Calendar {
    tz: Tz,
    cron: Option<Cron>,
}

impl Calendar {
    /// Parses `cadence`'s cron expression (if any) and `time_zone`.
    pub fn new(cadence: &Cadence, time_zone: &str) -> Result<Calendar, CalendarError> {
        let tz: Tz = time_zone.parse().map_err(|_| CalendarError::TimeZone(time_zone.to_string()))?;
        let cron = match cadence {
            Cadence::Cron { expression, .. } => {
                let fields = expression.split_whitespace().count();
                if fields != 5 && fields != 6 {
                    return Err(CalendarError::Cron(format!(
                        "{expression:?} has {fields} fields (5, or 6 with seconds first)"
                    )));
                }
                let parser = CronParser::builder().seconds(Seconds::Optional).year(Year::Disallowed).build();
                let cron = parser.parse(expression).map_err(|e| CalendarError::Cron(format!("{expression:?}: {e}")))?;
                Some(cron)
            }
            _ => None,
        };
        Ok(Calendar { tz, cron })
    }

    /// The first tick strictly after `after` (cron and interval cadences;
    /// `None` for periodic ones, or past the year 5000). `id` seeds the jitter.
    pub fn next_tick(&self, cadence: &Cadence, id: &str, after: UnixMillis) -> Option<UnixMillis> {
        match cadence {
            Cadence::Periodic { .. } => None,
            Cadence::Cron { .. } => {
                let cron = self.cron.as_ref()?;
                // Ticks are whole seconds: the first one strictly after the
                // whole second at or before `after` is the first one after
                // `after` itself.
                let from = self.local(after.div_euclid(1000) * 1000)?;
                let next = cron.find_next_occurrence(&from, false).ok()?;
                Some(next.timestamp_millis())
            }
            Cadence::Interval { every_ms, phase_ms, jitter_ms, .. } => {
                let iv = Interval::new(*every_ms, *phase_ms, *jitter_ms, id)?;
                let k = iv.index_at(after)?;
                let this = iv.tick(k)?;
                if this > after { Some(this) } else { iv.tick(k.checked_add(1)?) }
            }
        }
    }

    /// The latest tick at or before `at` (cron and interval cadences).
    pub fn last_tick_at_or_before(&self, cadence: &Cadence, id: &str, at: UnixMillis) -> Option<UnixMillis> {
        match cadence {
            Cadence::Periodic { .. } => None,
            Cadence::Cron { .. } => {
                let cron = self.cron.as_ref()?;
                let from = self.local(at.div_euclid(1000) * 1000)?;
                let prev = cron.find_previous_occurrence(&from, true).ok()?;
                Some(prev.timestamp_millis())
            }
            Cadence::Interval { every_ms, phase_ms, jitter_ms, .. } => {
                let iv = Interval::new(*every_ms, *phase_ms, *jitter_ms, id)?;
                let k = iv.index_at(at)?;
                let this = iv.tick(k)?;
                if this <= at { Some(this) } else { iv.tick(k.checked_sub(1)?) }
            }
        }
    }

    /// The end of the blackout `at` falls in, if it falls in one.
    pub fn blackout_end(&self, blackouts: &[Blackout], at: UnixMillis) -> Option<UnixMillis> {
        let mut end = self.window_end(blackouts, at)?;
        for _ in 1..MAX_CHAINED_BLACKOUTS {
            match self.window_end(blackouts, end) {
                Some(later) if later > end => end = later,
                _ => break,
            }
        }
        Some(end)
    }

    /// The instant `at` in the calendar's zone.
    fn local(&self, at: UnixMillis) -> Option<DateTime<Tz>> {
        Some(DateTime::from_timestamp_millis(at)?.with_timezone(&self.tz))
    }

    /// The end of the latest-ending window that holds `at` (one step of
    /// [`Calendar::blackout_end`]).
    fn window_end(&self, blackouts: &[Blackout], at: UnixMillis) -> Option<UnixMillis> {
        let local = self.local(at)?;
        let wall = local.naive_local();
        let second = wall.num_seconds_from_midnight();
        let today = wall.date();
        let mut best: Option<UnixMillis> = None;
        for b in blackouts {
            let (start, end) = (b.start_s, b.end_s);
            let end_day = if start < end && (start..end).contains(&second) {
                today
            } else if end < start && second >= start {
                today.succ_opt()?
            } else if end < start && second < end {
                today
            } else {
                continue;
            };
            if let Some(e) = self.wall_instant_after(end_day, end, at) {
                best = Some(best.map_or(e, |b| b.max(e)));
            }
        }
        best
    }

    /// The first instant after `after` at which the wall clock shows
    /// `second` seconds past midnight of `day`: in a spring-forward gap, the
    /// end of the gap; over a fall-back overlap, the first of the two
    /// occurrences that is after `after`.
    fn wall_instant_after(&self, day: NaiveDate, second: u32, after: UnixMillis) -> Option<UnixMillis> {
        // An end of 86,400 s (or more) is the next midnight.
        let (day, second) = if second >= 86_400 {
            (day.checked_add_days(chrono::Days::new(u64::from(second / 86_400)))?, second % 86_400)
        } else {
            (day, second)
        };
        let wall = day.and_hms_opt(second / 3600, (second / 60) % 60, second % 60)?;
        match self.tz.from_local_datetime(&wall) {
            LocalResult::Single(t) => Some(t.timestamp_millis()),
            LocalResult::Ambiguous(a, b) => {
                let (a, b) = (a.timestamp_millis(), b.timestamp_millis());
                Some(if a > after { a } else { b })
            }
            LocalResult::None => self.gap_end(wall),
        }
    }

    /// The instant a spring-forward gap holding the wall time `wall` ends:
    /// the first instant whose wall time is past `wall`.
    fn gap_end(&self, wall: NaiveDateTime) -> Option<UnixMillis> {
        // Read `wall` with the offsets in force a day before and a day after
        // the gap: the gap's end lies between the two readings, and "the
        // wall time at t is past `wall`" is false before it and true from it
        // on, so a binary search finds it to the millisecond.
        let wall_ms = wall.and_utc().timestamp_millis();
        let before = self.offset_ms_at(wall_ms.checked_sub(86_400_000)?)?;
        let after = self.offset_ms_at(wall_ms.checked_add(86_400_000)?)?;
        let past = |t: UnixMillis| -> Option<bool> { Some(t + self.offset_ms_at(t)? > wall_ms) };
        let (mut lo, mut hi) = (wall_ms - after, wall_ms - before);
        // Invariant: the wall time at `lo` is not past `wall`, at `hi` it is.
        if lo >= hi || past(lo)? || !past(hi)? {
            return None;
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if past(mid)? {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }

    /// The zone's offset from UTC at instant `at`, in ms.
    fn offset_ms_at(&self, at: UnixMillis) -> Option<i64> {
        let local = self.local(at)?;
        Some(i64::from(local.offset().fix().local_minus_utc()) * 1000)
    }
}

/// An interval cadence's tick arithmetic.
struct Interval {
    every: i64,
    phase: i64,
    jitter: i64,
    seed: u64,
}

impl Interval {
    fn new(every: i64, phase: i64, jitter: i64, id: &str) -> Option<Interval> {
        if every <= 0 {
            return None;
        }
        Some(Interval {
            every,
            phase: phase.rem_euclid(every),
            jitter: jitter.clamp(0, every),
            seed: fnv1a(id.bytes()),
        })
    }

    /// The k for which `phase + k * every <= t < phase + (k + 1) * every`.
    fn index_at(&self, t: UnixMillis) -> Option<i64> {
        Some(t.checked_sub(self.phase)?.div_euclid(self.every))
    }

    /// Tick k: its base time plus its jitter.
    fn tick(&self, k: i64) -> Option<UnixMillis> {
        let base = k.checked_mul(self.every)?.checked_add(self.phase)?;
        base.checked_add(self.jitter_of(k))
    }

    fn jitter_of(&self, k: i64) -> i64 {
        if self.jitter <= 0 {
            return 0;
        }
        let h = splitmix64(self.seed ^ splitmix64(k as u64));
        (h % self.jitter as u64) as i64
    }
}
