//! Whose share a key counts against, and with which weight: the operator's
//! group prefixes and per-key weights first, then the task's own weight.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// Which share a key's tasks count against, and its weight. A key under one
/// of the `groups` prefixes counts against the group's share (the longest
/// such prefix), with the operator's weight of the prefix, else the default:
/// a tenant's keys share one share, however many keys it uses and whatever
/// weight its tasks name. Any other key has its own share: the operator's
/// per-key weight first, then the task's own weight, then the default. One
/// key has one weight at a time as long as producers agree on it or the
/// operator sets it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Weights {
    /// The weight of a key that neither the operator nor the task gives one (1
    /// by default).
    pub default: f64,
    /// The operator's weights by fairness key (or group prefix); they
    /// override the tasks' own.
    pub keys: HashMap<String, f64>,
    /// Prefixes of fairness keys that share one share each (a tenant's keys).
    pub groups: Vec<String>,
}

impl Default for Weights {
    fn default() -> Self {
        Weights { default: 1.0, keys: HashMap::new(), groups: Vec::new() }
    }
}

impl Weights {
    /// The weight of `key` for a task that gave `task_weight`: the operator's,
    /// else the task's, else the default. Groups aside (see [`Self::share`]).
    pub fn resolve(&self, key: &str, task_weight: Option<f64>) -> f64 {
        self.keys.get(key).copied().or(task_weight).unwrap_or(self.default)
    }

    /// The share a task of `key` that gave `task_weight` counts against, and
    /// the share's weight.
    pub fn share<'k>(&'k self, key: &'k str, task_weight: Option<f64>) -> (&'k str, f64) {
        let group = self.groups.iter().filter(|g| key.starts_with(g.as_str())).max_by_key(|g| g.len());
        match group {
            Some(group) => (group, self.keys.get(group).copied().unwrap_or(self.default)),
            None => (key, self.resolve(key, task_weight)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_groups_keys_share_the_groups_weight_whatever_the_task_says() {
        let weights = Weights {
            default: 1.0,
            keys: HashMap::from([("a/".into(), 3.0), ("solo".into(), 2.0)]),
            groups: vec!["a/".into(), "a/big/".into(), "b/".into()],
        };
        assert_eq!(weights.share("a/1", Some(1000.0)), ("a/", 3.0));
        assert_eq!(weights.share("a/big/1", None), ("a/big/", 1.0), "the longest prefix");
        assert_eq!(weights.share("b/x", Some(50.0)), ("b/", 1.0), "the default, not the task's");
        assert_eq!(weights.share("solo", Some(7.0)), ("solo", 2.0), "the operator's");
        assert_eq!(weights.share("c", Some(7.0)), ("c", 7.0), "the task's");
        assert_eq!(weights.share("c", None), ("c", 1.0), "the default");
    }
}
