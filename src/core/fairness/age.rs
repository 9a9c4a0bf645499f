//! The age boost: how far waiting lowers a task's effective pass.
//!
//! A queue's `age_boost` of `b` lets a task that has waited `t` since its
//! first add compete at `pass − boost(t)`, where `boost` rises on a bounded
//! logarithm of the wait, from 0 at once to `b` strides of a weight-1 key
//! at the queue's `max_wait` (the chunk ranker's age score, 0 to 50 on a
//! log of the age up to its extreme age, made a number of passes):
//!
//! ```text
//! boost(t) = b · S · ln(1 + t / 1 s) / ln(1 + max_wait / 1 s),  at most b · S
//! ```
//!
//! Invariant: `boost` never decreases as `t` grows and never exceeds
//! `b · S`, so a task goes at most `b` weight-1 strides ahead of its place
//! in the fair order (docs/fairness.md §7f).

use super::STRIDE_SCALE;

/// The passes a task that has waited `waited_ms` competes ahead of its own,
/// under an `age_boost` of `boost` strides reached at `max_wait_ms`.
pub fn boost_passes(boost: u32, waited_ms: i64, max_wait_ms: i64) -> i64 {
    let full = i64::from(boost) * STRIDE_SCALE;
    if boost == 0 || waited_ms <= 0 || max_wait_ms <= 0 {
        return 0;
    }
    if waited_ms >= max_wait_ms {
        return full;
    }
    let share = (waited_ms as f64 / 1000.0).ln_1p() / (max_wait_ms as f64 / 1000.0).ln_1p();
    ((full as f64) * share).floor().clamp(0.0, full as f64) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boost_rises_on_a_log_of_the_wait_up_to_its_bound() {
        let hour = 3_600_000;
        assert_eq!(boost_passes(8, 0, hour), 0);
        assert_eq!(boost_passes(0, hour, hour), 0, "off");
        assert_eq!(boost_passes(8, hour, hour), 8 * STRIDE_SCALE);
        assert_eq!(boost_passes(8, 10 * hour, hour), 8 * STRIDE_SCALE, "bounded past max_wait");
        // A log: each tenfold wait adds about the same, most of it early.
        let (a, b, c) = (boost_passes(8, 3_600, hour), boost_passes(8, 36_000, hour), boost_passes(8, 360_000, hour));
        assert!(a < b && b < c && c < 8 * STRIDE_SCALE);
        assert!(((b - a) as f64 / (c - b) as f64 - 1.0).abs() < 0.25, "{a} {b} {c}");
        assert!(
            boost_passes(8, hour / 60, hour) > 4 * STRIDE_SCALE,
            "over half the boost in the first minute of an hour"
        );
        let mut last = 0;
        for waited in (0..=hour).step_by(7_919) {
            let now = boost_passes(8, waited, hour);
            assert!(now >= last, "the boost never falls");
            last = now;
        }
    }
}
