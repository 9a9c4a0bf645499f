//! What a visit of an origin is worth now: the chance that it finds
//! something new, from what is known of the origin and its change rate
//! ([`super::rate`]).
//!
//! - Never visited successfully: a visit finds something new for certain.
//! - A lister gave a change after the last successful visit: certain too.
//! - Otherwise the content is known up to the last successful visit (or the
//!   last listing that gave no later change), and the chance is that of a
//!   Poisson change since: `1 − e^{−λ·t}`.
//!
//! The `expected_value` index orders origins by when that chance reached
//! [`DUE_CHANCE`] (for the certain ones, by when they became certain), so a
//! round reading its head takes the origins that have been worth a visit
//! the longest; past the origins due now come the ones closest to due,
//! which is where spare capacity goes.

use super::{ListedOrigin, VisitStats, chance_of_change, time_to_chance};
use crate::clock::UnixMillis;

/// The chance of a change at which an origin is due for a visit.
pub const DUE_CHANCE: f64 = 0.5;
/// The rate taken for an origin without an estimate (changes per day):
/// about once a month.
pub const DEFAULT_RATE: f64 = 1.0 / 30.0;

/// What is known of an origin's content since its last successful visit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Never visited successfully; listed first at `since`.
    New {
        /// When it was first listed.
        since: UnixMillis,
    },
    /// Its lister gave a change after the last successful visit.
    Changed {
        /// The change's date, as the lister gave it.
        since: UnixMillis,
    },
    /// Known as it was at `since`; whether it changed after is a chance.
    Known {
        /// Up to when its content is known.
        since: UnixMillis,
    },
}

impl Freshness {
    /// What is known of `origin`.
    pub fn of(origin: &ListedOrigin, stats: &VisitStats) -> Freshness {
        let Some(success) = stats.last_successful.filter(|_| stats.last_snapshot.is_some()) else {
            return Freshness::New { since: origin.first_seen };
        };
        match origin.last_update {
            Some(update) if update > success => Freshness::Changed { since: update },
            // The last listing gave no change after the visit.
            Some(_) => Freshness::Known { since: success.max(origin.last_seen) },
            None => Freshness::Known { since: success },
        }
    }

    /// The chance that a visit at `now` finds something new, for a change
    /// rate `rate` per day (`None`: [`DEFAULT_RATE`]).
    pub fn chance(self, rate: Option<f64>, now: UnixMillis) -> f64 {
        match self {
            Freshness::New { .. } | Freshness::Changed { .. } => 1.0,
            Freshness::Known { since } => chance_of_change(rate.unwrap_or(DEFAULT_RATE), now - since),
        }
    }

    /// When the chance reached [`DUE_CHANCE`], or will: the origin's key in
    /// the `expected_value` index.
    pub fn due(self, rate: Option<f64>) -> UnixMillis {
        match self {
            Freshness::New { since } | Freshness::Changed { since } => since,
            Freshness::Known { since } => {
                since.saturating_add(time_to_chance(rate.unwrap_or(DEFAULT_RATE), DUE_CHANCE))
            }
        }
    }
}

/// An origin not due yet that spare capacity could visit.
#[derive(Clone, Debug, PartialEq)]
pub struct Spare<T> {
    /// What names it (an index entry, say).
    pub item: T,
    /// The chance a visit now finds something new.
    pub chance: f64,
    /// Its visits' mean duration in seconds.
    pub seconds: f64,
}

/// Up to `slots` of `spares` whose chance is at least `min_chance`, most
/// expected new content per loader-second first; `room` is asked before
/// one is taken, as in a round.
pub fn pick_spares<T>(
    mut spares: Vec<Spare<T>>,
    slots: usize,
    min_chance: f64,
    room: &mut dyn FnMut(&T) -> bool,
) -> Vec<T> {
    spares.retain(|s| s.chance >= min_chance);
    let worth = |s: &Spare<T>| s.chance / s.seconds.max(1.0);
    spares.sort_by(|a, b| worth(b).total_cmp(&worth(a)));
    let mut picked = Vec::new();
    for spare in spares {
        if picked.len() == slots {
            break;
        }
        if room(&spare.item) {
            picked.push(spare.item);
        }
    }
    picked
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::visits::{DAY_MS, VisitStatus};

    fn origin(last_update: Option<i64>, last_seen: i64) -> ListedOrigin {
        ListedOrigin {
            url: "https://h/r".into(),
            visit_type: "git".into(),
            lister: "l".into(),
            last_update,
            first_seen: 5,
            last_seen,
            is_fork: false,
            extra_loader_arguments: String::new(),
        }
    }

    fn visited(at: i64) -> VisitStats {
        VisitStats {
            last_visit: Some(at),
            last_successful: Some(at),
            last_visit_status: Some(VisitStatus::Successful),
            last_snapshot: Some(b"s".to_vec()),
            ..VisitStats::default()
        }
    }

    #[test]
    fn what_is_known_of_an_origin() {
        let day = DAY_MS;
        assert_eq!(Freshness::of(&origin(None, 0), &VisitStats::default()), Freshness::New { since: 5 });
        assert_eq!(
            Freshness::of(&origin(Some(9 * day), 10 * day), &visited(day)),
            Freshness::Changed { since: 9 * day }
        );
        assert_eq!(
            Freshness::of(&origin(Some(0), 10 * day), &visited(day)),
            Freshness::Known { since: 10 * day },
            "the last listing saw no change after the visit"
        );
        assert_eq!(Freshness::of(&origin(None, 10 * day), &visited(day)), Freshness::Known { since: day });
    }

    #[test]
    fn spares_go_by_chance_per_second_above_the_floor() {
        let spare = |item, chance, seconds| Spare { item, chance, seconds };
        let spares =
            vec![spare("slow", 0.4, 400.0), spare("fast", 0.3, 30.0), spare("low", 0.05, 1.0), spare("b", 0.35, 60.0)];
        assert_eq!(pick_spares(spares.clone(), 10, 0.1, &mut |_| true), vec!["fast", "b", "slow"]);
        assert_eq!(pick_spares(spares.clone(), 1, 0.1, &mut |_| true), vec!["fast"]);
        assert_eq!(pick_spares(spares, 10, 0.1, &mut |s| *s != "fast"), vec!["b", "slow"], "no room for fast");
    }

    #[test]
    fn the_chance_grows_with_time_and_rate_and_the_due_time_follows() {
        let known = Freshness::Known { since: 0 };
        assert!(known.chance(Some(1.0), DAY_MS) > known.chance(Some(0.1), DAY_MS));
        assert!(known.chance(Some(0.1), 10 * DAY_MS) > known.chance(Some(0.1), DAY_MS));
        let due = known.due(Some(0.5));
        assert!((known.chance(Some(0.5), due) - DUE_CHANCE).abs() < 1e-6);
        assert!(known.due(Some(2.0)) < known.due(Some(0.5)), "a faster origin is due sooner");
        assert_eq!(Freshness::New { since: 3 }.chance(None, 3), 1.0);
        assert_eq!(Freshness::Changed { since: 7 }.due(Some(0.01)), 7);
    }
}
