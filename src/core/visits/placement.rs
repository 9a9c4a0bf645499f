//! Where an origin stands in the scheduler's indexes, and the writes that
//! move it when its listing or statistics change.
//!
//! An origin that is enabled and past its cooldowns has one index entry per
//! policy that admits it, in its lister's index of that policy. Any other
//! enabled origin has a wake-up time instead (the end of its cooldowns),
//! and no index entry, so a round reading an index's head never meets an
//! origin it may not schedule. A disabled origin has neither.
//!
//! The state keeps where it was placed, so a write deletes exactly the
//! entries it wrote before, whatever the cooldowns or keys are now.

use serde::{Deserialize, Serialize};

use super::value::Freshness;
use super::{Cooldowns, DAY_MS, ListedOrigin, Policy, VisitStats};
use crate::clock::UnixMillis;

/// One row of a policy index: `(visit type, policy, lister)` names the
/// index, rows ascend by `(key, url)`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IndexEntry {
    /// The policy whose index holds the row (never `FirstVisitsAfterListing`,
    /// which reads another's).
    pub policy: Policy,
    /// The lister whose index holds the row.
    pub lister: String,
    /// The origin's place in the policy's order: smaller is visited first (see
    /// [`Policy::index_key`]).
    pub key: i64,
    /// The origin's URL, which breaks ties between equal keys.
    pub url: String,
}

/// The keys an index read covers: from `from` (inclusive) if given, up to
/// `below` (exclusive) if given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyRange {
    /// The lowest key read.
    pub from: Option<i64>,
    /// The first key not read.
    pub below: Option<i64>,
}

impl KeyRange {
    /// Every key.
    pub const ALL: KeyRange = KeyRange { from: None, below: None };

    /// The keys strictly below `below`.
    pub fn below(below: i64) -> KeyRange {
        KeyRange { from: None, below: Some(below) }
    }

    /// The keys `from..below`.
    pub fn between(from: i64, below: i64) -> KeyRange {
        KeyRange { from: Some(from), below: Some(below) }
    }

    /// Whether `key` is in the range.
    pub fn contains(self, key: i64) -> bool {
        self.from.is_none_or(|from| key >= from) && self.below.is_none_or(|below| key < below)
    }
}

/// Where an origin was placed by its last write.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The lister whose indexes hold the entries.
    pub lister: String,
    /// One key per policy index holding the origin.
    pub keys: Vec<(Policy, i64)>,
    /// When its cooldowns end, if it waits for them.
    pub wake_at: Option<UnixMillis>,
}

impl Placement {
    /// Where `origin` with `stats` belongs at `now`.
    pub fn of(origin: &ListedOrigin, stats: &VisitStats, cooldowns: &Cooldowns, now: UnixMillis) -> Placement {
        let lister = origin.lister.clone();
        if !stats.enabled {
            return Placement { lister, keys: Vec::new(), wake_at: None };
        }
        if let Some(until) = cooldowns.not_before(stats).filter(|&until| now <= until) {
            return Placement { lister, keys: Vec::new(), wake_at: Some(until) };
        }
        let keys = Policy::INDEXED.iter().filter_map(|&p| p.index_key(origin, stats).map(|key| (p, key))).collect();
        Placement { lister, keys, wake_at: None }
    }

    fn entries(&self, url: &str) -> Vec<IndexEntry> {
        self.keys
            .iter()
            .map(|&(policy, key)| IndexEntry { policy, lister: self.lister.clone(), key, url: url.to_owned() })
            .collect()
    }
}

/// Everything the scheduler keeps for one (origin, visit type).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OriginState {
    /// The origin as last listed.
    pub origin: ListedOrigin,
    /// What its visits did, and when it was last scheduled.
    pub stats: VisitStats,
    /// Where its last write put it: what the next write removes.
    pub placement: Placement,
}

