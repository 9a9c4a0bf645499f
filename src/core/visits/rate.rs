//! An origin's change rate, estimated from what its visits and listings saw.
//!
//! Changes are taken as a Poisson process of unknown rate `λ` (changes per
//! day). Two kinds of evidence, after Cho & Garcia-Molina ("Estimating
//! frequency of change", 2003):
//! - **dated**: a lister gives the date of the last change. A listing at
//!   `L` that reports a change at `u` after the time `o` up to which the
//!   history was already accounted says: one change, and none in `(u, L]`;
//!   one that reports none since `o` says: none in `(o, L]`. The likelihood
//!   is `λ^X · e^{−λE}` (`X` changes, `E` quiet days): its estimate is
//!   `X / E`.
//! - **changed or not**: a visit `t` days after the last successful one sees
//!   a new snapshot (at least one change, chance `1 − e^{−λt}`) or the same
//!   one (none, `e^{−λt}`). The changed intervals are kept in bins of
//!   doubling length (count and total days per bin), so the likelihood can
//!   be maximised again at any time within a few percent of the exact one.
//!
//! A prior gives new and rarely visited origins a sensible value: `log λ`
//! normal around the log of the origin's lister's mean rate, of standard
//! deviation [`PRIOR_SPREAD`]. It is scale-free: it pulls an estimate by a
//! factor, not by a number of days, so five listings that each show a
//! change a few hours old move an origin from a lister's monthly mean to
//! about its own rate (a Gamma prior of one observation weighed as a month
//! of quiet, and kept it near the mean). The estimate is the posterior mode
//! of `log λ`: the root of a function that decreases in `λ`, found by
//! bisection on `log λ`.
//!
//! Invariants: the evidence has at most [`BINS`] bins, at most
//! [`MAX_CHANGES`] changes and [`MAX_QUIET_DAYS`] (older evidence is halved
//! away, so a rate that changes is followed); the estimate is within [`MIN_RATE`]`..=`[`MAX_RATE`].

use serde::{Deserialize, Serialize};

use super::DAY_MS;
use crate::clock::UnixMillis;

/// Bins of changed intervals: bin `b` holds intervals of `2^b` to
/// `2^(b+1)` hours (the last, everything longer).
pub const BINS: u8 = 18;
/// Changes kept as evidence: past it, every count and span is halved.
pub const MAX_CHANGES: f32 = 32.0;
/// Quiet days kept as evidence: past it, every count and span is halved.
pub const MAX_QUIET_DAYS: f32 = 3650.0;
/// The prior's standard deviation of `ln λ`: a factor of e² ≈ 7.4 is one
/// deviation.
pub const PRIOR_SPREAD: f64 = 2.0;
/// The lowest rate the estimate takes (changes per day), and the highest.
pub const MIN_RATE: f64 = 1e-5;
/// See [`MIN_RATE`].
pub const MAX_RATE: f64 = 100.0;

/// What an origin's history says of its change rate (a few dozen bytes).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChangeEvidence {
    /// Up to when the history is accounted for (ms since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<UnixMillis>,
    /// Changes seen with their dates.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dated: f32,
    /// Days known to have passed without a change.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub quiet_days: f32,
    /// Changed intervals: (bin, count, total days), by bin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<(u8, f32, f32)>,
}

fn is_zero(x: &f32) -> bool {
    *x == 0.0
}

impl ChangeEvidence {
    /// A listing at `at` that gives the origin's last change `last_update`.
    pub fn listed(&mut self, last_update: UnixMillis, at: UnixMillis) {
        let at = at.max(last_update);
        match self.until {
            Some(until) if at <= until => return,
            Some(until) if last_update <= until => self.quiet(days(at - until)),
            // A change after what was accounted (or the first listing: the
            // last change of a process running since long before).
            _ => {
                self.dated += 1.0;
                self.quiet_days += days(at - last_update) as f32;
            }
        }
        self.until = Some(at);
        self.forget();
    }

