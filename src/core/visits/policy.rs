//! The policies that choose which origins of a visit type to visit next.
//! Each admits some origins and orders them; a round takes from each, in
//! that order, the slots [`super::share_slots`] gives it, among the origins
//! the cooldowns allow.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use super::value::{Freshness, Worth};
use super::{Cooldowns, VisitStats, VisitStatus};
use crate::clock::UnixMillis;

/// An origin as its lister reported it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedOrigin {
    /// The origin's URL; with the visit type, it names the origin.
    pub url: String,
    /// The kind of loader that visits it, e.g. `git`.
    pub visit_type: String,
    /// The lister's name and instance, e.g. `gitlab/framagit`.
    pub lister: String,
    /// When the forge says the origin last changed, if it says.
    pub last_update: Option<UnixMillis>,
    /// When a lister first reported it.
    pub first_seen: UnixMillis,
    /// When a lister last reported it.
    #[serde(default)]
    pub last_seen: UnixMillis,
    /// Whether the forge says it is a fork of another origin; passed on to the
    /// loader.
    #[serde(default)]
    pub is_fork: bool,
    /// Extra arguments for the loader, a JSON object as the lister gave it.
    #[serde(default)]
    pub extra_loader_arguments: String,
}

/// A rule that admits some origins of a visit type and orders them for visiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Never visited, with a known update date: oldest update first.
    NeverVisitedOldestUpdateFirst,
    /// Visited, and updated since the last successful visit: largest lag first.
    AlreadyVisitedOrderByLag,
    /// No update date from the forge: by queue position (the feedback's clock).
    OriginsWithoutLastUpdate,
    /// Not scheduled since its lister's last listing finished: never scheduled first.
    FirstVisitsAfterListing,
    /// Oldest scheduled (never scheduled) first, whatever else is known.
    OldestScheduledFirst,
    /// Until one visit succeeds, then never again (one-shot visit types).
    StopAfterSuccess,
    /// Every origin, by the changes a visit is expected to find per
    /// loader-second ([`super::value`]): a key of band of growth, then the
    /// time that worth reaches [`super::value::DUE_WORTH`].
    ExpectedValue,
}

/// What a policy looks at for one origin.
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    /// The origin as listed.
    pub origin: &'a ListedOrigin,
    /// What its visits did so far.
    pub stats: &'a VisitStats,
    /// When the origin's lister last finished a listing.
    pub listing_finished: Option<UnixMillis>,
}

impl Policy {
    /// Every policy, in order of declaration.
    pub const ALL: [Policy; 7] = [
        Policy::NeverVisitedOldestUpdateFirst,
        Policy::AlreadyVisitedOrderByLag,
        Policy::OriginsWithoutLastUpdate,
        Policy::FirstVisitsAfterListing,
        Policy::OldestScheduledFirst,
        Policy::StopAfterSuccess,
        Policy::ExpectedValue,
    ];

    /// The policies with an index of their own. `FirstVisitsAfterListing`
    /// reads the lister's `OldestScheduledFirst` index below the time its
    /// listing finished.
    pub const INDEXED: [Policy; 6] = [
        Policy::NeverVisitedOldestUpdateFirst,
        Policy::AlreadyVisitedOrderByLag,
        Policy::OriginsWithoutLastUpdate,
        Policy::OldestScheduledFirst,
        Policy::StopAfterSuccess,
        Policy::ExpectedValue,
    ];