/// The per-(lister, visit type) figures an origin contributes to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListerMetrics {
    /// Origins known, enabled or not.
    pub known: i64,
    /// Origins enabled.
    pub enabled: i64,
    /// Enabled, and no snapshot yet.
    pub never_visited: i64,
    /// Enabled, and updated since the last successful visit.
    pub pending_changes: i64,
    /// The sum of those updates' dates, in seconds since the Unix epoch:
    /// with `pending_changes`, their mean age.
    #[serde(default)]
    pub pending_since_s: i64,
    /// Enabled origins with a change-rate estimate...
    #[serde(default)]
    pub rated: i64,
    /// ...and the sum of their estimates, in millionths of a change per day.
    #[serde(default)]
    pub rate_micro: i64,
    /// Enabled, visited, with no listed change since: the sum of their rate
    /// estimates (millionths per day)...
    #[serde(default)]
    pub known_rate_micro: i64,
    /// ...and of each estimate times the day (since the Unix epoch) up to
    /// which its content is known: with `known_rate_micro`, the changes
    /// expected since.
    #[serde(default)]
    pub known_rate_days: i64,
}

/// Millionths of a change per day.
const MICRO: f64 = 1e6;

impl ListerMetrics {
    fn of(state: &OriginState) -> ListerMetrics {
        let (origin, stats) = (&state.origin, &state.stats);
        let enabled = stats.enabled;
        let freshness = Freshness::of(origin, stats);
        let pending = stats.last_successful.is_some() && matches!(freshness, Freshness::Changed { .. });
        let rate = stats.rate.filter(|_| enabled).map(|r| (f64::from(r) * MICRO).round() as i64);
        let known = match (freshness, rate) {
            (Freshness::Known { since } | Freshness::Listed { since }, Some(rate)) => {
                (rate, (rate as f64 * since as f64 / DAY_MS as f64).round() as i64)
            }
            _ => (0, 0),
        };
        ListerMetrics {
            known: 1,
            enabled: i64::from(enabled),
            never_visited: i64::from(enabled && stats.last_snapshot.is_none()),
            pending_changes: i64::from(enabled && pending),
            pending_since_s: match freshness {
                Freshness::Changed { since } if enabled && pending => since.div_euclid(1000),
                _ => 0,
            },
            rated: i64::from(rate.is_some()),
            rate_micro: rate.unwrap_or(0),
            known_rate_micro: known.0,
            known_rate_days: known.1,
        }
    }

    /// Whether every count is 0: a change that changes nothing.
    pub fn is_zero(&self) -> bool {
        *self == ListerMetrics::default()
    }

    /// Adds each count of `other`, times `sign` (1 or -1).
    pub fn add(&mut self, other: ListerMetrics, sign: i64) {
        self.known += sign * other.known;
        self.enabled += sign * other.enabled;
        self.never_visited += sign * other.never_visited;
        self.pending_changes += sign * other.pending_changes;
        self.pending_since_s += sign * other.pending_since_s;
        self.rated += sign * other.rated;
        self.rate_micro += sign * other.rate_micro;
        self.known_rate_micro += sign * other.known_rate_micro;
        self.known_rate_days += sign * other.known_rate_days;
    }

    /// The lister's mean change rate (per day), if any origin has an estimate.
    pub fn mean_rate(&self) -> Option<f64> {
        (self.rated > 0).then(|| self.rate_micro as f64 / MICRO / self.rated as f64)
    }

    /// The mean age at `now` of the changes listed and not yet visited.
    pub fn pending_age_ms(&self, now: UnixMillis) -> Option<i64> {
        (self.pending_changes > 0).then(|| now - self.pending_since_s * 1000 / self.pending_changes)
    }

    /// Changes expected at `now` that no visit picked up: those listed, and
    /// those the rate estimates expect since each origin's content was known.
    pub fn estimated_pending(&self, now: UnixMillis) -> f64 {
        let expected =
            (self.known_rate_micro as f64 * now as f64 / DAY_MS as f64 - self.known_rate_days as f64) / MICRO;
        self.pending_changes as f64 + expected.max(0.0)
    }
}