    /// A successful visit at `at` that found a new snapshot (`changed`) or
    /// the one of the visit before. The first successful visit only starts
    /// the history.
    pub fn visited(&mut self, changed: bool, at: UnixMillis) {
        match self.until {
            Some(until) if at <= until => return,
            Some(until) if changed => {
                let span = days(at - until);
                let bin = bin_of(span);
                match self.changed.iter_mut().find(|(b, _, _)| *b == bin) {
                    Some(entry) => {
                        entry.1 += 1.0;
                        entry.2 += span as f32;
                    }
                    None => {
                        self.changed.push((bin, 1.0, span as f32));
                        self.changed.sort_by_key(|(b, _, _)| *b);
                    }
                }
            }
            Some(until) => self.quiet(days(at - until)),
            None => {}
        }
        self.until = Some(at);
        self.forget();
    }

    /// A successful visit at `at` whose loader reported the date of the
    /// newest change its snapshot holds (`newest`, a commit's date, say).
    /// A new snapshot whose newest change is after what was accounted says
    /// what a dated listing says: one change, and none from it to the
    /// visit. Anything else (no date, or a date the history already
    /// covers, or one after the visit) is only "changed or not".
    pub fn visited_with_newest(&mut self, changed: bool, newest: Option<UnixMillis>, at: UnixMillis) {
        match newest {
            Some(newest) if changed && newest <= at && self.until.is_none_or(|until| newest > until) => {
                self.listed(newest, at);
            }
            _ => self.visited(changed, at),
        }
    }

    fn quiet(&mut self, span: f64) {
        self.quiet_days += span as f32;
    }

    /// Changes in the evidence, dated or not.
    pub fn changes(&self) -> f32 {
        self.dated + self.changed.iter().map(|(_, n, _)| n).sum::<f32>()
    }

    /// Halves the evidence once it holds more than [`MAX_CHANGES`] changes
    /// or [`MAX_QUIET_DAYS`]: the estimate stays, its weight against new
    /// evidence does not grow without end.
    fn forget(&mut self) {
        if self.changes() <= MAX_CHANGES && self.quiet_days <= MAX_QUIET_DAYS {
            return;
        }
        self.dated /= 2.0;
        self.quiet_days /= 2.0;
        for entry in &mut self.changed {
            entry.1 /= 2.0;
            entry.2 /= 2.0;
        }
    }

    /// The posterior mode of the rate (changes per day), the prior's mode
    /// being `prior` (the lister's mean rate, say).
    pub fn estimate(&self, prior: f64) -> f64 {
        let prior = prior.clamp(MIN_RATE, MAX_RATE);
        // d/d(ln λ) of the log posterior: dated − λ·quiet + Σ n·x/(e^x − 1)
        // (x = λ·t, t each bin's mean interval) − (ln λ − ln prior)/σ²; every
        // term decreases in λ.
        let (dated, quiet) = (f64::from(self.dated), f64::from(self.quiet_days));
        let spread = PRIOR_SPREAD * PRIOR_SPREAD;
        let slope = |rate: f64| {
            let changed: f64 = self
                .changed
                .iter()
                .map(|&(_, n, total)| {
                    let t = f64::from(total) / f64::from(n).max(f64::MIN_POSITIVE);
                    let x = rate * t;
                    f64::from(n) * if x < 1e-12 { 1.0 } else { x / x.exp_m1() }
                })
                .sum();
            dated - rate * quiet + changed - (rate / prior).ln() / spread
        };
        let (mut low, mut high) = (MIN_RATE.ln(), MAX_RATE.ln());
        if slope(MIN_RATE) <= 0.0 {
            return MIN_RATE;
        }
        if slope(MAX_RATE) >= 0.0 {
            return MAX_RATE;
        }
        for _ in 0..60 {
            let mid = (low + high) / 2.0;
            if slope(mid.exp()) > 0.0 {
                low = mid;
            } else {
                high = mid;
            }
        }
        ((low + high) / 2.0).exp()
    }
}

/// The chance that an origin of rate `rate` (per day) changed within `span_ms`.
pub fn chance_of_change(rate: f64, span_ms: i64) -> f64 {
    if span_ms <= 0 {
        return 0.0;
    }
    -(-rate * days(span_ms)).exp_m1()
}

/// How long after `since` an origin of rate `rate` has changed with chance
/// `chance` (below 1): `−ln(1 − chance) / rate`.
pub fn time_to_chance(rate: f64, chance: f64) -> i64 {
    let days = -(-chance.clamp(0.0, 0.999_999)).ln_1p() / rate.clamp(MIN_RATE, MAX_RATE);
    (days * DAY_MS as f64).min(i64::MAX as f64 / 4.0) as i64
}

fn days(ms: i64) -> f64 {
    ms as f64 / DAY_MS as f64
}

