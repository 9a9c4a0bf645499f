//! The arithmetic of the benchmark and simulation reports: percentiles,
//! CDFs, Jain's fairness index against the max-min fair allocation, a Zipf
//! sampler, and pacing of offered load. Pure functions, tested here.

use std::time::{Duration, Instant};

/// The empirical CDF of sorted values, thinned to at most 500 points.
pub(crate) fn cdf(sorted: &[f64]) -> Vec<(f64, f64)> {
    let step = (sorted.len() / 500).max(1);
    let n = sorted.len() as f64;
    let mut points: Vec<(f64, f64)> =
        sorted.iter().enumerate().step_by(step).map(|(i, v)| (*v, (i + 1) as f64 / n)).collect();
    if let Some(last) = sorted.last() {
        points.push((*last, 1.0));
    }
    points
}

/// The `q` quantile (0 to 1) of `sorted`, nearest rank; 0 when empty.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Sorts in place and returns the slice, for [`quantile`].
pub(crate) fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

/// The median of `values` (the lower middle for an even count); 0 when empty.
pub(crate) fn median(values: &[f64]) -> f64 {
    let sorted = sorted(values.to_vec());
    if sorted.is_empty() { 0.0 } else { sorted[(sorted.len() - 1) / 2] }
}

/// The max-min fair division of `capacity` among keys of weights `weights`
/// that want `demand`: no key gets more than it wants, and capacity left by
/// a key that wants less goes to the others in proportion to their weights
/// (water filling).
pub(crate) fn max_min_fair(demand: &[f64], weights: &[f64], capacity: f64) -> Vec<f64> {
    let mut share = vec![0.0; demand.len()];
    let mut open: Vec<usize> = (0..demand.len()).filter(|&i| demand[i] > 0.0).collect();
    let mut left = capacity;
    while !open.is_empty() && left > 1e-9 {
        let total_weight: f64 = open.iter().map(|&i| weights[i]).sum();
        let per_weight = left / total_weight;
        let (filled, unfilled): (Vec<usize>, Vec<usize>) =
            open.iter().partition(|&&i| demand[i] - share[i] <= per_weight * weights[i]);
        if filled.is_empty() {
            for &i in &unfilled {
                share[i] += per_weight * weights[i];
            }
            break;
        }
        for &i in &filled {
            left -= demand[i] - share[i];
            share[i] = demand[i];
        }
        open = unfilled;
    }
    share
}

/// Jain's index of the allocation `got` measured against the optimum `fair`
/// (keys with a zero optimum are left out): `(Σx)² / (n·Σx²)` with
/// `x = got / fair`. 1 when every key got exactly its fair share, `1/n`
/// when one key got everything.
pub(crate) fn jain_index(got: &[f64], fair: &[f64]) -> f64 {
    let x: Vec<f64> = got.iter().zip(fair).filter(|(_, f)| **f > 0.0).map(|(g, f)| g / f).collect();
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if squares == 0.0 { 1.0 } else { sum * sum / (x.len() as f64 * squares) }
}

/// Keys `0..n` drawn with probability proportional to `1 / (k + 1)^s`.
#[derive(Clone, Debug)]
pub(crate) struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    pub(crate) fn new(n: usize, s: f64) -> Zipf {
        let mut total = 0.0;
        let cumulative = (0..n)
            .map(|k| {
                total += 1.0 / ((k + 1) as f64).powf(s);
                total
            })
            .collect::<Vec<_>>();
        Zipf { cumulative: cumulative.into_iter().map(|c| c / total).collect() }
    }

    /// The key for a uniform number `unit` in `[0, 1)`.
    pub(crate) fn key(&self, unit: f64) -> usize {
        self.cumulative.partition_point(|&c| c <= unit).min(self.cumulative.len() - 1)
    }

    /// The probability of key `k`.
    #[cfg(test)]
    pub(crate) fn probability(&self, k: usize) -> f64 {
        self.cumulative[k] - if k == 0 { 0.0 } else { self.cumulative[k - 1] }
    }
}

/// Open-loop pacing at `rate` events per second: the `n`th event is due
/// `n / rate` seconds after the start, whether or not earlier ones were late.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pace {
    started: Instant,
    rate: f64,
}

impl Pace {
    pub(crate) fn new(rate: f64) -> Pace {
        Pace { started: Instant::now(), rate }
    }

    /// When event number `n` (from 0) is due.
    pub(crate) fn due(&self, n: u64) -> Instant {
        self.started + Duration::from_secs_f64(n as f64 / self.rate)
    }

    /// Waits until event number `n` is due.
    pub(crate) async fn wait_for(&self, n: u64) {
        tokio::time::sleep_until(self.due(n).into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let values = sorted((1..=100).rev().map(f64::from).collect());
        assert_eq!(quantile(&values, 0.5), 50.0);
        assert_eq!(quantile(&values, 0.99), 99.0);
        assert_eq!(quantile(&values, 1.0), 100.0);
        assert_eq!(quantile(&values, 0.0), 1.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    }

    #[test]
    fn water_filling_gives_what_small_keys_want_and_splits_the_rest_by_weight() {
        let fair = max_min_fair(&[10.0, 100.0, 100.0, 0.0], &[1.0, 1.0, 3.0, 1.0], 90.0);
        assert_eq!(fair[0], 10.0);
        assert!((fair[1] - 20.0).abs() < 1e-9 && (fair[2] - 60.0).abs() < 1e-9, "{fair:?}");
        assert_eq!(fair[3], 0.0);
        let everyone_served = max_min_fair(&[5.0, 7.0], &[1.0, 1.0], 100.0);
        assert_eq!(everyone_served, vec![5.0, 7.0]);
    }

    #[test]
    fn jain_is_one_when_fair_and_one_over_n_when_one_key_takes_all() {
        assert!((jain_index(&[10.0, 20.0], &[10.0, 20.0]) - 1.0).abs() < 1e-12);
        assert!((jain_index(&[30.0, 0.0, 0.0], &[10.0, 10.0, 10.0]) - 1.0 / 3.0).abs() < 1e-12);
        assert!(jain_index(&[12.0, 8.0], &[10.0, 10.0]) < 1.0);
    }

    #[test]
    fn zipf_favours_low_keys_in_proportion() {
        let zipf = Zipf::new(1000, 1.0);
        assert_eq!(zipf.key(0.0), 0);
        assert_eq!(zipf.key(0.999_999_9), 999);
        assert!((zipf.probability(0) / zipf.probability(9) - 10.0).abs() < 1e-9);
        let draws = 100_000;
        let zeros = (0..draws).filter(|i| zipf.key(*i as f64 / draws as f64) == 0).count();
        assert!((zeros as f64 / draws as f64 - zipf.probability(0)).abs() < 1e-3);
    }
}
