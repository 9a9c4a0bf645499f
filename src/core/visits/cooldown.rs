//! When an origin may be handed to the queue again.
//!
//! Four waits, all of which must have passed: since it was last scheduled
//! (absolute, so a round never sends an origin twice in a row); since it was
//! scheduled without an outcome coming back (the visit was lost); since a
//! failed visit (shorter after one failure than after two in a row); since
//! a not-found visit.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{VisitStats, VisitStatus};
use crate::clock::{UnixMillis, millis};

/// The waits, with the reference scheduler's defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Cooldowns {
    /// The wait after it was last scheduled, whatever came of it (12 h by default).
    #[serde(with = "crate::clock::duration_serde")]
    pub absolute: Duration,
    /// Scheduled, and no outcome since: the visit is taken as lost after this.
    #[serde(with = "crate::clock::duration_serde")]
    pub scheduled: Duration,
    /// The wait after a failed visit that follows another failure (14
    /// days by default).
    #[serde(with = "crate::clock::duration_serde")]
    pub failed: Duration,
    /// The wait after a single failed visit, one that follows a success or
    /// nothing (1 day by default; the reference scheduler waits `failed`
    /// after any). Most single failures pass (a network cut, a busy forge),
    /// and an origin that changes daily loses two weeks of changes to
    /// each; a second failure in a row waits `failed`, a third disables.
    #[serde(with = "crate::clock::duration_serde")]
    pub failed_once: Duration,
    /// The wait after a visit that did not find the origin (31 days by default).
    #[serde(with = "crate::clock::duration_serde")]
    pub not_found: Duration,
}

impl Default for Cooldowns {
    fn default() -> Self {
        const HOUR: u64 = 3600;
        Cooldowns {
            absolute: Duration::from_secs(12 * HOUR),
            scheduled: Duration::from_secs(7 * 24 * HOUR),
            failed: Duration::from_secs(14 * 24 * HOUR),
            failed_once: Duration::from_secs(24 * HOUR),
            not_found: Duration::from_secs(31 * 24 * HOUR),
        }
    }
}

impl Cooldowns {
    /// Whether an origin with `stats` may be scheduled at `now`: strictly
    /// after [`Cooldowns::not_before`].
    pub fn allow(&self, stats: &VisitStats, now: UnixMillis) -> bool {
        self.not_before(stats).is_none_or(|until| now > until)
    }

    /// The end of the longest wait that applies: the origin may be
    /// scheduled once strictly more than every wait has gone by. `None`
    /// when no wait applies.
    pub fn not_before(&self, stats: &VisitStats) -> Option<UnixMillis> {
        let end = |since: UnixMillis, wait: Duration| since.saturating_add(millis(wait));
        let mut waits = Vec::with_capacity(3);
        if let Some(scheduled) = stats.last_scheduled {
            waits.push(end(scheduled, self.absolute));
            // An outcome at or after the scheduling ends the wait for it; else it is lost after `scheduled`.
            if stats.last_visit.is_none_or(|visit| scheduled > visit) {
                waits.push(end(scheduled, self.scheduled));
            }
        }
        match (stats.last_visit_status, stats.last_visit) {
            (Some(VisitStatus::Failed), Some(visit)) => {
                let wait = if stats.successive_visits > 1 { self.failed } else { self.failed_once.min(self.failed) };
                waits.push(end(visit, wait));
            }
            (Some(VisitStatus::NotFound), Some(visit)) => waits.push(end(visit, self.not_found)),
            _ => {}
        }
        waits.into_iter().max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1000;
    const HOUR: i64 = 3600 * SECOND;
    const DAY: i64 = 24 * HOUR;
    const NOW: i64 = 1_000 * DAY;

    fn stats(scheduled: Option<i64>, visit: Option<(i64, VisitStatus)>) -> VisitStats {
        VisitStats {
            last_scheduled: scheduled,
            last_visit: visit.map(|(at, _)| at),
            last_visit_status: visit.map(|(_, status)| status),
            ..VisitStats::default()
        }
    }

    /// Allowed one second past the wait, refused one second before it.
    fn boundary(make: impl Fn(i64) -> VisitStats, wait: i64) {
        let c = Cooldowns::default();
        assert!(!c.allow(&make(NOW - wait + SECOND), NOW), "1 s before the end of the wait");
        assert!(c.allow(&make(NOW - wait - SECOND), NOW), "1 s after it");
    }

    #[test]
    fn never_scheduled_never_visited_is_allowed() {
        assert!(Cooldowns::default().allow(&VisitStats::default(), NOW));
    }

    #[test]
    fn absolute_cooldown_after_an_answered_schedule() {
        boundary(|at| stats(Some(at), Some((at + SECOND / 2, VisitStatus::Successful))), 12 * HOUR);
    }

    #[test]
    fn a_schedule_with_no_outcome_is_taken_as_lost_after_seven_days() {
        boundary(|at| stats(Some(at), Some((at - DAY, VisitStatus::Successful))), 7 * DAY);
        boundary(|at| stats(Some(at), None), 7 * DAY);
    }

    #[test]
    fn failed_and_not_found_visits_wait_one_or_fourteen_and_thirty_one_days() {
        let again = |at, status| VisitStats { successive_visits: 2, ..stats(None, Some((at, status))) };
        boundary(|at| stats(None, Some((at, VisitStatus::Failed))), DAY);
        boundary(|at| again(at, VisitStatus::Failed), 14 * DAY);
        boundary(|at| stats(None, Some((at, VisitStatus::NotFound))), 31 * DAY);
        boundary(|at| again(at, VisitStatus::NotFound), 31 * DAY);
        // Scheduled long ago and answered by the failure: only the failure's wait counts.
        boundary(|at| stats(Some(at - 30 * DAY), Some((at, VisitStatus::Failed))), DAY);
        // A single failure never waits longer than two.
        let short = Cooldowns { failed: Duration::from_secs(3600), ..Cooldowns::default() };
        assert!(short.allow(&stats(None, Some((NOW - 2 * HOUR, VisitStatus::Failed))), NOW));
    }
}
