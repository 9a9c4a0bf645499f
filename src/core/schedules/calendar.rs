//! Ticks of cron and interval cadences in a time zone, and blackout windows.
//!
//! DST, as `croner` resolves it (and as docs/schedules.md states): a fixed
//! time that falls in a spring-forward gap fires once, at the first instant
//! after the gap; a fixed time repeated by a fall-back overlap fires once, at
//! its first occurrence.

use chrono_tz::Tz;

use super::{Blackout, Cadence};
use crate::clock::UnixMillis;

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
    _tz: Tz,
}

impl Calendar {
    /// Parses `cadence`'s cron expression (if any) and `time_zone`.
    pub fn new(_cadence: &Cadence, _time_zone: &str) -> Result<Calendar, CalendarError> {
        todo!("core::schedules::calendar")
    }

    /// The first tick strictly after `after` (cron and interval cadences;
    /// `None` for periodic ones, or past the year 5000). `id` seeds the jitter.
    pub fn next_tick(&self, _cadence: &Cadence, _id: &str, _after: UnixMillis) -> Option<UnixMillis> {
        todo!("core::schedules::calendar")
    }

    /// The latest tick at or before `at` (cron and interval cadences).
    pub fn last_tick_at_or_before(&self, _cadence: &Cadence, _id: &str, _at: UnixMillis) -> Option<UnixMillis> {
        todo!("core::schedules::calendar")
    }

    /// The end of the blackout `at` falls in, if it falls in one.
    pub fn blackout_end(&self, _blackouts: &[Blackout], _at: UnixMillis) -> Option<UnixMillis> {
        todo!("core::schedules::calendar")
    }
}