/// One origin's change, as a store applies it: all of it, or (on an error
/// that says so) none of it.
#[derive(Clone, Debug, PartialEq)]
pub struct OriginWrite {
    /// The state after the write (its origin names the row).
    pub state: OriginState,
    /// Index entries to delete: where the origin was and is no more.
    pub unindex: Vec<IndexEntry>,
    /// Index entries to write: where the origin is now and was not.
    pub index: Vec<IndexEntry>,
    /// The wake-up row to delete and the one to write.
    pub unwake: Option<UnixMillis>,
    /// The wake-up row to write: when the origin's cooldowns end, if that changed.
    pub wake: Option<UnixMillis>,
    /// Changes to the counts of (lister, visit type).
    pub metrics: Vec<(String, ListerMetrics)>,
}

impl OriginWrite {
    /// The write that takes an origin from `old` (none: never recorded) to
    /// `origin` and `stats`, placed as they are at `now`.
    pub fn new(
        old: Option<&OriginState>,
        origin: ListedOrigin,
        stats: VisitStats,
        cooldowns: &Cooldowns,
        now: UnixMillis,
    ) -> OriginWrite {
        let placement = Placement::of(&origin, &stats, cooldowns, now);
        let state = OriginState { origin, stats, placement };
        let url = &state.origin.url;
        let before = old.map(|o| o.placement.entries(url)).unwrap_or_default();
        let after = state.placement.entries(url);
        let unindex = before.iter().filter(|e| !after.contains(e)).cloned().collect();
        let index = after.iter().filter(|e| !before.contains(e)).cloned().collect();
        let old_wake = old.and_then(|o| o.placement.wake_at);
        let (unwake, wake) =
            if old_wake == state.placement.wake_at { (None, None) } else { (old_wake, state.placement.wake_at) };
        let mut metrics: Vec<(String, ListerMetrics)> = Vec::new();
        if let Some(old) = old {
            let mut removed = ListerMetrics::default();
            removed.add(ListerMetrics::of(old), -1);
            metrics.push((old.origin.lister.clone(), removed));
        }
        let added = ListerMetrics::of(&state);
        match metrics.first_mut() {
            Some((lister, delta)) if *lister == state.origin.lister => delta.add(added, 1),
            _ => metrics.push((state.origin.lister.clone(), added)),
        }
        metrics.retain(|(_, delta)| !delta.is_zero());
        OriginWrite { state, unindex, index, unwake, wake, metrics }
    }

