//! A visit's outcome fed back into its origin's statistics.
//!
//! Each origin keeps an interval index (`next_position_offset`, 4 at first).
//! A visit that finds a new snapshot moves it down by 2, any other outcome
//! up by 1, clamped to `0..=MAX_OFFSET`; the index names the time to the
//! next visit (see [`interval_days`]), moved at random by up to ±10% so
//! that a host's origins do not all come due at once. Three failed or
//! not-found visits in a row disable the origin until a lister reports it
//! again.

use crate::clock::UnixMillis;

use super::{ChangeEvidence, DAY_MS};

/// The largest interval index (4,096 days).
pub const MAX_OFFSET: u8 = 10;
/// The index of an origin never visited.
pub const INITIAL_OFFSET: u8 = 4;
/// Failed or not-found visits in a row that disable an origin.
pub const DISABLE_AFTER: u32 = 3;
/// The interval is moved at random by up to this fraction, either way.
pub const JITTER: f64 = 0.1;

/// Days to the next visit for interval index `offset`: 1 day for 0 and 1,
/// 2 days for 2 to 4, then ×4 per step (4, 16, 64 … 4,096 days at 10).
pub fn interval_days(offset: u8) -> u64 {
    match offset {
        0..=1 => 1,
        2..=4 => 2,
        _ => 4u64.pow(u32::from(offset) - 4),
    }
}

/// How a visit ended, as the loader reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VisitStatus {
    /// The loader visited the origin and took a snapshot.
    Successful,
    /// The visit failed.
    Failed,
    /// The origin was not found at its URL.
    NotFound,
}

/// A visit's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VisitResult {
    /// How the visit ended, as the loader says.
    pub status: VisitStatus,
    /// The snapshot the visit found (successful visits only; a successful
    /// visit without one counts as failed).
    pub snapshot: Option<Vec<u8>>,
    /// When the visit happened.
    pub visit_date: UnixMillis,
    /// The date of the newest change the snapshot holds, when the loader
    /// knows it (the latest commit's, say): a visit that reports it teaches
    /// the origin's change rate as much as a dated listing does.
    pub newest_change: Option<UnixMillis>,
}

/// What the scheduler knows of one (origin, visit type).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct VisitStats {
    /// When the last visit recorded happened (its `visit_date`).
    pub last_visit: Option<UnixMillis>,
    /// How the last visit recorded ended (a success without a snapshot counts
    /// as failed).
    pub last_visit_status: Option<VisitStatus>,
    /// When the latest successful visit happened.
    pub last_successful: Option<UnixMillis>,
    /// The snapshot the last successful visit found: a different one next time
    /// moves the interval index down.
    pub last_snapshot: Option<Vec<u8>>,
    /// When it was last handed to the queue.
    pub last_scheduled: Option<UnixMillis>,
    /// The interval index.
    pub next_position_offset: u8,
    /// Visits in a row with the same status as the last one.
    pub successive_visits: u32,
    /// Where the origin stands on its visit type's queue-position clock
    /// (virtual milliseconds), for origins whose forge gives no update date.
    pub next_visit_queue_position: Option<i64>,
    /// False once disabled; a lister reporting the origin again enables it.
    pub enabled: bool,
    /// What its visits and listings said of how often it changes.
    #[serde(default)]
    pub evidence: ChangeEvidence,
    /// Its change rate (changes per day) as estimated at its last write
    /// from `evidence` and its lister's mean (see [`super::rate`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f32>,
    /// Its visits' mean duration in seconds (moving average).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visit_seconds: Option<f32>,
}

impl Default for VisitStats {
    fn default() -> Self {
        VisitStats {
            last_visit: None,
            last_visit_status: None,
            last_successful: None,
            last_snapshot: None,
            last_scheduled: None,
            next_position_offset: INITIAL_OFFSET,
            successive_visits: 1,
            next_visit_queue_position: None,
            enabled: true,
            evidence: ChangeEvidence::default(),
            rate: None,
            visit_seconds: None,
        }
    }
}

