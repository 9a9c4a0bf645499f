//! Pass assignment: the arithmetic of weighted fairness.
//!
//! A key of weight `w` advances by a stride of `STRIDE_SCALE / w` passes per
//! task. A task's pass is `max(base, next_pass[key])` where `base` is the pass
//! of the subqueue's ack level, and the key's next pass then moves one stride
//! further. Dispatching in pass order gives each continuously backlogged key
//! its weighted share (stride scheduling), and a new or idle key starts at the
//! ack level, in front of every backlog.
//!
//! Invariant kept by [`KeyCounters`]: the pass it returns for a key is never
//! smaller than the exact stride-scheduling pass would be; approximation only
//! ever delays a key. See `docs/fairness.md` for the bound.

mod across;
mod age;
mod cost;
mod counters;
mod lead;
mod sketch;
mod weights;

pub use across::{CATCH_UP, PartitionClocks};
pub use age::boost_passes;
pub use cost::CostCurve;
pub use counters::{CounterConfig, KeyCounters};
pub use lead::{GroupLeads, GroupTask};
pub use sketch::PassSketch;
pub use weights::Weights;

/// Passes per task of a weight-1 key. A power of two large enough that the
/// rounding of `STRIDE_SCALE / w` to an integer changes a weight by less than
/// 0.1% (for `w ≤ 1000`), small enough that the slowest key (weight 0.001)
/// takes over 8·10⁹ tasks to run out of `i64` passes.
pub const STRIDE_SCALE: i64 = 1 << 20;

/// The passes a key of this weight advances per task: `max(1, ⌊S / w⌋)`.
pub fn stride(weight: f64) -> i64 {
    let raw = (STRIDE_SCALE as f64 / weight).floor();
    if raw.is_finite() { (raw as i64).max(1) } else { i64::MAX / 4 }
}

/// The most passes one task moves its key on: the stride of the lowest
/// weight (0.001). Keeps the passes of a partition as far from `i64::MAX`
/// with costs as without (over 4·10⁹ tasks at the slowest advance).
pub const MAX_ADVANCE: i64 = STRIDE_SCALE * 1000;

/// The passes a task of `cost` moves a key of this weight on: `cost`
/// strides, at most [`MAX_ADVANCE`]. A key that is continuously backlogged
/// then gets a share of the work (the sum of its tasks' costs) in
/// proportion to its weight, whatever its tasks' costs.
pub fn advance(weight: f64, cost: u32) -> i64 {
    stride(weight).saturating_mul(i64::from(cost.max(1))).min(MAX_ADVANCE)
}

/// The weight that a stride actually gives: `S / stride`. Differs from the
/// configured weight by the rounding of [`stride`].
pub fn effective_weight(weight: f64) -> f64 {
    STRIDE_SCALE as f64 / stride(weight) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_follow_weights() {
        assert_eq!(stride(1.0), STRIDE_SCALE);
        assert_eq!(stride(2.0), STRIDE_SCALE / 2);
        assert!(stride(0.001) > stride(1.0));
        assert_eq!(stride(1000.0), STRIDE_SCALE / 1000);
        for w in [0.001, 0.37, 1.0, 3.0, 7.5, 999.0, 1000.0] {
            let rel = (effective_weight(w) - w).abs() / w;
            assert!(rel < 1e-3, "weight {w} rounds to {}", effective_weight(w));
        }
    }
}
