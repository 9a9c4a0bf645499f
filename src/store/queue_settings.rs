//! A queue's settings kept with the queue in the catalog (`UpdateQueue`,
//! `PauseQueue`, `ResumeQueue`): what every node that opens the queue's
//! partitions applies over the defaults of its config file.
//!
//! Invariant: a stored value passed [`QueueSettings::validate`], so its
//! bounds hold on every node that reads it, whatever that node's config
//! file says; each change is written by compare-and-set on `version`, which
//! it moves on by one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::engine::TaskPolicy;
use crate::core::engine::policy::MAX_GROUP_LEAD;
use crate::core::fairness::{CostCurve, Weights};
use crate::model::ValidationError;
use crate::model::validate::{self, MAX_TASK_SIZE};

/// The most fairness keys a queue's stored settings weigh.
pub const MAX_STORED_WEIGHTS: usize = 100;

/// The most fairness keys of a queue paused at once.
pub const MAX_PAUSED_KEYS: usize = 100;

/// The longest backoff a queue may store (30 days).
pub const MAX_STORED_BACKOFF: Duration = Duration::from_secs(30 * 24 * 3600);

/// A queue's stored settings. Each `None` (and an empty map or set) leaves
/// the node's config file in force for that setting.
///
/// Not stored here, fixed by the config file: `ordering`, `max_wait` and
/// `age_boost` (tasks already written are placed by them: changing them
/// under a running queue would reorder its rows), `late_slack`,
/// `backoff_jitter`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct QueueSettings {
    /// How many changes were written (0: never set). Stored beside the
    /// settings, not in them.
    #[serde(skip)]
    pub version: u64,
    /// `tasks.lease_timeout`, in ms (1 s to 24 h).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_timeout_ms: Option<u64>,
    /// `tasks.max_attempts` (1 to 1000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// `tasks.backoff_initial`, in ms (at most 30 days).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff_initial_ms: Option<u64>,
    /// `tasks.backoff_max`, in ms (at most 30 days).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff_max_ms: Option<u64>,
    /// `tasks.key_concurrency` (0: no limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_concurrency: Option<u32>,
    /// `tasks.key_rate_per_second` (0: no limit, at most 1,000,000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_rate_per_second: Option<f64>,
    /// `tasks.key_burst` (1 to 1,000,000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_burst: Option<u32>,
    /// `tasks.cost_curve`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_curve: Option<CostCurve>,
    /// `tasks.cost_reference_size` (1 to `MAX_TASK_SIZE`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_reference_size: Option<u64>,
    /// `tasks.group_lead` (0 to `MAX_GROUP_LEAD`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_lead: Option<u64>,
    /// Weights by fairness key (or group prefix), over the config file's
    /// `engine.weights.keys`; at most [`MAX_STORED_WEIGHTS`].
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub weights: BTreeMap<String, f64>,
    /// The whole queue is paused: nothing is dispatched; adds go on.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Fairness keys not dispatched (the empty key is one like any other);
    /// at most [`MAX_PAUSED_KEYS`].
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub paused_keys: BTreeSet<String>,
}

