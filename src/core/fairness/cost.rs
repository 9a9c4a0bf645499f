//! A task's size in the producer's units (records of an import, bytes of a
//! file) made into the cost the fair order charges its key, on the queue's
//! curve.
//!
//! - `linear`: the cost is proportional to the size, `MAX_TASK_COST` at the
//!   reference size (with the default reference of 1,000, a size of 1 to
//!   1,000 is its own cost).
//! - `log`: `1 + (MAX_TASK_COST − 1) · ln(1 + size) / ln(1 + reference)`, the
//!   chunk ranker's logarithmic size score turned into a cost: a job ten
//!   times larger costs a fixed step more, so small jobs go ahead of large
//!   ones without starving them. With a reference of 100,000, jobs of 100,
//!   1,000, 10,000 and 100,000 records cost 401, 600, 800 and 1,000.
//!
//! Invariant: every size maps to a cost of 1 to `MAX_TASK_COST` (a size at
//! or above the reference costs `MAX_TASK_COST`), and a larger size never
//! costs less.

use serde::{Deserialize, Serialize};

use crate::model::validate::MAX_TASK_COST;

/// How a queue makes sizes into costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CostCurve {
    /// Cost in proportion to size.
    #[default]
    Linear,
    /// Cost in proportion to the logarithm of size: small jobs first.
    Log,
}

impl CostCurve {
    /// The cost of a task of `size` (1 to `MAX_TASK_SIZE`) when the
    /// curve reaches `MAX_TASK_COST` at `reference` (at least 1).
    pub fn cost(self, size: u64, reference: u64) -> u32 {
        let top = f64::from(MAX_TASK_COST);
        let (size, reference) = (size.max(1) as f64, reference.max(1) as f64);
        let raw = match self {
            CostCurve::Linear => (size * top / reference).ceil(),
            CostCurve::Log => (1.0 + (top - 1.0) * size.ln_1p() / reference.ln_1p()).round(),
        };
        raw.clamp(1.0, top) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::validate::MAX_TASK_SIZE;

    #[test]
    fn the_log_curve_gives_a_fixed_step_per_tenfold_size() {
        let costs: Vec<u32> = [100, 1_000, 10_000, 100_000].iter().map(|&s| CostCurve::Log.cost(s, 100_000)).collect();
        assert_eq!(costs, [401, 600, 800, 1000]);
        assert_eq!(CostCurve::Log.cost(1_000_000, 100_000), MAX_TASK_COST, "past the reference: the most");
        assert_eq!(CostCurve::Log.cost(1, 1), MAX_TASK_COST);
    }

    #[test]
    fn the_linear_curve_is_the_size_at_the_default_reference() {
        for size in [1, 2, 999, 1000] {
            assert_eq!(CostCurve::Linear.cost(size, 1000), size as u32);
        }
        assert_eq!(CostCurve::Linear.cost(5000, 1000), MAX_TASK_COST);
        assert_eq!(CostCurve::Linear.cost(1, 1_000_000), 1, "never below 1");
        assert_eq!(CostCurve::Linear.cost(50_000, 100_000), 500);
    }

    #[test]
    fn a_larger_size_never_costs_less() {
        for curve in [CostCurve::Linear, CostCurve::Log] {
            for reference in [1, 7, 1000, 100_000, MAX_TASK_SIZE] {
                let mut last = 0;
                let mut size = 1u64;
                while size <= MAX_TASK_SIZE {
                    let cost = curve.cost(size, reference);
                    assert!((1..=MAX_TASK_COST).contains(&cost));
                    assert!(cost >= last, "{curve:?} at reference {reference}: size {size} costs {cost} < {last}");
                    last = cost;
                    size = size * 3 / 2 + 1;
                }
            }
        }
    }
}