impl VisitStats {
    /// Records `outcome`. `queue_clock` is the visit type's queue-position
    /// clock: the next position is the interval past the origin's own
    /// position or the clock, whichever is later, so an origin visited late
    /// waits a whole interval from now. `unit` is a random number in
    /// `[0, 1)` for the jitter. False
    /// (and nothing changed) for an outcome no newer than the last visit.
    pub fn record(&mut self, outcome: &VisitResult, queue_clock: i64, unit: f64) -> bool {
        if self.last_visit.is_some_and(|last| outcome.visit_date <= last) {
            return false;
        }
        let status = match (outcome.status, &outcome.snapshot) {
            (VisitStatus::Successful, None) => VisitStatus::Failed,
            (status, _) => status,
        };
        let visited_before = self.last_visit.is_some();
        let eventful = status == VisitStatus::Successful && outcome.snapshot != self.last_snapshot;
        if visited_before {
            let moved = if eventful {
                i16::from(self.next_position_offset) - 2
            } else {
                i16::from(self.next_position_offset) + 1
            };
            self.next_position_offset = moved.clamp(0, i16::from(MAX_OFFSET)) as u8;
        }
        self.successive_visits = if self.last_visit_status == Some(status) { self.successive_visits + 1 } else { 1 };
        self.last_visit = Some(outcome.visit_date);
        self.last_visit_status = Some(status);
        if status == VisitStatus::Successful {
            self.last_successful = Some(self.last_successful.map_or(outcome.visit_date, |t| t.max(outcome.visit_date)));
            self.last_snapshot = outcome.snapshot.clone();
        }
        let days = interval_days(self.next_position_offset) as f64;
        let interval = (days * DAY_MS as f64 * (1.0 + JITTER * (2.0 * unit - 1.0))) as i64;
        let base = self.next_visit_queue_position.map_or(queue_clock, |own| own.max(queue_clock));
        self.next_visit_queue_position = Some(base + interval);
        if status != VisitStatus::Successful && self.successive_visits >= DISABLE_AFTER {
            self.enabled = false;
        }
        true
    }

    /// A lister reported the origin again: it is enabled whatever happened.
    pub fn relisted(&mut self) {
        self.enabled = true;
    }