    /// The visit type and URL naming the origin's row.
    pub fn key(&self) -> (&str, &str) {
        (&self.state.origin.visit_type, &self.state.origin.url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::visits::{DAY_MS, VisitResult, VisitStatus};

    const NOW: i64 = 1_000 * DAY_MS;

    fn origin(lister: &str, last_update: Option<i64>) -> ListedOrigin {
        ListedOrigin {
            url: "https://forge.example/a".into(),
            visit_type: "git".into(),
            lister: lister.into(),
            last_update,
            first_seen: NOW - 50 * DAY_MS,
            last_seen: NOW,
            is_fork: false,
            extra_loader_arguments: String::new(),
        }
    }

    fn policies(write: &OriginWrite) -> Vec<Policy> {
        write.index.iter().map(|e| e.policy).collect()
    }

    #[test]
    fn a_new_origin_enters_every_index_that_admits_it() {
        let write =
            OriginWrite::new(None, origin("l", Some(NOW - DAY_MS)), VisitStats::default(), &Cooldowns::default(), NOW);
        assert_eq!(
            policies(&write),
            vec![
                Policy::NeverVisitedOldestUpdateFirst,
                Policy::OldestScheduledFirst,
                Policy::StopAfterSuccess,
                Policy::ExpectedValue
            ]
        );
        assert!(write.unindex.is_empty() && write.wake.is_none());
        assert_eq!(
            write.metrics,
            vec![(
                "l".into(),
                ListerMetrics {
                    known: 1,
                    enabled: 1,
                    never_visited: 1,
                    pending_changes: 0,
                    ..ListerMetrics::default()
                }
            )]
        );
    }

    #[test]
    fn scheduling_moves_it_from_the_indexes_to_a_wake_up_and_an_outcome_moves_the_wake_up() {
        let cooldowns = Cooldowns::default();
        let first = OriginWrite::new(None, origin("l", Some(NOW - DAY_MS)), VisitStats::default(), &cooldowns, NOW);
        let scheduled = VisitStats { last_scheduled: Some(NOW), ..first.state.stats.clone() };
        let write = OriginWrite::new(Some(&first.state), first.state.origin.clone(), scheduled, &cooldowns, NOW);
        assert_eq!(write.unindex, first.index, "every entry it had is deleted");
        assert!(write.index.is_empty());
        assert_eq!(write.wake, Some(NOW + 7 * DAY_MS), "lost after seven days without an outcome");
        assert!(write.metrics.is_empty(), "scheduling changes no count");

        let mut visited = write.state.stats.clone();
        let at = NOW + DAY_MS;
        visited.record(
            &VisitResult {
                status: VisitStatus::Successful,
                snapshot: Some(b"s".to_vec()),
                visit_date: at,
                newest_change: None,
            },
            0,
            0.5,
        );
        let after = OriginWrite::new(Some(&write.state), write.state.origin.clone(), visited, &cooldowns, at);
        assert_eq!(
            (after.unwake, after.wake),
            (Some(NOW + 7 * DAY_MS), None),
            "answered and past 12 h: back in the indexes"
        );
        assert_eq!(policies(&after), vec![Policy::OldestScheduledFirst, Policy::ExpectedValue]);
        assert_eq!(after.index[0].key, NOW);
        assert_eq!(after.metrics[0].1.never_visited, -1);
    }

    #[test]
    fn a_lister_change_moves_entries_and_counts_between_listers() {
        let cooldowns = Cooldowns::default();
        let first = OriginWrite::new(None, origin("a", None), VisitStats::default(), &cooldowns, NOW);
        let moved = OriginWrite::new(Some(&first.state), origin("b", None), first.state.stats.clone(), &cooldowns, NOW);
        assert!(moved.unindex.iter().all(|e| e.lister == "a") && moved.index.iter().all(|e| e.lister == "b"));
        assert_eq!(moved.unindex.len(), moved.index.len());
        assert_eq!(
            moved.metrics.iter().map(|(l, m)| (l.as_str(), m.known)).collect::<Vec<_>>(),
            vec![("a", -1), ("b", 1)]
        );
    }

    #[test]
    fn a_disabled_origin_is_nowhere_and_an_unchanged_one_writes_no_entry() {
        let cooldowns = Cooldowns::default();
        let first = OriginWrite::new(None, origin("l", None), VisitStats::default(), &cooldowns, NOW);
        let same = OriginWrite::new(
            Some(&first.state),
            first.state.origin.clone(),
            first.state.stats.clone(),
            &cooldowns,
            NOW,
        );
        assert!(same.index.is_empty() && same.unindex.is_empty() && same.metrics.is_empty());
        let disabled = VisitStats { enabled: false, ..VisitStats::default() };
        let off = OriginWrite::new(Some(&first.state), first.state.origin.clone(), disabled, &cooldowns, NOW);
        assert_eq!(off.unindex.len(), first.index.len());
        assert!(off.index.is_empty() && off.wake.is_none());
        assert_eq!(
            off.metrics[0].1,
            ListerMetrics { known: 0, enabled: -1, never_visited: -1, pending_changes: 0, ..ListerMetrics::default() }
        );
    }
}