/// The bin of an interval of `span` days.
fn bin_of(span: f64) -> u8 {
    let hours = (span * 24.0).max(1.0);
    (hours.log2().floor() as i64).clamp(0, i64::from(BINS) - 1) as u8
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    /// Poisson change times of rate `rate` per day, from 0 to `end_days`.
    fn changes(rng: &mut StdRng, rate: f64, end_days: f64) -> Vec<f64> {
        let mut at = 0.0;
        let mut all = Vec::new();
        loop {
            at += -(1.0 - rng.random::<f64>()).ln() / rate;
            if at > end_days {
                return all;
            }
            all.push(at);
        }
    }

    fn ms(days: f64) -> i64 {
        (days * DAY_MS as f64) as i64
    }

    /// Visits at random gaps (uniform between `gap / 2` and `3 gap / 2`
    /// days) that see only "changed or not".
    fn visited_estimate(rng: &mut StdRng, rate: f64, gap: f64, visits: usize, prior: f64) -> f64 {
        let all = changes(rng, rate, gap * 2.0 * visits as f64);
        let mut evidence = ChangeEvidence::default();
        let (mut at, mut seen) = (0.0, 0usize);
        for _ in 0..=visits {
            let now = all.partition_point(|&c| c <= at);
            evidence.visited(now > seen, ms(at));
            seen = now;
            at += gap * (0.5 + rng.random::<f64>());
        }
        evidence.estimate(prior)
    }

    /// Visits at random gaps whose loader reports the newest change's date.
    fn dated_visits_estimate(rng: &mut StdRng, rate: f64, gap: f64, visits: usize, prior: f64) -> f64 {
        let all = changes(rng, rate, gap * 2.0 * visits as f64 + 100.0);
        let mut evidence = ChangeEvidence::default();
        let (mut at, mut seen) = (100.0, all.partition_point(|&c| c <= 100.0));
        for _ in 0..visits {
            let now = all.partition_point(|&c| c <= at);
            let newest = now.checked_sub(1).map(|i| ms(all[i]));
            evidence.visited_with_newest(now > seen || evidence.until.is_none(), newest, ms(at));
            seen = now;
            at += gap * (0.5 + rng.random::<f64>());
        }
        evidence.estimate(prior)
    }

    #[test]
    fn visits_that_report_the_newest_change_learn_faster() {
        // The same visits, with and without the newest change's date: with
        // it, 8 visits put the median error within 35% (the prior 10× off),
        // closer than changed-or-not visits get.
        for rate in [1.0 / 30.0, 0.5, 2.0] {
            let gap = 1.0 / rate;
            let dated = median_error(|rng| dated_visits_estimate(rng, rate, gap, 8, rate * 10.0), rate);
            let blind = median_error(|rng| visited_estimate(rng, rate, gap, 8, rate * 10.0), rate);
            assert!(dated < 0.35, "rate {rate}/day: median error {dated:.2} with dates");
            assert!(dated < blind, "rate {rate}/day: {dated:.2} with dates, {blind:.2} without");
        }
        // A date the history already covers, or one after the visit, is
        // only "changed or not".
        let mut evidence = ChangeEvidence::default();
        evidence.visited_with_newest(true, Some(ms(1.0)), ms(2.0));
        assert_eq!((evidence.dated, evidence.quiet_days), (1.0, 1.0), "the first visit: one change, a quiet day");
        evidence.visited_with_newest(true, Some(ms(1.5)), ms(4.0));
        assert_eq!((evidence.dated, evidence.changes()), (1.0, 2.0), "an old date: a changed interval");
        evidence.visited_with_newest(true, Some(ms(9.0)), ms(6.0));
        assert_eq!((evidence.dated, evidence.changes()), (1.0, 3.0), "a date ahead: a changed interval");
        evidence.visited_with_newest(false, Some(ms(6.0)), ms(7.0));
        assert_eq!((evidence.changes(), evidence.quiet_days), (3.0, 2.0), "unchanged: a quiet day");
    }

    /// The median relative error of the estimate over many origins.
    fn median_error(mut estimate: impl FnMut(&mut StdRng) -> f64, rate: f64) -> f64 {
        let mut rng = StdRng::seed_from_u64(7);
        let mut errors: Vec<f64> = (0..400).map(|_| (estimate(&mut rng) / rate - 1.0).abs()).collect();
        errors.sort_by(f64::total_cmp);
        errors[errors.len() / 2]
    }

    #[test]
    fn changed_or_not_visits_at_random_gaps_find_the_rate() {
        // Rates from once a year to twice a day, visits about as often as
        // the changes and four times as often: after 32 visits the median
        // error is within 25%, whatever the prior says (here 10× off).
        for rate in [1.0 / 365.0, 1.0 / 30.0, 0.5, 2.0] {
            for per_change in [1.0, 0.25] {
                let gap = per_change / rate;
                let error = median_error(|rng| visited_estimate(rng, rate, gap, 32, rate * 10.0), rate);
                assert!(error < 0.25, "rate {rate}/day, a visit every {gap:.2} days: median error {error:.2}");
            }
        }
    }

    #[test]
    fn more_visits_give_a_closer_estimate() {
        let rate = 0.2;
        let errors: Vec<f64> = [4, 16, 64]
            .into_iter()
            .map(|visits| median_error(|rng| visited_estimate(rng, rate, 3.0, visits, 0.1), rate))
            .collect();
        assert!(errors[0] > errors[1] && errors[1] > errors[2], "{errors:?}");
        assert!(errors[2] < 0.15, "{errors:?}");
    }

    #[test]
    fn dated_listings_find_the_rate() {
        // Listings every 1 to 7 days giving the last change's date, long
        // enough for 32 listings and 32 changes: the median error is within
        // 25%, the prior 10× off.
        for rate in [1.0 / 60.0, 0.1, 0.5, 2.0] {
            let error = median_error(
                |rng| {
                    let (start, span) = (100.0, (32.0 / rate).max(128.0));
                    let all = changes(rng, rate, start + span);
                    let mut evidence = ChangeEvidence::default();
                    let mut at = start;
                    while at < start + span {
                        let last = all[..all.partition_point(|&c| c <= at)].last().copied().unwrap_or(0.0);
                        evidence.listed(ms(last), ms(at));
                        at += 1.0 + 6.0 * rng.random::<f64>();
                    }
                    evidence.estimate(rate * 10.0)
                },
                rate,
            );
            assert!(error < 0.25, "rate {rate}/day: median error {error:.2}");
        }
    }

    #[test]
    fn without_evidence_the_estimate_is_the_prior() {
        let evidence = ChangeEvidence::default();
        assert!((evidence.estimate(0.3) / 0.3 - 1.0).abs() < 1e-6);
        assert_eq!(evidence.estimate(0.0), MIN_RATE, "clamped");
        let mut once = ChangeEvidence::default();
        once.visited(true, 0);
        assert_eq!(once, ChangeEvidence { until: Some(0), ..ChangeEvidence::default() }, "a first visit starts it");
    }

    #[test]
    fn evidence_stays_bounded_over_a_long_history() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut evidence = ChangeEvidence::default();
        let mut at = 0i64;
        for _ in 0..100_000 {
            at += rng.random_range(1..(400 * DAY_MS));
            evidence.visited(rng.random::<bool>(), at);
        }
        assert!(evidence.changed.len() <= usize::from(BINS));
        assert!(evidence.changes() <= MAX_CHANGES + 1.0 && evidence.quiet_days <= MAX_QUIET_DAYS + 400.0);
        assert!(serde_json::to_vec(&evidence).unwrap().len() < 1024);
        let rate = evidence.estimate(1.0);
        assert!((MIN_RATE..=MAX_RATE).contains(&rate));
    }

    #[test]
    fn a_rate_that_changes_is_followed() {
        let mut evidence = ChangeEvidence::default();
        let mut at = 0;
        for _ in 0..200 {
            at += DAY_MS;
            evidence.visited(false, at);
        }
        assert!(evidence.estimate(0.1) < 0.01, "{}", evidence.estimate(0.1));
        for _ in 0..200 {
            at += DAY_MS;
            evidence.visited(true, at);
        }
        assert!(evidence.estimate(0.1) > 1.0, "{}", evidence.estimate(0.1));
    }

    #[test]
    fn chances_and_times_agree() {
        let t = time_to_chance(0.5, 0.5);
        assert!((chance_of_change(0.5, t) - 0.5).abs() < 1e-6);
        assert_eq!(chance_of_change(1.0, 0), 0.0);
        assert!(chance_of_change(1.0, 100 * DAY_MS) > 0.999);
    }
}