    /// The name used in configuration and on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Policy::NeverVisitedOldestUpdateFirst => "never_visited_oldest_update_first",
            Policy::AlreadyVisitedOrderByLag => "already_visited_order_by_lag",
            Policy::OriginsWithoutLastUpdate => "origins_without_last_update",
            Policy::FirstVisitsAfterListing => "first_visits_after_listing",
            Policy::OldestScheduledFirst => "oldest_scheduled_first",
            Policy::StopAfterSuccess => "stop_after_success",
            Policy::ExpectedValue => "expected_value",
        }
    }

    /// The policy whose [`Policy::name`] is `name`, if any.
    pub fn from_name(name: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The index this policy reads.
    pub fn index(self) -> Policy {
        match self {
            Policy::FirstVisitsAfterListing => Policy::OldestScheduledFirst,
            other => other,
        }
    }

    /// The origin's place in this policy's order (smaller is visited
    /// first, ties by URL), or `None` when the policy does not admit it.
    /// Listing-dependent admission is not decided here: for
    /// `FirstVisitsAfterListing` this is the key of its index, which the
    /// reader bounds by the listing's end (see [`Policy::admits`]).
    pub fn index_key(self, origin: &ListedOrigin, stats: &VisitStats) -> Option<i64> {
        match self {
            Policy::NeverVisitedOldestUpdateFirst => {
                if stats.last_snapshot.is_none() {
                    origin.last_update
                } else {
                    None
                }
            }
            Policy::AlreadyVisitedOrderByLag => {
                match (stats.last_snapshot.is_some(), origin.last_update, stats.last_successful) {
                    (true, Some(update), Some(success)) if update > success => Some(success - update),
                    _ => None,
                }
            }
            Policy::OriginsWithoutLastUpdate => {
                origin.last_update.is_none().then(|| stats.next_visit_queue_position.unwrap_or(i64::MIN))
            }
            Policy::FirstVisitsAfterListing | Policy::OldestScheduledFirst => {
                Some(stats.last_scheduled.unwrap_or(i64::MIN))
            }
            Policy::StopAfterSuccess => (stats.last_visit_status != Some(VisitStatus::Successful))
                .then(|| origin.last_update.unwrap_or(i64::MAX)),
            Policy::ExpectedValue => {
                let seconds = stats.visit_seconds.map(f64::from);
                let worth = Worth::of(Freshness::of(origin, stats), stats.rate.map(f64::from), seconds);
                Some(worth.spread(&origin.url).key())
            }
        }
    }

    /// Whether the policy would visit this origin at all (cooldowns aside).
    pub fn admits(self, c: &Candidate<'_>) -> bool {
        match (self, self.index_key(c.origin, c.stats)) {
            (_, None) => false,
            (Policy::FirstVisitsAfterListing, Some(key)) => c.listing_finished.is_some_and(|finished| key < finished),
            (_, Some(_)) => true,
        }
    }

    /// The policy's order: `Less` is visited first; ties go by URL, so
    /// that the order is total and the same as the index's.
    pub fn compare(self, a: &Candidate<'_>, b: &Candidate<'_>) -> Ordering {
        let key = |c: &Candidate<'_>| self.index_key(c.origin, c.stats);
        key(a).cmp(&key(b)).then_with(|| a.origin.url.cmp(&b.origin.url))
    }

    /// Up to `limit` candidates this policy admits and the cooldowns allow at
    /// `now`, best first: the order a round reads from the index.
    pub fn select<'a>(
        self,
        candidates: &[Candidate<'a>],
        limit: usize,
        cooldowns: &Cooldowns,
        now: UnixMillis,
    ) -> Vec<Candidate<'a>> {
        let mut chosen: Vec<Candidate<'a>> = candidates
            .iter()
            .filter(|c| c.stats.enabled && self.admits(c) && cooldowns.allow(c.stats, now))
            .copied()
            .collect();
        chosen.sort_by(|a, b| self.compare(a, b));
        chosen.truncate(limit);
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::visits::DAY_MS;

    const NOW: i64 = 1_000 * DAY_MS;

    struct Fixture {
        origins: Vec<ListedOrigin>,
        stats: Vec<VisitStats>,
    }

    impl Fixture {
        fn new() -> Fixture {
            Fixture { origins: Vec::new(), stats: Vec::new() }
        }

        fn add(&mut self, url: &str, last_update: Option<i64>, stats: VisitStats) -> &mut Self {
            let first_seen = self.origins.len() as i64;
            self.origins.push(ListedOrigin {
                url: url.into(),
                visit_type: "git".into(),
                lister: "l".into(),
                last_update,
                first_seen,
                last_seen: first_seen,
                is_fork: false,
                extra_loader_arguments: String::new(),
            });
            self.stats.push(stats);
            self
        }

        fn pick(&self, policy: Policy, listing_finished: Option<i64>) -> Vec<&str> {
            let candidates: Vec<Candidate<'_>> = self
                .origins
                .iter()
                .zip(&self.stats)
                .map(|(origin, stats)| Candidate { origin, stats, listing_finished })
                .collect();
            policy.select(&candidates, 10, &Cooldowns::default(), NOW).iter().map(|c| c.origin.url.as_str()).collect()
        }
    }

    fn visited(successful: i64, snapshot: &[u8]) -> VisitStats {
        VisitStats {
            last_visit: Some(successful),
            last_successful: Some(successful),
            last_visit_status: Some(VisitStatus::Successful),
            last_snapshot: Some(snapshot.to_vec()),
            ..VisitStats::default()
        }
    }

    #[test]
    fn never_visited_oldest_update_first() {
        let mut f = Fixture::new();
        f.add("new", Some(NOW - DAY_MS), VisitStats::default())
            .add("old", Some(NOW - 9 * DAY_MS), VisitStats::default())
            .add("no-date", None, VisitStats::default())
            .add("visited", Some(NOW - 20 * DAY_MS), visited(NOW - 30 * DAY_MS, b"s"));
        assert_eq!(f.pick(Policy::NeverVisitedOldestUpdateFirst, None), vec!["old", "new"]);
    }

    #[test]
    fn already_visited_by_lag_largest_first() {
        let mut f = Fixture::new();
        f.add("small-lag", Some(NOW - 5 * DAY_MS), visited(NOW - 6 * DAY_MS, b"a"))
            .add("big-lag", Some(NOW - 2 * DAY_MS), visited(NOW - 40 * DAY_MS, b"b"))
            .add("up-to-date", Some(NOW - 50 * DAY_MS), visited(NOW - 20 * DAY_MS, b"c"))
            .add("never", Some(NOW), VisitStats::default());
        assert_eq!(f.pick(Policy::AlreadyVisitedOrderByLag, None), vec!["big-lag", "small-lag"]);
    }

    #[test]
    fn without_last_update_by_queue_position_unset_first() {
        let mut f = Fixture::new();
        let at = |position| VisitStats { next_visit_queue_position: Some(position), ..VisitStats::default() };
        f.add("later", None, at(50)).add("sooner", None, at(10)).add("unset", None, VisitStats::default());
        f.add("dated", Some(NOW), VisitStats::default());
        assert_eq!(f.pick(Policy::OriginsWithoutLastUpdate, None), vec!["unset", "sooner", "later"]);
    }

    #[test]
    fn first_visits_after_listing_and_oldest_scheduled() {
        let mut f = Fixture::new();
        let scheduled = |at| VisitStats { last_scheduled: Some(at), ..VisitStats::default() };
        f.add("before-listing", None, scheduled(NOW - 10 * DAY_MS)).add("never", None, VisitStats::default()).add(
            "after-listing",
            None,
            scheduled(NOW - DAY_MS),
        );
        let finished = Some(NOW - 2 * DAY_MS);
        assert_eq!(f.pick(Policy::FirstVisitsAfterListing, finished), vec!["never", "before-listing"]);
        assert!(f.pick(Policy::FirstVisitsAfterListing, None).is_empty(), "no listing finished yet");
        // Scheduled a day ago with no outcome yet: in flight, held by the 7-day cooldown.
        assert_eq!(f.pick(Policy::OldestScheduledFirst, None), vec!["never", "before-listing"]);
    }

    #[test]
    fn stop_after_success_and_disabled_origins() {
        let mut f = Fixture::new();
        let failed = VisitStats {
            last_visit: Some(NOW - 20 * DAY_MS),
            last_visit_status: Some(VisitStatus::Failed),
            ..VisitStats::default()
        };
        f.add("done", None, visited(NOW - DAY_MS, b"s"))
            .add("failed-long-ago", Some(NOW - DAY_MS), failed)
            .add("fresh", Some(NOW - 3 * DAY_MS), VisitStats::default())
            .add("disabled", None, VisitStats { enabled: false, ..VisitStats::default() });
        assert_eq!(f.pick(Policy::StopAfterSuccess, None), vec!["fresh", "failed-long-ago"]);
    }
}