impl QueueSettings {
    /// Checks every setting against its bound; the error names the field
    /// (under `field`) and the limit.
    pub fn validate(&self, field: &str) -> Result<(), ValidationError> {
        let fail = |name: &str, message: String| Err(ValidationError::new(format!("{field}.{name}"), message));
        if let Some(ms) = self.lease_timeout_ms
            && !(1_000..=24 * 3600 * 1000).contains(&ms)
        {
            return fail("lease_timeout", format!("is {ms} ms; it must be 1s to 24h"));
        }
        if let Some(attempts) = self.max_attempts
            && !(1..=1000).contains(&attempts)
        {
            return fail("max_attempts", format!("is {attempts}; it must be 1 to 1000"));
        }
        for (name, value) in [("backoff_initial", self.backoff_initial_ms), ("backoff_max", self.backoff_max_ms)] {
            if let Some(ms) = value
                && Duration::from_millis(ms) > MAX_STORED_BACKOFF
            {
                return fail(name, format!("is {ms} ms; it must be at most 30 days"));
            }
        }
        if let (Some(initial), Some(max)) = (self.backoff_initial_ms, self.backoff_max_ms)
            && initial > max
        {
            return fail("backoff_initial", format!("is {initial} ms, above backoff_max {max} ms"));
        }
        if let Some(rate) = self.key_rate_per_second
            && !(0.0..=1e6).contains(&rate)
        {
            return fail("key_rate_per_second", format!("is {rate}; it must be 0 (no limit) to 1000000"));
        }
        if let Some(burst) = self.key_burst
            && !(1..=1_000_000).contains(&burst)
        {
            return fail("key_burst", format!("is {burst}; it must be 1 to 1000000"));
        }
        if let Some(size) = self.cost_reference_size
            && !(1..=MAX_TASK_SIZE).contains(&size)
        {
            return fail("cost_reference_size", format!("is {size}; it must be 1 to {MAX_TASK_SIZE}"));
        }
        if let Some(lead) = self.group_lead
            && lead > MAX_GROUP_LEAD
        {
            return fail("group_lead", format!("is {lead}; it must be 0 (off) to {MAX_GROUP_LEAD} (in costs)"));
        }
        if self.weights.len() > MAX_STORED_WEIGHTS {
            return fail("weights", format!("has {} keys; the limit is {MAX_STORED_WEIGHTS}", self.weights.len()));
        }
        for (key, weight) in &self.weights {
            validate::fairness_key(&format!("{field}.weights key"), key)?;
            validate::check_weight(&format!("{field}.weights[{key:?}]"), *weight)?;
        }
        if self.paused_keys.len() > MAX_PAUSED_KEYS {
            return fail(
                "paused_keys",
                format!(
                    "has {} keys; the limit is {MAX_PAUSED_KEYS} (pause the whole queue instead)",
                    self.paused_keys.len()
                ),
            );
        }
        for key in &self.paused_keys {
            validate::fairness_key(&format!("{field}.paused_keys"), key)?;
        }
        Ok(())
    }

    /// `defaults` (the node's task policy for the queue) with these
    /// settings over it. A stored initial backoff above the node's maximum
    /// raises the maximum to it.
    pub fn policy_over(&self, defaults: &TaskPolicy) -> TaskPolicy {
        let mut policy = defaults.clone();
        let ms = Duration::from_millis;
        if let Some(value) = self.lease_timeout_ms {
            policy.lease_timeout = ms(value);
        }
        if let Some(value) = self.max_attempts {
            policy.max_attempts = value;
        }
        if let Some(value) = self.backoff_initial_ms {
            policy.backoff_initial = ms(value);
        }
        if let Some(value) = self.backoff_max_ms {
            policy.backoff_max = ms(value);
        }
        policy.backoff_max = policy.backoff_max.max(policy.backoff_initial);
        if let Some(value) = self.key_concurrency {
            policy.key_concurrency = value;
        }
        if let Some(value) = self.key_rate_per_second {
            policy.key_rate_per_second = value;
        }
        if let Some(value) = self.key_burst {
            policy.key_burst = value;
        }
        if let Some(value) = self.cost_curve {
            policy.cost_curve = value;
        }
        if let Some(value) = self.cost_reference_size {
            policy.cost_reference_size = value;
        }
        if let Some(value) = self.group_lead {
            policy.group_lead = value;
        }
        policy
    }

    /// `defaults` (the node's weights) with these settings' weights over them.
    pub fn weights_over(&self, defaults: &Weights) -> Weights {
        let mut weights = defaults.clone();
        weights.keys.extend(self.weights.iter().map(|(key, weight)| (key.clone(), *weight)));
        weights
    }