    /// Learns from a visit's outcome, recorded at `now` (its end), what
    /// it says of the origin's change rate and of its visits' duration.
    /// Only for an origin whose lister gives no update date: the listings
    /// of the others are their evidence (both would count one span twice).
    /// Call before [`VisitStats::record`], which moves the last snapshot.
    pub fn learn(&mut self, outcome: &VisitResult, now: UnixMillis, dated: bool) {
        if self.last_visit.is_some_and(|last| outcome.visit_date <= last) {
            return;
        }
        let seconds = ((now - outcome.visit_date) as f64 / 1000.0).clamp(1.0, 86_400.0) as f32;
        if outcome.status == VisitStatus::Successful && outcome.snapshot.is_some() {
            self.visit_seconds = Some(self.visit_seconds.map_or(seconds, |mean| mean + (seconds - mean) / 8.0));
            if !dated {
                let changed = outcome.snapshot != self.last_snapshot;
                self.evidence.visited_with_newest(changed, outcome.newest_change, outcome.visit_date);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn visit(status: VisitStatus, snapshot: Option<&[u8]>, day: i64) -> VisitResult {
        VisitResult { status, snapshot: snapshot.map(<[u8]>::to_vec), visit_date: day * DAY_MS, newest_change: None }
    }

    #[test]
    fn the_interval_table() {
        let days: Vec<u64> = (0..=MAX_OFFSET).map(interval_days).collect();
        assert_eq!(days, vec![1, 1, 2, 2, 2, 4, 16, 64, 256, 1024, 4096]);
    }

    #[test]
    fn a_new_snapshot_moves_the_index_down_two_anything_else_up_one_clamped() {
        let mut stats = VisitStats::default();
        assert!(stats.record(&visit(VisitStatus::Successful, Some(b"a"), 1), 0, 0.5));
        assert_eq!(stats.next_position_offset, 4, "a first visit leaves the index");
        stats.record(&visit(VisitStatus::Successful, Some(b"b"), 2), 0, 0.5);
        assert_eq!(stats.next_position_offset, 2);
        stats.record(&visit(VisitStatus::Successful, Some(b"c"), 3), 0, 0.5);
        stats.record(&visit(VisitStatus::Successful, Some(b"d"), 4), 0, 0.5);
        assert_eq!(stats.next_position_offset, 0, "clamped at 0");
        assert_eq!(stats.successive_visits, 4);
        for day in 5..20 {
            stats.record(&visit(VisitStatus::Successful, Some(b"d"), day), 0, 0.5);
        }
        assert_eq!(stats.next_position_offset, MAX_OFFSET, "uneventful visits climb to the cap");
        assert!(stats.enabled, "uneventful visits never disable");
    }

    #[test]
    fn a_success_after_a_failure_restarts_the_run() {
        let mut stats = VisitStats::default();
        stats.record(&visit(VisitStatus::Successful, Some(b"a"), 1), 0, 0.5);
        stats.record(&visit(VisitStatus::Failed, None, 2), 0, 0.5);
        assert_eq!((stats.next_position_offset, stats.successive_visits), (5, 1), "a failure counts +1");
        stats.record(&visit(VisitStatus::Successful, Some(b"a"), 3), 0, 0.5);
        assert_eq!((stats.next_position_offset, stats.successive_visits), (6, 1), "the same snapshot: +1");
        assert_eq!(stats.last_successful, Some(3 * DAY_MS));
    }

    #[test]
    fn three_failures_in_a_row_disable_until_listed_again() {
        let mut stats = VisitStats::default();
        stats.record(&visit(VisitStatus::NotFound, None, 1), 0, 0.5);
        stats.record(&visit(VisitStatus::NotFound, None, 2), 0, 0.5);
        assert!(stats.enabled, "two are not enough");
        stats.record(&visit(VisitStatus::NotFound, None, 3), 0, 0.5);
        assert!(!stats.enabled);
        assert_eq!((stats.next_position_offset, stats.successive_visits), (6, 3));
        stats.relisted();
        assert!(stats.enabled);
    }

    #[test]
    fn a_success_without_a_snapshot_counts_as_a_failure() {
        let mut stats = VisitStats::default();
        for day in 1..=3 {
            stats.record(&visit(VisitStatus::Successful, None, day), 0, 0.5);
        }
        assert_eq!(stats.last_visit_status, Some(VisitStatus::Failed));
        assert!(!stats.enabled);
        assert_eq!(stats.last_successful, None);
    }

    #[test]
    fn an_outcome_older_than_the_last_changes_nothing() {
        let mut stats = VisitStats::default();
        stats.record(&visit(VisitStatus::Successful, Some(b"a"), 5), 0, 0.5);
        let before = stats.clone();
        assert!(!stats.record(&visit(VisitStatus::Failed, None, 4), 0, 0.5));
        assert!(!stats.record(&visit(VisitStatus::Failed, None, 5), 0, 0.5), "the same date again");
        assert_eq!(stats, before);
    }

    #[test]
    fn the_next_position_is_the_interval_ahead_within_ten_percent() {
        let mut stats = VisitStats::default();
        let clock = 1_000 * DAY_MS;
        stats.record(&visit(VisitStatus::Successful, Some(b"a"), 1), clock, 0.5);
        assert_eq!(stats.next_visit_queue_position, Some(clock + 2 * DAY_MS), "own position unset: from the clock");
        let mut low = VisitStats::default();
        low.record(&visit(VisitStatus::Successful, Some(b"a"), 1), clock, 0.0);
        let ahead = low.next_visit_queue_position.unwrap() - clock;
        assert!((ahead - 2 * DAY_MS * 9 / 10).abs() <= 1, "10% early at the lowest draw: {ahead}");
        let mut high = VisitStats::default();
        high.record(&visit(VisitStatus::Successful, Some(b"a"), 1), clock, 0.999_999);
        let ahead = high.next_visit_queue_position.unwrap() - clock;
        assert!(ahead < 2 * DAY_MS * 11 / 10 && ahead > 2 * DAY_MS * 109 / 100);
        stats.record(&visit(VisitStatus::Successful, Some(b"a"), 2), 0, 0.5);
        assert_eq!(stats.next_visit_queue_position, Some(clock + 2 * DAY_MS + 4 * DAY_MS), "then from its own");
        stats.record(&visit(VisitStatus::Successful, Some(b"a"), 3), 2_000 * DAY_MS, 0.5);
        assert_eq!(stats.next_visit_queue_position, Some(2_000 * DAY_MS + 16 * DAY_MS), "or the clock, if later");
    }
}
