use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// Which weight a key has: the operator's per-key setting first, then the
/// task's own weight, then the queue default. One key has one weight at a time
/// as long as producers agree on it or the operator sets it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Weights {
    /// The weight of a key that neither the operator nor the task gives one (1
    /// by default).
    pub default: f64,
    /// The operator's weights by fairness key; they override the tasks' own.
    pub keys: HashMap<String, f64>,
}

impl Default for Weights {
    fn default() -> Self {
        Weights { default: 1.0, keys: HashMap::new() }
    }
}

impl Weights {
    /// The weight of `key` for a task that gave `task_weight`: the operator's,
    /// else the task's, else the default.
    pub fn resolve(&self, key: &str, task_weight: Option<f64>) -> f64 {
        self.keys.get(key).copied().or(task_weight).unwrap_or(self.default)
    }
}