    /// The settings as stored: JSON of the fields set.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("settings are plain data")
    }

    /// Settings of `version` from their stored form (empty: none set).
    pub fn decode(text: &str, version: u64) -> Result<QueueSettings, String> {
        let mut settings: QueueSettings = if text.is_empty() {
            QueueSettings::default()
        } else {
            serde_json::from_str(text).map_err(|e| format!("stored queue settings: {e}"))?
        };
        settings.version = version;
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_through_their_stored_form_and_unset_ones_are_not_written() {
        assert_eq!(QueueSettings::default().encode(), "{}");
        let settings = QueueSettings {
            version: 3,
            lease_timeout_ms: Some(5_000),
            key_rate_per_second: Some(2.5),
            cost_curve: Some(CostCurve::Log),
            weights: [("acme".to_owned(), 4.0)].into(),
            paused_keys: [String::new(), "k".to_owned()].into(),
            ..QueueSettings::default()
        };
        assert_eq!(QueueSettings::decode(&settings.encode(), 3).unwrap(), settings);
        assert_eq!(QueueSettings::decode("", 0).unwrap(), QueueSettings::default());
        assert!(QueueSettings::decode("{\"a_later_field\":1}", 1).is_ok(), "a newer node's field is skipped");
        assert!(QueueSettings::decode("[", 1).unwrap_err().contains("stored queue settings"));
    }

    #[test]
    fn each_bound_is_refused_with_its_field_named() {
        let refused = |settings: QueueSettings| settings.validate("settings").unwrap_err().to_string();
        let base = QueueSettings::default;
        assert!(refused(QueueSettings { lease_timeout_ms: Some(999), ..base() }).contains("settings.lease_timeout"));
        assert!(refused(QueueSettings { max_attempts: Some(0), ..base() }).contains("settings.max_attempts"));
        assert!(
            refused(QueueSettings { backoff_initial_ms: Some(2), backoff_max_ms: Some(1), ..base() })
                .contains("settings.backoff_initial")
        );
        assert!(
            refused(QueueSettings { key_rate_per_second: Some(f64::NAN), ..base() })
                .contains("settings.key_rate_per_second")
        );
        assert!(refused(QueueSettings { key_burst: Some(0), ..base() }).contains("settings.key_burst"));
        assert!(refused(QueueSettings { group_lead: Some(MAX_GROUP_LEAD + 1), ..base() }).contains("group_lead"));
        let many: BTreeSet<String> = (0..=MAX_PAUSED_KEYS).map(|i| format!("k{i}")).collect();
        assert!(refused(QueueSettings { paused_keys: many, ..base() }).contains("the limit is 100"));
        let long = "x".repeat(257);
        assert!(refused(QueueSettings { weights: [(long, 1.0)].into(), ..base() }).contains("256 bytes"));
        assert!(refused(QueueSettings { weights: [("k".into(), 0.0)].into(), ..base() }).contains("weights"));
        let most = QueueSettings {
            lease_timeout_ms: Some(24 * 3600 * 1000),
            max_attempts: Some(1000),
            weights: (0..MAX_STORED_WEIGHTS).map(|i| (format!("{i:0>256}"), 1000.0)).collect(),
            paused_keys: (0..MAX_PAUSED_KEYS).map(|i| format!("{i:0>256}")).collect(),
            ..base()
        };
        most.validate("settings").unwrap();
        assert!(most.encode().len() < 64 * 1024, "the largest settings stay a small cell");
    }

    #[test]
    fn stored_settings_go_over_the_nodes_defaults_and_leave_the_rest() {
        let defaults = TaskPolicy::default();
        let settings = QueueSettings {
            lease_timeout_ms: Some(7_000),
            backoff_initial_ms: Some(defaults.backoff_max.as_millis() as u64 * 2),
            ..QueueSettings::default()
        };
        let policy = settings.policy_over(&defaults);
        assert_eq!(policy.lease_timeout, Duration::from_secs(7));
        assert_eq!(policy.backoff_max, policy.backoff_initial, "a longer initial backoff raises the maximum");
        assert_eq!(policy.max_attempts, defaults.max_attempts);
        policy.validate("settings").unwrap();
        let weights = QueueSettings { weights: [("a".into(), 3.0)].into(), ..QueueSettings::default() }
            .weights_over(&Weights::default());
        assert_eq!(weights.resolve("a", None), 3.0);
        assert_eq!(weights.resolve("b", None), 1.0);
    }
}
