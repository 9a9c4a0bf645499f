//! The next pass of every fairness key of a subqueue, in bounded memory:
//! exact for the busiest keys, a [`PassSketch`] for the rest.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::PassSketch;

/// How much per-key state a subqueue keeps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CounterConfig {
    /// Keys tracked exactly; past this many keys ahead of the ack level, the
    /// others share a [`PassSketch`].
    pub exact_keys: usize,
    /// Cells per row of the sketch (4 rows of 8-byte cells).
    pub sketch_width: usize,
}

impl Default for CounterConfig {
    fn default() -> Self {
        CounterConfig { exact_keys: 10_000, sketch_width: 32_768 }
    }
}

/// The next pass of every fairness key of one subqueue.
///
/// An entry `next_pass[key]` is the smallest pass the key's next task may
/// take. An entry at or below the base (the ack level's pass) says nothing
/// that `max(base, …)` does not, so it can be pruned without changing any
/// assignment: the exact map only holds keys that are ahead of the ack level.
/// Keys beyond `exact_keys` go to the sketch, whose estimates are upper bounds.
#[derive(Clone, Debug)]
pub struct KeyCounters {
    config: CounterConfig,
    exact: HashMap<String, i64>,
    sketch: Option<PassSketch>,
    /// The base of the last prune that found nothing to free.
    pruned_at_base: Option<i64>,
}

impl KeyCounters {
    /// Counters within `config`'s bounds, with no key tracked yet.
    pub fn new(config: CounterConfig) -> Self {
        KeyCounters { config, exact: HashMap::new(), sketch: None, pruned_at_base: None }
    }

    /// Starts from saved `(key, next_pass)` pairs, as a new owner does.
    pub fn seeded(config: CounterConfig, saved: impl IntoIterator<Item = (String, i64)>) -> Self {
        let mut counters = KeyCounters::new(config);
        for (key, next) in saved {
            if counters.exact.len() < counters.config.exact_keys {
                counters.exact.insert(key, next);
            }
        }
        counters
    }

    /// The pass of the key's next task, which then advances the key by `stride`.
    pub fn next_pass(&mut self, key: &str, base: i64, stride: i64) -> i64 {
        if let Some(next) = self.exact.get_mut(key) {
            let pass = base.max(*next);
            *next = pass.saturating_add(stride);
            return pass;
        }
        let estimate = self.sketch.as_ref().and_then(|s| s.estimate(key));
        let pass = estimate.map_or(base, |e| base.max(e));
        let next = pass.saturating_add(stride);
        if self.sketch.as_ref().is_some_and(|s| s.is_spent(base)) {
            self.sketch = None;
        }
        if self.exact.len() >= self.config.exact_keys {
            self.prune(base);
        }
        if self.exact.len() < self.config.exact_keys {
            self.exact.insert(key.to_owned(), next);
        } else {
            self.sketch.get_or_insert_with(|| PassSketch::new(self.config.sketch_width)).raise(key, next);
        }
        pass
    }

    /// Forgets keys whose next pass is at or below `base`: exact, since
    /// `max(base, next)` is then `base` with or without the entry.
    fn prune(&mut self, base: i64) {
        if self.pruned_at_base.is_some_and(|b| b >= base) {
            return;
        }
        let before = self.exact.len();
        self.exact.retain(|_, next| *next > base);
        if self.exact.len() == before {
            self.pruned_at_base = Some(base);
        }
    }

    /// Whether `key` is tracked in the exact map.
    pub fn is_exact(&self, key: &str) -> bool {
        self.exact.contains_key(key)
    }

    /// The sketch of the keys past `exact_keys`; `None` until the exact map
    /// overflows, and again once it is spent.
    pub fn sketch(&self) -> Option<&PassSketch> {
        self.sketch.as_ref()
    }

    /// How many keys the exact map tracks.
    pub fn exact_len(&self) -> usize {
        self.exact.len()
    }

    /// The `n` keys furthest ahead of `base`, furthest first: what a new
    /// owner most needs to start close to where this one stopped.
    pub fn top(&self, n: usize, base: i64) -> Vec<(String, i64)> {
        let mut ahead: Vec<(String, i64)> =
            self.exact.iter().filter(|(_, next)| **next > base).map(|(k, next)| (k.clone(), *next)).collect();
        ahead.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ahead.truncate(n);
        ahead
    }

    /// The key's next pass as tracked (exactly or as an upper bound).
    pub fn peek(&self, key: &str) -> Option<i64> {
        self.exact.get(key).copied().or_else(|| self.sketch.as_ref().and_then(|s| s.estimate(key)))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn exact() -> KeyCounters {
        KeyCounters::new(CounterConfig { exact_keys: usize::MAX, sketch_width: 1 })
    }

    #[test]
    fn backlogged_keys_advance_by_their_stride() {
        let mut c = exact();
        assert_eq!(c.next_pass("a", 0, 10), 0);
        assert_eq!(c.next_pass("a", 0, 10), 10);
        assert_eq!(c.next_pass("b", 0, 5), 0);
        assert_eq!(c.next_pass("b", 0, 5), 5);
        // An idle key restarts at the base, not behind its old passes.
        assert_eq!(c.next_pass("a", 100, 10), 100);
    }

    #[test]
    fn pruning_frees_keys_behind_the_base() {
        let mut c = KeyCounters::new(CounterConfig { exact_keys: 2, sketch_width: 16 });
        c.next_pass("a", 0, 10);
        c.next_pass("b", 0, 10);
        // Both are at or below base 10 now: "c" takes a freed slot.
        c.next_pass("c", 10, 10);
        assert!(c.is_exact("c"));
        assert!(c.sketch().is_none());
    }

    proptest! {
        /// Whatever the capacity, no key is ever given a pass below the one
        /// unbounded exact counters give it for the same sequence.
        #[test]
        fn bounded_counters_only_delay(
            ops in proptest::collection::vec((0u32..64, 1i64..50, 0i64..3), 1..400),
            exact_keys in 1usize..16,
            width in 1usize..8,
        ) {
            let mut bounded = KeyCounters::new(CounterConfig { exact_keys, sketch_width: width });
            let mut reference = exact();
            let mut base = 0;
            for (key, stride, base_step) in ops {
                base += base_step;
                let key = format!("k{key}");
                let approx = bounded.next_pass(&key, base, stride);
                let truth = reference.next_pass(&key, base, stride);
                prop_assert!(approx >= truth, "{key}: {approx} < {truth}");
            }
        }
    }
}
